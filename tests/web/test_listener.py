"""The gateway's listener on a real socket: what it serves itself, what it hands to
aiohttp, and that a connection behaves the same either way (keep-alive, pipelining,
streams, cancellation on disconnect, idle timeout, shutdown)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from gateway.aio import spawn
from gateway.web import listener as listener_module
from gateway.web.channel import ResponseChannel
from gateway.web.handlers import read_body
from gateway.web.listener import ROUTES, Listener, Served, serve
from gateway.web.middleware import error_middleware, request_id_middleware
from gateway.web.simple_http import read_head

MAX_BODY = 1000
CHUNKED = (
    b"POST /echo HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
)


class Handlers:
    def __init__(self) -> None:
        self.listener: Listener | None = None
        self.waiting: list[int] = []
        self.release = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.entered = asyncio.Event()

    async def echo(self, request: web.Request) -> web.StreamResponse:
        body = await read_body(request, MAX_BODY)  # the gateway's handlers' own reading
        answer = {"body": body.decode(), "auth": request.headers.getall("Authorization", [])}
        return web.json_response(answer)

    async def stream(self, request: web.Request) -> web.StreamResponse:
        channel = ResponseChannel(request, keepalive_s=60)
        await channel.notify({"jsonrpc": "2.0", "method": "notifications/progress"})
        return await channel.finish({"jsonrpc": "2.0", "id": 1, "result": {}})

    async def hold(self, request: web.Request) -> web.StreamResponse:
        self.entered.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return web.json_response({"held": True})

    async def fail(self, request: web.Request) -> web.StreamResponse:
        raise RuntimeError("a bug")

    async def stream_then_fail(self, request: web.Request) -> web.StreamResponse:
        channel = ResponseChannel(request, keepalive_s=60)
        await channel.notify({"jsonrpc": "2.0", "method": "notifications/progress"})
        raise RuntimeError("a bug past the first event")

    async def big(self, request: web.Request) -> web.StreamResponse:
        """4 MB, noting how much of earlier answers still waits in the transport."""
        assert self.listener is not None
        for conn in self.listener.connections:
            assert conn.transport is not None
            self.waiting.append(conn.transport.get_write_buffer_size())
        return web.Response(body=b'"' + b"x" * 4_000_000 + b'"', content_type="application/json")


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "alive"})


async def start(handlers: Handlers, *, middlewares: bool = True, **kw: Any) -> Served:
    app = web.Application(
        middlewares=[request_id_middleware, error_middleware] if middlewares else []
    )
    routes = {"/echo": handlers.echo, "/stream": handlers.stream, "/hold": handlers.hold}
    routes.update({"/fail": handlers.fail, "/stream_then_fail": handlers.stream_then_fail})
    routes["/big"] = handlers.big
    for path, handler in routes.items():
        app.router.add_route("*", path, handler)
    app.router.add_get("/healthz", healthz)
    app[ROUTES] = dict(routes)
    served = await serve(app, "127.0.0.1", 0, max_body=MAX_BODY)
    handlers.listener = served.listener
    served.listener.keepalive_s = kw.get("keepalive_s", served.listener.keepalive_s)
    return served


@pytest.fixture
async def handlers() -> Handlers:
    return Handlers()


@pytest.fixture
async def served(handlers: Handlers) -> AsyncIterator[Served]:
    served = await start(handlers)
    yield served
    handlers.release.set()
    await served.close()


def post(path: str, body: bytes = b"{}", *extra: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: gw", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response: status, headers (last value wins), body (chunks joined)."""
    status_line = await reader.readline()
    status = int(status_line.split()[1])
    headers: dict[str, str] = {}
    while (line := await reader.readline()) != b"\r\n":
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        return status, headers, await reader.readexactly(int(headers["content-length"]))
    body = b""
    while size := int((await reader.readline()).strip(), 16):
        body += await reader.readexactly(size)
        await reader.readexactly(2)
    await reader.readexactly(2)
    return status, headers, body


async def connect(served: Served) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", served.port)


async def one_answered(
    served: Served,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, Any]:
    """A connection that has had one request answered, and the listener's side of it."""
    reader, writer = await connect(served)
    writer.write(post("/echo"))
    assert (await read_response(reader))[0] == 200
    (conn,) = served.listener.connections
    return reader, writer, conn


async def test_plain_posts_are_served_here_behind_the_apps_middlewares(served: Served) -> None:
    reader, writer = await connect(served)
    writer.write(post("/echo", b'{"a":1}', "Authorization: one", "Authorization: two"))
    status, headers, body = await read_response(reader)
    assert status == 200 and headers["content-type"].startswith("application/json")
    assert json.loads(body) == {"body": '{"a":1}', "auth": ["one", "two"]}
    assert len(headers["x-request-id"]) == 16  # set by request_id_middleware
    assert "date" in headers and "server" not in headers  # not aiohttp's answer
    assert (served.listener.served, served.listener.handed_off) == (1, 0)
    writer.close()


