"""The legacy lane on the wire, by hand, in front of a real mcp 1.x server: session ids
refused as a legacy server refuses them (400 without one; 404 tampered, expired, another
principal's or route's, a requestState), statuses and headers as a legacy server answers,
the gateway's session id and never the upstream's, a response that comes first sent whole
and a stream that says more relayed, GET streams capped and ended on drain, one
`request_served` line per POST, and the lane off or not serving an upstream answering as
before. What is a matter of time (a session's expiry, keepalives, the hold timeout, a GET
stream's end, the pace of a busy GET's tries) is in `test_lane_clock.py`, on a manual
clock."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog

from gateway import logging as log_context
from gateway.aio import spawn
from gateway.protocol import legacy_session as ls
from gateway.protocol import state
from tests.peers.tooling import LegacyServer, legacy_stdio_command
from tests.support.inprocess import TEST_KEY, Gateway
from tests.support.legacy_wire import call, initialize, open_session, request, send
from tests.support.wire import rpc

pytestmark = pytest.mark.peers

SESSIONS = state.AesGcmKeyRing([state.parse_key(TEST_KEY, "test")]).with_prefix("lg1.")
LEGACY_VERSIONS = ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"]


def forged(**changed: Any) -> str:
    """A session id sealed with the test gateways' key, as the gateway would seal it."""
    now = int(time.time() * 1000)
    claims = dict(
        upstream="legacy",
        session="not-a-real-upstream-session",
        principal=ls.principal_tag(state.principal_of(None)),
        owner="",
        audience="test-gateway",
        created_ms=now,
        expires_ms=now + 3_600_000,
    )
    claims.update(changed)
    return ls.seal_session(SESSIONS, ls.SessionClaims(**claims))


def text_of(message: dict[str, Any]) -> str:
    return str(message["result"]["content"][0]["text"])


@pytest.mark.parametrize("transport", ["streamable-http", "stdio"])
async def test_a_session_answers_with_the_gateways_id_and_never_the_upstreams(
    make_gateway: Any, transport: str, tmp_path: Path
) -> None:
    """Over Streamable HTTP the upstream's session id is sealed in the gateway's; over
    stdio, the handle of the process this replica holds for the session."""
    if transport == "stdio":
        gateway = await make_gateway(upstream={"command": legacy_stdio_command(tmp_path)})
    else:
        gateway = await make_gateway()
    with structlog.testing.capture_logs(processors=[log_context.merge_bound]) as logs:
        first = await send(gateway.http, gateway.url, initialize())
        session = first.headers["Mcp-Session-Id"]
        upstream_id = SESSIONS.unseal(session)  # the test holds the key: what it sealed
        upstream_session = json.loads(upstream_id)["s"]
        assert first.status == 200 and first.last["result"]["protocolVersion"] == "2025-11-25"
        done = await send(
            gateway.http,
            gateway.url,
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            session=session,
        )
        assert done.status == 202
        echoed = await send(gateway.http, gateway.url, call("echo", text="hi"), session=session)
    assert echoed.status == 200 and text_of(echoed.last) == "hi"
    assert echoed.headers["Mcp-Session-Id"] == session
    for reply in (first, done, echoed):
        assert (
            upstream_session not in str(dict(reply.headers))
            and upstream_session.encode() not in reply.raw
        )
    served = [line for line in logs if line["event"] == "request_served"]
    assert [line["rpc_method"] for line in served] == [
        "initialize",
        "notifications/initialized",
        "tools/call",
    ]
    assert all(line["era"] == "legacy" and line["session"].startswith("s_") for line in served)
    assert len({line["session"] for line in served}) == 1
    assert [line["outcome"] for line in served] == ["complete", "accepted", "complete"]
    assert [line.get("tool") for line in served] == [None, None, "echo"]
    everything = json.dumps(logs, default=str)
    assert session not in everything and upstream_session not in everything


async def test_a_request_without_a_session_id_gets_400_and_initialize_does_not_need_one(
    gateway: Gateway,
) -> None:
    for body in (request("tools/list"), {"jsonrpc": "2.0", "method": "notifications/x"}):
        reply = await send(gateway.http, gateway.url, body)
        assert reply.status == 400 and reply.last["error"]["message"].endswith("Missing session ID")
    reply = await send(gateway.http, gateway.url, None, method="GET")
    assert reply.status == 400
    reply = await send(gateway.http, gateway.url, None, method="DELETE")
    assert reply.status == 400


