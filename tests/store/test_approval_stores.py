"""The marks of approvals, in memory and in a real Redis: an approval is used once, however
many replicas try; a remembered approval is found until its time is up; a mark this release
cannot read is no approval."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator

import pytest

from gateway.store.approvals import MemoryApprovals, RedisApprovals
from gateway.store.redis_client import close_client, connect
from tests.fakes.clock import ManualClock
from tests.peers.tooling import RedisServer


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["memory", "redis"])
async def store(
    request: pytest.FixtureRequest, redis_server: RedisServer, clock: ManualClock
) -> AsyncIterator[MemoryApprovals | RedisApprovals]:
    if request.param == "memory":
        yield MemoryApprovals(clock)
        return
    client = connect(redis_server.url)
    yield RedisApprovals(client, prefix=f"t{uuid.uuid4().hex[:6]}:", clock=clock)
    await close_client(client)


async def test_an_approval_is_used_once_however_many_try_at_once(
    store: MemoryApprovals | RedisApprovals, clock: ManualClock
) -> None:
    until = clock.wall_ms() + 60_000
    tries = await asyncio.gather(*(store.use("a-1", until) for _ in range(8)))
    assert sorted(tries) == [False] * 7 + [True]
    assert await store.use("a-1", until) is False
    assert await store.use("a-2", until) is True  # another approval is its own


async def test_a_remembered_approval_is_found_and_only_under_its_key(
    store: MemoryApprovals | RedisApprovals,
) -> None:
    assert await store.remembered("k-1") is False
    await store.remember("k-1", 60)
    assert await store.remembered("k-1") is True
    assert await store.remembered("k-2") is False


async def test_in_memory_marks_end_with_their_time(clock: ManualClock) -> None:
    store = MemoryApprovals(clock)
    await store.remember("k", 10)
    assert await store.use("a", clock.wall_ms() + 5_000)
    clock.advance(11)
    assert await store.remembered("k") is False
    assert await store.use("a", clock.wall_ms() + 5_000)  # its state has expired by now


async def test_redis_marks_expire_by_themselves_and_an_unreadable_one_is_no_approval(
    redis_server: RedisServer, clock: ManualClock
) -> None:
    client = connect(redis_server.url)
    prefix = f"t{uuid.uuid4().hex[:6]}:"
    store = RedisApprovals(client, prefix=prefix, clock=clock)
    try:
        await store.remember("k", 30)
        await store.use("a", clock.wall_ms() + 20_000)
        assert 0 < await client.pttl(f"{prefix}approval:ok:k") <= 30_000
        assert 0 < await client.pttl(f"{prefix}approval:used:a") <= 20_000
        raw = await client.get(f"{prefix}approval:ok:k")
        assert json.loads(raw)["v"] == 1
        await client.set(f"{prefix}approval:ok:k", json.dumps({"v": 99, "what": "remembered"}))
        assert await store.remembered("k") is False
    finally:
        await close_client(client)
