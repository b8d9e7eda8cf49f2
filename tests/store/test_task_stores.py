"""Where tasks' records are kept: in this process, or in Redis (a real `redis-server`)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from structlog.testing import capture_logs

from gateway.store.redis_client import close_client, connect
from gateway.store.tasks import MemoryTaskStore, RedisTaskStore
from tests.fakes.clock import ManualClock
from tests.peers.tooling import RedisServer


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["memory", "redis"])
async def store(
    request, redis_server: RedisServer, clock: ManualClock
) -> AsyncIterator[MemoryTaskStore | RedisTaskStore]:
    if request.param == "memory":
        yield MemoryTaskStore(clock)
        return
    client = connect(redis_server.url)
    yield RedisTaskStore(client, prefix=f"t{uuid.uuid4().hex[:6]}:", clock=clock)
    await close_client(client)


async def test_a_record_is_kept_until_its_expiry_then_forgotten(store, clock) -> None:
    now = clock.wall_ms()
    await store.put("task-a", "tk1.sealed-1", now + 60_000, final=False, owner="r1")
    await store.put(
        "task-a", "tk1.sealed-2", now + 60_000, final=False, owner="r1"
    )  # rewritten whole
    assert await store.get("task-a") == "tk1.sealed-2"
    assert await store.get("task-b") is None
    await store.put(
        "task-a", "tk1.sealed-3", now - 1, final=False, owner="r1"
    )  # past its expiry: gone
    assert await store.get("task-a") is None


async def test_a_record_written_final_is_never_written_again(store, clock) -> None:
    """A replica that ended a task (its owner taken for dead) has the last word: the
    owner, only cut off, cannot write the task back to life."""
    expires = clock.wall_ms() + 60_000
    assert await store.put("task-a", "tk1.working", expires, final=False, owner="r1")
    assert await store.put("task-a", "tk1.failed", expires, final=True, owner="r1")
    assert not await store.put("task-a", "tk1.completed", expires, final=True, owner="r1")
    assert not await store.put("task-a", "tk1.working", expires, final=False, owner="r1")
    assert await store.get("task-a") == "tk1.failed"
    assert not await store.take("task-a", "r1", "r2")


async def test_only_the_owner_writes_and_a_task_is_taken_once_from_its_owner(store, clock) -> None:
    expires = clock.wall_ms() + 60_000
    assert await store.put("task-a", "tk1.r1", expires, final=False, owner="r1")
    assert not await store.take("task-a", "r9", "r2")  # not its owner
    assert await store.take("task-a", "r1", "r2")
    assert not await store.take("task-a", "r1", "r3")  # taken already
    assert not await store.put("task-a", "tk1.r1-late", expires, final=False, owner="r1")
    assert await store.put("task-a", "tk1.r2", expires, final=False, owner="r2")
    assert await store.get("task-a") == "tk1.r2"
    assert not await store.take("task-b", "r1", "r2")  # no such task


async def test_memory_records_expire_with_the_clock(clock) -> None:
    store = MemoryTaskStore(clock)
    await store.put("task-a", "tk1.x", clock.wall_ms() + 1_000, final=False, owner="r1")
    clock.advance(0.999)
    assert await store.get("task-a") == "tk1.x"
    clock.advance(0.002)
    assert await store.get("task-a") is None


async def test_redis_expires_a_record_with_the_task(redis_server: RedisServer, clock) -> None:
    client = connect(redis_server.url)
    store = RedisTaskStore(client, prefix=f"t{uuid.uuid4().hex[:6]}:", clock=clock)
    try:
        await store.put("task-a", "tk1.x", clock.wall_ms() + 30_000, final=False, owner="r1")
        ttl_ms = await client.pttl(store.key("task-a"))
        assert 25_000 < ttl_ms <= 30_000
    finally:
        await close_client(client)


async def test_a_write_waits_for_the_replicas_asked_and_says_when_they_lack(
    redis_server: RedisServer, clock
) -> None:
    """A standalone server has no replica: WAIT answers 0 at its bound; the record is
    written all the same, and the shortfall logged."""
    client = connect(redis_server.url)
    store = RedisTaskStore(
        client, prefix=f"t{uuid.uuid4().hex[:6]}:", clock=clock, replicas_acked=1, wait_ms=10
    )
    try:
        with capture_logs() as logs:
            await store.put("task-a", "tk1.x", clock.wall_ms() + 30_000, final=False, owner="r1")
        assert await store.get("task-a") == "tk1.x"
        assert [e for e in logs if e["event"] == "task_write_not_replicated"] == [
            {"event": "task_write_not_replicated", "acked": 0, "wanted": 1, "log_level": "warning"}
        ]
    finally:
        await close_client(client)
