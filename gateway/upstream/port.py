"""The upstream port: what the call core needs from a legacy transport, and nothing more.

A legacy server binds everything to a session, so the core works with sessions:
it acquires one for a capability set from a pool, sends the call's request on it
(`start`, whose `Pumping` handle stops the reading), receives what the server says
about that call in an inbox (the call's own stream plus anything the session's other
streams carry while the call owns it), answers the server's questions and cancels
with `send`, and releases the session. Takeover adopts a session another replica
opened. Streamable HTTP (`gateway.upstream.http`) is one implementation; tests use a
scripted one. Implementations turn their foreign errors into `UpstreamError`.

This module holds types, and `TaskPump` (a task as a `Pumping`); no transport code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.aio import cancel_and_wait
from gateway.errors import UpstreamError
from gateway.protocol.capabilities import ClientCaps
from gateway.protocol.jsonrpc import RequestId
from gateway.protocol.translate import UpstreamInfo
from gateway.protocol.versions import Version
from gateway.upstream.held import HeldQuestions


class SessionExpired(UpstreamError):
    """The server no longer knows the session (it restarted, or dropped it)."""

    default_message = "The upstream server ended the session"
    kind = "session_lost"


@dataclass(slots=True)
class StreamCursor:
    """Where a call's stream stands: the last event id, the server's retry hint, done or not.

    The core keeps one per call; its `last_id` goes into the parked record so another
    replica can take the call over where the stream stopped.
    """

    last_id: str | None = None
    retry_ms: int | None = None
    answered: bool = False
    accepted: bool = False  # the server took the request: it may already be running
    # Set once a resumed stream carries the call's new events (`pump_resumed`): until
    # then an answer to the server could be answered on no stream.
    live: asyncio.Event | None = None


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """Put in an inbox when a call's stream ends without the call's response."""

    error: UpstreamError


InboxItem = dict[str, Any] | StreamEnd


class Inbox:
    """What the server says about one call, in order, for its one reader (the call).

    Unbounded, like the `asyncio.Queue` it replaces, and lighter: a list and, only while
    the reader waits, a future. Thousands of parked calls hold one each.
    """

    __slots__ = ("_items", "_waiter", "on_end")

    def __init__(self) -> None:
        self._items: list[InboxItem] = []
        self._waiter: asyncio.Future[None] | None = None
        # Told of a `StreamEnd` as it is put, while nobody may be reading (a parked call).
        self.on_end: Callable[[UpstreamError], None] | None = None

    def put_nowait(self, item: InboxItem) -> None:
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if self.on_end is not None and isinstance(item, StreamEnd):
            self.on_end(item.error)

    def ended(self) -> UpstreamError | None:
        """The error of a `StreamEnd` waiting in it, if one does."""
        for item in self._items:
            if isinstance(item, StreamEnd):
                return item.error
        return None

    async def get(self) -> InboxItem:
        """The next item, waiting for one."""
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._items.pop(0)

    def empty(self) -> bool:
        return not self._items

    def waiting(self) -> tuple[InboxItem, ...]:
        """What is in it now, left in place."""
        return tuple(self._items)


class Pumping(Protocol):
    """A call's stream being read into its inbox, by a task or by a transport's callbacks."""

    async def stop(self) -> None:
        """Stop reading (the stream is closed) and return once it has stopped."""
        ...

    def done(self) -> bool:
        """Whether the reading is over (the response read, the stream ended or stopped)."""
        ...


class TaskPump:
    """`Pumping` by a task of its own (a coroutine that reads into the inbox)."""

    __slots__ = ("task",)

    def __init__(self, task: asyncio.Task[None]) -> None:
        self.task = task

    async def stop(self) -> None:
        await cancel_and_wait(self.task)

    def done(self) -> bool:
        return self.task.done()


class UpstreamSession(Protocol):
    """One initialised legacy session; owned by one call at a time, or shared by a few
    where the pool allows it (`pool.calls_per_session`, Streamable HTTP only)."""

    @property
    def caps(self) -> ClientCaps:
        """The client capabilities the session was initialised with."""
        ...

    @property
    def version(self) -> Version:
        """The protocol version the session negotiated."""
        ...

    info: UpstreamInfo | None  # what the server said in `initialize`
    #: Questions the server asked while no call of the session could take them: the next
    #: call asks them of its caller before its own request goes upstream.
    held: HeldQuestions

    @property
    def id(self) -> str | None:
        """The handle another replica can adopt; None when the transport cannot be adopted."""
        ...

    def next_id(self) -> str:
        """A request id unique to this session and beyond it."""
        ...

    def attach(self, inbox: Inbox) -> None:
        """Route the server's messages outside any call's own stream to this inbox (the
        call's), while it is the only one attached."""
        ...

    def detach(self, inbox: Inbox) -> None:
        """The call of `inbox` no longer listens (it ended or went elsewhere)."""
        ...

    async def start(
        self,
        message: dict[str, Any],
        inbox: Inbox,
        cursor: StreamCursor,
        headers: Mapping[str, str] | None = None,
    ) -> Pumping:
        """Send a request; what the server says about it goes into `inbox` as it comes.

        Returns once the request is on its way (a transport may wait for the answer's
        head): the reading goes on without the caller, until the response is in the
        inbox, or a `StreamEnd` if the stream ended first. Never raises an
        `UpstreamError`: a failure is a `StreamEnd` in the inbox.
        """
        ...

    async def pump_resumed(self, rid: RequestId, inbox: Inbox, cursor: StreamCursor) -> None:
        """Continue another replica's call stream after `cursor.last_id` into `inbox`."""
        ...

    async def send(self, message: dict[str, Any]) -> None:
        """Send a response or a notification. Raises: UpstreamError."""
        ...


class UpstreamPool(Protocol):
    """Pre-initialised sessions of one upstream, per caller and capability set: a session
    serves the calls of one principal only (`gateway.upstream.pool`)."""

    info: UpstreamInfo | None

    @property
    def size(self) -> int: ...

    def start(self) -> None: ...

    async def close(self) -> None: ...

    async def check(self) -> bool:
        """Readiness: the upstream can be reached now."""
        ...

    async def acquire(self, caps: ClientCaps, principal: str) -> UpstreamSession:
        """A session of `principal`'s, owned by the caller until `release`.

        Raises:
            UpstreamError, CapacityExceeded
        """
        ...

    async def adopt(
        self, caps: ClientCaps, principal: str, session_id: str, version: Version
    ) -> UpstreamSession:
        """Take over a session another replica opened for `principal`.

        Raises:
            SessionExpired: the upstream has forgotten it; nothing was sent.
            UpstreamError, CapacityExceeded
        """
        ...

    def release(self, session: UpstreamSession, *, reuse: bool) -> None:
        """Give a session back: kept for the next call when `reuse`, else closed."""
        ...

    def discard(self, session: UpstreamSession) -> None:
        """Let go of a session another replica now uses: closed here, not ended upstream."""
        ...

    async def request(
        self,
        caps: ClientCaps,
        principal: str | None,
        method: str,
        params: dict[str, Any] | None,
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """A request that never asks the client anything, on a session of `principal`'s
        (None: the gateway's own, declaring nothing): its JSON-RPC response.

        Raises:
            UpstreamError, CapacityExceeded
        """
        ...

    async def upstream_info(self) -> UpstreamInfo:
        """What the upstream said in `initialize`. Raises: UpstreamError."""
        ...

    async def open_alone(self, caps: ClientCaps) -> PooledSession:
        """A session of the caller's own: outside `max_sessions` (the caller bounds its
        own), shared by no call, closed with `close_alone`. Raises: UpstreamError."""
        ...

    def close_alone(self, session: PooledSession) -> None:
        """Close, and end upstream, a session `open_alone` gave."""
        ...


class PooledSession(UpstreamSession, Protocol):
    """What the pool (`gateway.upstream.pool`) needs of a session beyond the port."""

    requests: int
    last_used: float
    #: The caller the session serves from its first call to its end (bound by the pool);
    #: None while nobody has used it (opened ahead), or when the pool shares sessions.
    principal: str | None
    #: Told of each list change (`notifications/tools/list_changed`, ...) the server sends
    #: outside a call's own stream, instead of whoever owns the session (the pool's).
    on_change: Callable[[dict[str, Any]], None] | None
    #: Told once the session can carry nothing more: the server forgot it, its stream
    #: ended, or (Streamable HTTP) its standalone GET stream dropped (a listen's).
    on_lost: Callable[[UpstreamError], None] | None
    #: Told when the server says it forgot the session (Streamable HTTP: a 404 on its
    #: GET stream), as a restarted server does: its lists may be others now.
    on_forgotten: Callable[[], None] | None

    @property
    def alive(self) -> bool: ...

    async def open(self) -> UpstreamInfo: ...

    async def adopt(self, session_id: str, version: Version) -> None: ...

    async def end_other(self, session_id: str, version: Version) -> int:
        """End upstream a session a dead replica opened: the status of the answer."""
        ...

    async def close(self, *, end: bool = True) -> None:
        """Close the session here; `end` also ends it upstream (where that means anything)."""
        ...

    async def wait_quiet(self) -> None: ...

    async def request(
        self, method: str, params: dict[str, Any] | None, headers: Mapping[str, str] | None = None
    ) -> dict[str, Any]: ...


SessionFactory = Callable[[ClientCaps], PooledSession]
