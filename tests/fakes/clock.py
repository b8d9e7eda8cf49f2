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
from typing import TypeVar

T = TypeVar("T")

START_WALL_MS = 1_800_000_000_000
#: Loop turns `run_until_done` lets pass before it moves time: enough for the fakes' chains
#: of callbacks (no I/O) to settle.
SETTLE_TURNS = 50


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

    def wall_s(self) -> float:
        return START_WALL_MS / 1000 + self.now

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

    async def armed(self, when: float, *, timeout_s: float = 30.0) -> None:
        """Until a timer due at `when` (relative to now: `now + delay`) is set."""
        async with asyncio.timeout(timeout_s):
            while not any(abs(w - when) < 1e-9 for w in self.pending()):
                self._changed.clear()
                await self._changed.wait()

    async def run_until_done(self, task: asyncio.Future[T], *, step: float, limit: float) -> T:
        """Move time forward `step` at a time, the loop's ready callbacks run between steps
        (nothing here does I/O), until `task` is done; its result. Fails once time has
        moved `limit` without it being done."""
        moved = 0.0
        while True:
            for _ in range(SETTLE_TURNS):
                if task.done():
                    return task.result()
                await asyncio.sleep(0)
            if moved >= limit:
                raise AssertionError(f"not done after {moved:g} s on the manual clock")
            self.advance(step)
            moved += step

    def advance(self, seconds: float) -> None:
        """Move time forward, firing every timer due on the way, in order."""
        target = self.now + seconds
        while self._timers and self._timers[0].when <= target:
            timer = heapq.heappop(self._timers)
            self.now = max(self.now, timer.when)
            self._fire(timer)
        self.now = target