async def test_keep_alive_pipelining_and_bodies_in_pieces(served: Served) -> None:
    reader, writer = await connect(served)
    writer.write(post("/echo", b'"first"') + post("/echo", b'"second"'))  # one write, two asks
    answers = [json.loads((await read_response(reader))[2])["body"] for _ in range(2)]
    assert answers == ['"first"', '"second"']
    whole = post("/echo", b'"third, in pieces"')
    for i in range(0, len(whole), 7):
        writer.write(whole[i : i + 7])
        await writer.drain()
    assert json.loads((await read_response(reader))[2])["body"] == '"third, in pieces"'
    assert served.listener.served == 3
    writer.close()


async def test_other_requests_hand_the_connection_to_aiohttp(served: Served) -> None:
    reader, writer = await connect(served)
    writer.write(post("/echo", b'"here"'))
    assert (await read_response(reader))[0] == 200
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n" + post("/echo", b'"after"'))
    status, headers, body = await read_response(reader)
    assert status == 200 and json.loads(body) == {"status": "alive"}
    assert headers["server"].startswith("Python/")  # aiohttp answered, and goes on doing so
    status, headers, body = await read_response(reader)
    assert json.loads(body)["body"] == '"after"' and "server" in headers
    assert (served.listener.served, served.listener.handed_off) == (1, 1)
    writer.close()


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (CHUNKED, 200),
        (post("/echo", b"x" * (MAX_BODY + 1)), 413),
        (b"POST /echo HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\nBad Header: x\r\n\r\n{}", 400),
        (b"DELETE /nowhere HTTP/1.1\r\nHost: gw\r\n\r\n", 404),
    ],
)
async def test_what_aiohttp_answers_it_still_answers(
    served: Served, raw: bytes, status: int
) -> None:
    reader, writer = await connect(served)
    writer.write(raw)
    assert (await read_response(reader))[0] == status
    assert served.listener.handed_off == 1
    writer.close()


async def test_a_streamed_answer_is_chunked_sse(served: Served) -> None:
    reader, writer = await connect(served)
    writer.write(post("/stream"))
    status, headers, body = await read_response(reader)
    assert status == 200 and headers["content-type"] == "text/event-stream"
    assert headers["transfer-encoding"] == "chunked" and len(headers["x-request-id"]) == 16
    events = [
        json.loads(line[5:]) for line in body.decode().splitlines() if line.startswith("data:")
    ]
    assert [e.get("method", e.get("id")) for e in events] == ["notifications/progress", 1]
    writer.write(post("/echo", b'"next"'))  # the connection goes on after the last chunk
    assert json.loads((await read_response(reader))[2])["body"] == '"next"'
    writer.close()


async def test_a_client_that_goes_away_cancels_its_handler(
    served: Served, handlers: Handlers
) -> None:
    _, writer = await connect(served)
    writer.write(post("/hold"))
    await handlers.entered.wait()
    writer.close()
    await asyncio.wait_for(handlers.cancelled.wait(), 5)


async def test_connection_close_is_honoured(served: Served) -> None:
    reader, writer = await connect(served)
    writer.write(post("/echo", b"{}", "Connection: close"))
    status, headers, _ = await read_response(reader)
    assert status == 200 and headers["connection"] == "close"
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the listener
    writer.close()


async def test_an_idle_connection_is_closed_after_the_keep_alive_time(handlers: Handlers) -> None:
    served = await start(handlers, keepalive_s=0.2)
    try:
        reader, writer = await connect(served)
        writer.write(post("/echo"))
        assert (await read_response(reader))[0] == 200
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
    finally:
        await served.close()


async def test_an_error_past_every_middleware_is_a_bare_500(handlers: Handlers) -> None:
    served = await start(handlers, middlewares=False)
    try:
        reader, writer = await connect(served)
        writer.write(post("/fail"))
        status, _, body = await read_response(reader)
        assert status == 500 and json.loads(body)["error"]["code"] == -32603
        assert b"a bug" not in body
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
    finally:
        await served.close()


async def test_closing_lets_a_busy_request_answer_and_ends_idle_ones(
    handlers: Handlers,
) -> None:
    served = await start(handlers)
    busy_reader, busy = await connect(served)
    idle_reader, idle = await connect(served)
    idle.write(post("/echo"))
    await read_response(idle_reader)
    busy.write(post("/hold"))
    await handlers.entered.wait()
    closing = spawn(served.close(), name="close")
    assert await asyncio.wait_for(idle_reader.read(), 5) == b""
    handlers.release.set()
    status, _, body = await read_response(busy_reader)
    assert status == 200 and json.loads(body) == {"held": True}
    await closing
    assert await asyncio.wait_for(busy_reader.read(), 5) == b""
    busy.close()
    idle.close()


