"""One keep-alive HTTP/1.1 connection of the client, and where a URL leads.

`Connection` is the asyncio protocol under `gateway.http1.client`: it feeds what the
socket delivers to the sans-IO parser (`gateway.http1.framing`) and keeps the events
of the one response in flight, for a reader that waits for them (`next_event`) or a
consumer that takes them as they come (`consume`). Bytes while no request is in
flight, or that are not HTTP, close it. Body bytes nobody has read yet are bounded:
past `HIGH_WATER` the socket is no longer read until the reader catches up.

It must not import anything else of the gateway, nor decide what a response means.
"""

from __future__ import annotations

import asyncio
import select
from collections import deque
from collections.abc import Callable
from functools import lru_cache
from typing import NamedTuple
from urllib.parse import urlsplit

import gateway.http1.framing as framing

#: Body bytes buffered unread before the socket stops being read (and after which
#: it is read again once the buffer is half consumed).
HIGH_WATER = 1024 * 1024
#: What one queued piece of a body costs beside its bytes, counted against `HIGH_WATER`
#: so that a body dripped a byte a read does not queue a million objects.
_PIECE_COST = 64


class Origin(NamedTuple):
    """Where requests go: the client's idle connections are kept by it (a tuple, hashed
    and compared in C: it is looked up twice for every request)."""

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


class Connection(asyncio.Protocol):
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
        "_consumer",
        "_fd",
    )

    def __init__(
        self,
        origin: Origin,
        lost: Callable[[Connection], None],
        max_head_bytes: int = framing.MAX_HEAD_BYTES,
    ) -> None:
        self.origin = origin
        self._lost = lost  # told once the connection has closed
        self.transport: asyncio.Transport | None = None
        self.parser = framing.ResponseParser(max_head_bytes=max_head_bytes)
        self.closed = False
        self.idle_since = 0.0
        self._events: deque[framing.Event] = deque()
        self._buffered = 0
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._active = False
        self._paused = False
        # Set by `Http1Response.stream_into`: events go to it as they arrive, not to the queue.
        self._consumer: Callable[[list[framing.Event] | BaseException], None] | None = None
        self._fd = -1

    # -- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        self._fd = sock.fileno() if sock is not None else -1

    def quiet(self) -> bool:
        """Whether nothing waits to be read on this idle connection: a close (or stray
        bytes) the server sent that the loop has not yet seen makes it unfit for reuse."""
        if self._fd < 0:
            return True
        poller = select.poll()  # not select(): descriptors past 1024 are common here
        poller.register(self._fd, select.POLLIN)
        try:
            return not poller.poll(0)
        except OSError:
            return False

    def data_received(self, data: bytes) -> None:
        if not self._active:
            self.close()  # bytes while idle: nothing can be trusted on this connection
            return
        try:
            events = self.parser.feed(data)
        except framing.BadResponse as exc:
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
            except framing.Incomplete as incomplete:
                self._error = incomplete
        self._tell_error()

    # -- the reader's side -------------------------------------------------------------

    def send(self, data: bytes) -> None:
        assert self.transport is not None
        self._active = True
        self._events.clear()
        self._buffered = 0
        self.parser.expect()
        self.transport.write(data)

    async def next_event(self) -> framing.Event:
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
        event = self._events.popleft()
        if isinstance(event, bytes):
            self._buffered -= len(event) + _PIECE_COST
            if self._paused and self._buffered < HIGH_WATER // 2 and self.transport is not None:
                self._paused = False
                self.transport.resume_reading()
        return event

    def finished(self) -> None:
        """The response ended; the connection may carry another request."""
        self._active = False
        self._consumer = None

    def consume(self, consumer: Callable[[list[framing.Event] | BaseException], None]) -> None:
        """Send this response's events to `consumer` from now on, those queued first."""
        queued, self._events = list(self._events), deque()
        self._buffered = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        self._consumer = consumer
        if queued:
            consumer(queued)
        if self._error is not None:  # a failure that came before: after what it cut short
            self._tell_error()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _push(self, events: list[framing.Event]) -> None:
        if not events:
            return
        if self._consumer is not None:
            self._consumer(events)
            return
        self._events.extend(events)
        for event in events:
            if isinstance(event, bytes):
                self._buffered += len(event) + _PIECE_COST
        if self._buffered > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def _fail(self, exc: BaseException) -> None:
        self._error = exc
        self.close()
        self._tell_error()

    def _tell_error(self) -> None:
        consumer = self._consumer
        if consumer is not None and self._error is not None:
            self._consumer = None
            consumer(self._error)
        else:
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
