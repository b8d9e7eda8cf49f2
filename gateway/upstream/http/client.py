"""The gateway's own HTTP/1.1 client toward Streamable HTTP legacy servers.

Every call the gateway bridges is one or more requests to its upstream, so this
client is on the hot path: a request is one write of its head and body, and a
response is read by the sans-IO parser of `gateway.upstream.http.h1` straight
from the socket, with no per-request machinery beyond that (no cookies, no
redirects, no proxies, no compression: the gateway asks for none of them).
Connections are kept alive per origin and reused most-recent-first; one that
the server closed is dropped when it closes, one idle past `idle_s` when it is
next looked at. A response's body is read as it arrives (an SSE stream) or
whole; its connection goes back to the pool only once the body has ended, and
is closed otherwise.

Only idempotent requests (GET) are sent again, once, when a reused connection
turns out closed before any byte of the answer: a POST may already have run.

Failures are the builtins the transport boundary (`gateway.upstream.transport.
mapped_errors`) maps: `OSError` (refused, reset, closed before answering),
`TimeoutError` (connecting), `ValueError` (`h1.BadResponse`: the bytes are not
HTTP, or the stream was cut mid-body).
"""

from __future__ import annotations

import asyncio
import contextvars
import ssl
import time
from types import TracebackType
from typing import Protocol

from gateway.upstream.http import h1
from gateway.upstream.http.connection import Connection, Origin, split_url

#: Idle keep-alive connections older than this are closed rather than reused.
#: Below the keep-alive timeouts servers commonly ship (uvicorn and Node 5 s, gunicorn 2 s,
#: hypercorn 5 s): a connection the server is about to close is not reused, since a POST
#: that meets a server's close is never sent again.
IDLE_S = 1.5
#: Idle connections kept per origin; more are closed when given back.
MAX_IDLE_PER_ORIGIN = 256


class BodySink(Protocol):
    """Where `Response.stream_into` sends a body."""

    def data(self, chunk: bytes) -> None:
        """More of the body."""
        ...

    def end(self, error: BaseException | None) -> None:
        """The body ended (None) or failed (`OSError`, `ValueError`)."""
        ...


