"""The front as `mrtr-gateway serve` runs it (aiohttp's runner and site, `serve`), on a real
socket, with the handlers' own building blocks (`read_body`, `ResponseChannel`) and the
request ids and errors of `gateway.web.front`: keep-alive, pipelining, streams,
cancellation, the bounds on a connection, shutdown; and that gateway/web/ holds no HTTP
server of its own."""

from __future__ import annotations

import ast
import asyncio
import gzip
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.typedefs import Handler
from structlog.testing import capture_logs

from gateway.aio import spawn
from gateway.app import build_app
from gateway.web.channel import ResponseChannel
from gateway.web.front import routed
from gateway.web.pipeline import read_body
from gateway.web.serving import Served, direct_routes, serve
from tests.support.inprocess import gateway_config
from tests.support.raw_http import closed, post, read_response

MAX_BODY = 1000
BOUND_S = 0.3  # the test-shortened bounds: idle (and head), body
WEB = Path(__file__).resolve().parents[2] / "gateway" / "web"


class Handlers:
    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.reading = asyncio.Event()

    async def echo(self, request: web.Request) -> web.StreamResponse:
        self.reading.set()
        body = await read_body(request, MAX_BODY, BOUND_S)
        return web.json_response({"body": body.decode()})

    async def stream(self, request: web.Request) -> web.StreamResponse:
        channel = ResponseChannel(request, keepalive_s=60)
        await channel.notify({"jsonrpc": "2.0", "method": "notifications/progress"})
        return await channel.finish({"jsonrpc": "2.0", "id": 1, "result": {}})

    async def stream_then_fail(self, request: web.Request) -> web.StreamResponse:
        channel = ResponseChannel(request, keepalive_s=60)
        await channel.notify({"jsonrpc": "2.0", "method": "notifications/progress"})
        raise RuntimeError("a bug past the first event")

    async def hold(self, request: web.Request) -> web.StreamResponse:
        self.entered.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return web.json_response({"held": True})


async def start(handlers: Handlers, *, grace_s: float = 10.0) -> Served:
    app = web.Application()
    for path in ("/echo", "/stream", "/stream_then_fail", "/hold"):
        app.router.add_route("*", path, routed(getattr(handlers, path[1:]), ["POST"]))
    return await serve(
        app, "127.0.0.1", 0, idle_timeout_s=BOUND_S, shutdown_grace_s=grace_s, linger_s=BOUND_S
    )


@pytest.fixture
def handlers() -> Handlers:
    return Handlers()


@pytest.fixture
async def served(handlers: Handlers) -> AsyncIterator[Served]:
    served = await start(handlers)
    yield served
    handlers.release.set()
    await served.close()


async def connect(served: Served) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", served.port)


async def test_keep_alive_pipelining_and_a_body_in_pieces(served: Served) -> None:
    reader, writer = await connect(served)
    writer.write(post("/echo", b'"first"') + post("/echo", b'"second"'))  # one write, two asks
    answers = [json.loads((await read_response(reader))[2])["body"] for _ in range(2)]
    assert answers == ['"first"', '"second"']
    whole = post("/echo", b'"third, in pieces"')
    for i in range(0, len(whole), 7):
        writer.write(whole[i : i + 7])
        await writer.drain()
    status, headers, body = await read_response(reader)
    assert status == 200 and json.loads(body)["body"] == '"third, in pieces"'
    assert len(headers["x-request-id"]) == 16  # named by the gateway's front
    writer.close()


async def test_a_streamed_answer_is_chunked_sse_and_its_connection_goes_on(
    served: Served,
) -> None:
    reader, writer = await connect(served)
    writer.write(post("/stream"))
    status, headers, body = await read_response(reader)
    assert status == 200 and headers["content-type"] == "text/event-stream"
    assert headers["transfer-encoding"] == "chunked" and len(headers["x-request-id"]) == 16
    assert "connection" not in headers  # kept alive, and said nothing else
    events = [
        json.loads(line[5:]) for line in body.decode().splitlines() if line.startswith("data:")
    ]
    assert [e.get("method", e.get("id")) for e in events] == ["notifications/progress", 1]
    writer.write(post("/echo", b'"next"'))
    assert json.loads((await read_response(reader))[2])["body"] == '"next"'
    writer.close()


@pytest.mark.parametrize("path", ["/echo", "/stream"])
async def test_an_answer_after_which_the_connection_closes_says_so(
    served: Served, path: str
) -> None:
    """A client's `Connection: close` is honoured, and the answer says `Connection: close`,
    a streamed one too."""
    reader, writer = await connect(served)
    writer.write(post(path, b"{}", "Connection: close"))
    status, headers, _ = await read_response(reader)
    assert status == 200 and headers["connection"] == "close"
    assert await closed(reader)
    writer.close()


