"""The ids of the questions a legacy server asks a 2025 client within a call, tagged with
the call, sans-IO.

A 2025 client answers a question (an `elicitation/create`, `sampling/createMessage` or
`roots/list` its server sent on a call's stream) with a POST of its own, which may reach
any replica, and which names nothing but the question's id. To record which call an
answer belongs to, the lane relays each question of a call with its id tagged
(`tagged`: the call's id in the audit trail, the question's number in the call, the
server's own id, its JSON), and gives the server back its own id when the answer comes
(`untagged`), on whichever replica it comes. A replica of a release that does not know
tagged ids would pass one on to the server as it came, so ids are tagged only once every
live replica reads them (`gateway.protocol.formats`, `Kind.LEGACY_QUESTION`).

A tagged id is a string: `mrtr-q/<call id>/<number>/<method>/<the server's id, as JSON>`,
the method being the call's (`t`, `p`, `r`: `tools/call`, `prompts/get`,
`resources/read`).
"""

from __future__ import annotations

import json
from typing import Any

PREFIX = "mrtr-q/"
_CODES = {"tools/call": "t", "prompts/get": "p", "resources/read": "r"}
_METHODS = {code: method for method, code in _CODES.items()}


def tagged(call_id: str, number: int, method: str, rid: Any) -> str:
    """The id a question is relayed with: its call (and the call's method), its number in
    the call, and its own id."""
    own = json.dumps(rid, separators=(",", ":"))
    return f"{PREFIX}{call_id}/{number}/{_CODES.get(method, 't')}/{own}"


def untagged(rid: Any) -> tuple[str, int, str, Any] | None:
    """The call, the question's number, the call's method and the server's own id of a
    tagged id; None for an id that is not one (a question outside any call, or relayed
    untagged)."""
    if not isinstance(rid, str) or not rid.startswith(PREFIX):
        return None
    call_id, _, rest = rid[len(PREFIX) :].partition("/")
    number, _, rest = rest.partition("/")
    code, _, own = rest.partition("/")
    if not call_id or not number.isdigit() or code not in _METHODS or not own:
        return None
    try:
        original = json.loads(own)
    except ValueError:
        return None
    if not isinstance(original, str | int) or isinstance(original, bool):
        return None
    return call_id, int(number), _METHODS[code], original
