"""The mechanism under the session pool: a bounded number of slots, sessions opened into
them (with a backoff after failed starts; with sharing, counted on by calls while they
open) and closed out of them, and a condition that wakes whoever waits for a slot or an
idle session. Which sessions to keep is the pool's
policy (`gateway.upstream.pool`).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Any

import structlog

from gateway.aio import spawn
from gateway.clock import Clock, SystemClock
from gateway.config import PoolLimits
from gateway.errors import UpstreamError
from gateway.protocol.capabilities import NO_CAPABILITIES, ClientCaps
from gateway.protocol.listen import LIST_CHANGED
from gateway.protocol.translate import UpstreamInfo
from gateway.protocol.versions import Version
from gateway.upstream.demand import Demand, Restarts
from gateway.upstream.port import PooledSession, SessionFactory
from gateway.upstream.sharing import Opening, Sharing

log = structlog.get_logger("gateway.upstream")


class SessionSlots:
    def __init__(
        self,
        name: str,
        new_session: SessionFactory,
        limits: PoolLimits,
        *,
        on_error: Callable[[], None] | None = None,
        clock: Clock | None = None,
        restart_backoff_s: float = 0.0,
    ) -> None:
        self.name = name
        self._factory = new_session
        # Told of the list changes the pool's sessions hear (`Listens.publish`).
        self.on_change: Callable[[dict[str, Any]], None] | None = None
        self.limits = limits
        self.clock = clock or SystemClock()
        self.restarts = Restarts(restart_backoff_s)
        self.demand = Demand()
        self.reachable = False  # the last attempt to open a session succeeded
        self.info: UpstreamInfo | None = None
        self._forgot = False  # a session was forgotten (told), none opened since
        self._on_error = on_error
        self._count = 0  # slots taken: sessions open, opening, or closing
        self._freed = asyncio.Condition()
        self._waiting = 0  # callers inside `_freed` (waiting for a slot or an idle session)
        self._closing = False
        # Sessions closing (awaited by close: a stdio server takes a moment to stop).
        self._closings: weakref.WeakSet[asyncio.Task[None]] = weakref.WeakSet()
        # Sessions opened for one caller alone (`open_alone`), outside the slots.
        self._alone: set[PooledSession] = set()
        # Sessions carrying several calls (`calls_per_session` > 1), counted.
        self._sharing = Sharing(limits.calls_per_session, self._usable)

    def new_session(self, caps: ClientCaps) -> PooledSession:
        """A session of the upstream's transport, not yet open."""
        session = self._factory(caps)
        session.on_change = self.on_change
        session.on_forgotten = self._forgotten
        return session

    def _forgotten(self) -> None:
        """The server forgot a session: it restarted (or let the session expire), and what
        it lists may be others now. Told once until a session opens again."""
        if self._forgot or self.on_change is None:
            return
        self._forgot = True
        self._publish_all()

    def _publish_all(self) -> None:
        assert self.on_change is not None
        for method in LIST_CHANGED:
            self.on_change({"jsonrpc": "2.0", "method": method})

    async def open_alone(self, caps: ClientCaps) -> PooledSession:
        """A session of the caller's own, outside `max_sessions` (its caller bounds such
        sessions: `limits.max_listens`), shared by no call, closed with `close_alone`; the
        fleet's ledger lists it, so it is ended if this replica dies.

        Raises:
            UpstreamError
        """
        session = await self._start(caps)
        self._alone.add(session)
        return session

    def close_alone(self, session: PooledSession) -> None:
        """Close, and end upstream, a session `open_alone` gave: in a task of its own,
        which the pool's close awaits (its caller may be cancelled)."""
        self._alone.discard(session)
        self._closings.add(spawn(session.close(), name=f"pool-close-{self.name}", detached=True))

    @property
    def _share(self) -> int:
        return self.limits.calls_per_session

    def _usable(self, session: PooledSession) -> bool:
        return session.alive and session.requests < self.limits.max_requests

    def _failed(self) -> None:
        self.reachable = False
        if self._on_error is not None:
            self._on_error()

    @property
    def size(self) -> int:
        return self._count

    async def _open(self, caps: ClientCaps) -> PooledSession:
        """Open a session in the slot the caller reserved (given back on any failure).

        Raises:
            UpstreamError: it failed to start, or a failed start is too recent to retry.
        """
        try:
            return await self._start(caps)
        except BaseException:
            self._count -= 1
            self._wake_waiters()
            raise

    async def _start(self, caps: ClientCaps) -> PooledSession:
        """Open a session, in no slot.

        Raises:
            UpstreamError: it failed to start, or a failed start is too recent to retry.
        """
        wait = self.restarts.wait_s(self.clock.monotonic())
        if wait > 0:
            raise UpstreamError(
                f"upstream {self.name!r} failed to start {self.restarts.failures} time(s) in a "
                f"row; the next try is in {wait:.1f} s"
            )
        session = self.new_session(caps)
        started = self.clock.monotonic()
        try:
            info = await session.open()
            if info == self.info:  # the same server said the same: one copy for all sessions
                session.info = self.info
            elif self.info is not None and self.on_change is not None and not self._forgot:
                self._publish_all()  # another server now (redeployed): its lists may be others
            self._forgot = False
            self.info = session.info
            self.demand.opened(self.clock.monotonic() - started)
            self.reachable = True
            self.restarts.succeeded()
        except BaseException as exc:
            # Whatever stopped it (a failure, or the caller's cancellation), the half-open
            # session is closed, in a task of its own.
            self._closings.add(
                spawn(session.close(), name=f"pool-close-{self.name}", detached=True)
            )
            if isinstance(exc, UpstreamError | TimeoutError):
                self._start_failed(exc)
            if isinstance(exc, TimeoutError):
                raise UpstreamError("upstream did not answer initialize in time") from exc
            raise
        log.debug("upstream_session_opened", upstream=self.name, caps=caps.key)
        return session

    async def _open_for(
        self, caps: ClientCaps, *, calls: int, opening: Opening | None = None
    ) -> PooledSession:
        """`_open`, where calls sharing a session may count on it while it opens (from
        `opening`, registered by whoever decided to open it, or from now).

        Raises:
            UpstreamError
        """
        if self._share == 1:
            return await self._open(caps)
        opening = opening or self._sharing.begin(caps.key, calls=calls)
        try:
            session = await self._open(caps)
        except BaseException:
            self._sharing.failed(opening)
            raise
        if self._sharing.opened(opening, session) and session in self._sharing:
            self._wake_waiters()  # room, maybe, for a call that waits for a slot
        return session

    async def end_other(self, session_id: str, version: Version) -> int:
        """End upstream a session a dead replica left open (it takes no slot here): the
        status the server answered. Raises: UpstreamError."""
        return await self.new_session(NO_CAPABILITIES).end_other(session_id, version)

    def _start_failed(self, exc: BaseException) -> None:
        self._failed()
        delay = self.restarts.failed(self.clock.monotonic())
        if delay is not None:
            log.warning(
                "upstream_start_failed",
                upstream=self.name,
                error=str(exc),
                failures=self.restarts.failures,
                retry_in_s=delay,
            )

    def _forget(self, session: PooledSession, *, end: bool = True) -> None:
        self._count -= 1
        closing = self._close_and_notify(session, end=end)
        self._closings.add(spawn(closing, name=f"pool-close-{self.name}", detached=True))

    async def _close_and_notify(self, session: PooledSession, *, end: bool = True) -> None:
        await session.wait_quiet()
        await session.close(end=end)
        await self._notify_freed()

    def _wake_waiters(self) -> None:
        """`_notify_freed` in a task of its own, only when someone waits: a session given
        back with nobody waiting (the common case) costs no task."""
        if self._waiting:
            spawn(self._notify_freed(), name=f"pool-freed-{self.name}", detached=True)

    async def _notify_freed(self) -> None:
        """Wake those waiting for a slot: one was freed, or a session went back idle."""
        if not self._waiting:
            return
        async with self._freed:
            self._freed.notify_all()
