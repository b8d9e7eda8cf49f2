"""Pooled, pre-initialised legacy sessions per caller and declared-capability set; the
`UpstreamPool`.

A legacy server keeps state per session (a login, a scratchpad, the client's roots) and
trusts that one session is one client, so a session serves the calls of one caller
(principal) from its first call to its end: idle sessions are kept per caller and
capability set (`gateway.upstream.idle`), at most `max_idle_per_caller` of a caller's,
the least recently used closed first; a session opened ahead belongs to nobody until
a caller takes it. `isolation: none` shares sessions between callers instead, for
servers known to keep nothing per session.

Interruptible calls (`tools/call`, `prompts/get`, `resources/read`) own a session
exclusively while in flight, so every server request on it belongs to that call; with
`calls_per_session` above 1 (Streamable HTTP), up to that many calls of one caller share
one, filled before the next is opened, so a parked call costs the server a call rather
than a session (`gateway.upstream.sharing`; what such a session cannot attribute:
`gateway.upstream.http.session`). Plain requests ride on one of their caller's idle
sessions (they ask the client nothing), or take one as a call would.

A question the server asks while no call holds its session (`roots/list` right after
`initialized`, say) is held by the session for its next call (`gateway.upstream.held`);
unasked after `outside_question_s`, it is answered as outside any call and the session
is retired.

The pool opens sessions ahead, in the background, so owning one costs the caller no
handshake: as many as the recent rate of sessions taken and not given back times the
time one takes to open (at least `min_idle`; `gateway.upstream.demand`), so a burst of
parking calls finds them ready and calls that give theirs back keep no spares idle on
the server. At most `max_opening` sessions open at once, so a burst of new callers on a
stdio server starts processes at a pace the machine can serve beside them. Sessions
idle past `idle_timeout_s` are closed (keeping `min_idle` unbound ones); the total is
bounded by `max_sessions`: a session open, opening or closing takes one of its slots,
and a caller finding none free waits a bounded time for one.

Sessions are made, opened and closed one at a time by `gateway.upstream.maker`, which
also knows what opening them says of the upstream (reachable, its `initialize`, its
lists changed). The pool must not know the transport: it has sessions made with the
factory it is given.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from typing import Any, cast

import structlog

from gateway import clock as clocks
from gateway.aio import cancel_and_wait, spawn
from gateway.clock import Clock, SystemClock
from gateway.config import SHARE_SESSIONS, PoolLimits
from gateway.errors import CapacityExceeded, SessionsBusy, UpstreamError
from gateway.protocol.capabilities import NO_CAPABILITIES, ClientCaps
from gateway.protocol.translate import UpstreamInfo
from gateway.protocol.versions import Version
from gateway.upstream.demand import Demand
from gateway.upstream.idle import Bucket, IdleSessions, bucket_of
from gateway.upstream.maker import SessionMaker
from gateway.upstream.port import PooledSession, SessionExpired, SessionFactory, UpstreamSession
from gateway.upstream.sharing import Opening, Sharing
from gateway.upstream.unasked import Unasked

log = structlog.get_logger("gateway.upstream")


class SessionPool:
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
        self.demand = Demand()
        self._isolated = limits.isolation != SHARE_SESSIONS
        self._count = 0  # slots taken: sessions open, opening, or closing
        self._freed = asyncio.Condition()
        self._waiting = 0  # callers inside `_freed` (waiting for a slot or an idle session)
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
        return self._count

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

    # -- calls' sessions -------------------------------------------------------------------

    async def acquire(self, caps: ClientCaps, principal: str) -> PooledSession:
        """An initialised session of `principal`'s, owned by the caller until `release`.

        Raises:
            UpstreamError: no session could be opened.
            CapacityExceeded: `max_sessions` stayed busy for `acquire_timeout_s`.
        """
        owner = self._owner(principal)
        self.demand.acquired(self.clock.monotonic())
        session = self._take(caps, owner)
        if session is None and self._share > 1:
            session = await self._join_opening((owner, caps.key))
        if session is None:
            session = await self._reserve(caps, owner)
        if session is None:
            self._refill(caps)  # this caller opens its own; the next ones find theirs
            session = await self._open_for(caps, owner, calls=1)
        self._refill(caps)
        return session

    def _owner(self, principal: str) -> str | None:
        """Whose sessions `principal`'s calls use: its own, or everyone's (no isolation)."""
        return principal if self._isolated else None

    def _take(self, caps: ClientCaps, owner: str | None) -> PooledSession | None:
        """A session for one more call of `owner`'s: one shared with room left, else an
        idle one of its own, else one opened ahead for nobody (now its own)."""
        bucket = (owner, caps.key)
        if self._share > 1 and (session := self._sharing.join(bucket)):
            return session
        session = self._take_idle(bucket)
        if session is None and owner is not None:
            session = self._take_idle((None, caps.key))
            if session is not None:
                self._bind(session, owner)  # at first use, for the rest of its life
        if session is not None and self._share > 1:
            self._sharing.carry(session)  # its first call; others of its caller may join it
        return session

    def _take_idle(self, bucket: Bucket) -> PooledSession | None:
        while (session := self._idle.take(bucket)) is not None:
            if self._usable(session):
                return session
            self._forget(session)
        return None

    def _evict_idle(self) -> bool:
        """Close the longest-idle session of any caller; False when none is idle."""
        session = self._idle.oldest()
        if session is None:
            return False
        self._forget(session)
        return True

    async def _join_opening(self, bucket: Bucket) -> PooledSession | None:
        """A session of the bucket being opened with room for this call, once it is open;
        None when none is opening (or it failed to open)."""
        opening = self._sharing.joinable(bucket)
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

    def release(self, given: UpstreamSession, *, reuse: bool) -> None:
        """Give a session back: to its caller's idle ones when clean, else close it. A
        shared session is given back by its last call."""
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
        if (
            reuse
            and self._usable(session)
            and not self._closing
            and self._idle.count(bucket_of(session)) < self.limits.max_sessions
        ):
            session.last_used = now = self.clock.monotonic()
            self._idle.put(session)
            self.demand.returned(now)
            owner = session.principal
            if owner is not None and self._idle.held_by(owner) > self.limits.max_idle_per_caller:
                self._forget(cast(PooledSession, self._idle.oldest(owner)))
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

    # -- sessions opened ahead ---------------------------------------------------------------

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
            if self._count >= self.limits.max_sessions or self.maker.busy:
                return
            self._count += 1  # the slot is taken now, so a burst never over-opens
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
            await self._notify_freed()  # someone may be waiting for a session of these caps

    # -- takeovers ---------------------------------------------------------------------------

    async def adopt(
        self, caps: ClientCaps, principal: str, session_id: str, version: Version
    ) -> PooledSession:
        """Take over a session another replica opened for `principal` (its call
        continues here); it stays `principal`'s.

        With sharing, the calls of one session taken over here share one session object
        (the server holds one GET stream per session); it takes no other calls, and is not
        ended upstream when they are done: other replicas may carry calls of its own.

        Raises:
            SessionExpired: the upstream has forgotten it.
            UpstreamError, CapacityExceeded
        """
        owner = self._owner(principal)
        if self._share == 1:
            return await self._adopt(caps, owner, session_id, version)
        # Takeovers of one session at once adopt it once (a second GET stream would be
        # refused): the later ones wait for the first, then join it.
        lock = self._adopting.setdefault(session_id, asyncio.Lock())
        async with lock:
            if known := self._sharing.adopted(session_id):
                return known
            session = await self._adopt(caps, owner, session_id, version)
            self._sharing.adopt(session_id, session)
            return session

    async def _adopt(
        self, caps: ClientCaps, owner: str | None, session_id: str, version: Version
    ) -> PooledSession:
        await self._reserve()
        session = self.maker.new_session(caps)
        session.principal = owner  # the same caller's, whose call it carries
        try:
            await session.adopt(session_id, version)
        except BaseException:
            # Closed here, not ended upstream: the session is the dead owner's call's, which
            # the next retry's takeover may adopt still.
            self._count -= 1
            self.maker.close_in_background(session.close(end=False))
            self._wake_waiters()
            raise
        self._bind(session, owner)
        self._unasked.watch(session)
        return session

    # -- plain requests ----------------------------------------------------------------------

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

    async def request(
        self,
        caps: ClientCaps,
        principal: str | None,
        method: str,
        params: dict[str, object] | None,
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, object]:
        """A plain request on a session of `principal`'s: an idle one, left idle (a plain
        request asks the client nothing, so it needs no session to itself), else one
        taken as a call would and given back; None: the gateway's own session (declaring
        no capability). Retried once on a fresh session if the session expired.

        Raises:
            UpstreamError, CapacityExceeded
        """
        for attempt in (1, 2):
            taken = False
            if principal is None:
                session: PooledSession | None = await self.own()
            elif attempt == 2:  # the server forgot a session: it may have forgotten all
                await self._reserve()
                session, taken = await self._open(caps, self._owner(principal)), True
            else:
                session = self._idle.peek((self._owner(principal), caps.key))
                taken = session is None or not self._usable(session)
                if taken:
                    session = await self.acquire(caps, principal)
            assert session is not None
            try:
                return await session.request(method, params, headers)
            except SessionExpired:
                if attempt == 2:
                    raise
                log.info("upstream_session_expired", upstream=self.name)
            except TimeoutError as exc:
                self.maker.failed()
                raise UpstreamError(f"upstream did not answer {method} in time") from exc
            except UpstreamError:
                self.maker.failed()
                raise
            finally:
                if taken:
                    self.release(session, reuse=True)
        raise AssertionError("unreachable")

    async def upstream_info(self) -> UpstreamInfo:
        """What the upstream said in `initialize` (opens the own session if needed)."""
        if self.info is None:
            await self.own()
        assert self.info is not None
        return self.info

    # -- sessions of one caller's own, and the fleet's ---------------------------------------

    async def open_alone(self, caps: ClientCaps) -> PooledSession:
        """A session of the caller's own, outside `max_sessions` (its caller bounds such
        sessions: `limits.max_listens`), shared by no call, closed with `close_alone`; the
        fleet's ledger lists it, so it is ended if this replica dies.

        Raises:
            UpstreamError
        """
        session = await self._start(caps, None)
        self._alone.add(session)
        return session

    def close_alone(self, session: PooledSession) -> None:
        """Close, and end upstream, a session `open_alone` gave: in a task of its own,
        which the pool's close awaits (its caller may be cancelled)."""
        self._alone.discard(session)
        self.maker.close_in_background(self._unasked.close(session))

    def idle_ids(self) -> dict[str, str]:
        """The sessions no call holds (idle ones, the gateway's own, listens') that
        another replica could end: their ids and negotiated versions (`fleet.ledger`)."""
        held = [*self._idle]
        held += [self._own] if self._own is not None else []
        held += self._alone  # a listen's: held by no call another replica could take over
        return {s.id: s.version.value for s in held if s.id is not None and s.alive}

    async def end_other(self, session_id: str, version: Version) -> int:
        """End upstream a session a dead replica left open (it takes no slot here): the
        status the server answered. Raises: UpstreamError."""
        return await self.maker.end_other(session_id, version)

    # -- slots -------------------------------------------------------------------------------

    async def _reserve(
        self, caps: ClientCaps | None = None, owner: str | None = None
    ) -> PooledSession | None:
        """Take one slot of `max_sessions`, waiting a bounded time for one to free.

        While it waits, a session of `owner`'s for `caps` given back idle (or one opened
        ahead for nobody) is taken instead (returned); an idle session of another caller
        or capability set is closed to make room.

        Raises:
            SessionsBusy: every slot stayed in use for `acquire_timeout_s`.
        """
        try:
            async with asyncio.timeout(self.limits.acquire_timeout_s):
                async with self._freed:
                    self._waiting += 1  # under the lock: a release now notifies
                    try:
                        while self._count >= self.limits.max_sessions:
                            if caps is not None and (session := self._take(caps, owner)):
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
            self._count -= 1
            self._wake_waiters()
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
            self._wake_waiters()  # room, maybe, for a call that waits for a slot
        return session

    def _bind(self, session: PooledSession, owner: str | None) -> None:
        """The session serves `owner` (None: nobody yet, or every caller) from now to its
        end."""
        session.principal = owner
        if owner is not None:
            self._bound[owner] += 1

    def _forget(self, session: PooledSession, *, end: bool = True) -> None:
        """Close a session and free its slot (the waiters are woken once it is closed)."""
        self._count -= 1
        if session.principal is not None and self._bound[session.principal]:
            self._bound[session.principal] -= 1
            if not self._bound[session.principal]:
                del self._bound[session.principal]
        self.maker.close_in_background(self._close_and_notify(session, end=end))

    async def _close_and_notify(self, session: PooledSession, *, end: bool = True) -> None:
        await session.wait_quiet()
        await self._unasked.close(session, end=end)
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

    def _retire(self, session: PooledSession) -> None:
        """A session's question went unasked (`Unasked`): closed now if no call holds it,
        else when its call gives it back (it is not usable any more)."""
        if self._idle.remove(session):
            self._forget(session)
        elif session is self._own:
            self._own = None
            self._forget(session)

    @property
    def _share(self) -> int:
        return self.limits.calls_per_session

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
