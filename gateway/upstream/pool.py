"""Pooled, pre-initialised legacy sessions per caller and declared-capability set; the
`UpstreamPool`.

A legacy server keeps state per session (a login, a scratchpad, the client's roots) and
trusts that one session is one client, so a session serves the calls of one caller
(principal) from its first call to its end: idle sessions are kept per caller and
capability set (`gateway.upstream.idle`), a caller's trimmed to `max_idle_per_caller`
(its least recently used closed first) by the supply's periodic look; a session opened
ahead belongs to nobody until a caller takes it. `isolation: none` shares sessions
between callers instead, for servers known to keep nothing per session.

Interruptible calls (`tools/call`, `prompts/get`, `resources/read`) own a session
exclusively while in flight, so every server request on it belongs to that call; with
`calls_per_session` above 1 (Streamable HTTP), up to that many calls of one caller share
one, filled before the next is opened, so a parked call costs the server a call rather
than a session (`gateway.upstream.sharing`; what such a session cannot attribute:
`gateway.upstream.http.session`). Plain requests ride on one of their caller's idle
sessions (they ask the client nothing), or take one as a call would. A question the
server asks while no call holds its session (`roots/list` right after `initialized`,
say) is held by the session for its next call (`gateway.upstream.held`).

How many sessions there are, and how they are opened, closed and opened ahead, is the
supply's beneath (`gateway.upstream.supply`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import cast

import structlog

from gateway.errors import UpstreamError
from gateway.protocol.capabilities import ClientCaps
from gateway.protocol.versions import Version
from gateway.upstream.idle import Bucket, bucket_of
from gateway.upstream.port import PooledSession, SessionExpired, UpstreamSession
from gateway.upstream.supply import SessionSupply

log = structlog.get_logger("gateway.upstream")


class SessionPool(SessionSupply):
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
            # While it waits, a session of its own given back idle (or one opened ahead
            # for nobody) is taken instead.
            session = await self._reserve(lambda: self._take(caps, owner))
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
                self._slots.wake()  # room, maybe, for a call waiting for a slot
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
            self._slots.wake()
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
            self._slots.give_back()
            self.maker.close_in_background(session.close(end=False))
            raise
        self._bind(session, owner)
        self._unasked.watch(session)
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
