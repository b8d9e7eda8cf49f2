"""A 2025 client's session on an endpoint of several upstreams, sans-IO: its sealed id,
and the ids that tell which upstream a message of the session belongs to.

On an endpoint of several upstreams (`endpoints[]`) a 2025 client holds one session, and
the gateway one upstream session per server behind it, each opened at `initialize`. The
client's `Mcp-Session-Id` seals them all, as a route's session id seals its one
(`gateway.protocol.legacy_session`): the endpoint's path, each upstream's session handle
and the replica that owns it (empty when any replica serves it), a digest of the
caller's principal, when it was made and when it expires, what the client declared, and
whether the session's answers come as SSE streams (as its servers' did).
It is sealed with the requestState key ring under a prefix of its own (``le1.``), so it
never opens as a route's session id nor the reverse. Any replica serves any request of
the session from the id alone; `member` gives the claims of one upstream's session, as
that upstream's own lane reads them.

What crosses the one session from several servers names its server:

- a request a server sends the client (`elicitation/create`, `sampling/createMessage`,
  `roots/list`) is relayed with its id marked with the upstream (`marked`), and the
  client's answer, on whichever replica it comes, goes back to that upstream with the
  id that upstream gave (`unmarked`). Its form: `mrtr-u/<upstream>/<the id, as JSON>`
  (the id as it came from that upstream's lane, itself perhaps tagged with its call,
  `gateway.protocol.legacy_questions`);
- an SSE event id, by which the client resumes a stream, is `<upstream>/<its id>`
  (`marked_event`, `unmarked_event`).

Both came with format level 2 (`Kind.ENDPOINT_SESSION`, `Kind.ENDPOINT_REQUEST_ID`), and
level 1 never served an endpoint: kinds it never reads.

Pure: no I/O. It must not decide HTTP statuses, nor read anything but what it is given.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gateway.protocol import formats, jsonrpc
from gateway.protocol.formats import Kind
from gateway.protocol.legacy_session import (
    SessionClaims,
    SessionIdRefusal,
    unsealed,
    valid_upstream_session,
)
from gateway.protocol.state import StateCodec

#: The prefix of an endpoint's session ids (a route's are ``lg1.``).
ENDPOINT_SESSION_PREFIX = "le1."
#: The version of an endpoint session id's claims this release writes.
CLAIMS_VERSION = formats.written(Kind.ENDPOINT_SESSION, formats.LEVEL)
#: The mark of a server's request id relayed on an endpoint's session.
MARK = "mrtr-u/"


@dataclass(frozen=True, slots=True)
class MemberSession:
    """One upstream's session behind an endpoint's session id."""

    upstream: str
    session: str | None  # the upstream's own session id; None: it gave none
    owner: str  # the replica holding it; empty: any replica serves it


@dataclass(frozen=True, slots=True, kw_only=True)
class EndpointClaims:
    """What an endpoint's session id asserts."""

    path: str  # the endpoint's path
    members: tuple[MemberSession, ...]  # in the endpoint's order; the upstreams that opened
    principal: str  # `legacy_session.principal_tag` of the caller who opened it
    audience: str
    created_ms: int
    expires_ms: int
    declared: tuple[str, ...]  # `legacy_session.declared_of` the client's capabilities
    #: Whether the gateway's own answers come as an SSE stream (some upstream answered
    #: `initialize` so: the session's answers come as its servers' do), else as JSON.
    streams: bool = False

    def member(self, upstream: str) -> SessionClaims | None:
        """The claims of `upstream`'s session, as its own lane reads a session id's; None
        when it did not open at `initialize` (it could not be reached)."""
        for member in self.members:
            if member.upstream == upstream:
                return SessionClaims(
                    upstream=upstream,
                    session=member.session,
                    principal=self.principal,
                    owner=member.owner,
                    audience=self.audience,
                    created_ms=self.created_ms,
                    expires_ms=self.expires_ms,
                    declared=self.declared,
                )
        return None

    @property
    def upstreams(self) -> tuple[str, ...]:
        return tuple(m.upstream for m in self.members)