def test_the_hand_off_works_on_uvloop_as_served() -> None:
    """`serve` runs on uvloop (its transports' `set_protocol` is what a hand-off uses)."""
    import uvloop  # a dependency wherever CPython runs on Linux, as here

    async def scenario() -> tuple[int, int, int]:
        served = await start(Handlers())
        try:
            reader, writer = await connect(served)
            writer.write(post("/echo") + b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
            first, second = await read_response(reader), await read_response(reader)
            writer.close()
            return first[0], second[0], served.listener.handed_off
        finally:
            await served.close()

    assert uvloop.run(scenario()) == (200, 200, 1)


async def test_an_answer_the_client_has_not_taken_holds_the_next_request(
    served: Served, handlers: Handlers
) -> None:
    """A client that pipelines and reads slowly: each request is served only once the
    previous answer has left the gateway's memory (down to the transport's low mark)."""
    reader, writer = await connect(served)
    writer.write(post("/big") * 4)
    for _ in range(4):
        status, _, body = await read_response(reader)
        assert status == 200 and len(body) == 4_000_002
    assert len(handlers.waiting) == 4
    assert max(handlers.waiting) <= 64 * 1024, handlers.waiting  # not answers piling up
    writer.close()


async def test_a_request_still_arriving_is_not_idle(served: Served) -> None:
    reader, writer, conn = await one_answered(served)
    whole = post("/echo", b'"slow"')
    conn.data_received(whole[:-3])  # as the loop would hand it the first bytes
    conn._idle_at -= 1000  # long past the keep-alive time
    conn._check_idle()
    assert not conn.closed
    writer.write(whole[-3:])
    assert json.loads((await read_response(reader))[2])["body"] == '"slow"'
    writer.close()


async def test_an_error_after_the_stream_began_ends_it_and_the_connection(
    served: Served,
) -> None:
    reader, writer = await connect(served)
    writer.write(post("/stream_then_fail"))
    status, headers, body = await read_response(reader)
    assert status == 200 and headers["content-type"] == "text/event-stream"
    assert b"notifications/progress" in body and b"HTTP/1.1" not in body
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()


async def test_closing_waits_for_the_handlers_it_cancels(handlers: Handlers) -> None:
    served = await start(handlers)
    _, writer = await connect(served)
    writer.write(post("/hold"))
    await handlers.entered.wait()
    await served.listener.close(timeout_s=0)
    assert handlers.cancelled.is_set()  # unwound before the app's resources close
    await served.runner.cleanup()
    writer.close()


async def test_connections_have_tcp_keep_alive(served: Served) -> None:
    _, writer, conn = await one_answered(served)
    assert conn.transport is not None
    sock = conn.transport.get_extra_info("socket")
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    writer.close()


async def test_a_head_is_read_once_however_its_body_comes(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A body in many pieces costs one reading of its head, not one per piece (which made a
    body's arrival quadratic in its pieces)."""
    reader, writer, conn = await one_answered(served)
    reads = []

    def counted(buf: bytes, *args: Any) -> Any:
        reads.append(len(buf))
        return read_head(buf, *args)

    monkeypatch.setattr(listener_module, "read_head", counted)
    whole = post("/echo", b'"' + b"y" * 600 + b'"')
    head_size = whole.index(b"\r\n\r\n") + 4
    conn.data_received(whole[:head_size])  # each piece one read, as the loop hands them
    for i in range(head_size, len(whole), 50):
        conn.data_received(whole[i : i + 50])
    assert json.loads((await read_response(reader))[2])["body"] == '"' + "y" * 600 + '"'
    assert len(reads) == 1
    writer.close()


async def test_a_head_that_does_not_arrive_in_time_gets_408_and_the_connection_closes(
    served: Served,
) -> None:
    served.listener.head_timeout_s = 0.2
    reader, writer = await connect(served)
    writer.write(b"POST /echo HTTP/1.1\r\nHost: gw\r\n")  # and nothing more
    status_line = await asyncio.wait_for(reader.readline(), 5)
    assert status_line.startswith(b"HTTP/1.1 408")
    assert (await asyncio.wait_for(reader.read(), 5)).endswith(b"\r\n\r\n")  # then EOF
    assert not served.listener.connections
    writer.close()


async def test_a_head_timed_then_completed_in_time_is_served_and_no_longer_timed(
    served: Served,
) -> None:
    reader, writer, conn = await one_answered(served)
    whole = post("/echo", b'"late"')
    conn.data_received(whole[:10])  # as the loop would hand it: a head begun, not all there
    assert conn._head_since is not None
    conn.data_received(whole[10:])  # it completes: served, and its deadline is dropped
    assert conn._head_since is None
    assert json.loads((await read_response(reader))[2])["body"] == '"late"'
    conn._check_idle()  # the head's timer firing now finds nothing to time out
    assert not conn.closed
    writer.write(post("/echo"))
    assert (await read_response(reader))[0] == 200
    writer.close()


@pytest.mark.parametrize(
    "opening",
    [
        b"POST /echo HTTP/1.1\nHost: gw\nContent-Length: 2\n\n{}",  # bare LF line ends
        bytes.fromhex("16030100c8010000c40303") + b"\x00" * 40,  # a TLS ClientHello
    ],
    ids=["bare-lf", "tls-hello"],
)
async def test_what_can_never_end_a_head_is_answered_at_once(
    served: Served, opening: bytes
) -> None:
    reader, writer = await connect(served)
    writer.write(opening)
    answer = await asyncio.wait_for(reader.read(65536), 5)  # aiohttp answers or closes
    assert answer == b"" or answer.startswith((b"HTTP/1.0 4", b"HTTP/1.1 4"))
    writer.close()
