"""The legacy lane's session, sans-IO: the gateway's `Mcp-Session-Id` and what policy reads.

A 2025 client's session is an upstream session of its own, passed through one to one.
The gateway's session id is the whole of the state: it seals which upstream, the
upstream's own session handle (its `Mcp-Session-Id`, or none), a digest of the caller's
principal, the replica that owns the session (empty when any replica serves it), when it
was made and when it expires, and (version 2) what the client declared at `initialize`
(`declared_of`: what the gateway may ask it itself, `gateway.legacy_clients.asking`),
with the requestState key ring under a prefix of its own (``lg1.``, bound into the
AEAD's associated data: a requestState never opens as a session id, nor the reverse).
So any replica serves any request of the session, and no replica nor Redis needs to
hold anything for it (a replica keeps what the ids it opened lately opened to only to
spare itself opening them again: `OpenedSessions`, bounded). A tampered, expired,
foreign or misrouted id is refused with a reason for the log only; the wire answer is
404 (the client starts over).

Beside it, what the lane's policy reads of a legacy request: which method and target
it is checked as (for per-tool scopes). What a caller may see of a list is
`gateway.protocol.lists`, for both eras.

Pure: no I/O. It must not decide HTTP statuses, nor read anything but what it is given.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from gateway.errors import InvalidRequestState
from gateway.protocol import formats, jsonrpc
from gateway.protocol.formats import Kind
from gateway.protocol.state import StateCodec

#: The prefix of the gateway's session ids (requestState's is ``gw1.``).
SESSION_PREFIX = "lg1."
#: The longest upstream session id the gateway seals (visible ASCII, as the spec has it).
MAX_UPSTREAM_SESSION_CHARS = 1024
_VISIBLE = re.compile(r"[\x21-\x7e]+")
#: The version of a session id's claims (`"v"`) this release writes when its fleet has
#: moved on (`gateway.protocol.formats`); the lane writes by the fleet's level, as
#: requestState's sealing does: version 1 (no `declared`) while a replica of level 1 lives.
CLAIMS_VERSION = formats.written(Kind.LEGACY_SESSION, formats.LEVEL)
#: The client capabilities a session id keeps (`declared_of`); any other is left out.
KEPT_CAPABILITIES = ("elicitation", "roots", "sampling")


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionClaims:
    """What a gateway session id asserts."""

    upstream: str  # the configured upstream's name
    session: str | None  # the upstream's own session id; None: it gave none
    principal: str  # `principal_tag` of the caller who opened it
    owner: str  # the replica holding the upstream session; empty: any replica serves it
    audience: str  # the deployment that minted it (`sealing.audience`)
    created_ms: int
    expires_ms: int
    #: What the client declared at `initialize` (`declared_of`); None in a version 1 id,
    #: which does not say (minted while the fleet wrote what the previous release reads).
    declared: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class SessionIdRefusal:
    """Why a session id was refused: for the log, never for the wire."""

    reason: str


def principal_tag(principal: str) -> str:
    """A short, fixed-size stand-in for a principal: ids stay small whoever the caller is."""
    digest = hashlib.sha256(principal.encode()).digest()[:16]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def valid_upstream_session(value: str | None) -> bool:
    """Whether an upstream's session id can be sealed: visible ASCII, bounded."""
    return value is None or (
        len(value) <= MAX_UPSTREAM_SESSION_CHARS and _VISIBLE.fullmatch(value) is not None
    )


def declared_of(capabilities: Any) -> tuple[str, ...]:
    """What a client's `initialize` capabilities declare, as a session id keeps it: the
    names of `KEPT_CAPABILITIES` it declared, sorted, where `elicitation` means that form
    mode is allowed (a bare `{}`, or modes naming `form`) and `elicitation.url` that URL
    mode is (2025-11-25)."""
    if not isinstance(capabilities, dict):
        return ()
    kept = {name for name in KEPT_CAPABILITIES if isinstance(capabilities.get(name), dict)}
    elicitation = capabilities.get("elicitation")
    if isinstance(elicitation, dict):
        modes = {mode for mode in ("form", "url") if isinstance(elicitation.get(mode), dict)}
        if modes and "form" not in modes:
            kept.discard("elicitation")  # URL mode only
        if "url" in modes:
            kept.add("elicitation.url")
    return tuple(sorted(kept))


def seal_session(codec: StateCodec, claims: SessionClaims, version: int = CLAIMS_VERSION) -> str:
    """The session id carrying `claims` (`codec` seals under `SESSION_PREFIX`), in
    `version` of its claims (1 leaves `declared` out: the previous release reads only it).

    Raises:
        ValueError: an upstream session id that is not visible ASCII or too long.
    """
    if not valid_upstream_session(claims.session):
        raise ValueError("the upstream's session id is not visible ASCII of a bounded length")
    data: dict[str, Any] = {
        "v": version,
        "u": claims.upstream,
        "s": claims.session,
        "p": claims.principal,
        "o": claims.owner,
        "a": claims.audience,
        "c": claims.created_ms,
        "e": claims.expires_ms,
    }
    if version >= 2:
        data["k"] = list(claims.declared or ())
    return codec.seal(jsonrpc.dumps(data))