async def test_a_session_id_that_does_not_open_here_gets_404(
    gateway: Gateway, make_gateway: Any
) -> None:
    session = await open_session(gateway.http, gateway.url)
    flipped = session[:-3] + ("A" if session[-3] != "A" else "B") + session[-2:]
    request_state = state.seal_claims(
        SESSIONS.with_prefix("gw1."),
        state.Claims(
            call="c", round=1, principal="anonymous", digest="d", audience="test-gateway",
            issued_ms=0, expires_ms=2**53,
        ),
    )  # fmt: skip
    refused = {
        "tampered": flipped,
        "expired": forged(expires_ms=int(time.time() * 1000) - 1),
        "another route's": forged(upstream="elsewhere"),
        "another deployment's": forged(audience="another-gateway"),
        "a requestState": request_state,
        "another replica's (a replica-bound session)": forged(owner="replica-elsewhere"),
        "not a token at all": "abc",
    }
    for what, token in refused.items():
        for method, body in (("POST", request("tools/list")), ("GET", None), ("DELETE", None)):
            reply = await send(gateway.http, gateway.url, body, session=token, method=method)
            assert reply.status == 404, (what, method)
    # Another principal (here: another Authorization, the route being open) gets 404 too.
    reply = await send(
        gateway.http,
        gateway.url,
        request("tools/list"),
        session=session,
        headers={"Authorization": "Bearer someone-else"},
    )
    assert reply.status == 404
    # And the session itself still works.
    reply = await send(gateway.http, gateway.url, request("tools/list"), session=session)
    assert reply.status == 200 and reply.last["result"]["tools"]


async def test_a_session_deleted_upstream_is_404_as_the_upstream_says(gateway: Gateway) -> None:
    session = await open_session(gateway.http, gateway.url)
    deleted = await send(gateway.http, gateway.url, None, session=session, method="DELETE")
    assert deleted.status == 200
    after = await send(gateway.http, gateway.url, request("tools/list"), session=session)
    assert after.status == 404


async def test_other_methods_batches_and_bad_accept_are_refused_as_a_legacy_server_does(
    gateway: Gateway,
) -> None:
    reply = await send(gateway.http, gateway.url, None, method="PUT")
    assert reply.status == 405 and reply.headers["Allow"] == "GET, POST, DELETE"
    session = await open_session(gateway.http, gateway.url)
    batch = [request("tools/list"), request("tools/list", rid=2)]
    reply = await send(gateway.http, gateway.url, batch, session=session)
    assert reply.status == 400 and reply.last["error"]["code"] == -32600
    reply = await send(
        gateway.http, gateway.url, None, session=session, method="GET",
        headers={"Accept": "application/json"},
    )  # fmt: skip
    assert reply.status == 406


async def test_the_lane_off_answers_2025_clients_as_before(make_gateway: Any) -> None:
    gateway = await make_gateway(legacy={"enabled": False})
    reply = await send(gateway.http, gateway.url, initialize())
    assert reply.status == 404 and reply.last["error"]["code"] == -32601
    assert reply.last["error"]["data"] == {"supported": ["2026-07-28"]}
    reply = await send(gateway.http, gateway.url, None, session="lg1.x", method="GET")
    assert reply.status == 405 and reply.headers["Allow"] == "POST"
    final = await gateway.final(rpc("server/discover"))
    assert final["result"]["supportedVersions"] == ["2026-07-28"]


async def test_discover_lists_the_legacy_versions_the_lane_serves(gateway: Gateway) -> None:
    final = await gateway.final(rpc("server/discover"))
    assert final["result"]["supportedVersions"] == LEGACY_VERSIONS


async def test_a_stdio_upstream_is_served_to_2025_clients_and_refuses_a_handle_it_lacks(
    make_gateway: Any, tmp_path: Path
) -> None:
    gateway = await make_gateway(upstream={"command": legacy_stdio_command(tmp_path)})
    final = await gateway.final(rpc("server/discover"))
    assert final["result"]["supportedVersions"] == LEGACY_VERSIONS
    session = await open_session(gateway.http, gateway.url)
    echoed = await send(gateway.http, gateway.url, call("echo", text="hi"), session=session)
    assert echoed.status == 200 and text_of(echoed.last) == "hi"
    # Sealed right, but naming a session this replica does not hold: the client starts over.
    reply = await send(gateway.http, gateway.url, request("tools/list"), session=forged())
    assert reply.status == 404


