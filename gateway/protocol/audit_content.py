"""What of an audit event's content is kept, sans-IO: the operator's switches, the
`redact` patterns and the cap (`gateway.protocol.audit` names what is content).

Content is kept as its compact JSON text (a string as it is), the patterns run over at
most four times the cap of it, each match replaced by `REDACTED`, then the text is cut to
the cap in UTF-8 bytes, never inside a character.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gateway.protocol import jsonrpc

REDACTED = "[redacted]"


@dataclass(frozen=True, slots=True, kw_only=True)
class ContentPolicy:
    """Which content an event keeps (none by default), and how: through `redact` (each
    match replaced by `REDACTED`), then cut to `max_bytes` of UTF-8."""

    arguments: bool = False
    answers: bool = False
    results: bool = False
    questions: bool = False
    redact: tuple[re.Pattern[str], ...] = ()
    max_bytes: int = 1024

    def kept(self, value: Any) -> dict[str, Any] | None:
        """`value` as recorded: `{"text", "bytes", "truncated"}` (`redacted`: how many
        matches were replaced, when any), or None for no value.

        `text` is the value's compact JSON (a string is kept as it is). The patterns see
        at most four times `max_bytes` of it (what lies beyond is never recorded), so a
        huge result costs a bounded scan; `bytes` is the whole value's size.
        """
        if value is None:
            return None
        text = value if isinstance(value, str) else jsonrpc.dumps(value).decode(errors="replace")
        size = len(text.encode(errors="replace"))
        examined = text[: 4 * self.max_bytes]
        replaced = 0
        for pattern in self.redact:
            examined, n = pattern.subn(REDACTED, examined)
            replaced += n
        encoded = examined.encode(errors="replace")
        truncated = len(encoded) > self.max_bytes or len(examined) < len(text)
        if len(encoded) > self.max_bytes:
            examined = encoded[: self.max_bytes].decode(errors="ignore")
        out: dict[str, Any] = {"text": examined, "bytes": size, "truncated": truncated}
        if replaced:
            out["redacted"] = replaced
        return out


#: Keep no content at all: the defaults.
NO_CONTENT = ContentPolicy()
