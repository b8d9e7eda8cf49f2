"""How many sessions of one upstream exist, and their life: the supply beneath the pool.

`SessionSupply` keeps the sessions of one upstream within bounds and opens and closes
them; `SessionPool` (`gateway.upstream.pool`), built on it, says which caller gets which.
The total is bounded by `max_sessions`: a session open, opening or closing takes one of
its slots (`gateway.upstream.slots`), and a caller finding none free waits a bounded time
for one while idle sessions, the least recently used first, are closed to make room. At
most `max_opening` sessions open at once (`gateway.upstream.maker`), so a burst of new
callers on a stdio server starts processes at a pace the machine can serve beside them.

Sessions are opened ahead, in the background and for nobody yet, so owning one costs a
caller no handshake: as many as the recent rate of sessions taken and not given back
times the time one takes to open (at least `min_idle`; `gateway.upstream.demand`), so a
burst of parking calls finds them ready and calls that give theirs back keep no spares
idle on the server; none is opened ahead while sessions wait their turn to open. Idle
sessions past `idle_timeout_s` are closed (keeping `min_idle` opened ahead), and at each
look (every 30 s at most) a caller keeps at most `max_idle_per_caller` idle ones, its
least recently used closed beyond: a burst leaves a caller its sessions for its next
calls, not for ever. A session
whose held question went unasked is retired (`gateway.upstream.unasked`).

The gateway's own session declares nothing and serves no caller: it says whether the
upstream is reachable (readiness) and what it said in `initialize`.

Sessions are made, opened and closed one at a time by `gateway.upstream.maker`, which
also knows what opening them says of the upstream. Neither module knows the transport:
sessions are made with the factory given.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any, cast

import structlog

from gateway import clock as clocks
from gateway.aio import cancel_and_wait, spawn
from gateway.clock import Clock, SystemClock
from gateway.config import SHARE_SESSIONS, PoolLimits
from gateway.errors import CapacityExceeded, UpstreamError
from gateway.protocol.capabilities import NO_CAPABILITIES, ClientCaps
from gateway.protocol.translate import UpstreamInfo
from gateway.upstream.demand import Demand
from gateway.upstream.idle import Bucket, IdleSessions
from gateway.upstream.maker import SessionMaker
from gateway.upstream.port import PooledSession, SessionFactory
from gateway.upstream.sharing import Opening, Sharing
from gateway.upstream.slots import Slots
from gateway.upstream.unasked import Unasked

log = structlog.get_logger("gateway.upstream")


class SessionSupply:
    def __init__(
        self,
        name: str,
        new_session: SessionFactory,
        limits: PoolLimits,
        *,
        on_error: Callable[[], None] | None = None,
        on_change: Callable[[dict[str, Any]], None] | None = None,
        clock: Clock | None = None,
        restart_backoff_s: float = 0.0,
    ) -> None:
        """`on_change`: told of each list change its sessions hear."""
        self.name = name
        self.limits = limits
        self.clock = clock or SystemClock()
        self.maker = SessionMaker(
            name,
            new_session,
            clock=self.clock,
            restart_backoff_s=restart_backoff_s,
            on_error=on_error,
            max_opening=limits.max_opening,
            turn_timeout_s=limits.acquire_timeout_s,
        )
        self.maker.on_change = on_change
        self.demand = Demand()
        self._isolated = limits.isolation != SHARE_SESSIONS
        self._share = limits.calls_per_session  # read a few times by every call
        self._slots = Slots(name, limits.max_sessions, limits.acquire_timeout_s)
        self._closing = False
        self._idle = IdleSessions()
        self._unasked = Unasked(name, self.clock, limits.outside_question_s, self._retire)
        self._bound: Counter[str] = Counter()  # sessions open per caller (idle or in use)
        # The gateway's own session: it declares nothing and serves no caller (readiness,
        # what the upstream says in `initialize`).
        self._own: PooledSession | None = None
        self._own_lock = asyncio.Lock()
        # Sessions carrying several calls (`calls_per_session` > 1), counted.
        self._sharing = Sharing(limits.calls_per_session, self._usable)
        # Sessions opened for one caller alone (`open_alone`), outside the slots.
        self._alone: set[PooledSession] = set()
        self._reaper: asyncio.Task[None] | None = None
        # Sessions opening in the background (cancelled by close).
        self._openers: weakref.WeakSet[asyncio.Task[None]] = weakref.WeakSet()
        self._probe: asyncio.Task[None] | None = None
        self._warming: defaultdict[str, int] = defaultdict(int)  # opening ahead, per caps
        # Takeovers adopting a session, by its id (gone once nobody holds its lock).
        self._adopting: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    @property
    def size(self) -> int:
        """Slots taken: sessions open, opening or closing (those opened alone aside)."""
        return self._slots.taken

    def sessions_per_caller(self) -> Counter[str]:
        """Sessions open per caller holding any, idle or in use (sessions grow with the
        number of active callers)."""
        return Counter(self._bound)

    @property
    def reachable(self) -> bool:
        """The last session to open did, and no request failed since."""
        return self.maker.reachable

    @property
    def info(self) -> UpstreamInfo | None:
        """What the upstream said in `initialize`, when a session last opened."""
        return self.maker.info

    @info.setter
    def info(self, info: UpstreamInfo | None) -> None:
        self.maker.info = info

    @property
    def on_change(self) -> Callable[[dict[str, Any]], None] | None:
        """Told of the list changes the pool's sessions hear (`Listens.publish`)."""
        return self.maker.on_change

    @on_change.setter
    def on_change(self, listener: Callable[[dict[str, Any]], None] | None) -> None:
        self.maker.on_change = listener

    def start(self) -> None:
        self._reaper = spawn(self._reap(), name=f"pool-reaper-{self.name}", detached=True)
        self._openers.add(spawn(self._warm_up(), name=f"pool-warm-up-{self.name}", detached=True))

    async def _warm_up(self) -> None:
        """Open the gateway's own session at start, so readiness reflects the upstream at once."""
        try:
            await self.own()
        except (UpstreamError, CapacityExceeded) as exc:
            log.warning("upstream_unreachable_at_start", upstream=self.name, error=exc.message)

    async def check(self) -> bool:
        """Readiness: reachable now, or re-tried once (bounded) if it was not.

        A live own session proves the upstream reachable. A start slower than the
        probe is not cancelled: it goes on in the background and counts once it is up.
        """
        if self.maker.reachable:
            return True
        if self._own is not None and self._usable(self._own):
            self.maker.reachable = True
            return True
        if self._probe is None or self._probe.done():
            self._probe = spawn(self._warm_up(), name=f"pool-probe-{self.name}", detached=True)
            self._openers.add(self._probe)
        await asyncio.wait({self._probe}, timeout=2)
        return self.maker.reachable

    async def close(self) -> None:
        self._closing = True
        await cancel_and_wait(self._reaper)
        for opener in list(self._openers):
            await cancel_and_wait(opener)  # a half-open session is closed on the way out
        sessions = self._idle.clear()
        self._bound.clear()
        if self._own is not None:
            sessions.append(self._own)
            self._own = None
        closing = [self._unasked.close(s) for s in sessions]
        for s in self._sharing.sessions():  # still carrying calls: not if others' calls too
            closing.append(self._unasked.close(s, end=not self._sharing.kept_upstream(s)))
        self._sharing.clear()
        await asyncio.gather(*closing, return_exceptions=True)
        # Sessions given back closed (or half-open ones) are still ending: a stdio server
        # takes a moment to stop. Wait for them, so no process outlives the pool.
        await self.maker.wait_closed(timeout_s=10)

    def _evict_idle(self) -> bool:
        """Close the longest-idle session of any caller; False when none is idle."""
        session = self._idle.oldest()
        if session is None:
            return False
        self._forget(session)
        return True

    def reserve_target(self) -> int:
        """Calls to keep room ready for, in idle sessions (at least `min_idle` of them) and
        shared ones (see `Demand`)."""
        target = self.demand.reserve(self.limits.min_idle, self.limits.max_sessions)
        return max(target, self.limits.min_idle * self._share)

    def _refill(self, caps: ClientCaps) -> None:
        """Open sessions ahead of demand, for nobody yet, in parallel, up to
        `reserve_target`; not while sessions wait their turn to open (`max_opening`)."""
        if self._closing:
            return
        share = self._share
        bucket: Bucket = (None, caps.key)
        if share > 1:  # room for calls: in idle sessions, shared ones, and those opening
            ready = self._idle.count(bucket) * share + self._sharing.spare(bucket)
        else:
            ready = self._idle.count(bucket) + self._warming[caps.key]
        for _ in range(-(-(self.reserve_target() - ready) // share)):  # sessions, rounded up
            if self._slots.full or self.maker.busy:
                return
            self._slots.taken += 1  # the slot is taken now, so a burst never over-opens
            self.maker.starting += 1  # its turn to open, counted now likewise
            self._warming[caps.key] += 1
            # With sharing, its room counts from now, before the opener's task runs.
            opening = self._sharing.begin(bucket, calls=0) if share > 1 else None
            prewarm = self._prewarm(caps, opening)
            self._openers.add(spawn(prewarm, name=f"pool-prewarm-{self.name}", detached=True))

    async def _prewarm(self, caps: ClientCaps, opening: Opening | None) -> None:
        try:
            session = await self._open_for(caps, None, calls=0, opening=opening, counted=True)
        except (UpstreamError, CapacityExceeded) as exc:
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
            self._idle.put(session)
            await self._slots.notify()  # someone may be waiting for a session of these caps

    async def own(self) -> PooledSession:
        """The gateway's own session: it declares no capability and serves no caller.

        Raises:
            UpstreamError, CapacityExceeded
        """
        session = self._own
        if session is not None and self._usable(session):
            session.last_used = self.clock.monotonic()
            return session
        async with self._own_lock:
            session = self._own
            if session is not None and self._usable(session):
                return session
            if session is not None:
                self._own = None
                self._forget(session)
            await self._reserve()
            session = await self._open(NO_CAPABILITIES, None)
            session.last_used = self.clock.monotonic()
            self._own = session
            return session

    async def upstream_info(self) -> UpstreamInfo:
        """What the upstream said in `initialize` (opens the own session if needed)."""
        if self.info is None:
            await self.own()
        assert self.info is not None
        return self.info

    async def _reserve(
        self, instead: Callable[[], PooledSession | None] = lambda: None
    ) -> PooledSession | None:
        """Take one slot of `max_sessions` (None), waiting a bounded time for one; while it
        waits, the session `instead` finds is taken instead (returned), and an idle session
        is closed to make room.

        Raises:
            SessionsBusy: every slot stayed in use for `acquire_timeout_s`.
        """
        return await self._slots.take(instead, self._evict_idle)

    async def _start(
        self, caps: ClientCaps, owner: str | None, *, counted: bool = False
    ) -> PooledSession:
        """A new session of `owner`'s, in no slot, once it is its turn to open
        (`max_opening`, `SessionMaker.start`); how long it took tells `demand`.

        Raises:
            UpstreamError: it failed to start, or a failed start is too recent to retry.
            SessionsBusy: its turn to open did not come within `acquire_timeout_s`.
        """
        started = self.clock.monotonic()
        session = await self.maker.start(caps, counted=counted)
        self.demand.opened(self.clock.monotonic() - started)
        self._bind(session, owner)
        self._unasked.watch(session)
        return session

    async def _open(
        self, caps: ClientCaps, owner: str | None, *, counted: bool = False
    ) -> PooledSession:
        """Open a session in the slot the caller reserved (given back on any failure).

        Raises:
            UpstreamError: it failed to start, or a failed start is too recent to retry.
            SessionsBusy: its turn to open did not come in time.
        """
        try:
            return await self._start(caps, owner, counted=counted)
        except BaseException:
            self._slots.give_back()
            raise

    async def _open_for(
        self,
        caps: ClientCaps,
        owner: str | None,
        *,
        calls: int,
        opening: Opening | None = None,
        counted: bool = False,
    ) -> PooledSession:
        """`_open`, where calls sharing a session may count on it while it opens (from
        `opening`, registered by whoever decided to open it, or from now).

        Raises:
            UpstreamError, SessionsBusy
        """
        if self._share == 1:
            return await self._open(caps, owner, counted=counted)
        opening = opening or self._sharing.begin((owner, caps.key), calls=calls)
        try:
            session = await self._open(caps, owner, counted=counted)
        except BaseException:
            self._sharing.failed(opening)
            raise
        if self._sharing.opened(opening, session) and session in self._sharing:
            self._slots.wake()  # room, maybe, for a call that waits for a slot
        return session

    def _bind(self, session: PooledSession, owner: str | None) -> None:
        """The session serves `owner` (None: nobody yet, or every caller) from now to its
        end."""
        session.principal = owner
        if owner is not None:
            self._bound[owner] += 1

    def _forget(self, session: PooledSession, *, end: bool = True) -> None:
        """Close a session and free its slot (the waiters are woken once it is closed)."""
        self._slots.taken -= 1
        if session.principal is not None and self._bound[session.principal]:
            self._bound[session.principal] -= 1
            if not self._bound[session.principal]:
                del self._bound[session.principal]
        self.maker.close_in_background(self._close_and_notify(session, end=end))

    async def _close_and_notify(self, session: PooledSession, *, end: bool = True) -> None:
        await session.wait_quiet()
        await self._unasked.close(session, end=end)
        await self._slots.notify()

    def _retire(self, session: PooledSession) -> None:
        """A session's question went unasked (`Unasked`): closed now if no call holds it,
        else when its call gives it back (it is not usable any more)."""
        if self._idle.remove(session):
            self._forget(session)
        elif session is self._own:
            self._own = None
            self._forget(session)

    def _usable(self, session: PooledSession) -> bool:
        return (
            session.alive
            and session.requests < self.limits.max_requests
            and not session.held.lapsed
        )

    async def _reap(self) -> None:
        while True:
            await clocks.sleep(self.clock, min(30.0, self.limits.idle_timeout_s))
            now = self.clock.monotonic()
            before = now - self.limits.idle_timeout_s
            for session in self._idle.stale(before, keep_unbound=self.limits.min_idle):
                self._forget(session)
            # A caller's burst of calls leaves it as many idle sessions: kept until this
            # look (its next calls reuse them), then down to `max_idle_per_caller`.
            for caller, idle in self._idle.callers().items():
                for _ in range(idle - self.limits.max_idle_per_caller):
                    self._forget(cast(PooledSession, self._idle.oldest(caller)))
