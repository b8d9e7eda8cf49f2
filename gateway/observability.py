"""Prometheus metrics: one registry per application, exposed at `/metrics`.

Every name starts with `mrtr_`. What an operator watches at 3 a.m.: requests by
method and outcome, latency of the whole request, of upstream exchanges, of
rounds, of resumes and of cross-replica forwards, parked calls now, rounds per
call, requestState refusals by reason, expiries, upstream sessions and errors,
store latency and errors. Labels are bounded: methods come from the fixed set
of MCP methods, upstreams from the config, reasons from the code.

Counters and histograms are tallied: counted in plain floats on the hot path and read
when the registry is collected (a scrape, or `get_sample_value`) by collectors of their
own, through `prometheus_client`'s public collector interface (`collect` yields metric
families). The library's own children take a lock on every `labels`, `inc` and
`observe`, and the hot path does a few of each per request. The exposition is the one
the library's `Counter` and `Histogram` give (`tests/test_metrics_exposition.py`).
Gauges are read at scrape time, so they stay the library's own.

This module must not touch the library's private fields (they change without notice),
nor be counted into from another thread than the event loop's: the tallies take no lock.
"""

from __future__ import annotations

import math
import os
import time
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Generic, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from gateway.tracing import TRACING

#: `prometheus_client`'s documented switch for the `_created` series, read as it reads it.
DISABLE_CREATED = os.environ.get("PROMETHEUS_DISABLE_CREATED_SERIES", "false")
CREATED_SERIES = DISABLE_CREATED.lower() not in ("true", "1", "t")


class CounterTally:
    """One counter series, counted in a plain float."""

    __slots__ = ("value", "created")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self.value += amount


class HistogramTally:
    """One histogram series: an observation is a bisection and two additions."""

    __slots__ = ("bounds", "counts", "total", "created")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = bounds  # ends with +Inf
        self.counts = [0] * len(bounds)  # per bucket, not cumulative
        self.total = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        self.total += amount
        if amount == amount:  # NaN is in no bucket, as the library has it
            self.counts[bisect_left(self.bounds, amount)] += 1


Child = TypeVar("Child", CounterTally, HistogramTally)
_T = TypeVar("_T")


