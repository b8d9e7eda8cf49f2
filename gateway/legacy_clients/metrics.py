"""The legacy lane's metrics, registered beside the gateway's own (`gateway.observability`).

Families of their own, so that the 2026 lane's series stay exactly as they were:
`mrtr_legacy_requests_total{method,outcome}` and `mrtr_legacy_request_duration_seconds{method}`
(one per POST, methods from a fixed set, others counted as "other"), the GET streams open
on this replica, the stdio and HTTP+SSE sessions it holds per upstream, and session ids
refused by reason (reasons come from the code).
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import Gauge

from gateway.observability import Metrics, TalliedCounter, TalliedHistogram


class LaneMetrics:
    def __init__(self, metrics: Metrics, streams: Callable[[], int]) -> None:
        registry = metrics.registry
        # The gateway's own family: an upstream's failures counted alike in both lanes.
        self.upstream_errors = metrics.upstream_errors
        self.requests = TalliedCounter(
            "mrtr_legacy_requests",
            "Legacy (2025) client POSTs by JSON-RPC method and outcome",
            ["method", "outcome"],
            registry=registry,
        )
        self.request_seconds = TalliedHistogram(
            "mrtr_legacy_request_duration_seconds",
            "Whole legacy client POST (to the end of its stream)",
            ["method"],
            buckets=metrics.request_seconds.bounds,
            registry=registry,
        )
        self.refusals = TalliedCounter(
            "mrtr_legacy_session_refusals",
            "Legacy session ids refused (404), by reason",
            ["reason"],
            registry=registry,
        )
        self.streams = Gauge(
            "mrtr_legacy_streams", "Legacy GET streams open on this replica", registry=registry
        )
        self.streams.set_function(lambda: float(streams()))
        self._bound = Gauge(
            "mrtr_legacy_bound_sessions",
            "Legacy sessions of stdio and HTTP+SSE upstreams held on this replica",
            ["upstream"],
            registry=registry,
        )

    def bound_sessions(self, upstream: str, sessions: Callable[[], int]) -> None:
        """Count the sessions this replica holds of `upstream` (a stdio or HTTP+SSE one)."""
        self._bound.labels(upstream).set_function(lambda: float(sessions()))