def seal(codec: StateCodec, claims: EndpointClaims, version: int = CLAIMS_VERSION) -> str:
    """The session id carrying `claims` (`codec` seals under `ENDPOINT_SESSION_PREFIX`).

    Raises:
        ValueError: an upstream session id that is not visible ASCII or too long.
    """
    for member in claims.members:
        if not valid_upstream_session(member.session):
            raise ValueError("an upstream's session id is not visible ASCII of a bounded length")
    data = {
        "P": claims.path,
        "m": [[m.upstream, m.session, m.owner] for m in claims.members],
        "p": claims.principal,
        "a": claims.audience,
        "c": claims.created_ms,
        "e": claims.expires_ms,
        "k": list(claims.declared),
        "t": claims.streams,
    }
    return codec.seal(jsonrpc.dumps(formats.stamped(Kind.ENDPOINT_SESSION, data, version)))


_FIELDS: dict[str, tuple[type, str]] = {
    "P": (str, "path"),
    "m": (list, "members"),
    "p": (str, "principal"),
    "a": (str, "audience"),
    "c": (int, "created_ms"),
    "e": (int, "expires_ms"),
    "k": (list, "declared"),
    "t": (bool, "streams"),
}


def open_session(
    codec: StateCodec, token: str, *, now_ms: int, principal: str, path: str, audience: str
) -> EndpointClaims | SessionIdRefusal:
    """The claims of an endpoint's session id presented by `principal` (its
    `principal_tag`) on the endpoint at `path`, or why it is refused; fail-closed."""
    opened = unsealed(codec, token, Kind.ENDPOINT_SESSION)
    if isinstance(opened, SessionIdRefusal):
        return opened
    _, data = opened
    if set(data) != set(_FIELDS):
        return SessionIdRefusal("payload shape")
    values: dict[str, Any] = {}
    for key, (kind, name) in _FIELDS.items():
        value = data[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            return SessionIdRefusal(f"claim {name} has the wrong type")
        values[name] = value
    members = _members(values["members"])
    declared = values["declared"]
    if members is None or not all(isinstance(d, str) for d in declared):
        return SessionIdRefusal("payload shape")
    claims = EndpointClaims(**{**values, "members": members, "declared": tuple(declared)})
    if claims.audience != audience:
        return SessionIdRefusal("audience mismatch")
    if claims.path != path:
        return SessionIdRefusal("another endpoint's session")
    if now_ms >= claims.expires_ms:
        return SessionIdRefusal("expired")
    if claims.principal != principal:
        return SessionIdRefusal("principal mismatch")
    return claims


def _members(raw: list[Any]) -> tuple[MemberSession, ...] | None:
    members = []
    for entry in raw:
        if not isinstance(entry, list) or len(entry) != 3:
            return None
        upstream, session, owner = entry
        if not isinstance(upstream, str) or not isinstance(owner, str):
            return None
        if not (session is None or isinstance(session, str)):
            return None
        members.append(MemberSession(upstream, session, owner))
    return tuple(members)


# -- what crosses the session, marked with its upstream -----------------------------------


def marked(upstream: str, rid: Any) -> str:
    """The id a request of `upstream`'s to the client is relayed with."""
    return f"{MARK}{upstream}/{json.dumps(rid, separators=(',', ':'))}"


def unmarked(rid: Any) -> tuple[str, Any] | None:
    """The upstream and its own id of a marked id; None for one that is not well formed."""
    if not isinstance(rid, str) or not rid.startswith(MARK):
        return None
    upstream, _, own = rid[len(MARK) :].partition("/")
    if not upstream or not own:
        return None
    try:
        original = json.loads(own)
    except ValueError:
        return None
    if not isinstance(original, str | int) or isinstance(original, bool):
        return None
    return upstream, original


def marked_event(upstream: str, event_id: str) -> str:
    """The id an SSE event of `upstream`'s stream is relayed with."""
    return f"{upstream}/{event_id}"


def unmarked_event(event_id: str) -> tuple[str, str] | None:
    """The upstream and its own event id of a relayed one; None if it names none."""
    upstream, _, own = event_id.partition("/")
    return (upstream, own) if upstream and own else None
