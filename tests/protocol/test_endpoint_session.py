"""An endpoint's 2025 session id, sans-IO: sealed and opened with every claim, refused
(tampered, another endpoint's, another caller's, expired, a route's id, a foreign
version) with a reason for the log; each upstream's session read as its own lane reads
one; a server's request id and an event id marked with their upstream and read back,
and anything else not taken for one."""

from __future__ import annotations

import base64
from dataclasses import replace

import pytest

from gateway.protocol import endpoint_session, formats, jsonrpc, legacy_session
from gateway.protocol.endpoint_session import EndpointClaims, MemberSession
from gateway.protocol.formats import Kind
from gateway.protocol.legacy_session import SessionClaims, SessionIdRefusal
from gateway.protocol.state import AesGcmKeyRing, generate_key

RING = AesGcmKeyRing([base64.urlsafe_b64decode(generate_key() + "=")])
CODEC = RING.with_prefix(endpoint_session.ENDPOINT_SESSION_PREFIX)
CLAIMS = EndpointClaims(
    path="/mcp",
    members=(MemberSession("notes", "n-1", ""), MemberSession("tickets", None, "replica-2~ab")),
    principal=legacy_session.principal_tag("alice"),
    audience="aud",
    created_ms=1_000,
    expires_ms=10_000,
    declared=("elicitation",),
    streams=True,
)


def opened(token: str, **given: object) -> EndpointClaims | SessionIdRefusal:
    asked = {
        "now_ms": 2_000,
        "principal": legacy_session.principal_tag("alice"),
        "path": "/mcp",
        "audience": "aud",
        **given,
    }
    return endpoint_session.open_session(CODEC, token, **asked)  # type: ignore[arg-type]


def test_an_id_opens_to_its_claims_and_each_upstreams_session() -> None:
    token = endpoint_session.seal(CODEC, CLAIMS)
    assert token.startswith("le1.")
    assert opened(token) == CLAIMS
    assert CLAIMS.member("tickets") == SessionClaims(
        upstream="tickets",
        session=None,
        principal=CLAIMS.principal,
        owner="replica-2~ab",
        audience="aud",
        created_ms=1_000,
        expires_ms=10_000,
        declared=("elicitation",),
    )
    assert CLAIMS.member("wiki") is None  # not opened at initialize
    assert CLAIMS.upstreams == ("notes", "tickets")


@pytest.mark.parametrize(
    ("given", "reason"),
    [
        ({"path": "/other"}, "another endpoint's session"),
        ({"principal": legacy_session.principal_tag("bob")}, "principal mismatch"),
        ({"now_ms": 10_000}, "expired"),
        ({"audience": "elsewhere"}, "audience mismatch"),
    ],
)
def test_an_id_is_refused_off_its_endpoint_caller_time_and_deployment(
    given: dict[str, object], reason: str
) -> None:
    assert opened(endpoint_session.seal(CODEC, CLAIMS), **given) == SessionIdRefusal(reason)


def test_a_tampered_id_a_routes_id_and_a_foreign_version_are_refused() -> None:
    token = endpoint_session.seal(CODEC, CLAIMS)
    tampered = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
    assert isinstance(opened(tampered), SessionIdRefusal)
    route = RING.with_prefix(legacy_session.SESSION_PREFIX)
    claims = SessionClaims(
        upstream="notes",
        session="n-1",
        principal=CLAIMS.principal,
        owner="",
        audience="aud",
        created_ms=1_000,
        expires_ms=10_000,
    )
    routes_id = legacy_session.seal_session(route, claims)
    assert isinstance(opened(routes_id), SessionIdRefusal)
    newer = {"v": 99, "P": "/mcp", "m": [], "p": CLAIMS.principal, "a": "aud"}
    assert opened(CODEC.seal(jsonrpc.dumps(newer))) == SessionIdRefusal("payload version")
    shapeless = formats.stamped(Kind.ENDPOINT_SESSION, {"P": "/mcp"}, 1)
    assert opened(CODEC.seal(jsonrpc.dumps(shapeless))) == SessionIdRefusal("payload shape")
    members = {
        "P": "/mcp",
        "m": [["notes", 7, ""]],
        "p": CLAIMS.principal,
        "a": "aud",
        "c": 1,
        "e": 10_000,
        "k": [],
        "t": False,
    }
    bad = formats.stamped(Kind.ENDPOINT_SESSION, members, 1)
    assert opened(CODEC.seal(jsonrpc.dumps(bad))) == SessionIdRefusal("payload shape")


def test_an_upstream_session_id_that_is_not_visible_ascii_is_not_sealed() -> None:
    claims = replace(CLAIMS, members=(MemberSession("a", "x y", ""),))
    with pytest.raises(ValueError, match="visible ASCII"):
        endpoint_session.seal(CODEC, claims)


@pytest.mark.parametrize("rid", [0, 7, "q-1", "mrtr-q/c1/1/t/3"])
def test_a_servers_request_id_is_marked_with_its_upstream_and_read_back(rid: object) -> None:
    marked = endpoint_session.marked("tickets", rid)
    assert marked.startswith("mrtr-u/tickets/")
    assert endpoint_session.unmarked(marked) == ("tickets", rid)


@pytest.mark.parametrize(
    "rid", [7, "q-1", "mrtr-u/", "mrtr-u/tickets", "mrtr-u//7", "mrtr-u/t/{", "mrtr-u/t/true"]
)
def test_an_id_not_marked_is_not_taken_for_one(rid: object) -> None:
    assert endpoint_session.unmarked(rid) is None


def test_an_event_id_names_its_upstream() -> None:
    assert endpoint_session.marked_event("notes", "e/1") == "notes/e/1"
    assert endpoint_session.unmarked_event("notes/e/1") == ("notes", "e/1")
    assert endpoint_session.unmarked_event("e1") is None
    assert endpoint_session.unmarked_event("/e1") is None
