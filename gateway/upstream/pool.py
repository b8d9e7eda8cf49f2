"""Pooled, pre-initialised legacy sessions per declared-capability set.

Interruptible calls (`tools/call`, `prompts/get`, `resources/read`) own a session
exclusively while in flight, so every server request on it belongs to that
call. Plain requests share one session per capability set. After an idle
session is taken, the pool opens a replacement in the background, so owning a
session costs the caller no handshake. Sessions idle past `idle_timeout_s` are
closed (keeping `min_idle`); the total is bounded by `max_sessions`.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable, Mapping

import aiohttp
import structlog

from gateway.aio import cancel_and_wait, spawn
from gateway.config import PoolLimits
from gateway.errors import CapacityExceeded, UpstreamError
from gateway.protocol.capabilities import ClientCaps
from gateway.protocol.translate import UpstreamInfo
from gateway.protocol.versions import Version
from gateway.upstream.session import Endpoint, LegacySession, SessionExpired

log = structlog.get_logger("gateway.upstream")


class SessionPool:
    def __init__(
        self,
        http: aiohttp.ClientSession,
        endpoint: Endpoint,
        limits: PoolLimits,
        *,
        on_error: Callable[[], None] | None = None,
    ) -> None:
        self.http = http
        self.endpoint = endpoint
        self.limits = limits
        self._on_error = on_error
        self.reachable = False  # the last attempt to open a session succeeded
        self._idle: dict[str, list[LegacySession]] = defaultdict(list)
        self._shared: dict[str, LegacySession] = {}
        self._shared_lock: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._count = 0
        self._freed = asyncio.Condition()
        self._closing = False
        self._reaper: asyncio.Task[None] | None = None
        self.info: UpstreamInfo | None = None
        self.errors = 0

    def _failed(self) -> None:
        self.errors += 1
        self.reachable = False
        if self._on_error is not None:
            self._on_error()

    @property
    def size(self) -> int:
        return self._count

    def start(self) -> None:
        self._reaper = spawn(self._reap(), name=f"pool-reaper-{self.endpoint.name}")
        spawn(self._warm_up(), name=f"pool-warm-up-{self.endpoint.name}")

    async def _warm_up(self) -> None:
        """Open the shared session at start, so readiness reflects the upstream at once."""
        try:
            await self.shared(ClientCaps())
        except (UpstreamError, CapacityExceeded) as exc:
            log.warning(
                "upstream_unreachable_at_start", upstream=self.endpoint.name, error=exc.message
            )

    async def check(self) -> bool:
        """Readiness: reachable now, or re-tried once (bounded) if it was not."""
        if self.reachable:
            return True
        try:
            async with asyncio.timeout(2):
                await self.shared(ClientCaps())
        except (UpstreamError, CapacityExceeded, TimeoutError):
            return False
        return self.reachable

    async def close(self) -> None:
        self._closing = True
        await cancel_and_wait(self._reaper)
        sessions = [s for idle in self._idle.values() for s in idle] + list(self._shared.values())
        self._idle.clear()
        self._shared.clear()
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)

    async def _open(self, caps: ClientCaps) -> LegacySession:
        session = LegacySession(self.http, self.endpoint, caps)
        try:
            self.info = await session.open()
            self.reachable = True
        except BaseException as exc:
            # Whatever stopped it (a failure, or the caller's cancellation), the slot is
            # given back and the half-open session closed, in a task of its own.
            self._count -= 1
            spawn(session.close(), name=f"pool-close-{self.endpoint.name}")
            if isinstance(exc, UpstreamError | TimeoutError):
                self._failed()
            if isinstance(exc, TimeoutError):
                raise UpstreamError("upstream did not answer initialize in time") from exc
            raise
        log.debug("upstream_session_opened", upstream=self.endpoint.name, caps=caps.key)
        return session

    async def _reserve(self) -> None:
        """Take one slot of `max_sessions`, waiting a bounded time for one to free."""
        if self._count >= self.limits.max_sessions:
            try:
                async with asyncio.timeout(self.limits.acquire_timeout_s):
                    async with self._freed:
                        await self._freed.wait_for(lambda: self._count < self.limits.max_sessions)
            except TimeoutError:
                raise CapacityExceeded(
                    f"all {self.limits.max_sessions} upstream sessions "
                    f"of {self.endpoint.name!r} are busy",
                    reason="upstream_sessions",
                ) from None
        self._count += 1

    async def acquire(self, caps: ClientCaps) -> LegacySession:
        """An initialised session owned by the caller until `release`.

        Raises:
            UpstreamError: no session could be opened.
            CapacityExceeded: `max_sessions` stayed busy for `acquire_timeout_s`.
        """
        idle = self._idle[caps.key]
        while idle:
            session = idle.pop()
            if session.alive:
                self._refill(caps)
                return session
            self._forget(session)
        await self._reserve()
        session = await self._open(caps)
        self._refill(caps)
        return session

    async def adopt(self, caps: ClientCaps, session_id: str, version: Version) -> LegacySession:
        """Take over a session another replica opened (its call continues here).

        Raises:
            SessionExpired: the upstream has forgotten it.
            UpstreamError, CapacityExceeded
        """
        await self._reserve()
        session = LegacySession(self.http, self.endpoint, caps)
        try:
            await session.adopt(session_id, version)
        except BaseException:
            self._count -= 1
            spawn(session.close(), name=f"pool-close-{self.endpoint.name}")
            raise
        return session

    def release(self, session: LegacySession, *, reuse: bool) -> None:
        """Give a session back: to the idle list when clean, else close it."""
        session.detach()
        idle = self._idle[session.caps.key]
        fresh = session.requests < self.limits.max_requests
        if (
            reuse
            and fresh
            and session.alive
            and not self._closing
            and len(idle) < self.limits.max_sessions
        ):
            session.last_used = time.monotonic()
            idle.append(session)
            return
        self._forget(session)

    def _forget(self, session: LegacySession) -> None:
        self._count -= 1
        spawn(self._close_and_notify(session), name=f"pool-close-{self.endpoint.name}")

    async def _close_and_notify(self, session: LegacySession) -> None:
        await session.wait_quiet()
        await session.close()
        async with self._freed:
            self._freed.notify_all()

    def _refill(self, caps: ClientCaps) -> None:
        if len(self._idle[caps.key]) < self.limits.min_idle and not self._closing:
            spawn(self._prewarm(caps), name=f"pool-prewarm-{self.endpoint.name}")

    async def _prewarm(self, caps: ClientCaps) -> None:
        if self._count >= self.limits.max_sessions:
            return
        self._count += 1
        try:
            session = await self._open(caps)
        except UpstreamError as exc:
            log.warning("upstream_prewarm_failed", upstream=self.endpoint.name, error=str(exc))
            return
        if self._closing:
            self._forget(session)
        else:
            self._idle[caps.key].append(session)

    async def shared(self, caps: ClientCaps) -> LegacySession:
        """The session plain requests of this capability set share.

        Raises:
            UpstreamError, CapacityExceeded
        """
        session = self._shared.get(caps.key)
        if session is not None and self._usable(session):
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
            self._shared[caps.key] = session
            return session

    def _usable(self, session: LegacySession) -> bool:
        return session.alive and session.requests < self.limits.max_requests

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
                log.info("upstream_session_expired", upstream=self.endpoint.name)
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
            await self.shared(ClientCaps())
        assert self.info is not None
        return self.info

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(min(30.0, self.limits.idle_timeout_s))
            now = time.monotonic()
            for key, shared in list(self._shared.items()):
                # Shared sessions of rarely seen capability sets go too (not the default one).
                if key != ClientCaps().key and now - shared.last_used > self.limits.idle_timeout_s:
                    del self._shared[key]
                    self._forget(shared)
            for idle in self._idle.values():
                keep: list[LegacySession] = []
                for session in idle:
                    stale = now - session.last_used > self.limits.idle_timeout_s
                    if (stale and len(keep) >= self.limits.min_idle) or not session.alive:
                        self._forget(session)
                    else:
                        keep.append(session)
                idle[:] = keep
