"""A clock that moves only when the test says so (implements `gateway.clock.Clock`).

Timers fire in order as `advance` passes them, each at its own time. A test that
needs to know the code under test has started waiting awaits `armed`, an event,
rather than sleeping.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

START_WALL_MS = 1_800_000_000_000


@dataclass(order=True)
class _Timer:
    when: float
    seq: int
    callback: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    def __init__(self) -> None:
        self.now = 0.0
        self._timers: list[_Timer] = []
        self._seq = itertools.count()
        self._changed = asyncio.Event()

    def wall_ms(self) -> int:
        return START_WALL_MS + round(self.now * 1000)

    def monotonic(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], None]) -> _Timer:
        timer = _Timer(when, next(self._seq), callback)
        if when <= self.now:
            asyncio.get_running_loop().call_soon(self._fire, timer)
        else:
            heapq.heappush(self._timers, timer)
        self._changed.set()
        return timer

    @staticmethod
    def _fire(timer: _Timer) -> None:
        if not timer.cancelled:
            timer.cancelled = True
            timer.callback()

    def pending(self) -> list[float]:
        """When the live timers are due, soonest first."""
        return sorted(t.when for t in self._timers if not t.cancelled)

    async def armed(self, when: float, *, timeout_s: float = 5.0) -> None:
        """Until a timer due at `when` (relative to now: `now + delay`) is set."""
        async with asyncio.timeout(timeout_s):
            while not any(abs(w - when) < 1e-9 for w in self.pending()):
                self._changed.clear()
                await self._changed.wait()

    def advance(self, seconds: float) -> None:
        """Move time forward, firing every timer due on the way, in order."""
        target = self.now + seconds
        while self._timers and self._timers[0].when <= target:
            timer = heapq.heappop(self._timers)
            self.now = max(self.now, timer.when)
            self._fire(timer)
        self.now = target
