"""The one clock of the call core, the stores, the fleet and the edges.

Everything that reads the time or waits for it asks a `Clock`: wall time in
milliseconds (what `requestState` and store records carry) or seconds (as JWT claims
count it), a monotonic reading (durations, deadlines) and timers on the monotonic
line. `SystemClock` is the event loop's; tests give the same code a manual clock and
move time by hand, so expiry, coalescing windows and heartbeats are tested without
sleeping. Beside it, the one rule for waiting longer after each failure in a row
(`Backoff`).

It must not know about calls, stores or the network.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.aio import cancel_and_wait, spawn


class Timer(Protocol):
    def cancel(self) -> None: ...


class Bound(Protocol):
    """A deadline over a block (`deadline`), moved while the block runs (as
    `asyncio.Timeout` is)."""

    def reschedule(self, when: float | None) -> None:
        """The block raises TimeoutError at `when` from now on (None: never)."""
        ...

    def expired(self) -> bool:
        """Whether the deadline has interrupted the block."""
        ...


class Clock(Protocol):
    def wall_ms(self) -> int:
        """Milliseconds since the Unix epoch: comparable across replicas."""
        ...

    def wall_s(self) -> float:
        """Seconds since the Unix epoch, as `time.time` (and JWT claims) count them."""
        ...

    def monotonic(self) -> float:
        """Seconds on a line that never goes back: durations and deadlines."""
        ...

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        """Run `callback` once `monotonic()` reaches `when`."""
        ...


class SystemClock:
    """The running event loop's clock, and the system's wall time."""

    def wall_ms(self) -> int:
        return int(time.time() * 1000)

    def wall_s(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return asyncio.get_running_loop().time()

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_at(when, callback)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff: `base` after the first failure in a row, twice as long after
    each further one, never more than `cap`."""

    base: float
    cap: float

    def delay(self, failures: int) -> float:
        """The wait after `failures` failures in a row (1: the first)."""
        # The exponent is bounded: a long outage must not overflow the float.
        return min(self.cap, self.base * 2.0 ** min(max(failures - 1, 0), 64))


async def sleep_until(clock: Clock, when: float) -> None:
    """Wait until the clock reaches `when` (at once if it has)."""
    if when <= clock.monotonic():
        await asyncio.sleep(0)  # still a point where the caller can be cancelled
        return
    woken = asyncio.get_running_loop().create_future()

    def wake() -> None:
        if not woken.done():
            woken.set_result(None)

    timer = clock.call_at(when, wake)
    try:
        await woken
    finally:
        timer.cancel()


async def sleep(clock: Clock, seconds: float) -> None:
    await sleep_until(clock, clock.monotonic() + seconds)


def deadline(clock: Clock, when: float | None) -> AbstractAsyncContextManager[Bound]:
    """Like `asyncio.timeout_at`, on `clock`: the body raises TimeoutError at `when`,
    which the body may move (`Bound.reschedule`).

    `None` waits forever. A body that finishes without awaiting past `when` is not
    interrupted, even if `when` has already passed. On the event loop's own clock it
    is `asyncio.timeout_at` itself (the hot path: a round reads under one).
    """
    if type(clock) is SystemClock:
        return asyncio.timeout_at(when)
    return _deadline(clock, when)


class _ClockBound:
    """A deadline on a clock that is not the loop's: a scope of the loop's with no
    deadline of its own, interrupted when a timer on `clock` fires."""

    __slots__ = ("clock", "scope", "timer")

    def __init__(self, clock: Clock, scope: asyncio.Timeout) -> None:
        self.clock = clock
        self.scope = scope
        self.timer: Timer | None = None

    def reschedule(self, when: float | None) -> None:
        self.cancel()
        if not self.scope.expired():
            self.scope.reschedule(None)  # a timer that fired but has not yet interrupted
        if when is not None:
            self.timer = self.clock.call_at(when, self._expire)

    def _expire(self) -> None:
        self.timer = None
        if not self.scope.expired():
            self.scope.reschedule(asyncio.get_running_loop().time())

    def expired(self) -> bool:
        return self.scope.expired()

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


@asynccontextmanager
async def _deadline(clock: Clock, when: float | None) -> AsyncIterator[Bound]:
    async with asyncio.timeout(None) as scope:
        bound = _ClockBound(clock, scope)
        bound.reschedule(when)
        try:
            yield bound
        finally:
            bound.cancel()


def timeout(clock: Clock, seconds: float | None) -> AbstractAsyncContextManager[Bound]:
    """`deadline` `seconds` from now."""
    return deadline(clock, None if seconds is None else clock.monotonic() + seconds)


class Later:
    """A coroutine that starts at `when` on `clock`: until then it costs one timer, not a
    task (a parked call's deadline is one of these for each of thousands of calls)."""

    def __init__(
        self,
        clock: Clock,
        when: float,
        start: Callable[[], Coroutine[Any, Any, None]],
        *,
        name: str,
    ) -> None:
        self._start = start
        self._name = name
        self.task: asyncio.Task[None] | None = None
        self._timer: Timer | None = clock.call_at(when, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self.task = spawn(self._start(), name=self._name)

    def done(self) -> bool:
        """Cancelled before it started, or started and finished."""
        return self._timer is None and (self.task is None or self.task.done())

    async def cancel(self) -> None:
        """Never start it, or stop it and wait if it has started (not from inside it)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.task is not None and self.task is not asyncio.current_task():
            await cancel_and_wait(self.task)