class Tallied(Generic[Child]):
    """The series of one counter or histogram, found by their label values in a dict:
    label values are bounded (see the module docstring), so the dict is too. One
    without labels has its one series from the start, as the library's has."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        new_series: Callable[[], Child],
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.series: dict[tuple[str, ...], Child] = {}
        self._new_series: Callable[[], Child] = new_series
        if not self.labelnames:
            self.labels()

    def labels(self, *values: str) -> Child:
        series = self.series.get(values)
        if series is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name} takes labels {self.labelnames}, given {values}")
            series = self.series[values] = self._new_series()
        return series


class TalliedCounter(Tallied[CounterTally]):
    """A counter whose series are tallies; a collector of the registry, registered in
    the place the library's `Counter` would take."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        registry: CollectorRegistry,
    ) -> None:
        super().__init__(name, documentation, labelnames, CounterTally)
        registry.register(self)

    def describe(self) -> list[Metric]:
        """What the registry checks names against, without samples."""
        return [CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> list[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, series in self.series.items():
            created = series.created if CREATED_SERIES else None
            family.add_metric(values, series.value, created=created)
        return [family]


class TalliedHistogram(Tallied[HistogramTally]):
    """A histogram whose series are tallies; a collector of the registry, registered in
    the place the library's `Histogram` would take."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:
        bounds = [float(bound) for bound in buckets]
        if bounds[-1] != math.inf:
            bounds.append(math.inf)
        self.bounds = bounds
        # The `le` labels, as the library writes them (its function is not typed).
        self.bucket_names: list[str] = [floatToGoString(b) for b in bounds]  # type: ignore[no-untyped-call]
        super().__init__(name, documentation, labelnames, lambda: HistogramTally(bounds))
        registry.register(self)

    def describe(self) -> list[Metric]:
        """What the registry checks names against, without samples."""
        return [HistogramFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> list[Metric]:
        family = HistogramFamily(self.name, self.documentation, labels=self.labelnames)
        for values, series in self.series.items():
            cumulative, buckets = 0.0, []
            for name, count in zip(self.bucket_names, series.counts, strict=True):
                cumulative += count
                buckets.append((name, cumulative))
            created = series.created if CREATED_SERIES else None
            family.add_series(
                dict(zip(self.labelnames, values, strict=True)), buckets, series.total, created
            )
        return [family]


class HistogramFamily(HistogramMetricFamily):
    """The library's histogram family, with each series' `_created` sample, as its
    counter family has one (`CounterMetricFamily.add_metric(created=...)`) and its
    `Histogram` exposes one."""

    def add_series(
        self,
        labels: dict[str, str],
        buckets: list[tuple[str, float]],
        total: float,
        created: float | None,
    ) -> None:
        self.add_metric(list(labels.values()), buckets, total)
        if created is not None:
            self.samples.append(Sample(f"{self.name}_created", labels, created))


class Sized(Protocol):
    @property
    def size(self) -> int: ...

    def sessions_per_caller(self) -> Mapping[str, int]: ...


_FAST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_SLOW = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 600.0)


class Metrics:
    """Every metric of the gateway, registered in the order they are exposed."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._requests(self.registry)
        self._calls(self.registry)
        self._upstreams(self.registry)
        self._store_and_fleet(self.registry)

    def _requests(self, r: CollectorRegistry) -> None:
        """Client requests, rounds, resumes and forwards."""
        self.requests = TalliedCounter(
            "mrtr_requests",
            "Client requests by JSON-RPC method and outcome",
            ["method", "outcome"],
            registry=r,
        )
        self.request_seconds = TalliedHistogram(
            "mrtr_request_duration_seconds",
            "Whole client request",
            ["method"],
            buckets=_SLOW,
            registry=r,
        )
        self.upstream_seconds = TalliedHistogram(
            "mrtr_upstream_duration_seconds",
            "Plain upstream exchanges (request to response)",
            ["upstream", "method"],
            buckets=_FAST,
            registry=r,
        )
        self.round_seconds = TalliedHistogram(
            "mrtr_round_duration_seconds",
            "One round of an interruptible call: from the client request to input_required or the result",
            ["upstream", "outcome"],
            buckets=_SLOW,
            registry=r,
        )
        self.resume_seconds = TalliedHistogram(
            "mrtr_resume_duration_seconds",
            "A retry that resumed a parked call: from arrival to its outcome",
            ["upstream"],
            buckets=_SLOW,
            registry=r,
        )
        self.forward_seconds = TalliedHistogram(
            "mrtr_forward_duration_seconds",
            "A retry forwarded to the replica owning its call",
            buckets=_SLOW,
            registry=r,
        ).labels()

    def _calls(self, r: CollectorRegistry) -> None:
        """The calls, listens and tasks this replica holds, and how they end."""
        self.parked = Gauge(
            "mrtr_parked_calls", "Calls waiting for a client's answers on this replica", registry=r
        )
        self.live = Gauge(
            "mrtr_live_calls", "Calls whose upstream stream this replica holds", registry=r
        )
        self.listens = Gauge(
            "mrtr_listens", "subscriptions/listen streams open on this replica", registry=r
        )
        self.tasks = Gauge(
            "mrtr_tasks", "Tasks whose calls this replica runs (the tasks extension)", registry=r
        )
        self.task_endings = TalliedCounter(
            "mrtr_task_endings",
            "Tasks run here that ended, by status (completed, failed, cancelled, expired)",
            ["status"],
            registry=r,
        )
        self.lost = Gauge(
            "mrtr_parked_calls_lost",
            "Parked calls here whose upstream stream is gone: their retries are told so",
            registry=r,
        )
        self.rounds_per_call = TalliedHistogram(
            "mrtr_rounds_per_call",
            "Rounds a finished call needed",
            buckets=(0, 1, 2, 3, 4, 6, 8, 12, 16),
            registry=r,
        ).labels()
        self.state_refusals = TalliedCounter(
            "mrtr_request_state_refusals",
            "requestState refused, by reason",
            ["reason"],
            registry=r,
        )
        self.call_endings = TalliedCounter(
            "mrtr_call_endings",
            "Calls ended, by how (done, failed, expired, cancelled)",
            ["phase"],
            registry=r,
        )

    def _upstreams(self, r: CollectorRegistry) -> None:
        """Upstream sessions, their callers, their failures, and the dead's sessions ended."""
        self.upstream_sessions = Gauge(
            "mrtr_upstream_sessions", "Open upstream sessions", ["upstream"], registry=r
        )
        self.upstream_callers = Gauge(
            "mrtr_upstream_callers",
            "Callers holding upstream sessions (a session serves one caller)",
            ["upstream"],
            registry=r,
        )
        self.upstream_caller_sessions = Gauge(
            "mrtr_upstream_caller_sessions_max",
            "The most upstream sessions one caller holds, idle or in use",
            ["upstream"],
            registry=r,
        )
        self.upstream_errors = TalliedCounter(
            "mrtr_upstream_errors",
            "Upstream failures by kind: open (a session could not be opened), and during a "
            "request: failed (unreachable, or broke the protocol), timeout, exited (a stdio "
            "server), session_lost, credentials (the upstream's token endpoint)",
            ["upstream", "kind"],
            registry=r,
        )
        self.catalog_drift = TalliedCounter(
            "mrtr_catalog_drift",
            "Tool definitions seen that differ from their pins, by upstream and severity "
            "(high: a safety hint weakened)",
            ["upstream", "severity"],
            registry=r,
        )
        self.approvals = TalliedCounter(
            "mrtr_approvals",
            "Approvals the gateway asked a person for, by upstream and outcome (asked, "
            "approved, declined, remembered: covered by an earlier one)",
            ["upstream", "outcome"],
            registry=r,
        )
        self.orphaned_sessions = TalliedCounter(
            "mrtr_orphaned_sessions",
            "Upstream sessions of dead replicas that this one ended, by outcome "
            "(ended, gone, refused, failed)",
            ["upstream", "outcome"],
            registry=r,
        )

    def _store_and_fleet(self, r: CollectorRegistry) -> None:
        """The store's operations, the fleet's hand-offs, drains and lease."""
        self.store_seconds = TalliedHistogram(
            "mrtr_store_duration_seconds",
            "Suspended-call store operations",
            ["op"],
            buckets=_FAST,
            registry=r,
        )
        self.store_errors = TalliedCounter(
            "mrtr_store_errors", "Failed store operations", ["op"], registry=r
        )
        self.handoffs = TalliedCounter(
            "mrtr_fleet_handoffs",
            "Retries served away from the replica that parked their call, by how "
            "(forwarded, taken_over, replayed, lost, claimed_from_dead)",
            ["kind"],
            registry=r,
        )
        self.drain_timeouts = TalliedCounter(
            "mrtr_drain_timeouts", "Drains that ended with calls still held", registry=r
        ).labels()
        self.store_data_losses = TalliedCounter(
            "mrtr_store_data_losses",
            "Times the store was found empty (its records written back)",
            registry=r,
        ).labels()
        self.lease = Gauge(
            "mrtr_fleet_lease",
            "1 while this replica's heartbeat is surely in the store (it may serve its calls)",
            registry=r,
        )

    def bind(
        self,
        *,
        parked: Callable[[], int],
        live: Callable[[], int],
        pools: Mapping[str, Sized],
        lease: Callable[[], bool] = lambda: True,
        lost: Callable[[], int] = lambda: 0,
    ) -> None:
        """Gauges read at scrape time from the live objects (no bookkeeping on the hot path)."""
        self.lease.set_function(lambda: float(lease()))
        self.parked.set_function(lambda: float(parked()))
        self.live.set_function(lambda: float(live()))
        self.lost.set_function(lambda: float(lost()))
        for name in list(pools):
            self.upstream_sessions.labels(name).set_function(_size_of(pools, name))
            self.upstream_callers.labels(name).set_function(_callers_of(pools, name, len))
            self.upstream_caller_sessions.labels(name).set_function(
                _callers_of(pools, name, lambda held: max(held.values(), default=0))
            )

    async def timed_store(self, op: str, operation: Awaitable[_T]) -> _T:
        """What store operation `op` comes to (`operation`, awaited), timed, its failure
        counted, in a span when tracing. (Timed in place, not by a context manager: its
        `__enter__` and `__exit__` would be two calls from C into Python per operation.)"""
        started = time.perf_counter()
        try:
            if TRACING.enabled:
                with TRACING.span(f"store {op}"):
                    return await operation
            return await operation
        except Exception:
            self.store_errors.labels(op).inc()
            raise
        finally:
            self.store_seconds.labels(op).observe(time.perf_counter() - started)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _size_of(pools: Mapping[str, Sized], name: str) -> Callable[[], float]:
    return lambda: float(pools[name].size) if name in pools else 0.0


def _callers_of(
    pools: Mapping[str, Sized], name: str, read: Callable[[Mapping[str, int]], int]
) -> Callable[[], float]:
    return lambda: float(read(pools[name].sessions_per_caller())) if name in pools else 0.0