async def test_an_error_after_the_stream_began_ends_it_and_the_connection(
    served: Served,
) -> None:
    reader, writer = await connect(served)
    writer.write(post("/stream_then_fail"))
    with capture_logs() as logs:
        status, headers, body = await read_response(reader)  # the stream's end, whole
        assert await closed(reader)
    assert status == 200 and headers["content-type"] == "text/event-stream"
    assert b"notifications/progress" in body and b"HTTP/1.1" not in body
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["unhandled_error"]
    writer.close()


async def test_a_client_that_goes_away_cancels_its_handler(
    served: Served, handlers: Handlers
) -> None:
    _, writer = await connect(served)
    writer.write(post("/hold"))
    await handlers.entered.wait()
    writer.close()
    await asyncio.wait_for(handlers.cancelled.wait(), 10)


async def test_an_idle_connection_is_closed(served: Served) -> None:
    reader, writer = await connect(served)
    writer.write(post("/echo"))
    assert (await read_response(reader))[0] == 200
    assert await closed(reader)  # nothing more sent: closed at its idle bound
    writer.close()


async def test_a_connection_that_never_sends_a_request_is_closed(served: Served) -> None:
    reader, writer = await connect(served)
    assert await closed(reader)
    writer.close()


async def test_a_trickled_head_is_closed_though_its_bytes_keep_coming(served: Served) -> None:
    reader, writer = await connect(served)
    # Within aiohttp's limits (one 8,190-byte line, 128 fields): only time can end it.
    head = b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"y" * 8000
    for byte in head:  # a byte at a time, each a little before the bound would pass
        try:
            writer.write(bytes([byte]))
            await writer.drain()
        except ConnectionError:
            break
        if await closed(reader, BOUND_S / 3):
            break
    else:
        pytest.fail("the whole head was taken a byte at a time")
    writer.close()


@pytest.mark.parametrize(
    "request_bytes",
    [
        post("/echo", b'{"a":', length=20),  # a body that stops short and never ends
        b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n",
    ],
    ids=["content-length", "chunked"],
)
async def test_a_body_that_does_not_arrive_in_time_gets_408_and_the_connection_closes(
    served: Served, request_bytes: bytes
) -> None:
    reader, writer = await connect(served)
    writer.write(request_bytes)
    with capture_logs() as logs:
        status, headers, body = await read_response(reader)
    assert status == 408 and headers["connection"] == "close"
    assert json.loads(body)["error"]["code"] == -32600
    assert [e["event"] for e in logs] == ["request_body_timed_out"]
    assert await closed(reader)
    writer.close()


async def test_a_malformed_chunk_after_the_head_is_answered_within_the_body_bound(
    served: Served, handlers: Handlers
) -> None:
    """aiohttp's parser refuses the chunk after the handler began to read; the read would
    wait for ever, and the body's bound ends it."""
    reader, writer = await connect(served)
    writer.write(b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n")
    await handlers.reading.wait()
    writer.write(b"2\r\n{}\r\nzz\r\n")
    status, headers, _ = await read_response(reader)
    assert status == 408 and headers["connection"] == "close"
    assert await closed(reader)
    writer.close()


async def test_a_body_that_does_not_decompress_is_a_400_and_one_info_line(
    served: Served, server_log: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    """The handler's read fails (400, connection closed); aiohttp, draining the body after
    the answer, logs it: one `request_malformed` line, no ERROR record, no traceback."""
    reader, writer = await connect(served)
    with capture_logs() as logs, caplog.at_level(logging.DEBUG, logger="aiohttp.server"):
        writer.write(post("/echo", b"not gzip at all", "Content-Encoding: gzip"))
        status, headers, body = await read_response(reader)
        assert await closed(reader)
    assert status == 400 and headers["connection"] == "close"
    assert json.loads(body)["error"]["code"] == -32600
    assert logs == [
        {
            "event": "request_malformed",
            "kind": "ContentEncodingError",
            "part": "body",
            "log_level": "info",
        }
    ]
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    writer.close()


async def test_a_body_that_does_decompress_is_read_decompressed(served: Served) -> None:
    reader, writer = await connect(served)
    writer.write(post("/echo", gzip.compress(b'"zipped"'), "Content-Encoding: gzip"))
    status, _, body = await read_response(reader)
    assert status == 200 and json.loads(body)["body"] == '"zipped"'
    writer.close()


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nBad Header: x\r\n\r\n{}",
        b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Long: " + b"a" * 9000 + b"\r\n\r\n",
    ],
    ids=["bad-header", "bad-chunk", "line-too-long"],
)
async def test_what_aiohttp_cannot_parse_is_a_400_and_one_info_line(
    served: Served,
    server_log: logging.Logger,
    caplog: pytest.LogCaptureFixture,
    request_bytes: bytes,
) -> None:
    reader, writer = await connect(served)
    with capture_logs() as logs, caplog.at_level(logging.DEBUG, logger="aiohttp.server"):
        writer.write(request_bytes)
        status, _, _ = await read_response(reader)
        assert await closed(reader)
    assert status == 400 and [e["event"] for e in logs] == ["request_malformed"]
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    writer.close()


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
    assert await closed(idle_reader)
    handlers.release.set()
    status, _, body = await read_response(busy_reader)
    assert status == 200 and json.loads(body) == {"held": True}
    await closing
    assert await closed(busy_reader)
    busy.close()
    idle.close()


