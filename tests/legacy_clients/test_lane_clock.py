"""The legacy lane's timing, as transcripts on a manual clock: the gateway in process on a
`ManualClock`, in front of a Streamable HTTP server the test plays (`StreamableServer`).
Nothing sleeps; time moves when the test moves it.

- A session id is served from what it opened to until its expiry, and refused (404,
  `expired`) from then on.
- A POST's stream whose upstream is quiet gets keepalives every `keepalive_s`; its
  response, when it comes, is relayed; an upstream silent for `hold_timeout_s` before its
  response ends the stream with an error for the request.
- A GET stream ends, cleanly, at its session's expiry.
- A GET the upstream refuses as busy (409) is asked again after each of
  `BUSY_RETRY_S`, then passed on; a try that finds the stream free gets it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import structlog

from gateway.aio import spawn
from gateway.app import build_app
from gateway.legacy_clients.upstream import BUSY_RETRY_S
from gateway.protocol.sse import KEEPALIVE
from gateway.web.serving import serve
from tests.fakes.clock import ManualClock
from tests.support.inprocess import Gateway, gateway_config
from tests.support.legacy_wire import HEADERS, VERSION, call, open_session, request, send
from tests.support.streamable import StreamableServer
from tests.support.wire import parse_sse_messages

KEEPALIVE_S = 5.0
HOLD_S = 30.0
SESSION_TTL_S = 600.0


@pytest.fixture
async def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def server() -> AsyncIterator[StreamableServer]:
    played = await StreamableServer(
        {"tools/list": {"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}},
        streamed={"tools/call", "GET"},
    ).start()
    yield played
    await played.stop()


@pytest.fixture
async def gateway(clock: ManualClock, server: StreamableServer) -> AsyncIterator[Gateway]:
    config = gateway_config(
        server.url,
        legacy={"session_ttl_s": SESSION_TTL_S},
        limits={"keepalive_s": KEEPALIVE_S, "hold_timeout_s": HOLD_S},
    )
    served = await serve(build_app(config, clock=clock), "127.0.0.1", 0, idle_timeout_s=75)
    http = aiohttp.ClientSession()
    try:
        yield Gateway(served, http, server.url)
    finally:
        await http.close()
        await served.close()


def session_headers(session: str) -> dict[str, str]:
    return {**HEADERS, "Mcp-Session-Id": session, "MCP-Protocol-Version": VERSION}


async def test_a_session_is_served_until_its_expiry_and_refused_from_then_on(
    gateway: Gateway, clock: ManualClock
) -> None:
    session = await open_session(gateway.http, gateway.url)
    for _ in range(2):  # opened, then served from what the lane kept
        reply = await send(gateway.http, gateway.url, request("tools/list"), session=session)
        assert reply.status == 200 and reply.last["result"]["tools"]
    clock.advance(SESSION_TTL_S - 0.001)
    reply = await send(gateway.http, gateway.url, request("tools/list"), session=session)
    assert reply.status == 200  # a moment before its expiry
    clock.advance(0.001)
    with structlog.testing.capture_logs() as logs:
        reply = await send(gateway.http, gateway.url, request("tools/list"), session=session)
    assert reply.status == 404
    refused = [line["reason"] for line in logs if line["event"] == "legacy_session_refused"]
    assert refused == ["expired"]


async def opened_stream(
    gateway: Gateway, clock: ManualClock, server: StreamableServer, session: str
) -> tuple[aiohttp.ClientResponse, Any]:
    """A tools/call whose upstream answers with a stream that says nothing: its head is
    held for a keepalive's wait, then sent as a stream (the client's response, and the
    server's side of the stream)."""
    body = json.dumps(call("t", rid=7)).encode()
    posting = spawn(
        gateway.http.post(gateway.url, data=body, headers=session_headers(session)), name="post"
    )
    stream = await server.next_stream("tools/call")
    await clock.armed(clock.now + KEEPALIVE_S)  # the head waits for a first message
    assert not posting.done()
    clock.advance(KEEPALIVE_S)
    resp = await asyncio.wait_for(posting, 5)
    assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
    return resp, stream


