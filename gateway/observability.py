"""Prometheus metrics: one registry per application, exposed at `/metrics`.

Every name starts with `mrtr_`. What an operator watches at 3 a.m.: requests by
method and outcome, latency of the whole request, of upstream exchanges, of
rounds, of resumes and of cross-replica forwards, parked calls now, rounds per
call, requestState refusals by reason, expiries, upstream sessions and errors,
store latency and errors. Labels are bounded: methods come from the fixed set
of MCP methods, upstreams from the config, reasons from the code.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gateway.tracing import TRACING


class CounterTally:
    """A counter child counted in a plain float, added to its `prometheus_client` child
    when the registry is collected (`Tallies`): the real child's `inc` takes a lock and
    goes through a value class each time, the hot path counts a few things per request,
    and the gateway counts on its event loop's thread only."""

    __slots__ = ("child", "pending")

    def __init__(self, child: Counter) -> None:
        self.child = child
        self.pending = 0.0

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self.pending += amount

    def flush(self) -> None:
        if self.pending:
            self.child.inc(self.pending)
            self.pending = 0.0


class HistogramTally:
    """A histogram child observed into plain lists, added to its `prometheus_client`
    child when the registry is collected: an observation is a bisection and two
    additions, where the real child's takes a lock per bucket it walks past."""

    __slots__ = ("child", "bounds", "counts", "total", "dirty")

    def __init__(self, child: Histogram) -> None:
        self.child = child
        self.bounds: list[float] = list(child._upper_bounds)  # ends with +Inf
        self.counts = [0] * len(self.bounds)
        self.total = 0.0
        self.dirty = False

    def observe(self, amount: float) -> None:
        self.total += amount
        if amount == amount:  # NaN is in no bucket, as the real child has it
            self.counts[bisect_left(self.bounds, amount)] += 1
        self.dirty = True

    def flush(self) -> None:
        if not self.dirty:
            return
        buckets = self.child._buckets
        for i, count in enumerate(self.counts):
            if count:
                buckets[i].inc(count)
                self.counts[i] = 0
        self.child._sum.inc(self.total)
        self.total, self.dirty = 0.0, False


Tally = CounterTally | HistogramTally
T = TypeVar("T", CounterTally, HistogramTally)
C = TypeVar("C")


class Tallies:
    """Every tally of one registry, flushed into the real metrics whenever the registry
    is collected (a scrape, or `get_sample_value`): registered before any metric, so
    it runs first."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._tallies: list[Tally] = []
        registry.register(self)  # type: ignore[arg-type]

    def add(self, tally: T) -> T:
        self._tallies.append(tally)
        return tally

    def counter(self, metric: Counter) -> Labelled[CounterTally]:
        return Labelled(metric, lambda child: self.add(CounterTally(child)))

    def histogram(self, metric: Histogram) -> Labelled[HistogramTally]:
        return Labelled(metric, lambda child: self.add(HistogramTally(child)))

    def collect(self) -> list[object]:
        for tally in self._tallies:
            tally.flush()
        return []


class Labelled(Generic[C]):
    """A labelled metric whose children are found by their label values in a dict of
    their own: `prometheus_client`'s `labels` takes a lock and rebuilds the key on every
    call, and the hot path asks for a few children per request. Label values are
    bounded (see the module docstring), so the dict is too. A child is what `make`
    turns the metric's own child into: a tally for counters and histograms."""

    __slots__ = ("metric", "_make", "_children")

    def __init__(self, metric: Counter | Gauge | Histogram, make: Callable[[Any], C]) -> None:
        self.metric = metric
        self._make = make
        self._children: dict[tuple[str, ...], C] = {}

    def labels(self, *values: str) -> C:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._make(self.metric.labels(*values))
        return child


class Sized(Protocol):
    @property
    def size(self) -> int: ...


