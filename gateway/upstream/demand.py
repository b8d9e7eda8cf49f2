"""How many sessions a pool should keep ready, and when a failed start may be tried again.
Pure bookkeeping on given times.

The reserve follows Little's law on the sessions calls keep: the calls of the last
window that took a session and did not give one back (a burst of parking calls keeps
each), per second, times the time a session takes to open. Calls that give their
sessions back as fast as they take them (pass-through calls, or parked calls ending as
fast as new ones park) keep none: their own sessions come back to serve the next, and
spares held beside them would only sit on the server, which pays for each session it
holds on every call it serves."""

from __future__ import annotations

import math
from collections import deque

from gateway.clock import Backoff


class Demand:
    def __init__(self, *, window_s: float = 1.0) -> None:
        self.window_s = window_s
        self.open_s = 0.0  # a moving average of how long opening a session took
        self._acquired: deque[float] = deque()
        self._returned: deque[float] = deque()

    def acquired(self, now: float) -> None:
        """A call took a session (or a call's room in a shared one)."""
        self._note(self._acquired, now)

    def returned(self, now: float) -> None:
        """A call gave its session (or its room) back for the next one."""
        self._note(self._returned, now)

    def _note(self, times: deque[float], now: float) -> None:
        times.append(now)
        horizon = now - self.window_s
        for seen in (self._acquired, self._returned):
            while seen and seen[0] <= horizon:
                seen.popleft()

    def opened(self, took_s: float) -> None:
        self.open_s = took_s if not self.open_s else 0.8 * self.open_s + 0.2 * took_s

    def reserve(self, floor: int, ceiling: int) -> int:
        """Idle sessions to keep ready, between `floor` and `ceiling`: the sessions calls
        kept in the last window, as a rate, times the time to open one; never more than
        they kept in the window (a slow start, say a stdio server taking seconds, must not
        turn a burst of eight calls, or eight calls more in flight than a second ago, into
        dozens of processes)."""
        kept = max(0, len(self._acquired) - len(self._returned))
        wanted = min(kept, math.ceil(kept / self.window_s * self.open_s))
        return min(ceiling, max(floor, wanted))


class Restarts:
    """After a failed start, the next is tried only `backoff_s` later, doubling with each
    failure in a row up to `MAX_BACKOFF_S`: a stdio server that crashes at start is not
    restarted in a tight loop. No backoff when `backoff_s` is 0."""

    MAX_BACKOFF_S = 30.0

    def __init__(self, backoff_s: float) -> None:
        self.backoff = Backoff(backoff_s, self.MAX_BACKOFF_S) if backoff_s else None
        self.failures = 0  # in a row
        self._retry_at = 0.0

    def wait_s(self, now: float) -> float:
        """How long until a start may be tried (0 or less: now)."""
        return self._retry_at - now

    def succeeded(self) -> None:
        self.failures, self._retry_at = 0, 0.0

    def failed(self, now: float) -> float | None:
        """Count a failed start; the delay before the next try, None without backoff."""
        self.failures += 1
        if self.backoff is None:
            return None
        delay = self.backoff.delay(self.failures)
        self._retry_at = now + delay
        return delay
