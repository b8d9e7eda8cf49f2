"""Which lane a request on the MCP endpoint takes: the 2026-07-28 one or the legacy one.

One endpoint serves both eras (`basic/versioning.mdx`: a dual-era server selects its
behaviour from how the client opens). The rule is the TypeScript SDK 2.x's
(`isLegacyRequest`), read from the HTTP method, the lower-cased headers and the
decoded body, first match wins:

1. A POST whose `params._meta` carries the protocol-version claim is of the era the
   claim names: a legacy revision goes to the legacy lane; anything else (2026-07-28, an
   unknown revision, a value that is not a string) goes to the 2026 lane, whose ladder
   answers it exactly as before (so `initialize`, `ping` or `logging/setLevel` with a
   2026 claim is 404 -32601, as the conformance suite's `server-stateless` scores).
2. Otherwise the `MCP-Protocol-Version` header decides: one naming anything but a legacy
   revision is a 2026 client's (its ladder refuses the missing claim, -32602); a legacy
   revision, or no header at all, is a legacy client's.

So GET, DELETE, posted JSON-RPC responses, batches and `initialize` without a claim are
legacy unless a 2026 header says otherwise; a `Mcp-Session-Id` header decides nothing
(the spec has 2026 servers ignore it). Whether the legacy lane is on is the caller's
business: with it off, every request takes the 2026 path.

Pure: no I/O, nothing awaited; it decides the lane, never the answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

from gateway.protocol.inbound import PROTOCOL_VERSION_KEY, VERSION_HEADER
from gateway.protocol.versions import LEGACY_ERA, Version


class Lane(Enum):
    MODERN = "2026"
    LEGACY = "legacy"


_NO_CLAIM = object()
# Read once: on Python 3.11 an enum member read off its class is a descriptor call, and
# every request on the MCP endpoint is classified.
_LEGACY, _MODERN = Lane.LEGACY, Lane.MODERN


def lane_of(method: str, headers: Mapping[str, str], body: Any = None) -> Lane:
    """The lane of one request: its HTTP `method`, its `headers` by lower-case name and,
    for a POST, its decoded JSON `body` (any JSON value)."""
    if method == "POST":
        claim = claimed_version(body)
        if claim is not _NO_CLAIM:
            return _LEGACY if Version.parse(claim) in LEGACY_ERA else _MODERN
    named = headers.get(VERSION_HEADER)
    if named is None or Version.parse(named) in LEGACY_ERA:
        return _LEGACY
    return _MODERN


def claimed_version(body: Any) -> Any:
    """The value of `params._meta`'s protocol-version claim, whatever its type, or
    `_NO_CLAIM` when the body makes none (not an object, no params or `_meta` object)."""
    if not isinstance(body, dict):
        return _NO_CLAIM
    params = body.get("params")
    if not isinstance(params, dict):
        return _NO_CLAIM
    meta = params.get("_meta")
    if not isinstance(meta, dict) or PROTOCOL_VERSION_KEY not in meta:
        return _NO_CLAIM
    return meta[PROTOCOL_VERSION_KEY]