_FAST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_SLOW = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 600.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        t = Tallies(r)  # before every metric: a collection flushes the tallies first
        self.requests = t.counter(
            Counter(
                "mrtr_requests",
                "Client requests by JSON-RPC method and outcome",
                ["method", "outcome"],
                registry=r,
            )
        )
        self.request_seconds = t.histogram(
            Histogram(
                "mrtr_request_duration_seconds",
                "Whole client request",
                ["method"],
                buckets=_SLOW,
                registry=r,
            )
        )
        self.upstream_seconds = t.histogram(
            Histogram(
                "mrtr_upstream_duration_seconds",
                "Plain upstream exchanges (request to response)",
                ["upstream", "method"],
                buckets=_FAST,
                registry=r,
            )
        )
        self.round_seconds = t.histogram(
            Histogram(
                "mrtr_round_duration_seconds",
                "One round of an interruptible call: from the client request to input_required or the result",
                ["upstream", "outcome"],
                buckets=_SLOW,
                registry=r,
            )
        )
        self.resume_seconds = t.histogram(
            Histogram(
                "mrtr_resume_duration_seconds",
                "A retry that resumed a parked call: from arrival to its outcome",
                ["upstream"],
                buckets=_SLOW,
                registry=r,
            )
        )
        self.forward_seconds = Histogram(
            "mrtr_forward_duration_seconds",
            "A retry forwarded to the replica owning its call",
            buckets=_SLOW,
            registry=r,
        )
        self.parked = Gauge(
            "mrtr_parked_calls", "Calls waiting for a client's answers on this replica", registry=r
        )
        self.live = Gauge(
            "mrtr_live_calls", "Calls whose upstream stream this replica holds", registry=r
        )
        self.listens = Gauge(
            "mrtr_listens", "subscriptions/listen streams open on this replica", registry=r
        )
        self.lost = Gauge(
            "mrtr_parked_calls_lost",
            "Parked calls here whose upstream stream is gone: their retries are told so",
            registry=r,
        )
        self.rounds_per_call = t.add(
            HistogramTally(
                Histogram(
                    "mrtr_rounds_per_call",
                    "Rounds a finished call needed",
                    buckets=(0, 1, 2, 3, 4, 6, 8, 12, 16),
                    registry=r,
                )
            )
        )
        self.state_refusals = t.counter(
            Counter(
                "mrtr_request_state_refusals",
                "requestState refused, by reason",
                ["reason"],
                registry=r,
            )
        )
        self.call_endings = t.counter(
            Counter(
                "mrtr_call_endings",
                "Calls ended, by how (done, failed, expired, cancelled)",
                ["phase"],
                registry=r,
            )
        )
        self.upstream_sessions: Labelled[Gauge] = Labelled(
            Gauge("mrtr_upstream_sessions", "Open upstream sessions", ["upstream"], registry=r),
            lambda child: child,
        )
        self.upstream_errors = t.counter(
            Counter(
                "mrtr_upstream_errors",
                "Upstream failures (unreachable, protocol)",
                ["upstream"],
                registry=r,
            )
        )
        self.orphaned_sessions = t.counter(
            Counter(
                "mrtr_orphaned_sessions",
                "Upstream sessions of dead replicas that this one ended, by outcome "
                "(ended, gone, refused, failed)",
                ["upstream", "outcome"],
                registry=r,
            )
        )
        self.store_seconds = t.histogram(
            Histogram(
                "mrtr_store_duration_seconds",
                "Suspended-call store operations",
                ["op"],
                buckets=_FAST,
                registry=r,
            )
        )
        self.store_errors = t.counter(
            Counter("mrtr_store_errors", "Failed store operations", ["op"], registry=r)
        )
        self.handoffs = t.counter(
            Counter(
                "mrtr_fleet_handoffs",
                "Retries served away from the replica that parked their call, by how "
                "(forwarded, taken_over, replayed, lost, claimed_from_dead)",
                ["kind"],
                registry=r,
            )
        )
        self.drain_timeouts = Counter(
            "mrtr_drain_timeouts", "Drains that ended with calls still held", registry=r
        )
        self.store_data_losses = Counter(
            "mrtr_store_data_losses",
            "Times the store was found empty (its records written back)",
            registry=r,
        )
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

    def timed_store(self, op: str) -> StoreTimer:
        """Time a store operation (and count its failures), in a span when tracing."""
        return StoreTimer(self, op)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _size_of(pools: Mapping[str, Sized], name: str) -> Callable[[], float]:
    return lambda: float(pools[name].size) if name in pools else 0.0


class StoreTimer:
    """`Metrics.timed_store`: a plain context manager, for it wraps every store operation."""

    __slots__ = ("metrics", "op", "started", "span")

    def __init__(self, metrics: Metrics, op: str) -> None:
        self.metrics = metrics
        self.op = op
        self.span = TRACING.span(f"store {op}")
        self.started = 0.0

    async def __aenter__(self) -> None:
        self.started = time.perf_counter()
        self.span.__enter__()

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.span.__exit__(kind, error, tb)
        finally:
            if kind is not None and issubclass(kind, Exception):
                self.metrics.store_errors.labels(self.op).inc()
            self.metrics.store_seconds.labels(self.op).observe(time.perf_counter() - self.started)
