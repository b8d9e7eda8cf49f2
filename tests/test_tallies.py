"""Counters and histograms tallied on the hot path read, once scraped, exactly what
`prometheus_client`'s own `Counter` and `Histogram` would have read, and are read
through the library's public collector interface only."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from gateway.observability import Metrics, TalliedCounter, TalliedHistogram

BUCKETS = (0.001, 0.01, 0.1, 1.0)
VALUES = [0.0, 0.001, 0.0010001, 0.01, 0.05, 1.0, 1.5, 1e9, -3.0, math.inf, 0.1, 0.1]
GATEWAY = Path(__file__).resolve().parents[1] / "gateway"


def exposition(registry: CollectorRegistry) -> list[str]:
    """The lines, but the values of the `_created` ones (a time, different in each registry)."""
    return [
        line.rsplit(" ", 1)[0] if "_created" in line and not line.startswith("#") else line
        for line in generate_latest(registry).decode().splitlines()
    ]


def test_a_tallied_histogram_scrapes_as_the_real_one_does() -> None:
    plain, tallied = CollectorRegistry(), CollectorRegistry(auto_describe=True)
    real = Histogram("h_seconds", "h", ["op"], buckets=BUCKETS, registry=plain)
    tally = TalliedHistogram("h_seconds", "h", ["op"], buckets=BUCKETS, registry=tallied)
    for i, value in enumerate(VALUES):
        real.labels(f"op{i % 2}").observe(value)
        tally.labels(f"op{i % 2}").observe(value)
    assert exposition(tallied) == exposition(plain)
    assert 'h_seconds_bucket{le="0.001",op="op0"} 2.0' in exposition(tallied)
    assert 'h_seconds_created{op="op1"}' in exposition(tallied)


def test_a_histogram_without_labels_is_exposed_before_its_first_observation() -> None:
    plain, tallied = CollectorRegistry(), CollectorRegistry(auto_describe=True)
    Histogram("n", "n", buckets=BUCKETS, registry=plain)
    TalliedHistogram("n", "n", buckets=BUCKETS, registry=tallied)
    assert exposition(tallied) == exposition(plain)
    assert "n_count 0.0" in exposition(tallied)


def test_a_nan_is_in_no_bucket_but_in_the_sum_as_before() -> None:
    plain, tallied = CollectorRegistry(), CollectorRegistry(auto_describe=True)
    real = Histogram("n", "n", buckets=BUCKETS, registry=plain)
    tally = TalliedHistogram("n", "n", buckets=BUCKETS, registry=tallied).labels()
    real.observe(math.nan)
    tally.observe(math.nan)
    lines = exposition(tallied)
    assert lines == exposition(plain)
    assert [line.split()[-1] for line in lines if "_bucket" in line] == ["0.0"] * 5
    assert any(line.startswith("n_sum") and line.endswith("NaN") for line in lines)


def test_a_tallied_counter_counts_once_across_scrapes_and_refuses_to_go_down() -> None:
    plain, tallied = CollectorRegistry(), CollectorRegistry(auto_describe=True)
    real = Counter("c", "c", ["k"], registry=plain)
    tally = TalliedCounter("c", "c", ["k"], registry=tallied)
    for amount in (1, 1, 2.5):
        real.labels("a").inc(amount)
        tally.labels("a").inc(amount)
    assert exposition(tallied) == exposition(plain)
    assert exposition(tallied) == exposition(plain)  # a second scrape adds nothing
    tally.labels("a").inc()
    real.labels("a").inc()
    assert exposition(tallied) == exposition(plain)
    assert 'c_total{k="a"} 5.5' in exposition(tallied)
    with pytest.raises(ValueError):
        tally.labels("a").inc(-1)


def test_a_tallied_metric_refuses_the_wrong_labels_and_a_name_taken_already() -> None:
    registry = CollectorRegistry(auto_describe=True)
    counter = TalliedCounter("c", "c", ["k"], registry=registry)
    with pytest.raises(ValueError):
        counter.labels("a", "b")
    with pytest.raises(ValueError):  # its names are registered as the library's would be
        Counter("c", "again", registry=registry)
    with pytest.raises(ValueError):
        TalliedHistogram("c", "again", buckets=BUCKETS, registry=registry)


def test_the_gateways_own_metrics_are_read_by_any_collection() -> None:
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


def private_reads(tree: ast.AST) -> set[str]:
    """Private names a module reads off anything but `self`, and those it imports from
    `prometheus_client`: in a module that uses the library, such a read may be of the
    library's fields (`child._buckets`), which change without notice."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            on_self = isinstance(node.value, ast.Name) and node.value.id == "self"
            if not on_self and not node.attr.startswith("__"):
                found.add(node.attr)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("prometheus"):
            found.update(alias.name for alias in node.names if alias.name.startswith("_"))
    return found


def test_the_reads_of_private_names_are_found() -> None:
    tree = ast.parse("from prometheus_client.metrics import _use_created\nchild._buckets[0]")
    assert private_reads(tree) == {"_use_created", "_buckets"}
    assert private_reads(ast.parse("self._series.get(k)")) == set()


def test_no_module_of_the_gateway_reads_a_private_name_of_prometheus_client() -> None:
    offenders = {}
    for path in GATEWAY.rglob("*.py"):
        source = path.read_text()
        if "prometheus_client" in source and (names := private_reads(ast.parse(source))):
            offenders[str(path.relative_to(GATEWAY))] = names
    assert offenders == {}
