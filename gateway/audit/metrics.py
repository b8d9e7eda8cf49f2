"""The audit trail's metrics, registered beside the gateway's own (`gateway.observability`).

`mrtr_audit_events_total{sink}` (events written), `mrtr_audit_dropped_total{sink}`
(events that will never be written: a sink's backlog full, a gateway stopping with some
still held, or, as `sink="trail"`, an event that could not be made), and
`mrtr_audit_backlog{sink}` (events held now). Sinks are `log`, `file` and `stream`.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Gauge

from gateway.observability import TalliedCounter


class AuditMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        registry = registry or CollectorRegistry(auto_describe=True)
        self.written = TalliedCounter(
            "mrtr_audit_events", "Audit events written, by sink", ["sink"], registry=registry
        )
        self.dropped = TalliedCounter(
            "mrtr_audit_dropped",
            "Audit events never written, by sink (a full backlog, a stop with events held)",
            ["sink"],
            registry=registry,
        )
        self._backlog = Gauge(
            "mrtr_audit_backlog",
            "Audit events a sink holds that it could not write yet",
            ["sink"],
            registry=registry,
        )

    def backlog(self, sink: str, size: Callable[[], int]) -> None:
        """Show what `sink` holds (read at scrape time)."""
        self._backlog.labels(sink).set_function(lambda: float(size()))
