"""The gateway's TCP listener: the common request served here, the rest by aiohttp.

Each connection starts on `_Connection`, which serves `simple_http.SimplePost`
requests itself: the same handler, behind the same middlewares in the same order
(the application's own list), without aiohttp's request and response machinery
(about a fifth of the gateway's CPU on the CPU-clock profile; 4.6% of a pass-through
call's instructions once its own head reading is counted). At the first request
of any other shape, the connection (with every byte it has buffered, at a request
boundary) is handed to aiohttp's own protocol for the rest of its life, so health
probes, metadata documents, methods not allowed and every malformed or unusual
request are answered exactly as aiohttp answers them.

What aiohttp's server did for these requests and this one does the same way:
handler cancellation when the client goes away, keep-alive with an idle timeout,
pipelined requests answered in order, back-pressure on reads and on streamed
writes, and a 500 without details for an error that escapes the middlewares.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

import structlog
from aiohttp import web
from yarl import URL

from gateway.aio import spawn
from gateway.web.exchange import SimpleAnswer, SimpleRequest, SimpleStream
from gateway.web.middleware import INTERNAL_ERROR_BODY
from gateway.web.simple_http import (
    LAST_CHUNK,
    MAX_HEAD_BYTES,
    HandOff,
    HttpDate,
    SimplePost,
    read_head,
    response_head,
)

log = structlog.get_logger("gateway.web")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: The handler of each path the listener serves itself (the app's MCP paths).
ROUTES = web.AppKey("listener_routes", dict[str, Handler])
#: aiohttp's default idle time of a kept-alive connection.
KEEPALIVE_S = 75.0
#: How long a request's head may take to arrive, from its first byte: a connection that
#: trickles a head (or sends what never ends one) is answered 408 and closed, so that
#: idle-looking half-requests cannot hold the gateway's sockets.
HEAD_TIMEOUT_S = 10.0
_HEAD_TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"


class Listener:
    """Listens on one address; `served` and `handed_off` count what went which way."""

    def __init__(
        self,
        app: web.Application,
        server: web.Server,
        routes: Mapping[str, Handler],
        *,
        max_body: int,
        keepalive_s: float = KEEPALIVE_S,
    ) -> None:
        self.server = server
        self.max_body = max_body
        self.keepalive_s = keepalive_s
        self.head_timeout_s = HEAD_TIMEOUT_S
        # The application's middlewares, in its order, around each route's handler.
        self.routes = {path: _wrapped(app.middlewares, h) for path, h in routes.items()}
        self.connections: set[_Connection] = set()
        self.served = 0
        self.handed_off = 0
        self._date = HttpDate()
        self._asyncio_server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        """Start listening; the port bound (a free one when `port` is 0)."""
        loop = asyncio.get_running_loop()
        self._asyncio_server = await loop.create_server(
            lambda: _Connection(self), host, port, backlog=128
        )
        return int(self._asyncio_server.sockets[0].getsockname()[1])

    def date(self) -> str:
        return self._date.at(time.time())

    async def close(self, timeout_s: float = 10.0) -> None:
        """Stop listening; close idle connections, give busy ones `timeout_s` to answer."""
        if self._asyncio_server is not None:
            self._asyncio_server.close()
        busy = [c.task for c in self.connections if c.task is not None]
        for conn in list(self.connections):
            conn.closing = True
            if conn.task is None:
                conn.close()
        if busy:
            _, late = await asyncio.wait(busy, timeout=timeout_s)
            for task in late:
                task.cancel()
            if late:  # their handlers unwind before the app's resources close
                await asyncio.wait(late)
        for conn in list(self.connections):
            conn.close()


class Served:
    """An application served as `mrtr-gateway serve` serves it: aiohttp's runner (the
    app's start-up and clean-up, its server for handed-off connections) behind the
    listener."""

    def __init__(self, app: web.Application, runner: web.AppRunner, listener: Listener) -> None:
        self.app, self.runner, self.listener = app, runner, listener
        self.host, self.port = "", 0

    def make_url(self, path: str) -> URL:
        return URL.build(scheme="http", host=self.host, port=self.port, path=path)

    async def close(self) -> None:
        await self.listener.close()
        await self.runner.cleanup()


async def serve(app: web.Application, host: str, port: int, *, max_body: int) -> Served:
    """Start `app` (its cleanup contexts) and listen on `host`:`port` (0: a free port)."""
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    assert runner.server is not None  # set up
    routes = app[ROUTES]
    served = Served(app, runner, Listener(app, runner.server, routes, max_body=max_body))
    try:
        served.host, served.port = host, await served.listener.start(host, port)
    except BaseException:
        await runner.cleanup()
        raise
    return served


def _wrapped(middlewares: Sequence[Any], handler: Handler) -> Handler:
    for middleware in reversed(middlewares):
        handler = functools.partial(middleware, handler=handler)
    return handler


class _Connection(asyncio.Protocol):
    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None
        self.closing = False  # the listener is closing: no request after this one
        # What has come and is not yet a request: the bytes of one read as they came, a
        # bytearray once reads pile up (appending to bytes would copy it all each time).
        self._buf: bytes | bytearray = b""
        self._head: SimplePost | None = None  # read, its body still on its way
        self._reading = True
        self._writable: asyncio.Future[None] | None = None  # while writes are paused
        self._paused = False
        self._idle_at = 0.0
        self._head_since: float | None = None  # when a head still arriving began to
        self._timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:  # TCP keep-alive, as aiohttp sets it: a dead peer is found
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        self.listener.connections.add(self)
        loop = asyncio.get_running_loop()
        self._idle_at = loop.time()
        self._timer = loop.call_at(self._idle_at + self.listener.keepalive_s, self._check_idle)

    def data_received(self, data: bytes) -> None:
        if not self._buf:
            self._buf = data
        elif isinstance(self._buf, bytearray):
            self._buf += data
        else:
            self._buf = bytearray(self._buf) + data
        if self.task is None:
            self._next()
            self._watch_head()
        elif self._reading and len(self._buf) > self.listener.max_body + 2 * MAX_HEAD_BYTES:
            self._pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.listener.connections.discard(self)
        if self._timer is not None:
            self._timer.cancel()
        if self.task is not None:
            self.task.cancel()  # the client went away: cancellation, as aiohttp's
        self._wake_writer()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_writer()

    # -- writing

    def write(self, data: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("the client's connection is closed")
        self.transport.write(data)

    async def drain(self) -> None:
        """Until the client has taken what was written down to the transport's mark."""
        if self._paused and not self.closed:
            if self._writable is None:  # one future for every writer waiting
                self._writable = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._writable)
        if self.closed:
            raise ConnectionResetError("the client's connection is closed")

    def _wake_writer(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    def date(self) -> str:
        return self.listener.date()

    @property
    def closed(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _pause_reading(self) -> None:
        assert self.transport is not None
        self._reading = False
        self.transport.pause_reading()

    # -- requests

    def _next(self) -> None:
        if not self._buf or self.closing:
            return
        found = self._head or read_head(self._buf, self.listener.routes, self.listener.max_body)
        if found is None:
            return
        if isinstance(found, HandOff):
            self._hand_off(found.reason)
            return
        end = found.head_size + found.body_size
        if len(self._buf) < end:
            self._head = found  # read once, however many pieces its body comes in
            return
        self._head = None
        body = bytes(self._buf[found.head_size : end])
        self._buf = self._buf[end:] if len(self._buf) > end else b""
        self.task = spawn(self._serve(found, body), name="request")

    async def _serve(self, post: SimplePost, body: bytes) -> None:
        request = SimpleRequest(self, post, body)
        handler = self.listener.routes[post.path]
        try:
            try:
                response = await handler(cast(web.Request, request))
            except web.HTTPException as exc:  # aiohttp's own answers are responses too
                response = exc
            close = post.close or self.closing
            close = self._answer(request, response, close) or close
            if self._paused:  # no next request while this answer waits in memory
                await self.drain()
        except (asyncio.CancelledError, ConnectionResetError):
            self._done(close=True)
            return
        except Exception:
            log.exception("unhandled_error", path=post.path)
            if request.streamed is None and not self.closed:
                head = {"Content-Type": "application/json"}
                self.write(self._whole(500, head, INTERNAL_ERROR_BODY, close=True))
            self._done(close=True)
            return
        self.listener.served += 1
        self._done(close=close or self.closing)

    def _done(self, *, close: bool) -> None:
        """The request is answered: close, or go on to the next one."""
        self.task = None
        if close:
            self.close()
            return
        self._idle_at = asyncio.get_running_loop().time()
        if not self._reading:
            self._reading = True
            assert self.transport is not None
            self.transport.resume_reading()
        self._next()
        self._watch_head()

    def _watch_head(self) -> None:
        """Time a head that has begun to arrive and is not all there (the rare case: a
        request nearly always comes whole in one read)."""
        if self.task is not None or self._head is not None or not self._buf:
            self._head_since = None
            return
        if self._head_since is not None or self.transport is None:
            return  # timed already
        loop = asyncio.get_running_loop()
        self._head_since = loop.time()
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(
            self._head_since + self.listener.head_timeout_s, self._check_idle
        )

    def _answer(
        self,
        request: SimpleRequest,
        response: web.StreamResponse | SimpleAnswer | SimpleStream,
        close: bool,
    ) -> bool:
        """Write the handler's answer; True when the connection must end after it."""
        if isinstance(response, SimpleStream):
            if not response.ended:  # a handler that returned without ending its stream
                self.write(LAST_CHUNK)
            return False
        if request.streamed is not None:
            # An answer after the stream began (an error past the first event): nothing
            # can follow a stream but its end, and the connection is no longer sound.
            if not request.streamed.ended:
                self.write(LAST_CHUNK)
            return True
        if isinstance(response, SimpleAnswer):
            self.write(self._whole(response.status, response.headers, response.body, close))
            return False
        body = response.body if isinstance(response, web.Response) else None
        if body is not None and not isinstance(body, bytes):
            raise TypeError(f"an answer's body of {type(body).__name__} cannot be sent here")
        self.write(self._whole(response.status, response.headers, body or b"", close))
        return False

    def _whole(self, status: int, headers: Mapping[str, str], body: bytes, close: bool) -> bytes:
        head = response_head(status, headers.items(), self.date(), length=len(body), close=close)
        return head + body

    def _hand_off(self, reason: str) -> None:
        """aiohttp's protocol takes the connection, from the request at `_buf` on."""
        assert self.transport is not None
        log.debug("connection_handed_off", reason=reason)
        self.listener.handed_off += 1
        self.listener.connections.discard(self)
        if self._timer is not None:
            self._timer.cancel()
        protocol = self.listener.server()
        protocol.connection_made(self.transport)
        if self._paused:  # the transport's writes are paused: the new protocol must know
            protocol.pause_writing()
        self.transport.set_protocol(protocol)
        buf, self._buf = bytes(self._buf), b""
        protocol.data_received(buf)

    def _check_idle(self) -> None:
        """Close a connection idle for `keepalive_s` between requests; one whose request is
        being served or still arriving is not idle (as with aiohttp)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._head_since is not None and self.task is None and self._head is None:
            deadline = self._head_since + self.listener.head_timeout_s
            if now >= deadline:
                self._timer = None
                log.debug("request_head_timed_out", received=len(self._buf))
                if self.transport is not None and not self.transport.is_closing():
                    self.transport.write(_HEAD_TIMED_OUT)
                self.close()
                return
            self._timer = loop.call_at(deadline, self._check_idle)
            return
        if self.task is None and not self._buf:
            if now - self._idle_at >= self.listener.keepalive_s:
                self._timer = None
                self.close()
                return
            base = self._idle_at
        else:
            base = now
        self._timer = loop.call_at(base + self.listener.keepalive_s, self._check_idle)