_FIELDS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "u": (str, "upstream"),
    "s": ((str, type(None)), "session"),
    "p": (str, "principal"),
    "o": (str, "owner"),
    "a": (str, "audience"),
    "c": (int, "created_ms"),
    "e": (int, "expires_ms"),
}


def unsealed(
    codec: StateCodec, token: str, kind: Kind
) -> tuple[int, dict[str, Any]] | SessionIdRefusal:
    """The version and the claims of a sealed id of `kind` (its version member left out),
    or why it does not open: not sealed under these keys, not a JSON object, a version
    this release does not read."""
    try:
        payload = codec.unseal(token)
    except InvalidRequestState as exc:
        return SessionIdRefusal(exc.reason)
    try:
        data = jsonrpc.loads(payload)
    except (ValueError, RecursionError):
        return SessionIdRefusal("payload not JSON")
    if not isinstance(data, dict):
        return SessionIdRefusal("payload shape")
    try:
        return formats.unstamped(kind, data)
    except ValueError:
        return SessionIdRefusal("payload version")


def open_session(
    codec: StateCodec,
    token: str,
    *,
    now_ms: int,
    principal: str,
    upstream: str,
    audience: str,
) -> SessionClaims | SessionIdRefusal:
    """The claims of a session id presented by `principal` (its `principal_tag`) on the
    route of `upstream`, or why it is refused; every check fail-closed."""
    opened = unsealed(codec, token, Kind.LEGACY_SESSION)
    if isinstance(opened, SessionIdRefusal):
        return opened
    version, data = opened
    declared = data.pop("k", None) if version >= 2 else ()
    if set(data) != set(_FIELDS) or declared is None:
        return SessionIdRefusal("payload shape")
    if not isinstance(declared, list | tuple) or not all(isinstance(d, str) for d in declared):
        return SessionIdRefusal("claim declared has the wrong type")
    values: dict[str, Any] = {"declared": tuple(declared) if version >= 2 else None}
    for key, (kind, name) in _FIELDS.items():
        value = data[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            return SessionIdRefusal(f"claim {name} has the wrong type")
        values[name] = value
    claims = SessionClaims(**values)
    if claims.audience != audience:
        return SessionIdRefusal("audience mismatch")
    if claims.upstream != upstream:
        return SessionIdRefusal("another upstream's session")
    if now_ms >= claims.expires_ms:
        return SessionIdRefusal("expired")
    if claims.principal != principal:
        return SessionIdRefusal("principal mismatch")
    return claims


class OpenedSessions:
    """The session ids opened lately, each with its claims and its log stand-in, so that
    a session's later requests are not opened again (the AEAD, the JSON, every check).

    An entry is made only for an id that opened (`open_session`) for a principal, and is
    found only by the same id presented by the same principal: another principal's or a
    tampered id misses and is opened, and refused, in full. An entry past its expiry is
    dropped when looked up, never served; the ids are opened on one route (its upstream
    and audience), so a lane keeps its own. Bounded: past `size` entries the least
    recently used goes.
    """

    __slots__ = ("size", "_entries")

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[tuple[str, str], Opened] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, token: str, principal: str, now_ms: int) -> Opened | None:
        """The entry of `token` presented by `principal`; None if there is none or it has
        expired (then the id is opened in full, and refused as expired)."""
        key = (token, principal)
        entry = self._entries.get(key)
        if entry is None:
            return None
        if now_ms >= entry.claims.expires_ms:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry

    def put(self, token: str, principal: str, opened: Opened) -> None:
        """Keep what `token` opened to for `principal` (`open_session` gave `opened.claims`)."""
        entries = self._entries
        entries[(token, principal)] = opened
        entries.move_to_end((token, principal))
        while len(entries) > self.size:
            entries.popitem(last=False)

    def forget(self, token: str, principal: str) -> None:
        """Drop the entry of `token` (its session has been ended)."""
        self._entries.pop((token, principal), None)


@dataclass(frozen=True, slots=True)
class Opened:
    """A session id that opened: its claims, and its stand-in in logs."""

    claims: SessionClaims
    log_id: str


# -- what policy reads -------------------------------------------------------------------

#: Methods whose target is guarded as another's: subscribing to a resource reads it.
_GUARDED_AS = {"resources/subscribe": "resources/read", "resources/unsubscribe": "resources/read"}


def scoped(method: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The method and params a legacy request is checked against per-target scopes as:
    itself, or (for a resource subscription) the read of the same resource."""
    return _GUARDED_AS.get(method, method), params