async def test_closing_cancels_what_outlives_the_grace_and_waits_for_it(
    handlers: Handlers,
) -> None:
    served = await start(handlers, grace_s=0.1)
    _, writer = await connect(served)
    writer.write(post("/hold"))
    await handlers.entered.wait()
    await served.close()
    assert handlers.cancelled.is_set()  # unwound before the app's clean-up ran
    writer.close()


def test_gateway_web_holds_no_http_server_of_its_own() -> None:
    """No `asyncio.Protocol` (nor a subclass of aiohttp's), and no private attribute but
    those gateway/web/ defines itself: aiohttp's server reads and parses the requests."""
    trees = {path.name: ast.parse(path.read_text()) for path in WEB.glob("*.py")}
    own = {name for tree in trees.values() for name in _private_names_defined(tree)}
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(base) for base in node.bases}
                assert not bases & {"asyncio.Protocol", "Protocol", "BaseProtocol"} or (
                    bases == {"Protocol"} and _typing_protocol(tree)
                ), f"{name}: {node.name} is a protocol of its own"
            if isinstance(node, ast.Attribute) and _private(node.attr):
                assert node.attr in own, f"{name}: {ast.unparse(node)} is someone else's"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_names_defined(tree: ast.Module) -> set[str]:
    """The private attributes a module sets on its own objects, and its private methods."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _private(node.name):
            names.add(node.name)
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        for target in targets:
            for each in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(each, ast.Attribute) and ast.unparse(each.value) == "self":
                    names.add(each.attr)
    return {name for name in names if _private(name)}


def _typing_protocol(tree: ast.Module) -> bool:
    """`Protocol` here is `typing.Protocol` (a port), not asyncio's."""
    return any(
        isinstance(node, ast.ImportFrom)
        and node.module == "typing"
        and any(alias.name == "Protocol" for alias in node.names)
        for node in ast.walk(tree)
    )


def test_direct_routes_are_the_paths_the_router_resolves_by_path_alone() -> None:
    """A route of one path for every method is served without the application's handler;
    a path of other methods, a route with parameters, or an app with middlewares is not."""

    async def answer(request: web.Request) -> web.Response:
        return web.Response()

    async def other(request: web.Request) -> web.Response:
        return web.Response(status=204)

    app = web.Application()
    app.router.add_route("*", "/mcp", answer)
    app.router.add_get("/get", answer)
    app.router.add_route("*", "/get", other)  # a POST reaches it, through the app
    app.router.add_route("*", "/items/{name}", answer)
    app.router.add_route("*", "/mcp", other)  # a resource the router never reaches: nor we
    assert direct_routes(app) == {"/mcp": answer}

    gateway = build_app(gateway_config("http://127.0.0.1:9/mcp"))
    assert set(direct_routes(gateway)) == {"/mcp", "/healthz", "/readyz", "/metrics"}

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        return await handler(request)

    wrapped = web.Application(middlewares=[middleware])
    wrapped.router.add_route("*", "/mcp", answer)
    assert direct_routes(wrapped) == {}
    with_files = web.Application()
    with_files.router.add_static("/mcp", WEB)  # a prefix the router may try first
    with_files.router.add_route("*", "/mcp/x", answer)
    assert direct_routes(with_files) == {}


async def test_served_directly_or_through_the_app_a_request_gets_the_same_answer(
    served: Served,
) -> None:
    """`/echo` directly; with `Expect: 100-continue` through the app (aiohttp answers the
    `100 Continue`); a path nothing serves through the app, to aiohttp's 404."""
    reader, writer = await connect(served)
    writer.write(post("/echo", b'"direct"'))
    status, headers, body = await read_response(reader)
    assert status == 200 and json.loads(body)["body"] == '"direct"'
    assert len(headers["x-request-id"]) == 16
    head = post("/echo", b'"expected"', "Expect: 100-continue")
    split = head.index(b"\r\n\r\n") + 4
    writer.write(head[:split])  # the head alone: the body only once the server says so
    assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(head[split:])
    status, headers, body = await read_response(reader)
    assert status == 200 and json.loads(body)["body"] == '"expected"'
    assert len(headers["x-request-id"]) == 16
    writer.write(post("/nothing"))
    status, _, _ = await read_response(reader)
    assert status == 404
    writer.close()


async def test_a_chunked_body_over_the_limit_is_refused_however_it_arrives(
    served: Served,
) -> None:
    """No `Content-Length` to refuse it by: its bytes are counted, whether they are all
    there when the handler reads (one write) or still coming."""
    body = b"x" * (MAX_BODY + 1)
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    head = b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    for pieces in ([head + chunked], [head, chunked[:500], chunked[500:]]):
        reader, writer = await connect(served)
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
        status, _, _ = await read_response(reader)
        assert status == 413
        writer.close()
