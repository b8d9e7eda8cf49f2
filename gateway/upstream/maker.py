"""One upstream's sessions, one at a time: made with the transport's factory, opened
(at most `max_opening` at once, the rest in turn; a failed start backs the next off),
closed in tasks of their own that the pool's close awaits. And what opening them tells
of the upstream: whether it is reachable, what it said in `initialize`, and when its
lists may have changed (a server that forgot a session, or says something else in
`initialize`, was restarted or redeployed): the pool's listeners are told.

It holds no session: which sessions to keep, for whom and how many, is the pool's
(`gateway.upstream.pool`), which this module must not know of.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

import structlog

from gateway.aio import spawn
from gateway.clock import Clock
from gateway.errors import SessionsBusy, UpstreamError
from gateway.protocol.capabilities import NO_CAPABILITIES, ClientCaps
from gateway.protocol.listen import LIST_CHANGED
from gateway.protocol.translate import UpstreamInfo
from gateway.protocol.versions import Version
from gateway.upstream.demand import Restarts
from gateway.upstream.port import PooledSession, SessionFactory

log = structlog.get_logger("gateway.upstream")


class SessionMaker:
    def __init__(
        self,
        name: str,
        new_session: SessionFactory,
        *,
        clock: Clock,
        restart_backoff_s: float = 0.0,
        on_error: Callable[[], None] | None = None,
        max_opening: int = 4,
        turn_timeout_s: float = 10.0,
    ) -> None:
        self.name = name
        # At most `max_opening` sessions open at once (a burst of new callers on a stdio
        # server starts processes at a pace the machine serves beside them); `starting`
        # counts those opening and those waiting their turn, at most `turn_timeout_s`.
        self.max_opening = max_opening
        self.turn_timeout_s = turn_timeout_s
        self._turns = asyncio.Semaphore(max_opening)
        self.starting = 0
        self._factory = new_session
        self.clock = clock
        self.restarts = Restarts(restart_backoff_s)
        # Told of the list changes the sessions hear (`Listens.publish`).
        self.on_change: Callable[[dict[str, Any]], None] | None = None
        self.reachable = False  # the last attempt to open a session succeeded
        self.info: UpstreamInfo | None = None
        self._forgot = False  # a session was forgotten (told), none opened since
        self._on_error = on_error
        # Sessions closing (awaited by `wait_closed`: a stdio server takes a moment to stop).
        self._closings: weakref.WeakSet[asyncio.Task[None]] = weakref.WeakSet()

    def new_session(self, caps: ClientCaps) -> PooledSession:
        """A session of the upstream's transport, not yet open."""
        session = self._factory(caps)
        session.on_change = self.on_change
        session.on_forgotten = self._forgotten
        return session

    @property
    def busy(self) -> bool:
        """Whether as many sessions as may open at once are opening or waiting to."""
        return self.starting >= self.max_opening

    async def start(self, caps: ClientCaps, *, counted: bool = False) -> PooledSession:
        """Open a new session once it is its turn (`counted`: its caller counted it in
        `starting` already, before it had a task).

        Raises:
            UpstreamError: it failed to start, or a failed start is too recent to retry.
            SessionsBusy: its turn did not come within `turn_timeout_s`.
        """
        if not counted:
            self.starting += 1
        try:
            try:
                async with asyncio.timeout(self.turn_timeout_s):
                    await self._turns.acquire()
            except TimeoutError:
                raise SessionsBusy(
                    f"{self.max_opening} sessions of {self.name!r} were opening for "
                    f"{self.turn_timeout_s:g} s"
                ) from None
            try:
                return await self._start(caps)
            finally:
                self._turns.release()
        finally:
            self.starting -= 1

    async def _start(self, caps: ClientCaps) -> PooledSession:
        wait = self.restarts.wait_s(self.clock.monotonic())
        if wait > 0:
            raise UpstreamError(
                f"upstream {self.name!r} failed to start {self.restarts.failures} time(s) in a "
                f"row; the next try is in {wait:.1f} s"
            )
        session = self.new_session(caps)
        try:
            info = await session.open()
            if info == self.info:  # the same server said the same: one copy for all sessions
                session.info = self.info
            elif self.info is not None and self.on_change is not None and not self._forgot:
                self._publish_all()  # another server now (redeployed): its lists may be others
            self._forgot = False
            self.info = session.info
            self.reachable = True
            self.restarts.succeeded()
        except BaseException as exc:
            # Whatever stopped it (a failure, or the caller's cancellation), the half-open
            # session is closed, in a task of its own.
            self.close_in_background(session.close())
            if isinstance(exc, UpstreamError | TimeoutError):
                self._start_failed(exc)
            if isinstance(exc, TimeoutError):
                raise UpstreamError("upstream did not answer initialize in time") from exc
            raise
        log.debug("upstream_session_opened", upstream=self.name, caps=caps.key)
        return session

    def failed(self) -> None:
        """The upstream failed a session: not reachable now, and counted."""
        self.reachable = False
        if self._on_error is not None:
            self._on_error()

    def close_in_background(self, closing: Coroutine[Any, Any, None]) -> None:
        """Run a session's closing in a task of its own, which `wait_closed` awaits: its
        caller may be cancelled, or have no reason to wait."""
        self._closings.add(spawn(closing, name=f"pool-close-{self.name}", detached=True))

    async def wait_closed(self, timeout_s: float) -> None:
        """Until the sessions closing now are closed (bounded), so no process outlives
        the pool."""
        pending = {task for task in self._closings if not task.done()}
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)

    async def end_other(self, session_id: str, version: Version) -> int:
        """End upstream a session a dead replica left open: the status the server
        answered. Raises: UpstreamError."""
        return await self.new_session(NO_CAPABILITIES).end_other(session_id, version)

    def _start_failed(self, exc: BaseException) -> None:
        self.failed()
        delay = self.restarts.failed(self.clock.monotonic())
        if delay is not None:
            log.warning(
                "upstream_start_failed",
                upstream=self.name,
                error=str(exc),
                failures=self.restarts.failures,
                retry_in_s=delay,
            )

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