class Response:
    """A response whose body is read once: whole (`read`) or as it arrives (`chunks`).

    Use it as an async context manager, or call `release`: a connection whose body
    was read to its end goes back to the pool, any other is closed.
    """

    __slots__ = ("status", "headers", "_conn", "_client", "_keep", "_ended", "_sink")

    def __init__(self, head: h1.Head, conn: Connection, client: Http1Client) -> None:
        self.status = head.status
        self.headers = head.headers  # names lower-cased
        self._conn: Connection | None = conn
        self._client = client
        self._keep = head.keep_alive
        self._ended = False
        self._sink: BodySink | None = None

    async def next_chunk(self) -> bytes | None:
        """The body's next bytes as they arrive; None once it has ended.

        A plain coroutine rather than an async generator: a reader that stops early
        (the response it wanted came) leaves nothing for the loop to finalise.

        Raises:
            OSError, ValueError
        """
        conn = self._conn
        while conn is not None and not self._ended:
            event = await conn.next_event()
            if isinstance(event, bytes):
                if event:
                    return event
            elif isinstance(event, h1.End):
                self._ended = True
        return None

    async def read(self) -> bytes:
        """The whole body. Raises: OSError, ValueError."""
        parts = []
        while (chunk := await self.next_chunk()) is not None:
            parts.append(chunk)
        return b"".join(parts)

    def stream_into(self, sink: BodySink) -> None:
        """Hand the rest of the body to `sink` as it arrives, from the connection's own
        callbacks (no task reads it); the response is released when the body ends or
        fails, and `sink` told which. `release` before then abandons it (closed)."""
        conn = self._conn
        if conn is None:
            raise RuntimeError("the response was released")
        self._sink = sink
        conn.consume(self._consume)

    def _consume(self, events: list[h1.Event] | BaseException) -> None:
        sink = self._sink
        if sink is None:
            return
        if isinstance(events, BaseException):
            self._sink = None
            self.release()
            sink.end(events)
            return
        for event in events:
            if isinstance(event, bytes):
                if event:
                    sink.data(event)
                if self._sink is None:
                    return  # the sink let go meanwhile
            elif isinstance(event, h1.End):
                self._ended = True
                self._sink = None
                self.release()
                sink.end(None)
                return

    def release(self) -> None:
        self._sink = None
        conn, self._conn = self._conn, None
        if conn is None:
            return
        conn.finished()
        if self._ended and self._keep and not conn.closed:
            self._client.give_back(conn)
        else:
            conn.close()

    async def __aenter__(self) -> Response:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class Http1Client:
    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        idle_s: float = IDLE_S,
        max_idle_per_origin: int = MAX_IDLE_PER_ORIGIN,
    ) -> None:
        self._ssl = ssl_context
        self.idle_s = idle_s
        self.max_idle_per_origin = max_idle_per_origin
        self._idle: dict[Origin, list[Connection]] = {}
        self._open: set[Connection] = set()
        self._closed = False

    @property
    def idle_connections(self) -> int:
        return sum(len(idle) for idle in self._idle.values())

    async def request(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        body: bytes = b"",
        *,
        connect_timeout_s: float,
    ) -> Response:
        """Send a request and read its head; the caller reads the body and releases it.

        Raises:
            OSError: the connection could not be made, or closed before an answer.
            TimeoutError: connecting took longer than `connect_timeout_s`.
            ValueError: a bad URL or header, or a malformed answer.
        """
        origin, target = split_url(url)
        data = h1.request_head(method, target, origin.host_header, headers, len(body)) + body
        retry = method == "GET"
        while True:
            conn = self._take(origin)
            reused = conn is not None
            if conn is None:
                conn = await self._connect(origin, connect_timeout_s)
            try:
                conn.send(data, no_body=method == "HEAD")
                head = await conn.next_event()
            except ConnectionResetError:
                conn.close()
                if reused and retry:
                    retry = False
                    continue
                raise
            except BaseException:
                conn.close()  # cancelled or failed mid-answer: never reused
                raise
            assert isinstance(head, h1.Head)
            return Response(head, conn, self)

    def give_back(self, conn: Connection) -> None:
        idle = self._idle.setdefault(conn.origin, [])
        if self._closed or len(idle) >= self.max_idle_per_origin:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        idle.append(conn)

    async def close(self) -> None:
        """Close every connection, idle or in use."""
        self._closed = True
        self._idle.clear()
        for conn in list(self._open):
            conn.close()
        self._open.clear()

    def _take(self, origin: Origin) -> Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < self.idle_s and conn.quiet():
                return conn
            conn.close()
        return None

    async def _connect(self, origin: Origin, timeout_s: float) -> Connection:
        if self._closed:
            raise ConnectionError("the upstream client is closed")
        loop = asyncio.get_running_loop()
        context = None
        if origin.scheme == "https":
            context = self._ssl = self._ssl or ssl.create_default_context()
        # Made in a task of its own in an empty context: the connection's callbacks run
        # in the context it was made in, and it serves many requests after the one that
        # made it, whose log fields (request_id ...) are not theirs. Awaited here at once
        # (not `spawn`: its failure is this caller's to raise, not a background crash).
        connecting = loop.create_task(
            loop.create_connection(
                lambda: Connection(origin, self._open.discard),
                origin.host,
                origin.port,
                ssl=context,
                server_hostname=origin.host if context is not None else None,
            ),
            name="upstream-connect",
            context=contextvars.Context(),
        )
        try:
            async with asyncio.timeout(timeout_s):
                _, conn = await connecting  # cancelled with the caller
        except BaseException:
            if connecting.done() and not connecting.cancelled() and not connecting.exception():
                connecting.result()[1].close()  # made just as the caller gave up
            raise
        if not conn.closed:
            self._open.add(conn)
        return conn
