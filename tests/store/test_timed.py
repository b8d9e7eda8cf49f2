"""Every store operation is timed, and a failing one counted, by op."""

from __future__ import annotations

import pytest

from gateway.errors import StoreError
from gateway.observability import Metrics
from gateway.store.base import Kept, TimedStore
from gateway.store.memory import MemoryStore
from tests.fakes.clock import ManualClock


class Unreachable(MemoryStore):
    async def delete(self, call_id: str, kept: Kept | None = None) -> None:
        raise StoreError("the store is unreachable")


def sample(metrics: Metrics, name: str, op: str) -> float:
    value = metrics.registry.get_sample_value(name, {"op": op})
    return 0.0 if value is None else value


async def test_each_operation_is_timed_and_a_failure_counted_by_op() -> None:
    metrics = Metrics()
    store = TimedStore(Unreachable(ManualClock()), metrics)
    assert await store.get("nothing") is None
    with pytest.raises(StoreError):
        await store.delete("nothing")
    assert sample(metrics, "mrtr_store_duration_seconds_count", "get") == 1
    assert sample(metrics, "mrtr_store_duration_seconds_count", "delete") == 1
    assert sample(metrics, "mrtr_store_errors_total", "get") == 0
    assert sample(metrics, "mrtr_store_errors_total", "delete") == 1
