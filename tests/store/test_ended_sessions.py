"""The marks of ended sessions (an endpoint's 2025 sessions), in memory and in a real
Redis: a session is ended once marked, and only that one; the mark lasts as long as the
session's id would have; in Redis it is versioned and expires by itself."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

import pytest

from gateway.protocol import formats
from gateway.protocol.formats import Kind
from gateway.store.ended import MemoryEndedSessions, RedisEndedSessions
from gateway.store.redis_client import close_client, connect
from tests.fakes.clock import ManualClock
from tests.peers.tooling import RedisServer


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["memory", "redis"])
async def store(
    request: pytest.FixtureRequest, redis_server: RedisServer, clock: ManualClock
) -> AsyncIterator[MemoryEndedSessions | RedisEndedSessions]:
    if request.param == "memory":
        yield MemoryEndedSessions(clock)
        return
    client = connect(redis_server.url)
    yield RedisEndedSessions(client, prefix=f"t{uuid.uuid4().hex[:6]}:", clock=clock)
    await close_client(client)


async def test_a_session_is_ended_once_marked_and_only_that_one(
    store: MemoryEndedSessions | RedisEndedSessions, clock: ManualClock
) -> None:
    assert await store.ended("d-1") is False
    await store.end("d-1", clock.wall_ms() + 60_000)
    assert await store.ended("d-1") is True
    assert await store.ended("d-2") is False


async def test_in_memory_a_mark_lasts_until_the_session_would_have_expired(
    clock: ManualClock,
) -> None:
    store = MemoryEndedSessions(clock)
    await store.end("d-1", clock.wall_ms() + 5_000)
    clock.advance(4)
    assert await store.ended("d-1") is True
    clock.advance(2)
    assert await store.ended("d-1") is False


async def test_in_redis_a_mark_is_versioned_and_expires_with_the_session(
    redis_server: RedisServer, clock: ManualClock
) -> None:
    client = connect(redis_server.url)
    prefix = f"t{uuid.uuid4().hex[:6]}:"
    try:
        store = RedisEndedSessions(client, prefix=prefix, clock=clock)
        await store.end("d-1", clock.wall_ms() + 5_000)
        key = f"{prefix}endpoint-session:ended:d-1"
        raw = await client.get(key)
        version, _ = formats.unstamped(Kind.ENDED_SESSION, json.loads(raw))
        assert version == formats.written(Kind.ENDED_SESSION, formats.LEVEL)
        assert 0 < await client.pttl(key) <= 5_000
    finally:
        await close_client(client)
