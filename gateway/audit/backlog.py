"""What one sink holds of the events it has not written yet, and what it says of an outage.

A sink that cannot write (Redis out of reach, a disk full) keeps its events here, at most
`bound`; one more drops the oldest. Nothing is dropped silently: each drop is counted
(`mrtr_audit_dropped_total{sink}`), the first of an outage is a warning line
(`audit_events_dropped`), and the end of the outage says how many it cost
(`audit_sink_recovered`, `dropped`). An outage starts with `audit_sink_down` (once, with
the error), not at every failed try.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

import structlog

from gateway.audit.metrics import AuditMetrics

log = structlog.get_logger("gateway.audit")

T = TypeVar("T")


class Backlog(Generic[T]):
    """Events (as each sink keeps them: a line, an id and a line) a sink has still to
    write, oldest first."""

    def __init__(self, sink: str, bound: int, metrics: AuditMetrics) -> None:
        self.sink = sink
        self.bound = bound
        self._lines: deque[T] = deque()
        self._written = metrics.written.labels(sink)
        self._dropped = metrics.dropped.labels(sink)
        self.down = False  # from a failed write until it has caught up
        self.dropped_in_episode = 0  # since the episode began
        metrics.backlog(sink, self.__len__)

    def __len__(self) -> int:
        return len(self._lines)

    def add(self, line: T) -> None:
        """Hold `line`; past the bound the oldest held is dropped (counted)."""
        if len(self._lines) >= self.bound:
            self._lines.popleft()
            self.drop(1)
        self._lines.append(line)

    def take(self, most: int) -> list[T]:
        """Up to `most` of the oldest, no longer held."""
        lines = self._lines
        if len(lines) <= most:
            taken = list(lines)
            lines.clear()
            return taken
        return [lines.popleft() for _ in range(most)]

    def drop(self, count: int, *, why: str = "backlog full") -> None:
        """Count `count` events that will never be written; the first drop of an episode
        (from a failure or a drop until the sink has caught up) is said in the log."""
        if count <= 0:
            return
        self._dropped.inc(count)
        if self.dropped_in_episode == 0:
            log.warning(
                "audit_events_dropped", sink=self.sink, count=count, why=why, bound=self.bound
            )
        self.dropped_in_episode += count

    def wrote(self, count: int) -> None:
        """`count` events were written. Once nothing is held, an episode of failures or
        drops is over, and said to be with what it cost."""
        self._written.inc(count)
        if self._lines or not (self.down or self.dropped_in_episode):
            return
        log.info("audit_sink_recovered", sink=self.sink, dropped=self.dropped_in_episode)
        self.down = False
        self.dropped_in_episode = 0

    def failed(self, error: str) -> None:
        """A write failed: the first failure of an episode is said, once."""
        if not self.down:
            self.down = True
            log.warning("audit_sink_down", sink=self.sink, error=error, held=len(self._lines))
