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
import ssl
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import lru_cache
from types import TracebackType
from urllib.parse import urlsplit

from gateway.upstream.http import h1

#: Idle keep-alive connections older than this are closed rather than reused.
IDLE_S = 15.0
#: Idle connections kept per origin; more are closed when given back.
MAX_IDLE_PER_ORIGIN = 256
#: Body bytes buffered unread before the socket stops being read (and after which
#: it is read again once the buffer is half consumed).
HIGH_WATER = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Origin:
    scheme: str
    host: str
    port: int
    host_header: str


@lru_cache(maxsize=256)
def split_url(url: str) -> tuple[Origin, str]:
    """The origin of `url` and its request target (path and query).

    Raises:
        ValueError: not an absolute http(s) URL.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    default = 443 if parts.scheme == "https" else 80
    port = parts.port or default
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    header = shown if port == default else f"{shown}:{port}"
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Origin(parts.scheme, host, port, header), target


class _Connection(asyncio.Protocol):
    """One keep-alive connection: a response at a time, its events queued for the reader."""

    __slots__ = (
        "origin",
        "transport",
        "parser",
        "closed",
        "idle_since",
        "_events",
        "_buffered",
        "_waiter",
        "_error",
        "_active",
        "_paused",
        "_lost",
    )

    def __init__(self, origin: Origin, lost: Callable[[_Connection], None]) -> None:
        self.origin = origin
        self._lost = lost  # told once the connection has closed
        self.transport: asyncio.Transport | None = None
        self.parser = h1.ResponseParser()
        self.closed = False
        self.idle_since = 0.0
        self._events: list[h1.Event] = []
        self._buffered = 0
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._active = False
        self._paused = False

    # -- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if not self._active:
            self.close()  # bytes while idle: nothing can be trusted on this connection
            return
        try:
            events = self.parser.feed(data)
        except h1.BadResponse as exc:
            self._fail(exc)
            return
        self._push(events)

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._lost(self)
        if not self._active or self._error is not None:
            return
        if not self.parser.started:
            self._error = ConnectionResetError(
                "the upstream closed the connection before answering"
            )
        else:
            try:
                self._push(self.parser.eof())
                return
            except h1.Incomplete as incomplete:
                self._error = incomplete
        self._wake()

    # -- the reader's side -------------------------------------------------------------

    def send(self, data: bytes, *, no_body: bool) -> None:
        assert self.transport is not None
        self._active = True
        self._events.clear()
        self._buffered = 0
        self.parser.reset(no_body=no_body)
        self.transport.write(data)

    async def next_event(self) -> h1.Event:
        """The response's next event. Raises: OSError, ValueError (see the module)."""
        while not self._events:
            if self._error is not None:
                raise self._error
            if self.closed:
                raise ConnectionResetError("the upstream connection is closed")
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        event = self._events.pop(0)
        if isinstance(event, bytes):
            self._buffered -= len(event)
            if self._paused and self._buffered < HIGH_WATER // 2 and self.transport is not None:
                self._paused = False
                self.transport.resume_reading()
        return event

    def finished(self) -> None:
        """The response ended; the connection may carry another request."""
        self._active = False

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _push(self, events: list[h1.Event]) -> None:
        if not events:
            return
        self._events.extend(events)
        for event in events:
            if isinstance(event, bytes):
                self._buffered += len(event)
        if self._buffered > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def _fail(self, exc: BaseException) -> None:
        self._error = exc
        self.close()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class Response:
    """A response whose body is read once: whole (`read`) or as it arrives (`chunks`).

    Use it as an async context manager, or call `release`: a connection whose body
    was read to its end goes back to the pool, any other is closed.
    """

    __slots__ = ("status", "headers", "_conn", "_client", "_keep", "_ended")

    def __init__(self, head: h1.Head, conn: _Connection, client: Http1Client) -> None:
        self.status = head.status
        self.headers = head.headers  # names lower-cased
        self._conn: _Connection | None = conn
        self._client = client
        self._keep = head.keep_alive
        self._ended = False

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

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive. Raises: OSError, ValueError."""
        while (chunk := await self.next_chunk()) is not None:
            yield chunk

    async def read(self) -> bytes:
        """The whole body. Raises: OSError, ValueError."""
        parts = []
        while (chunk := await self.next_chunk()) is not None:
            parts.append(chunk)
        return b"".join(parts)

    def release(self) -> None:
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
        self._idle: dict[Origin, list[_Connection]] = {}
        self._open: set[_Connection] = set()
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

    def give_back(self, conn: _Connection) -> None:
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

    def _take(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < self.idle_s:
                return conn
            conn.close()
        return None

    async def _connect(self, origin: Origin, timeout_s: float) -> _Connection:
        if self._closed:
            raise ConnectionError("the upstream client is closed")
        loop = asyncio.get_running_loop()
        context = None
        if origin.scheme == "https":
            context = self._ssl = self._ssl or ssl.create_default_context()
        async with asyncio.timeout(timeout_s):
            _, conn = await loop.create_connection(
                lambda: _Connection(origin, self._open.discard),
                origin.host,
                origin.port,
                ssl=context,
                server_hostname=origin.host if context is not None else None,
            )
        if not conn.closed:
            self._open.add(conn)
        return conn