async def test_a_response_that_comes_first_is_sent_whole_and_a_stream_that_says_more_relayed(
    make_gateway: Any,
) -> None:
    """The upstream's events pass on as they came either way (their ids included); only
    how they are carried differs: a response that is the stream's first event goes as a
    body of known length, a stream with anything before its response as a stream."""
    server = LegacyServer(event_store=True)  # its events carry ids
    try:
        gateway = await make_gateway(server.url)
        session = await open_session(gateway.http, gateway.url)
        echoed = await send(gateway.http, gateway.url, call("echo", text="hi"), session=session)
        assert echoed.status == 200 and text_of(echoed.last) == "hi"
        assert echoed.headers["Content-Type"].startswith("text/event-stream")
        assert echoed.headers["Mcp-Session-Id"] == session
        assert "Content-Length" in echoed.headers and "Transfer-Encoding" not in echoed.headers
        # The server's priming event (an id, no message) and its response, with their ids.
        assert len(re.findall(rb"^id: \S+$", echoed.raw, re.MULTILINE)) == 2
        assert len(echoed.messages) == 1
        token = {"progressToken": "p1"}
        progressed = await send(
            gateway.http,
            gateway.url,
            request("tools/call", {"name": "slow_progress", "arguments": {}, "_meta": token}),
            session=session,
        )
        assert progressed.status == 200 and "Content-Length" not in progressed.headers
        assert progressed.headers["Transfer-Encoding"] == "chunked"
        methods = [m.get("method") for m in progressed.messages]
        assert methods == ["notifications/progress"] * 3 + [None]
        assert text_of(progressed.last) == "done after 3 steps"
        assert len(re.findall(rb"^id: \S+$", progressed.raw, re.MULTILINE)) == 1 + 3 + 1
    finally:
        server.stop()


async def test_an_upstream_gone_is_a_502_for_the_request(make_gateway: Any) -> None:
    server = LegacyServer()
    try:
        gateway = await make_gateway(server.url)
        session = await open_session(gateway.http, gateway.url)
        server.terminate()
        reply = await send(gateway.http, gateway.url, request("tools/list", rid=5), session=session)
        assert reply.status == 502
        assert reply.last["id"] == 5 and reply.last["error"]["code"] == -32603
    finally:
        server.stop()


async def get_stream(gateway: Gateway, session: str) -> aiohttp.ClientResponse:
    headers = {
        "Accept": "text/event-stream",
        "Mcp-Session-Id": session,
        "MCP-Protocol-Version": "2025-11-25",
    }
    return await gateway.http.get(gateway.url, headers=headers)


async def test_get_streams_are_capped_per_principal_and_end_when_the_replica_drains(
    make_gateway: Any,
) -> None:
    gateway = await make_gateway(legacy={"max_streams_per_principal": 1})
    first, second = [await open_session(gateway.http, gateway.url) for _ in range(2)]
    other = await open_session(
        gateway.http, gateway.url, headers={"Authorization": "Bearer another-principal"}
    )
    held = await get_stream(gateway, first)
    assert held.status == 200 and held.headers["Mcp-Session-Id"] == first
    refused = await get_stream(gateway, second)
    assert refused.status == 429 and (await refused.json())["error"]["data"]["reason"] == (
        "legacy.max_streams_per_principal"
    )
    others = await gateway.http.get(
        gateway.url,
        headers={
            "Accept": "text/event-stream",
            "Mcp-Session-Id": other,
            "Authorization": "Bearer another-principal",
        },
    )
    assert others.status == 200  # another principal is served
    drain = spawn(gateway.bridge.drain(5.0), name="test-drain")
    async with asyncio.timeout(10):  # both streams end, cleanly (their last chunk)
        assert await held.content.read() == b""
        assert await others.content.read() == b""
    await drain
    again = await get_stream(gateway, first)
    assert again.status == 503  # a draining replica opens none: clients go elsewhere
    for resp in (held, refused, others, again):
        resp.release()


