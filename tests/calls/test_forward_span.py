"""The "mcp forward" span of a retry bound for another replica: it starts with the
message (whose trace context names it), and says whether the forward went ahead."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.calls.forwarding import Forward
from gateway.tracing import TRACING
from tests.fakes.fleet import Network
from tests.fakes.harness import call_tool
from tests.store.test_stores import record


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}
    TRACING.configure("test", "b", env, processor=SimpleSpanProcessor(exporter))
    try:
        yield exporter
    finally:
        TRACING.shutdown()
        TRACING.enabled = False


def test_a_forward_that_went_ahead_and_one_whose_claim_failed_say_which(
    exported: InMemorySpanExporter, network: Network
) -> None:
    bus = network.bus("b")
    sent = Forward(bus, call_tool(rid=2))
    assert "traceparent" in sent.delivery(record()).payload  # the owner's span's parent
    with sent.span():
        pass
    sent.close()
    refused = Forward(bus, call_tool(rid=3))
    refused.delivery(record())
    refused.close()  # its round was not claimed: it never went
    unsent = Forward(bus, call_tool(rid=4))
    unsent.delivery(record())
    with unsent.span():
        unsent.not_sent()  # claimed, but the owner was gone: takeover or replay instead
    unsent.close()
    spans = [(s.name, s.attributes["mcp.forwarded"]) for s in exported.get_finished_spans()]
    assert spans == [("mcp forward", True), ("mcp forward", False), ("mcp forward", False)]
