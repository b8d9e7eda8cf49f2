"""An upstream's SSE answer relayed to the client, event by event.

Each event is framed again as it came (its id, retry, type and data, so `Last-Event-ID`
means to the upstream what it meant), after the lane has looked at it (`see`: to filter
a list result, to note the response). While the upstream is quiet the client gets a
comment keepalive every `keepalive_s`, which also finds a client that has gone. A relay
ends when the upstream's stream ends, when it fails, when the upstream has been silent
for `idle_s` (a POST's answer; a GET stream may be quiet for hours), at `end_at` (the
session's expiry, or the credential's) or when it is stopped (`stop`: the replica
drains); then the client's stream ends too, cleanly, so a client reconnects. Before a
stream's head is sent, `read_prelude` reads its events up to its first message, so that the
lane can send a response that comes first whole instead. Every time it reads or waits
for is on the `Clock` it is given.

It must not decide what an event means, nor answer anything but the stream it relays.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import structlog
from aiohttp import web

from gateway import clock as clocks
from gateway.aio import cancel_and_wait, spawn
from gateway.clock import Bound, Clock, Timer
from gateway.errors import UpstreamError
from gateway.legacy_clients.upstream import EventStream
from gateway.protocol import sse

log = structlog.get_logger("gateway.legacy")

#: How a relay ended.
ENDED = "ended"  # the upstream ended its stream
FAILED = "failed"  # the upstream's stream broke (`Relay.error` says how)
IDLE = "idle"  # the upstream said nothing for `idle_s`
EXPIRED = "expired"  # `end_at` came


class StreamHooks(Protocol):
    """What the web part does with a stream the lane answers (`gateway.web.front`)."""

    def heading(self, request: web.Request, headers: dict[str, str]) -> None:
        """Add what every answer's head carries (its request id) to a stream's head."""
        ...

    def begun(self, request: web.Request, response: web.StreamResponse) -> None:
        """The stream's head is sent: an error from now on can only end it."""
        ...


