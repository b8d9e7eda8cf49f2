"""Pooled, pre-initialised legacy sessions per declared-capability set; the `UpstreamPool`.

Interruptible calls (`tools/call`, `prompts/get`, `resources/read`) own a session
exclusively while in flight, so every server request on it belongs to that call; with
`calls_per_session` above 1 (Streamable HTTP), up to that many calls share one, filled
before the next is opened, so a parked call costs the server a call rather than a
session (`gateway.upstream.sharing`; what such a session cannot attribute:
`gateway.upstream.http.session`). Plain requests share one session per capability set.
The pool opens sessions ahead, in the background and in parallel, so owning one costs
the caller no handshake: as many as the recent rate of sessions taken and not given back
times the time one takes to open (at least `min_idle`; `gateway.upstream.demand`), so a
burst of parking calls finds them ready and calls that give theirs back keep no spares
idle on the server. Sessions idle past `idle_timeout_s` are closed (keeping `min_idle`);
the total is bounded by `max_sessions`. The slots themselves are `gateway.upstream.slots`.

The pool does not know the transport: it makes sessions with the factory it is given.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import defaultdict
from collections.abc import Mapping
from typing import Any, cast

import structlog

from gateway import clock as clocks
from gateway.aio import cancel_and_wait, spawn
from gateway.errors import CapacityExceeded, SessionsBusy, UpstreamError
from gateway.protocol.capabilities import NO_CAPABILITIES, ClientCaps
from gateway.protocol.translate import UpstreamInfo
from gateway.protocol.versions import Version
from gateway.upstream.port import PooledSession, SessionExpired, UpstreamSession
from gateway.upstream.sharing import Opening
from gateway.upstream.slots import SessionSlots

log = structlog.get_logger("gateway.upstream")


class SessionPool(SessionSlots):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Takes `SessionSlots`' arguments; adds what the pool keeps ready."""
        super().__init__(*args, **kwargs)
        self._idle: dict[str, list[PooledSession]] = defaultdict(list)
        self._shared: dict[str, PooledSession] = {}
        self._shared_lock: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._reaper: asyncio.Task[None] | None = None
        # Sessions opening in the background (cancelled by close).
        self._openers: weakref.WeakSet[asyncio.Task[None]] = weakref.WeakSet()
        self._probe: asyncio.Task[None] | None = None
        self._warming: defaultdict[str, int] = defaultdict(int)  # opening ahead, per caps
        # Takeovers adopting a session, by its id (gone once nobody holds its lock).
        self._adopting: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    def start(self) -> None:
        self._reaper = spawn(self._reap(), name=f"pool-reaper-{self.name}", detached=True)
        self._openers.add(spawn(self._warm_up(), name=f"pool-warm-up-{self.name}", detached=True))

    async def _warm_up(self) -> None:
        """Open the shared session at start, so readiness reflects the upstream at once."""
        try:
            await self.shared(NO_CAPABILITIES)
        except (UpstreamError, CapacityExceeded) as exc:
            log.warning("upstream_unreachable_at_start", upstream=self.name, error=exc.message)

    async def check(self) -> bool:
        """Readiness: reachable now, or re-tried once (bounded) if it was not.

        A live shared session proves the upstream reachable. A start slower than the
        probe is not cancelled: it goes on in the background and counts once it is up.
        """
        if self.reachable:
            return True
        shared = self._shared.get(NO_CAPABILITIES.key)
        if shared is not None and self._usable(shared):
            self.reachable = True
            return True
        if self._probe is None or self._probe.done():
            self._probe = spawn(self._warm_up(), name=f"pool-probe-{self.name}", detached=True)
            self._openers.add(self._probe)
        await asyncio.wait({self._probe}, timeout=2)
        return self.reachable

    async def close(self) -> None:
        self._closing = True
        await cancel_and_wait(self._reaper)
        for opener in list(self._openers):
            await cancel_and_wait(opener)  # a half-open session is closed on the way out
        sessions = [s for idle in self._idle.values() for s in idle] + list(self._shared.values())
        closing = [s.close() for s in sessions]
        for s in self._sharing.sessions():  # still carrying calls: not if others' calls too
            closing.append(s.close(end=not self._sharing.kept_upstream(s)))
        self._idle.clear()
        self._shared.clear()
        self._sharing.clear()
        await asyncio.gather(*closing, return_exceptions=True)
        # Sessions given back closed (or half-open ones) are still ending: a stdio server
        # takes a moment to stop. Wait for them, so no process outlives the pool.
        pending = {task for task in self._closings if not task.done()}
        if pending:
            await asyncio.wait(pending, timeout=10)

    async def _reserve(self, caps: ClientCaps | None = None) -> PooledSession | None:
        """Take one slot of `max_sessions`, waiting a bounded time for one to free.

        While it waits, a session of `caps` given back idle is taken instead (returned);
        an idle session of another capability set is closed to make room.

        Raises:
            SessionsBusy: every slot stayed in use for `acquire_timeout_s`.
        """
        try:
            async with asyncio.timeout(self.limits.acquire_timeout_s):
                async with self._freed:
                    self._waiting += 1  # under the lock: a release now notifies (slots)
                    try:
                        while self._count >= self.limits.max_sessions:
                            if caps is not None and (session := self._take(caps)):
                                return session
                            if not self._evict_idle():
                                await self._freed.wait()
                    finally:
                        self._waiting -= 1
        except TimeoutError:
            raise SessionsBusy(
                f"all {self.limits.max_sessions} upstream sessions of {self.name!r} are busy"
            ) from None
        self._count += 1
        return None

    def _take(self, caps: ClientCaps) -> PooledSession | None:
        """A session for one more call: one shared with room left, else an idle one."""
        if self._share > 1 and (session := self._sharing.join(caps.key)):
            return session
        session = self._take_idle(caps)
        if session is not None and self._share > 1:
            self._sharing.carry(session)  # its first call; others may join it
        return session

    def _take_idle(self, caps: ClientCaps) -> PooledSession | None:
        idle = self._idle[caps.key]
        while idle:
            session = idle.pop()
            if session.alive:
                return session
            self._forget(session)
        return None

    def _evict_idle(self) -> bool:
        """Close the longest-idle session of any capability set; False when none is idle."""
        candidates = [(s.last_used, key) for key, idle in self._idle.items() for s in idle[:1]]
        if not candidates:
            return False
        _, key = min(candidates)
        self._forget(self._idle[key].pop(0))
        return True

    async def acquire(self, caps: ClientCaps) -> PooledSession:
        """An initialised session owned by the caller until `release`.

        Raises:
            UpstreamError: no session could be opened.
            CapacityExceeded: `max_sessions` stayed busy for `acquire_timeout_s`.
        """
        self.demand.acquired(self.clock.monotonic())
        session = self._take(caps)
        if session is None and self._share > 1:
            session = await self._join_opening(caps)
        if session is None:
            session = await self._reserve(caps)
        if session is None:
            self._refill(caps)  # this caller opens its own; the next ones find theirs
            session = await self._open_for(caps, calls=1)
        self._refill(caps)
        return session

    async def _join_opening(self, caps: ClientCaps) -> PooledSession | None:
        """A session being opened with room for this call, once it is open; None when
        none is opening (or it failed to open)."""
        opening = self._sharing.joinable(caps.key)
        if opening is None:
            return None
        try:
            return await asyncio.shield(opening.ready)
        except asyncio.CancelledError:
            if not opening.ready.done():
                self._sharing.gave_up(opening)
            elif (counted := opening.ready.result()) is not None:
                self.release(counted, reuse=True)  # it was counted for this call
            raise

    def reserve_target(self) -> int:
        """Calls to keep room ready for, in idle sessions (at least `min_idle` of them) and
        shared ones (see `Demand`)."""
        target = self.demand.reserve(self.limits.min_idle, self.limits.max_sessions)
        return max(target, self.limits.min_idle * self._share)

    async def adopt(self, caps: ClientCaps, session_id: str, version: Version) -> PooledSession:
        """Take over a session another replica opened (its call continues here).

        With sharing, the calls of one session taken over here share one session object
        (the server holds one GET stream per session); it takes no other calls, and is not
        ended upstream when they are done: other replicas may carry calls of its own.

        Raises:
            SessionExpired: the upstream has forgotten it.
            UpstreamError, CapacityExceeded
        """
        if self._share == 1:
            return await self._adopt(caps, session_id, version)
        # Takeovers of one session at once adopt it once (a second GET stream would be
        # refused): the later ones wait for the first, then join it.
        lock = self._adopting.setdefault(session_id, asyncio.Lock())
        async with lock:
            if known := self._sharing.adopted(session_id):
                return known
            session = await self._adopt(caps, session_id, version)
            self._sharing.adopt(session_id, session)
            return session

    async def _adopt(self, caps: ClientCaps, session_id: str, version: Version) -> PooledSession:
        await self._reserve()
        session = self.new_session(caps)
        try:
            await session.adopt(session_id, version)
        except BaseException:
            # Closed here, not ended upstream: the session is the dead owner's call's, which
            # the next retry's takeover may adopt still.
            self._count -= 1
            closing = session.close(end=False)
            self._closings.add(spawn(closing, name=f"pool-close-{self.name}", detached=True))
            self._wake_waiters()
            raise
        return session

    def idle_ids(self) -> dict[str, str]:
        """The sessions no call holds (idle ones, those plain requests share, listens')
        that another replica could end: their ids and negotiated versions (`fleet.ledger`)."""
        held = [s for idle in self._idle.values() for s in idle] + [*self._shared.values()]
        held += self._alone  # a listen's: held by no call another replica could take over
        return {s.id: s.version.value for s in held if s.id is not None and s.alive}

    def release(self, given: UpstreamSession, *, reuse: bool) -> None:
        """Give a session back: to the idle list when clean, else close it. A shared
        session is given back by its last call."""
        session = cast(PooledSession, given)  # every session given back was made here
        end = True
        if session in self._sharing:
            if not self._sharing.leave(session, reuse=reuse):
                if reuse:
                    self.demand.returned(self.clock.monotonic())  # its room, for another call
                self._wake_waiters()  # room, maybe, for a call waiting for a slot
                return
            keep, end = self._sharing.let_go(session)
            reuse = reuse and keep
        idle = self._idle[session.caps.key]
        fresh = session.requests < self.limits.max_requests
        if (
            reuse
            and fresh
            and session.alive
            and not self._closing
            and len(idle) < self.limits.max_sessions
        ):
            session.last_used = now = self.clock.monotonic()
            idle.append(session)
            self.demand.returned(now)
            self._wake_waiters()
            return
        self._forget(session, end=end)

    def discard(self, given: UpstreamSession) -> None:
        session = cast(PooledSession, given)
        if session in self._sharing:
            # Another replica took this call over: the session lives on there.
            self._sharing.handed_over(session)
            if not self._sharing.leave(session, reuse=False):
                return
            self._sharing.let_go(session)
        self._forget(session, end=False)

    def _refill(self, caps: ClientCaps) -> None:
        """Open sessions ahead of demand, in parallel, up to `reserve_target`."""
        if self._closing:
            return
        share = self._share
        if share > 1:  # room for calls: in idle sessions, shared ones, and those opening
            ready = len(self._idle[caps.key]) * share + self._sharing.spare(caps.key)
        else:
            ready = len(self._idle[caps.key]) + self._warming[caps.key]
        for _ in range(-(-(self.reserve_target() - ready) // share)):  # sessions, rounded up
            if self._count >= self.limits.max_sessions:
                return
            self._count += 1  # the slot is taken now, so a burst never over-opens
            self._warming[caps.key] += 1
            # With sharing, its room counts from now, before the opener's task runs.
            opening = self._sharing.begin(caps.key, calls=0) if share > 1 else None
            prewarm = self._prewarm(caps, opening)
            self._openers.add(spawn(prewarm, name=f"pool-prewarm-{self.name}", detached=True))

    async def _prewarm(self, caps: ClientCaps, opening: Opening | None) -> None:
        try:
            session = await self._open_for(caps, calls=0, opening=opening)
        except UpstreamError as exc:
            log.warning("upstream_prewarm_failed", upstream=self.name, error=str(exc))
            return
        finally:
            self._warming[caps.key] -= 1
        if session in self._sharing:
            return  # calls joined it while it opened: they carry it now
        if self._closing:
            self._forget(session)
        else:
            session.last_used = self.clock.monotonic()
            self._idle[caps.key].append(session)
            await self._notify_freed()  # someone may be waiting for a session of these caps

    async def shared(self, caps: ClientCaps) -> PooledSession:
        """The session plain requests of this capability set share.

        Raises:
            UpstreamError, CapacityExceeded
        """
        session = self._shared.get(caps.key)
        if session is not None and self._usable(session):
            session.last_used = self.clock.monotonic()
            return session
        async with self._shared_lock[caps.key]:
            session = self._shared.get(caps.key)
            if session is not None and self._usable(session):
                return session
            if session is not None:
                del self._shared[caps.key]
                self._forget(session)
            await self._reserve()
            session = await self._open(caps)
            session.last_used = self.clock.monotonic()
            self._shared[caps.key] = session
            return session

    async def request(
        self,
        caps: ClientCaps,
        method: str,
        params: dict[str, object] | None,
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, object]:
        """A plain request on the shared session, retried once on a fresh session if it expired.

        Raises:
            UpstreamError, CapacityExceeded
        """
        for attempt in (1, 2):
            session = await self.shared(caps)
            try:
                return await session.request(method, params, headers)
            except SessionExpired:
                if attempt == 2:
                    raise
                log.info("upstream_session_expired", upstream=self.name)
            except TimeoutError as exc:
                self._failed()
                raise UpstreamError(f"upstream did not answer {method} in time") from exc
            except UpstreamError:
                self._failed()
                raise
        raise AssertionError("unreachable")

    async def upstream_info(self) -> UpstreamInfo:
        """What the upstream said in `initialize` (opens the shared session if needed)."""
        if self.info is None:
            await self.shared(NO_CAPABILITIES)
        assert self.info is not None
        return self.info

    async def _reap(self) -> None:
        while True:
            await clocks.sleep(self.clock, min(30.0, self.limits.idle_timeout_s))
            now = self.clock.monotonic()
            for key, shared in list(self._shared.items()):
                # Shared sessions of rarely seen capability sets go too (not the default one).
                if (
                    key != NO_CAPABILITIES.key
                    and now - shared.last_used > self.limits.idle_timeout_s
                ):
                    del self._shared[key]
                    self._forget(shared)
            for idle in self._idle.values():
                keep: list[PooledSession] = []
                for session in idle:
                    stale = now - session.last_used > self.limits.idle_timeout_s
                    if (stale and len(keep) >= self.limits.min_idle) or not session.alive:
                        self._forget(session)
                    else:
                        keep.append(session)
                idle[:] = keep
