"""An HTTP/1.1 client that stands alone: keep-alive connections per origin, a response
read whole or streamed as it arrives.

Built for a reverse proxy's one job toward its backends (a request, a JSON or an
event-stream answer), and on its hot path: a request is one write of its head and
body, and a response is parsed by llhttp (`gateway.http1.framing`) straight from the
socket, with no per-request machinery beyond that (no cookies, no redirects, no
proxies, no compression: nothing asks for them). Connections are kept alive per origin
and reused most-recent-first; one that the server closed is dropped when it closes,
one idle past `idle_s` when it is next looked at. A response's body is read whole
(`read`, at most `max_body_bytes`), awaited piece by piece (`next_chunk`) or handed to
a `BodySink` from the connection's own callbacks (`stream_into`, no task); its
connection goes back to the pool only once the body has ended, and is closed otherwise.

Only idempotent requests (GET) are sent again, once, when a reused connection turns
out closed before any byte of the answer: a POST may already have run. Connecting is
bounded (`connect_timeout_s`); what follows is bounded by the caller.

Failures are builtins, for the caller to map: `OSError` (refused, reset, closed before
answering), `TimeoutError` (connecting), `ValueError` (`framing.BadResponse`: the
bytes are not HTTP, a head or a body read whole is too large, the stream was cut
mid-body; or a bad URL or header). It must not import anything else of the gateway.
"""

from __future__ import annotations

import asyncio
import contextvars
import ssl
import time
from types import TracebackType
from typing import Protocol

import gateway.http1.framing as framing
from gateway.http1.connection import Connection, Origin, split_url

#: Idle keep-alive connections older than this are closed rather than reused.
#: Below the keep-alive timeouts servers commonly ship (uvicorn and Node 5 s, gunicorn 2 s,
#: hypercorn 5 s): a connection the server is about to close is not reused, since a POST
#: that meets a server's close is never sent again.
IDLE_S = 1.5
#: Idle connections kept per origin; more are closed when their response ends.
MAX_IDLE_PER_ORIGIN = 256
#: The largest body `Http1Response.read` takes, unless the client or the request says.
MAX_BODY_BYTES = 64 * 1024 * 1024


class BodySink(Protocol):
    """Where `Http1Response.stream_into` sends a body."""

    def data(self, chunk: bytes) -> None:
        """More of the body.

        Raises:
            ValueError: the sink refuses the body (too large, malformed): the response
                fails, its connection is closed, and `end` is told so.
        """
        ...

    def end(self, error: BaseException | None) -> None:
        """The body ended (None) or failed (`OSError`, `ValueError`)."""
        ...


class Http1Response:
    """A response whose body is read once: whole (`read`), awaited piece by piece
    (`next_chunk`) or handed to a sink as it arrives (`stream_into`).

    Use it as an async context manager, or call `release`: a connection whose body
    was read to its end goes back to the pool, any other is closed.
    """

    __slots__ = (
        "status",
        "headers",
        "max_body_bytes",
        "_conn",
        "_client",
        "_keep",
        "_ended",
        "_sink",
    )

    def __init__(
        self, head: framing.Head, conn: Connection, client: Http1Client, max_body_bytes: int
    ) -> None:
        self.status = head.status
        self.headers = head.headers  # names lower-cased
        self.max_body_bytes = max_body_bytes  # for `read` only: a stream is its reader's
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
            elif isinstance(event, framing.End):
                self._ended = True
        return None

    async def read(self) -> bytes:
        """The whole body, of at most `max_body_bytes`.

        Raises:
            OSError
            ValueError: `framing.TooLarge` past the bound (as soon as the head announces
                it, or the bytes pass it), or a malformed or cut body.
        """
        limit = self.max_body_bytes
        announced = self.headers.get("content-length")
        if announced is not None and int(announced) > limit:  # llhttp checked its digits
            raise framing.TooLarge(f"the response body ({announced} bytes) is too large")
        body = bytearray()  # not a list of pieces: a body dripped a byte a read stays small
        while (chunk := await self.next_chunk()) is not None:
            body += chunk
            if len(body) > limit:
                raise framing.TooLarge(f"the response body is too large (over {limit} bytes)")
        return bytes(body)

    def stream_into(self, sink: BodySink) -> None:
        """Hand the rest of the body to `sink` as it arrives, from the connection's own
        callbacks (no task reads it); the response is released when the body ends or
        fails, and `sink` told which. `release` before then abandons it (closed)."""
        conn = self._conn
        if conn is None:
            raise RuntimeError("the response was released")
        self._sink = sink
        conn.consume(self._consume)

    def _consume(self, events: list[framing.Event] | BaseException) -> None:
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
                    try:
                        sink.data(event)
                    except ValueError as refused:
                        self._sink = None
                        self.release()  # not ended: closed, never reused mid-body
                        sink.end(refused)
                        return
                if self._sink is None:
                    return  # the sink let go meanwhile
            elif isinstance(event, framing.End):
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
            self._client.keep_idle(conn)
        else:
            conn.close()

    async def __aenter__(self) -> Http1Response:
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
        max_body_bytes: int = MAX_BODY_BYTES,
        max_head_bytes: int = framing.MAX_HEAD_BYTES,
    ) -> None:
        self._ssl = ssl_context
        self.idle_s = idle_s
        self.max_idle_per_origin = max_idle_per_origin
        self.max_body_bytes = max_body_bytes
        self.max_head_bytes = max_head_bytes
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
        max_body_bytes: int | None = None,
    ) -> Http1Response:
        """Send a request and read its head; the caller reads the body and releases it.
        `max_body_bytes` bounds a body read whole (`Http1Response.read`; the client's own
        bound if None).

        Raises:
            OSError: the connection could not be made, or closed before an answer.
            TimeoutError: connecting took longer than `connect_timeout_s`.
            ValueError: a bad URL or header, a HEAD request (its answer's framing cannot
                be told to the parser), or a malformed answer.
        """
        if method == "HEAD":
            raise ValueError("HEAD requests are not supported")
        origin, target = split_url(url)
        data = framing.request_head(method, target, origin.host_header, headers, len(body)) + body
        limit = self.max_body_bytes if max_body_bytes is None else max_body_bytes
        retry = method == "GET"
        while True:
            conn = self._take(origin)
            reused = conn is not None
            if conn is None:
                conn = await self._connect(origin, connect_timeout_s)
            try:
                conn.send(data)
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
            assert isinstance(head, framing.Head)
            return Http1Response(head, conn, self, limit)

    def keep_idle(self, conn: Connection) -> None:
        """Keep `conn`, whose response has ended, for the next request to its origin
        (closed instead once the client is closed or holds enough idle ones)."""
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
                lambda: Connection(origin, self._open.discard, self.max_head_bytes),
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