def test_a_session_id_is_visible_ascii_of_a_bounded_size() -> None:
    token = forged(session="x" * ls.MAX_UPSTREAM_SESSION_CHARS)
    assert token.isascii() and token.isprintable() and " " not in token
    assert len(token) < 2000
    raw = base64.urlsafe_b64decode(token[4:] + "==")
    assert len(raw) > 16


async def test_legacy_requests_have_metrics_of_their_own_and_leave_the_2026_series_alone(
    gateway: Gateway,
) -> None:
    session = await open_session(gateway.http, gateway.url)
    await send(gateway.http, gateway.url, call("echo", text="x"), session=session)
    await send(gateway.http, gateway.url, request("tools/list"), session="lg1.nope")
    async with gateway.http.get(gateway.url.replace("/mcp", "/metrics")) as resp:
        text = await resp.text()
    assert 'mrtr_legacy_requests_total{method="tools/call",outcome="complete"} 1.0' in text
    assert 'mrtr_legacy_requests_total{method="tools/list",outcome="refused"} 1.0' in text
    assert 'mrtr_legacy_request_duration_seconds_count{method="initialize"} 1.0' in text
    assert 'mrtr_legacy_session_refusals_total{reason="truncated"} 1.0' in text
    assert "mrtr_legacy_streams 0.0" in text
    assert 'mrtr_requests_total{method="tools/call"' not in text  # no 2026 request was made


def upstream_session_of(session: str) -> str:
    """The upstream's own session id a gateway session id seals (the test holds the key)."""
    return str(json.loads(SESSIONS.unseal(session))["s"])


async def test_a_get_the_upstream_refuses_as_busy_is_asked_again_then_passed_on(
    gateway: Gateway,
) -> None:
    """The upstream still holds the session's GET stream (a replica that held it has just
    died, the server has not seen it go): its 409 is asked again until the stream is gone,
    and passed on when it does not go (the pace of the tries: `test_lane_clock.py`)."""

    def upstream_headers(session: str) -> dict[str, str]:
        return {
            "Accept": "text/event-stream",
            "Mcp-Session-Id": upstream_session_of(session),
            "MCP-Protocol-Version": "2025-11-25",
        }

    session = await open_session(gateway.http, gateway.url)
    busy = asyncio.Event()

    def noticed(logger: Any, name: str, event: dict[str, Any]) -> dict[str, Any]:
        if event["event"] == "upstream_get_busy":
            busy.set()
        return event

    with structlog.testing.capture_logs(processors=[noticed]):
        held = await gateway.http.get(gateway.upstream_url, headers=upstream_headers(session))
        assert held.status == 200
        opening = spawn(get_stream(gateway, session), name="test-get")
        async with asyncio.timeout(10):
            await busy.wait()  # refused once at least, and asked again
        held.close()  # the old stream goes: the next try gets the stream
        async with asyncio.timeout(30):
            opened = await opening
        assert opened.status == 200
        opened.close()
    # Another session whose stream the upstream holds for good (no gateway stream of it
    # was ever open upstream, so none has to be seen gone first): the 409 is passed on.
    other = await open_session(gateway.http, gateway.url)
    held_for_good = await gateway.http.get(gateway.upstream_url, headers=upstream_headers(other))
    try:
        assert held_for_good.status == 200
        async with asyncio.timeout(30):
            refused = await get_stream(gateway, other)
        assert refused.status == 409
        refused.release()
    finally:
        held_for_good.close()


async def test_the_upstream_gets_the_gateways_own_token_never_the_clients(
    make_gateway: Any, tmp_path: Path
) -> None:
    from tests.peers.auth_server import AuthServer

    issuer = await AuthServer().start()
    try:
        issuer.clients["mrtr-gateway"] = "gw-secret"
        secret = tmp_path / "secret"
        secret.write_text("gw-secret\n")
        client = {
            "token_url": issuer.token_url,
            "client_id": "mrtr-gateway",
            "client_secret_file": str(secret),
        }
        gateway = await make_gateway(upstream={"oauth_client": client})
        own = {"Authorization": "Bearer the-clients-token"}
        session = await open_session(gateway.http, gateway.url, headers=own)
        seen = await send(
            gateway.http, gateway.url, call("authorization_seen"), session=session, headers=own
        )
        assert text_of(seen.last).startswith("Bearer ") and "the-clients-token" not in text_of(
            seen.last
        )
        assert issuer.token_requests[-1]["grant_type"] == "client_credentials"
    finally:
        await issuer.down()