class Relay:
    """One client stream carrying one upstream stream's events."""

    __slots__ = (
        "request",
        "headers",
        "hooks",
        "keepalive_s",
        "clock",
        "error",
        "_response",
        "_lock",
        "_last",
        "_timer",
        "_keeper",
        "_bound",
        "_stopped",
    )

    def __init__(
        self,
        request: web.Request,
        headers: Mapping[str, str],
        hooks: StreamHooks,
        *,
        keepalive_s: float,
        clock: Clock,
    ) -> None:
        self.request = request
        self.headers = dict(headers)
        self.hooks = hooks
        self.keepalive_s = keepalive_s
        self.clock = clock
        self.error: UpstreamError | None = None
        self._response: web.StreamResponse | None = None
        self._lock = asyncio.Lock()
        self._last = 0.0
        self._timer: Timer | None = None
        self._keeper: asyncio.Task[None] | None = None
        self._bound: Bound | None = None
        self._stopped: str | None = None

    @property
    def started(self) -> bool:
        """Whether the head has been sent (`start`)."""
        return self._response is not None

    async def start(self) -> web.StreamResponse:
        """Send the head (200, an event stream) and start keeping the stream alive."""
        self.hooks.heading(self.request, self.headers)
        response = web.StreamResponse(status=200, headers=self.headers)
        await response.prepare(self.request)
        self.hooks.begun(self.request, response)
        self._response = response
        self._last = self.clock.monotonic()
        self._arm(self.keepalive_s)
        return response

    async def run(
        self,
        events: EventStream,
        see: Callable[[sse.SseEvent], sse.SseEvent | None],
        *,
        idle_s: float | None = None,
        end_at: float | None = None,
        done: Callable[[], bool] | None = None,
        quiet_since: float | None = None,
    ) -> str:
        """Relay `events` until they end or the relay does; how it ended (`ENDED`, `FAILED`,
        `IDLE`, `EXPIRED` or the reason given to `stop`). `end_at` is on the relay's clock.
        Once `done()` says the client has all it waits for (a POST's response: the server
        SHOULD end its stream there), the relay ends at once and the rest of the upstream's
        stream is read in the background for at most `DRAIN_S`, so that its connection is
        used again; `events` is closed whatever happens. `quiet_since`: when the upstream
        last said something, on the relay's clock, if before the relay began (`idle_s`
        counts from then).

        Raises:
            ConnectionResetError: the client went away.
        """
        clock = self.clock
        draining = False
        try:
            since = clock.monotonic() if quiet_since is None else quiet_since
            async with clocks.deadline(clock, _deadline(since, idle_s, end_at)) as bound:
                self._bound = bound
                if self._stopped is not None:
                    bound.reschedule(clock.monotonic())
                async for event in events:
                    shown = see(event)
                    if shown is not None:
                        await self.write(sse.encode_event(shown))
                    if done is not None and done():
                        draining = True
                        drain(events, clock)
                        return ENDED
                    if idle_s is not None and self._stopped is None:
                        bound.reschedule(_deadline(clock.monotonic(), idle_s, end_at))
            return ENDED
        except TimeoutError:
            if self._stopped is not None:
                return self._stopped
            return EXPIRED if end_at is not None and clock.monotonic() >= end_at else IDLE
        except UpstreamError as exc:
            self.error = exc
            return FAILED
        finally:
            self._bound = None
            if not draining:
                await events.aclose()

    def stop(self, why: str) -> None:
        """End the relay at once (its `run` returns `why`), cleanly for the client."""
        if self._stopped is not None:
            return
        self._stopped = why
        bound = self._bound
        if bound is not None and not bound.expired():
            bound.reschedule(self.clock.monotonic())

    async def write(self, data: bytes) -> None:
        """Send bytes on the stream (one whole frame). Raises: ConnectionResetError."""
        assert self._response is not None, "start() first"
        async with self._lock:
            await self._response.write(data)
            self._last = self.clock.monotonic()

    async def finish(self) -> web.StreamResponse:
        """End the client's stream (its last chunk), after what was written."""
        await self.close()
        assert self._response is not None, "start() first"
        async with self._lock:
            try:
                await self._response.write_eof()
            except ConnectionResetError:
                pass  # the client went first: nothing is owed to it
        return self._response

    async def standalone(
        self,
        events: EventStream,
        see: Callable[[sse.SseEvent], sse.SseEvent | None],
        *,
        end_at: float | None,
        principal: str,
        session: str | None,
        **ended: object,
    ) -> str:
        """A standalone (GET) stream relayed to its end (`run`, then `close`), between its
        `legacy_stream_opened` and `legacy_stream_ended` lines (`ended`: more fields for
        the latter); how it ended."""
        began = self.clock.monotonic()
        log.info("legacy_stream_opened", principal=principal, session=session)
        how = "client_gone"
        try:
            how = await self.run(events, see, end_at=end_at)
        finally:
            await self.close()
            log.info(
                "legacy_stream_ended",
                how=how,
                principal=principal,
                session=session,
                **ended,
                duration_s=round(self.clock.monotonic() - began, 1),
            )
        return how

    async def close(self) -> None:
        """Stop keeping the stream alive (whatever ended it)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        await cancel_and_wait(self._keeper)
        self._keeper = None

    # -- keepalives --------------------------------------------------------------------

    def _arm(self, delay_s: float) -> None:
        self._timer = self.clock.call_at(self.clock.monotonic() + delay_s, self._due)

    def _due(self) -> None:
        """A keepalive is due unless something was written meanwhile: then later."""
        self._timer = None
        quiet = self.clock.monotonic() - self._last
        if quiet < self.keepalive_s:
            self._arm(self.keepalive_s - quiet)
        elif self._keeper is None:
            self._keeper = spawn(self._keep_alive(), name="legacy-keepalive")

    async def _keep_alive(self) -> None:
        try:
            await self.write(sse.KEEPALIVE)
        except ConnectionResetError:
            return  # the client has gone: its handler is cancelled and ends the relay
        finally:
            self._keeper = None
        self._arm(self.keepalive_s)


@dataclass(slots=True)
class Prelude:
    """What a stream said before its head was sent (`read_prelude`)."""

    heard: float  # when the upstream last said something (or was asked), on the lane's clock
    events: list[sse.SseEvent] = field(default_factory=list)  # as `see` let them through
    how: str | None = None  # how the stream ended meanwhile (`ENDED`, `FAILED`, ...), if it did
    error: UpstreamError | None = None  # `FAILED`: how it failed


async def read_prelude(
    events: EventStream,
    see: Callable[[sse.SseEvent], sse.SseEvent],
    wait_s: float,
    *,
    gave_up: str | None,
    clock: Clock,
) -> Prelude:
    """The events of a stream up to its first message (an event with data; those before it
    carry none, as a priming event that only gives an id), each through `see`, for at most
    `wait_s`; a stream that ended, failed or said no message within it says so (`gave_up`:
    what a wait that ran out means: None, that the relay goes on). `events` is closed when
    the wait is cancelled, and left open otherwise."""
    prelude = Prelude(clock.monotonic())
    iterator = aiter(events)
    try:
        async with clocks.timeout(clock, wait_s):
            while True:
                event = await anext(iterator)
                prelude.heard = clock.monotonic()
                prelude.events.append(see(event))
                if event.data:
                    return prelude
    except TimeoutError:
        prelude.how = gave_up
    except StopAsyncIteration:
        prelude.how = ENDED
    except UpstreamError as exc:
        prelude.how, prelude.error = FAILED, exc
    except BaseException:
        await events.aclose()
        raise
    return prelude


#: How long the rest of a stream may take to end once the client has what it waits for.
DRAIN_S = 1.0


def drain(events: EventStream, clock: Clock) -> None:
    """Read the rest of `events` in the background, for at most `DRAIN_S`, then close
    them: what follows a response the client has (normally just the stream's end)."""
    spawn(_drain(events, clock), name="legacy-stream-drain")


async def _drain(events: EventStream, clock: Clock) -> None:
    """Read what follows a response (normally just the stream's end), briefly: a stream
    read to its end gives its connection back for the next request; one cut is closed."""
    try:
        async with clocks.timeout(clock, DRAIN_S):
            async for _ in events:
                pass
    except (TimeoutError, UpstreamError):
        pass
    finally:
        await events.aclose()


def _deadline(now: float, idle_s: float | None, end_at: float | None) -> float | None:
    """The nearer of the idle bound and `end_at`, or None for neither."""
    idle_at = math.inf if idle_s is None else now + idle_s
    nearest = min(idle_at, math.inf if end_at is None else end_at)
    return None if nearest == math.inf else nearest
