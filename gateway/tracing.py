"""OpenTelemetry traces, when configured: a request, its rounds, forwards between
replicas, takeovers and store calls, exported over OTLP/HTTP.

Optional: the `otel` extra installs the SDK and exporter, and the standard variable
`OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) turns tracing
on. Without either, every `span` is a no-op costing one attribute check. A client's W3C
`traceparent` (from `_meta` or the headers) is the parent of the request's span, and a
forwarded retry carries its context to the owner, so one multi-round call across
replicas is one trace. Span attributes never carry requestState, tokens or arguments.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import structlog

_NO_SPAN = nullcontext()

log = structlog.get_logger("gateway.tracing")

ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


class Tracing:
    """The process's tracer, or nothing (`enabled` False)."""

    def __init__(self) -> None:
        self.enabled = False
        self._tracer: Any = None
        self._provider: Any = None
        self._propagator: Any = None

    def configure(
        self,
        service: str,
        replica: str,
        env: Mapping[str, str] = os.environ,
        processor: Any = None,
    ) -> None:
        """`processor`: where spans go (a batch to the OTLP exporter unless given)."""
        if not any(env.get(name) for name in ENDPOINT_VARS):
            return
        try:
            from opentelemetry import trace
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.trace.propagation.tracecontext import (
                TraceContextTextMapPropagator,
            )
        except ImportError:
            log.warning(
                "tracing_unavailable",
                detail="OTEL_EXPORTER_OTLP_ENDPOINT is set but the otel extra is not "
                "installed: pip install 'mrtr-gateway[otel]'",
            )
            return
        resource = Resource.create({"service.name": service, "service.instance.id": replica})
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(processor or BatchSpanProcessor(OTLPSpanExporter()))
        self._provider = provider
        self._tracer = provider.get_tracer("mrtr-gateway")
        self._propagator = TraceContextTextMapPropagator()
        self._kinds = {
            "server": trace.SpanKind.SERVER,
            "client": trace.SpanKind.CLIENT,
            "internal": trace.SpanKind.INTERNAL,
        }
        self.enabled = True
        log.info("tracing_enabled", replica=replica)

    def span(
        self,
        name: str,
        *,
        parent: Mapping[str, str] | None = None,
        kind: str = "internal",
        attributes: Mapping[str, Any] | None = None,
    ) -> AbstractContextManager[object]:
        """A span around the block, child of the current one or of `parent` (W3C
        trace context); an exception raised through it is recorded. Without tracing,
        a shared do-nothing context (a request pays nothing for it)."""
        if not self.enabled:
            return _NO_SPAN
        context = self._propagator.extract(dict(parent)) if parent else None
        span: AbstractContextManager[object] = self._tracer.start_as_current_span(
            name,
            context=context,
            kind=self._kinds[kind],
            attributes={k: v for k, v in (attributes or {}).items() if v is not None},
        )
        return span

    def begin(
        self, name: str, *, kind: str = "internal", attributes: Mapping[str, Any] | None = None
    ) -> Begun:
        """A span started now, child of the current one, whose context can be sent along
        before the block it times is entered (`Begun.entered`)."""
        if not self.enabled:
            return Begun(None, {})
        from opentelemetry import trace

        span = self._tracer.start_span(
            name,
            kind=self._kinds[kind],
            attributes={k: v for k, v in (attributes or {}).items() if v is not None},
        )
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=trace.set_span_in_context(span))
        return Begun(span, carrier)

    def shutdown(self) -> None:
        """Export what is buffered (bounded by the SDK's own timeouts)."""
        if self._provider is not None:
            self._provider.shutdown()


class Begun:
    """A span `Tracing.begin` started: its context (`carrier`), entered once as the
    current span and ended as the block leaves, or ended unentered by `end`."""

    __slots__ = ("_span", "_used", "carrier")

    def __init__(self, span: Any, carrier: dict[str, str]) -> None:
        self._span = span
        self._used = span is None  # entered or ended: it can be neither again
        self.carrier = carrier

    def entered(self) -> AbstractContextManager[object]:
        if self._used:
            return _NO_SPAN
        from opentelemetry import trace

        self._used = True
        return trace.use_span(self._span, end_on_exit=True, record_exception=True)

    def set(self, **attributes: Any) -> None:
        """Add attributes (None values are left out), until the span has ended."""
        if self._span is not None:
            self._span.set_attributes({k: v for k, v in attributes.items() if v is not None})

    def end(self, **attributes: Any) -> None:
        """End it if it was never entered (the work it was begun for did not happen),
        with `attributes` that say so."""
        if not self._used:
            self._used = True
            self.set(**attributes)
            self._span.end()


TRACING = Tracing()
