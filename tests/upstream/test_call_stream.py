"""A Streamable HTTP call's answer read by its connection's callbacks (no task per call),
against a scripted loopback server: messages reach the inbox as they arrive, the rest
of the stream is drained for the connection's reuse, and every way a stream can end
without the response ends the call's stream with a StreamEnd."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from gateway.aio import spawn
from gateway.clock import SystemClock
from gateway.config import UpstreamConfig
from gateway.errors import UpstreamError
from gateway.http1 import Http1Client
from gateway.protocol import sse
from gateway.protocol.capabilities import ClientCaps
from gateway.protocol.versions import UPSTREAM_VERSIONS
from gateway.upstream.factory import session_factory
from gateway.upstream.http import get_stream
from gateway.upstream.http import stream as call_stream
from gateway.upstream.http.session import HttpSession
from gateway.upstream.http.wire import Endpoint, HttpWire
from gateway.upstream.port import Inbox, SessionExpired, StreamCursor, StreamEnd
from tests.http1.servers import Server

INIT = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "serverInfo": {"name": "scripted", "version": "1"},
}
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)

Call = Callable[[asyncio.StreamReader, asyncio.StreamWriter, str], Awaitable[object]]


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def event(message: dict[str, object], event_id: str | None = None) -> bytes:
    head = f"id: {event_id}\n".encode() if event_id else b""
    return chunk(head + b"event: message\ndata: " + json.dumps(message).encode() + b"\n\n")


def initialized(rid: object) -> bytes:
    """The answer to `initialize`: a JSON result naming session s1."""
    data = json.dumps({"jsonrpc": "2.0", "id": rid, "result": INIT}).encode()
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nmcp-session-id: s1\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(data), data)
    )


def response(rid: str) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": rid, "result": {"content": [], "isError": False}}


def body_of(request: bytes) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(request.split(b"\r\n\r\n", 1)[1] or b"{}")
    return parsed


def answer_handshake(writer: asyncio.StreamWriter, body: dict[str, Any]) -> None:
    """`initialize` gets session s1; anything else posted (a notification) gets 202."""
    if body.get("method") == "initialize":
        writer.write(initialized(body["id"]))
    else:
        writer.write(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n")


async def scripted(call: Call) -> Server:
    """A legacy server that does the handshake and answers each tools/call with `call`."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> object:
        request = server.requests[-1]
        if request.startswith(b"GET"):
            writer.write(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n")
            return None
        body = body_of(request)
        if body.get("method") == "tools/call":
            return await call(reader, writer, body["id"])
        answer_handshake(writer, body)
        return None

    server = await Server().start(answer)
    return server


@pytest.fixture
async def http() -> AsyncIterator[Http1Client]:
    client = Http1Client()
    yield client
    await client.close()


def new_session(http: Http1Client, server: Server) -> HttpSession:
    return HttpSession(
        http, Endpoint("u", server.url, {}, timeout_s=5), ClientCaps(), clock=SystemClock()
    )


async def open_session(http: Http1Client, server: Server) -> HttpSession:
    session = new_session(http, server)
    await session.open()
    return session


def gets(server: Server) -> list[bytes]:
    """The GET requests the server has had (each the head of a standalone stream)."""
    return [r for r in server.requests if r.startswith(b"GET")]


def call_request(session: HttpSession) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": session.next_id(), "method": "tools/call", "params": {}}


async def test_messages_reach_the_inbox_as_they_arrive_with_no_task_reading(
    http: Http1Client,
) -> None:
    go_on = asyncio.Event()

    async def ask_then_answer(
        _reader: asyncio.StreamReader, writer: asyncio.StreamWriter, rid: str
    ) -> None:
        question = {"jsonrpc": "2.0", "id": 0, "method": "elicitation/create", "params": {}}
        writer.write(SSE_HEAD + event(question))
        await go_on.wait()
        writer.write(event(response(rid)) + b"0\r\n\r\n")

    server = await scripted(ask_then_answer)
    session = await open_session(http, server)
    inbox = Inbox()
    before = asyncio.all_tasks()
    pumping = await session.start(call_request(session), inbox, StreamCursor())
    ours = {
        t.get_name() for t in asyncio.all_tasks() - before if not t.get_name().startswith("Task-")
    }
    assert ours == set()  # the gateway started no task: the connection's callbacks read it
    assert (await inbox.get())["method"] == "elicitation/create"  # before the stream ends
    assert not pumping.done()
    go_on.set()
    assert "result" in await inbox.get()
    await session.wait_quiet()  # the stream ran out: the exchange is over
    assert pumping.done() and http.idle_connections >= 1  # its connection kept for reuse
    await session.close()
    await server.stop()


async def test_a_stream_that_goes_on_after_the_response_is_given_up(
    http: Http1Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(call_stream, "DRAIN_S", 0.0)
    held: list[asyncio.StreamWriter] = []

    async def answer_and_linger(
        _reader: asyncio.StreamReader, writer: asyncio.StreamWriter, rid: str
    ) -> bool:
        writer.write(SSE_HEAD + event(response(rid)))
        held.append(writer)
        return True  # the stream stays open

    server = await scripted(answer_and_linger)
    session = await open_session(http, server)
    inbox = Inbox()
    pumping = await session.start(call_request(session), inbox, StreamCursor())
    assert "result" in await inbox.get()
    await session.wait_quiet()  # the drain gave up on it
    assert pumping.done()
    await session.close()
    await server.stop()


@pytest.mark.parametrize(
    ("ending", "says"),
    [
        (b"0\r\n\r\n", "closed the stream before answering"),  # ended clean, no event id
        (b"", "answer failed while posting a request"),  # cut mid-body
    ],
)
async def test_a_stream_that_ends_without_the_response_ends_the_calls_stream(
    http: Http1Client, ending: bytes, says: str
) -> None:
    async def end_early(
        _reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _rid: str
    ) -> bool:
        notice = {"jsonrpc": "2.0", "method": "notifications/message", "params": {}}
        writer.write(SSE_HEAD + event(notice) + ending)
        await writer.drain()
        return False  # and the connection closes

    server = await scripted(end_early)
    session = await open_session(http, server)
    inbox = Inbox()
    await session.start(call_request(session), inbox, StreamCursor())
    assert (await inbox.get())["method"] == "notifications/message"
    end = await inbox.get()
    assert isinstance(end, StreamEnd) and isinstance(end.error, UpstreamError)
    assert says in str(end.error)
    await session.close()
    await server.stop()


async def test_stopping_a_call_closes_its_stream(http: Http1Client) -> None:
    closed = asyncio.Event()

    async def never_answer(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _rid: str
    ) -> bool:
        writer.write(SSE_HEAD)
        await reader.read()  # until the gateway closes the connection
        closed.set()
        return False

    server = await scripted(never_answer)
    session = await open_session(http, server)
    inbox = Inbox()
    pumping = await session.start(call_request(session), inbox, StreamCursor())
    await pumping.stop()
    assert pumping.done() and inbox.empty()
    await session.wait_quiet()
    async with asyncio.timeout(5):
        await closed.wait()  # the server sees the call's connection go
    await session.close()
    await server.stop()


async def test_a_json_answer_is_put_at_once(http: Http1Client) -> None:
    async def json_answer(
        _reader: asyncio.StreamReader, writer: asyncio.StreamWriter, rid: str
    ) -> None:
        data = json.dumps(response(rid)).encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (len(data), data)
        )

    server = await scripted(json_answer)
    session = await open_session(http, server)
    inbox = Inbox()
    pumping = await session.start(call_request(session), inbox, StreamCursor())
    assert pumping.done() and "result" in await inbox.get()
    await session.close()
    await server.stop()


async def test_the_gateway_names_itself_to_its_upstream_unless_the_config_does(
    http: Http1Client,
) -> None:
    async def unused(
        _reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _rid: str
    ) -> None:
        raise AssertionError("no call is made")

    server = await scripted(unused)
    for headers, expected in (
        ({}, b"\r\nUser-Agent: mrtr-gateway/"),
        ({"user-agent": "acme-probe/2"}, b"\r\nuser-agent: acme-probe/2\r\n"),
    ):
        server.requests.clear()
        config = UpstreamConfig(name="u", url=server.url, headers=headers)
        session = session_factory(http, config, clock=SystemClock())(ClientCaps())
        await session.open()
        await session.close()
        initialize = server.requests[0]
        assert expected in initialize and initialize.lower().count(b"user-agent") == 1
    await server.stop()


async def test_a_resumed_stream_is_live_at_its_priming_event_and_not_before(
    http: Http1Client,
) -> None:
    wire = HttpWire(http, Endpoint("u", "http://127.0.0.1:1/mcp", {}, timeout_s=5))
    cursor = StreamCursor(last_id="s-1:4", live=asyncio.Event())
    parser = sse.Parser()
    replayed = b"id: s-1:5\ndata: " + json.dumps({"jsonrpc": "2.0", "method": "x"}).encode()
    assert wire.call_messages(parser, replayed + b"\n\n", "r1", cursor) != []
    assert not cursor.live.is_set()  # a replayed message: the stream is not attached yet
    wire.call_messages(parser, b"id: s-1:6\ndata: \n\n", "r1", cursor)
    assert cursor.live.is_set()  # mcp 1.x primes a resumed stream once it is attached
    assert cursor.last_id == "s-1:6"


async def test_a_session_waits_for_its_get_stream_and_stops_waiting_when_closed(
    http: Http1Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`open` returns once the server answers the GET stream (mcp 1.x drops what it sends
    before it holds it); closed meanwhile, the session stops waiting at once; never
    answered, it serves once the wait runs out, and warns."""
    asked = asyncio.Event()

    async def answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        request = server.requests[-1]
        if request.startswith(b"GET"):
            asked.set()
            await asyncio.Event().wait()  # holds the stream without a head
        answer_handshake(writer, body_of(request))

    server = await Server().start(answer)
    try:
        session = new_session(http, server)
        opening = spawn(session.open(), name="open")
        await asyncio.wait_for(asked.wait(), 5)
        assert not opening.done()  # the stream has had no answer
        await session.close(end=False)
        async with asyncio.timeout(1):  # not the 5 s a stream never answered is given
            await opening
        # Never answered, the wait runs out: the session serves, and says what it risks.
        monkeypatch.setattr(get_stream, "LISTEN_WAIT_S", 0.05)
        later = new_session(http, server)
        with capture_logs() as logs:
            await asyncio.wait_for(later.open(), 5)
        assert later.alive
        [warning] = [e for e in logs if e["event"] == "upstream_get_stream_unanswered"]
        assert warning["upstream"] == "u" and warning["log_level"] == "warning"
        await later.close(end=False)
    finally:
        await server.stop()


async def test_an_adopted_session_asks_a_busy_get_stream_again_before_it_serves(
    http: Http1Client,
) -> None:
    """The server holds one GET stream per session: a session adopted again right after
    its last call here ended finds the old stream not yet seen closed (409). It asks
    again soon, and serves no call before the server holds its stream (mcp 1.x drops
    what it would send there meanwhile)."""
    refusals = 3

    async def answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        if len(gets(server)) <= refusals:
            writer.write(b"HTTP/1.1 409 Conflict\r\ncontent-length: 0\r\n\r\n")
            return
        writer.write(SSE_HEAD)
        await writer.drain()
        await asyncio.Event().wait()  # holds the stream

    server = await Server().start(answer)
    try:
        session = new_session(http, server)
        async with asyncio.timeout(3):  # well before the 5 s a stream never answered gets
            await session.adopt("s1", UPSTREAM_VERSIONS[0])
        asked = gets(server)
        assert len(asked) == refusals + 1 and all(b"mcp-session-id: s1" in g.lower() for g in asked)
        assert session.alive
        await session.close(end=False)
    finally:
        await server.stop()


async def test_a_session_closed_while_it_reopens_starts_no_get_stream(
    http: Http1Client,
) -> None:
    """`close` can come while a call renews the session (`reopen`, waiting for the new
    handshake): the session opened meanwhile is ended at once, and no stream that nobody
    would ever stop is held for it."""

    async def answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        request = server.requests[-1]
        if request.startswith(b"GET"):
            writer.write(SSE_HEAD)
            await writer.drain()
            await asyncio.Event().wait()
        answer_handshake(writer, body_of(request))

    server = await Server().start(answer)
    try:
        session = await open_session(http, server)
        await session.close(end=False)
        with pytest.raises(UpstreamError, match="closed while it was opened again"):
            async with asyncio.timeout(1):  # no wait for a stream that will not be opened
                await session.reopen()
        assert len(gets(server)) == 1  # the first session's only
        assert server.requests[-1].startswith(b"DELETE")  # the one opened meanwhile, ended
    finally:
        await server.stop()


async def test_busy_refusals_are_counted_in_a_row_and_a_gone_session_is_not_adopted(
    http: Http1Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 409 after a stream that dropped gets every quick retry again, not what an
    earlier run left; and a session the server forgets while it is asked again (404)
    is refused to the takeover (SessionExpired), not handed over dead."""
    monkeypatch.setattr(get_stream, "RECONNECT_DELAY_S", 0.01)
    monkeypatch.setattr(get_stream, "BUSY_RETRY_S", (0.01,) * 3)
    script = [b"409", b"409", b"drop", b"409", b"409", b"409", b"hold"]
    held = asyncio.Event()

    async def answer(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> object:
        step = script.pop(0) if script else b"hold"
        if step == b"409":
            writer.write(b"HTTP/1.1 409 Conflict\r\ncontent-length: 0\r\n\r\n")
            return None
        if step == b"404":
            writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            return None
        writer.write(SSE_HEAD)
        await writer.drain()
        if step == b"drop":
            return False  # the connection ends mid-stream
        held.set()
        await asyncio.Event().wait()
        return None

    server = await Server().start(answer)
    try:
        session = new_session(http, server)
        with capture_logs() as logs:
            await session.adopt("s1", UPSTREAM_VERSIONS[0])
            await asyncio.wait_for(held.wait(), 5)
        assert not [e for e in logs if e["event"] == "upstream_get_stream_refused"], logs
        await session.close(end=False)
        script[:] = [b"409", b"404"]
        gone = new_session(http, server)
        with pytest.raises(SessionExpired):
            await gone.adopt("s1", UPSTREAM_VERSIONS[0])
        await gone.close(end=False)
    finally:
        await server.stop()
