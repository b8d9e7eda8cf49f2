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
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Generic, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gateway.tracing import TRACING

M = TypeVar("M", Counter, Gauge, Histogram)


class Labelled(Generic[M]):
    """A labelled metric whose children are found by their label values in a dict of
    their own: `prometheus_client`'s `labels` takes a lock and rebuilds the key on every
    call, and the hot path asks for a few children per request. Label values are
    bounded (see the module docstring), so the dict is too."""

    __slots__ = ("metric", "_children")

    def __init__(self, metric: M) -> None:
        self.metric: M = metric
        self._children: dict[tuple[str, ...], M] = {}

    def labels(self, *values: str) -> M:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self.metric.labels(*values)
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
        self.requests = Labelled(
            Counter(
                "mrtr_requests",
                "Client requests by JSON-RPC method and outcome",
                ["method", "outcome"],
                registry=r,
            )
        )
        self.request_seconds = Labelled(
            Histogram(
                "mrtr_request_duration_seconds",
                "Whole client request",
                ["method"],
                buckets=_SLOW,
                registry=r,
            )
        )
        self.upstream_seconds = Labelled(
            Histogram(
                "mrtr_upstream_duration_seconds",
                "Plain upstream exchanges (request to response)",
                ["upstream", "method"],
                buckets=_FAST,
                registry=r,
            )
        )
        self.round_seconds = Labelled(
            Histogram(
                "mrtr_round_duration_seconds",
                "One round of an interruptible call: from the client request to input_required or the result",
                ["upstream", "outcome"],
                buckets=_SLOW,
                registry=r,
            )
        )
        self.resume_seconds = Labelled(
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
        self.lost = Gauge(
            "mrtr_parked_calls_lost",
            "Parked calls here whose upstream stream is gone: their retries are told so",
            registry=r,
        )
        self.rounds_per_call = Histogram(
            "mrtr_rounds_per_call",
            "Rounds a finished call needed",
            buckets=(0, 1, 2, 3, 4, 6, 8, 12, 16),
            registry=r,
        )
        self.state_refusals = Labelled(
            Counter(
                "mrtr_request_state_refusals",
                "requestState refused, by reason",
                ["reason"],
                registry=r,
            )
        )
        self.call_endings = Labelled(
            Counter(
                "mrtr_call_endings",
                "Calls ended, by how (done, failed, expired, cancelled)",
                ["phase"],
                registry=r,
            )
        )
        self.upstream_sessions = Labelled(
            Gauge("mrtr_upstream_sessions", "Open upstream sessions", ["upstream"], registry=r)
        )
        self.upstream_errors = Labelled(
            Counter(
                "mrtr_upstream_errors",
                "Upstream failures (unreachable, protocol)",
                ["upstream"],
                registry=r,
            )
        )
        self.orphaned_sessions = Labelled(
            Counter(
                "mrtr_orphaned_sessions",
                "Upstream sessions of dead replicas that this one ended, by outcome "
                "(ended, gone, refused, failed)",
                ["upstream", "outcome"],
                registry=r,
            )
        )
        self.store_seconds = Labelled(
            Histogram(
                "mrtr_store_duration_seconds",
                "Suspended-call store operations",
                ["op"],
                buckets=_FAST,
                registry=r,
            )
        )
        self.store_errors = Labelled(
            Counter("mrtr_store_errors", "Failed store operations", ["op"], registry=r)
        )
        self.handoffs = Labelled(
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
