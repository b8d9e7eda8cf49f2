"""A large answer from a Streamable HTTP upstream (a JSON body, or one event of a call's
stream) is read in steps, its bulk kept as the bytes it came in: in order with what
came before and after it, the stream resumable from the last event the call has seen,
and written out to the client as the same JSON."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from structlog.testing import capture_logs

from gateway.http1 import Http1Client
from gateway.protocol import jsonrpc, large
from gateway.upstream.http.wire import Endpoint, HttpWire
from gateway.upstream.port import Inbox, StreamCursor, StreamEnd
from tests.http1.servers import Server
from tests.upstream.test_call_stream import (
    SSE_HEAD,
    answer_handshake,
    body_of,
    call_request,
    chunk,
    open_session,
    scripted,
)

TEXT = 'a "quoted" line\tand é, 日本\n' * (3 * large.LARGE_BYTES // 30)  # about 3 MiB


def big_result(rid: object) -> dict[str, Any]:
    content = [{"type": "text", "text": TEXT}]
    return {"jsonrpc": "2.0", "id": rid, "result": {"content": content, "isError": False}}


def sse_event(message: dict[str, Any], event_id: str | None = None) -> bytes:
    head = f"id: {event_id}\n".encode() if event_id else b""
    return head + b"event: message\ndata: " + orjson.dumps(message) + b"\n\n"


def pieces(data: bytes, size: int = 64 * 1024) -> list[bytes]:
    return [data[at : at + size] for at in range(0, len(data), size)]


@pytest.fixture
async def http() -> AsyncIterator[Http1Client]:
    client = Http1Client()
    yield client
    await client.close()


@pytest.fixture
def wire() -> HttpWire:
    return HttpWire(Http1Client(), Endpoint("u", "http://127.0.0.1:9/mcp", {}, timeout_s=5))


def as_written(item: dict[str, Any]) -> Any:
    return json.loads(orjson.dumps(item))


async def test_what_follows_a_large_event_waits_for_it_and_the_stream_resumes_from_it(
    wire: HttpWire,
) -> None:
    parser = wire.sse_parser(large_raw=True)
    cursor = StreamCursor()
    notice = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"n": 1}}
    other = big_result("not-this-call")  # a large response, to some other request
    stream = sse_event(notice, "e1") + sse_event(other, "e2") + sse_event(notice, "e3")
    items: list[dict[str, Any]] = []
    for piece in pieces(stream):
        items += wire.call_messages(parser, piece, "r-1", cursor)
    assert items == [notice] and parser.held is not None
    assert cursor.last_id == "e1"  # not past the large event while it is unread
    assert wire.call_messages(parser, sse_event(big_result("r-1"), "e4"), "r-1", cursor) == []
    read = await wire.read_large(parser, "r-1", cursor)  # the other's, then the notice
    assert [as_written(item) for item in read] == [other, notice]
    assert isinstance(read[0]["result"]["content"][0]["text"], orjson.Fragment)
    assert cursor.last_id == "e3" and parser.held is not None  # the call's own, now
    (mine,) = await wire.read_large(parser, "r-1", cursor)
    assert as_written(mine) == big_result("r-1") and cursor.answered


async def test_a_large_event_that_is_not_json_is_skipped_as_any_such_event(wire: HttpWire) -> None:
    parser = wire.sse_parser(large_raw=True)
    cursor = StreamCursor()
    broken = sse_event(big_result("r-1"))[:-40] + b"\n\n"
    assert wire.call_messages(parser, broken + sse_event(big_result("r-1")), "r-1", cursor) == []
    with capture_logs() as logs:
        assert await wire.read_large(parser, "r-1", cursor) == []  # and the next is held
        (answer,) = await wire.read_large(parser, "r-1", cursor)
    assert [log["event"] for log in logs] == ["upstream_sent_bad_json"]
    assert as_written(answer) == big_result("r-1") and cursor.answered


async def test_a_large_answer_on_a_calls_stream_reaches_the_inbox_in_order(
    http: Http1Client,
) -> None:
    notice = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"p": 1}}

    async def large_answer(
        _reader: asyncio.StreamReader, writer: asyncio.StreamWriter, rid: str
    ) -> None:
        writer.write(SSE_HEAD + chunk(sse_event(notice, "e1")))
        for piece in pieces(sse_event(big_result(rid), "e2")):
            writer.write(chunk(piece))
            await writer.drain()
        writer.write(b"0\r\n\r\n")  # the stream ends as the answer is being read

    server = await scripted(large_answer)
    session = await open_session(http, server)
    inbox = Inbox()
    request = call_request(session)
    pumping = await session.start(request, inbox, StreamCursor())
    assert await inbox.get() == notice
    answer = await inbox.get()
    assert not isinstance(answer, StreamEnd)
    assert isinstance(answer["result"]["content"][0]["text"], orjson.Fragment)
    assert as_written(answer) == big_result(request["id"])
    await session.wait_quiet()
    assert pumping.done() and inbox.empty()  # no StreamEnd: the stream ended answered
    assert http.idle_connections >= 1  # read to its end: its connection kept for reuse
    await session.close()
    await server.stop()


def json_answer(message: dict[str, Any]) -> bytes:
    data = orjson.dumps(message)
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    return head % len(data) + data


async def answering(method: str, result: dict[str, Any]) -> Server:
    """A legacy server answering `method` with `result` in JSON (and the handshake)."""

    async def answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        body = body_of(server.requests[-1])
        if body.get("method") == method:
            writer.write(json_answer({"jsonrpc": "2.0", "id": body["id"], "result": result}))
        else:
            answer_handshake(writer, body)

    server = await Server().start(answer)
    return server


async def test_a_large_json_answer_is_read_in_steps(http: Http1Client) -> None:
    server = await answering("tools/call", big_result(0)["result"])
    session = await open_session(http, server)
    inbox = Inbox()
    request = call_request(session)
    await session.start(request, inbox, StreamCursor())
    item = await inbox.get()
    assert isinstance(item, dict)
    assert isinstance(item["result"]["content"][0]["text"], orjson.Fragment)
    assert as_written(item) == big_result(request["id"])
    await session.close()
    await server.stop()


async def test_a_large_list_is_read_whole_the_gateway_filters_its_entries(
    http: Http1Client,
) -> None:
    tools = [
        {"name": f"t{i}", "inputSchema": {"type": "object"}, "d": TEXT[:3000]} for i in range(500)
    ]
    assert len(jsonrpc.dumps(tools)) > large.LARGE_BYTES
    server = await answering("tools/list", {"tools": tools})
    session = await open_session(http, server)
    response = await session.request("tools/list", {})
    assert response["result"] == {"tools": tools}  # plain values, no fragment
    await session.close()
    await server.stop()
