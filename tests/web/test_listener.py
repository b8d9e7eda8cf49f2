"""The gateway's listener on a real socket: what it serves itself, what it hands to
aiohttp, and that a connection behaves the same either way (keep-alive, pipelining,
streams, cancellation on disconnect, idle timeout, shutdown)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from gateway.aio import spawn
from gateway.web.channel import ResponseChannel
from gateway.web.handlers import read_body
from gateway.web.listener import ROUTES, Served, serve
from gateway.web.middleware import error_middleware, request_id_middleware

MAX_BODY = 1000
CHUNKED = (
    b"POST /echo HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
)


class Handlers:
    def __init__(self) -> None:
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


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "alive"})


async def start(handlers: Handlers, *, middlewares: bool = True, **kw: Any) -> Served:
    app = web.Application(
        middlewares=[request_id_middleware, error_middleware] if middlewares else []
    )
    routes = {"/echo": handlers.echo, "/stream": handlers.stream, "/hold": handlers.hold}
    routes["/fail"] = handlers.fail
    for path, handler in routes.items():
        app.router.add_route("*", path, handler)
    app.router.add_get("/healthz", healthz)
    app[ROUTES] = dict(routes)
    served = await serve(app, "127.0.0.1", 0, max_body=MAX_BODY)
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
    assert (await read_response(reader))[0] == 200
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