async def test_a_quiet_stream_gets_keepalives_then_its_response(
    gateway: Gateway, clock: ManualClock, server: StreamableServer
) -> None:
    session = await open_session(gateway.http, gateway.url)
    resp, stream = await opened_stream(gateway, clock, server, session)
    try:
        for _ in range(3):  # every keepalive_s of quiet, one comment
            await clock.armed(clock.now + KEEPALIVE_S)
            clock.advance(KEEPALIVE_S)
            assert await asyncio.wait_for(resp.content.readuntil(b"\n\n"), 5) == KEEPALIVE
        content = {"content": [{"type": "text", "text": "late"}]}
        await stream.respond(content)
        (answer,) = parse_sse_messages(await asyncio.wait_for(resp.read(), 5))
        assert answer == {"jsonrpc": "2.0", "id": 7, "result": content}
    finally:
        resp.release()


async def test_a_stream_silent_for_the_hold_timeout_ends_with_an_error_for_its_request(
    gateway: Gateway, clock: ManualClock, server: StreamableServer
) -> None:
    session = await open_session(gateway.http, gateway.url)
    resp, stream = await opened_stream(gateway, clock, server, session)
    try:
        clock.advance(HOLD_S - KEEPALIVE_S - 0.001)  # keepalives only, so far
        await clock.armed(HOLD_S)
        assert not resp.content.at_eof()
        clock.advance(0.001)
        messages = parse_sse_messages(await asyncio.wait_for(resp.read(), 5))
        assert [m["id"] for m in messages] == [7]
        assert messages[0]["error"]["code"] == -32603
        assert "hold_timeout_s" in messages[0]["error"]["message"]
    finally:
        stream.end()
        resp.release()


async def test_a_get_stream_ends_cleanly_at_its_sessions_expiry(
    gateway: Gateway, clock: ManualClock, server: StreamableServer
) -> None:
    session = await open_session(gateway.http, gateway.url)
    clock.advance(SESSION_TTL_S / 2)
    headers = {**session_headers(session), "Accept": "text/event-stream"}
    resp = await gateway.http.get(gateway.url, headers=headers)
    try:
        assert resp.status == 200
        stream = await server.next_stream("GET", session=server.session_of("pytest-legacy"))
        await stream.send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        said = await asyncio.wait_for(resp.content.readuntil(b"\n\n"), 5)
        assert b"list_changed" in said
        await clock.armed(SESSION_TTL_S)  # the session's expiry, on the lane's clock
        clock.advance(SESSION_TTL_S / 2 - 0.001)  # keepalives on the way, nothing else
        assert not resp.content.at_eof()
        with structlog.testing.capture_logs() as logs:
            clock.advance(0.001)
            rest = await asyncio.wait_for(resp.read(), 5)  # until its last chunk
        assert rest.replace(KEEPALIVE, b"") == b""
        ended = [line["how"] for line in logs if line["event"] == "legacy_stream_ended"]
        assert ended == ["expired"]
    finally:
        resp.release()


@pytest.mark.parametrize("refusals", [2, len(BUSY_RETRY_S) + 1])
async def test_a_get_refused_as_busy_is_asked_again_at_its_pace_then_passed_on(
    gateway: Gateway, clock: ManualClock, server: StreamableServer, refusals: int
) -> None:
    session = await open_session(gateway.http, gateway.url)
    upstream = server.session_of("pytest-legacy")
    server.busy[upstream] = refusals
    headers = {**session_headers(session), "Accept": "text/event-stream"}
    getting = spawn(gateway.http.get(gateway.url, headers=headers), name="get")
    tries = min(refusals, len(BUSY_RETRY_S))
    for asked, delay in enumerate(BUSY_RETRY_S[:tries], start=1):
        await clock.armed(clock.now + delay)  # refused: asked again only after `delay`
        assert server.gets.count(upstream) == asked and not getting.done()
        clock.advance(delay)
    resp = await asyncio.wait_for(getting, 5)
    try:
        assert server.gets.count(upstream) == tries + 1
        if refusals > len(BUSY_RETRY_S):
            assert resp.status == 409  # still busy after the last try: the client is told
        else:
            assert resp.status == 200  # free at last: the stream
            stream = await server.next_stream("GET", session=upstream)
            stream.end()
    finally:
        resp.release()
