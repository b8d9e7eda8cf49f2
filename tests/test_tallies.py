"""Counters and histograms tallied on the hot path read, once scraped, exactly what
`prometheus_client`'s own children would have read."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from gateway.observability import Metrics, Tallies

BUCKETS = (0.001, 0.01, 0.1, 1.0)
VALUES = [0.0, 0.001, 0.0010001, 0.01, 0.05, 1.0, 1.5, 1e9, -3.0, math.inf, 0.1, 0.1]


def exposition(registry: CollectorRegistry) -> list[str]:
    """The sample lines, without the `_created` ones (a time, different in each registry)."""
    return [
        line
        for line in generate_latest(registry).decode().splitlines()
        if not line.startswith("#") and "_created" not in line
    ]


def pair() -> tuple[CollectorRegistry, CollectorRegistry, Tallies]:
    tallied = CollectorRegistry(auto_describe=True)
    return CollectorRegistry(auto_describe=True), tallied, Tallies(tallied)


def test_a_tallied_histogram_scrapes_as_the_real_one_does() -> None:
    plain, tallied, tallies = pair()
    real = Histogram("h_seconds", "h", ["op"], buckets=BUCKETS, registry=plain)
    labelled = tallies.histogram(
        Histogram("h_seconds", "h", ["op"], buckets=BUCKETS, registry=tallied)
    )
    for i, value in enumerate(VALUES):
        real.labels(f"op{i % 2}").observe(value)
        labelled.labels(f"op{i % 2}").observe(value)
    assert exposition(tallied) == exposition(plain)
    assert 'h_seconds_bucket{le="0.001",op="op0"} 2.0' in exposition(tallied)


def test_a_nan_is_in_no_bucket_but_in_the_sum_as_before() -> None:
    plain, tallied, tallies = pair()
    real = Histogram("n", "n", buckets=BUCKETS, registry=plain)
    tally = tallies.histogram(Histogram("n", "n", ["x"], buckets=BUCKETS, registry=tallied))
    real.observe(math.nan)
    tally.labels("a").observe(math.nan)
    lines = exposition(tallied)
    assert [line.split()[-1] for line in lines if "_bucket" in line] == ["0.0"] * 5
    assert [line for line in exposition(plain) if "_bucket" in line][-1].endswith(" 0.0")
    assert any(line.startswith("n_sum") and line.endswith("NaN") for line in lines)


def test_a_tallied_counter_counts_once_across_scrapes_and_refuses_to_go_down() -> None:
    plain, tallied, tallies = pair()
    real = Counter("c", "c", ["k"], registry=plain)
    labelled = tallies.counter(Counter("c", "c", ["k"], registry=tallied))
    for amount in (1, 1, 2.5):
        real.labels("a").inc(amount)
        labelled.labels("a").inc(amount)
    assert exposition(tallied) == exposition(plain)
    assert exposition(tallied) == exposition(plain)  # a second scrape adds nothing
    labelled.labels("a").inc()
    real.labels("a").inc()
    assert exposition(tallied) == exposition(plain) == ['c_total{k="a"} 5.5']
    with pytest.raises(ValueError):
        labelled.labels("a").inc(-1)


def test_the_gateways_own_metrics_are_flushed_by_any_collection() -> None:
    metrics = Metrics()
    metrics.requests.labels("tools/call", "complete").inc()
    metrics.rounds_per_call.observe(2)
    metrics.request_seconds.labels("tools/call").observe(0.02)
    sample = metrics.registry.get_sample_value  # a collection like a scrape
    assert sample("mrtr_requests_total", {"method": "tools/call", "outcome": "complete"}) == 1
    assert sample("mrtr_rounds_per_call_bucket", {"le": "2.0"}) == 1
    assert sample("mrtr_rounds_per_call_bucket", {"le": "1.0"}) == 0
    assert sample("mrtr_request_duration_seconds_count", {"method": "tools/call"}) == 1
    assert b'mrtr_requests_total{method="tools/call",outcome="complete"} 1.0' in metrics.render()
