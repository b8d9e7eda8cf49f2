"""Per-principal token buckets: a noisy caller waits, the others are served; memory and Redis."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from gateway.auth import Principal
from gateway.auth.ratelimit import (
    MemoryTokenBucket,
    RateDecision,
    RedisTokenBucket,
    retry_after_header,
)
from gateway.errors import StoreError
from gateway.store.redis_client import connect
from tests.auth.conftest import ManualWallClock
from tests.peers.tooling import RedisServer

ALICE = "jwt:https://as.example|alice"
BOB = "key:bob"


@pytest.fixture(params=["memory", "redis"])
async def limiter(
    request, redis_server: RedisServer, clock: ManualWallClock
) -> AsyncIterator[MemoryTokenBucket | RedisTokenBucket]:
    if request.param == "memory":
        yield MemoryTokenBucket(rate_per_s=0.5, burst=3, clock=clock)
        return
    client = connect(redis_server.url)
    yield RedisTokenBucket(
        client, rate_per_s=0.5, burst=3, clock=clock, prefix=f"t{uuid.uuid4().hex[:6]}:"
    )
    await client.aclose()


async def test_a_noisy_principal_is_told_when_to_retry_while_another_is_served(
    limiter, clock: ManualWallClock
) -> None:
    assert [await limiter.take(ALICE) for _ in range(3)] == [RateDecision(True)] * 3
    assert await limiter.take(ALICE) == RateDecision(False, 2.0)
    assert await limiter.take(BOB) == RateDecision(True)
    clock.advance(1)
    assert await limiter.take(ALICE) == RateDecision(False, 1.0)
    clock.advance(1)
    assert await limiter.take(ALICE) == RateDecision(True)
    assert await limiter.take(ALICE) == RateDecision(False, 2.0)


async def test_a_bucket_refills_only_up_to_its_burst(limiter, clock: ManualWallClock) -> None:
    await limiter.take(ALICE)
    clock.advance(3600)
    decisions = [await limiter.take(ALICE) for _ in range(4)]
    assert [d.allowed for d in decisions] == [True, True, True, False]


async def test_replicas_share_a_principals_bucket_through_redis(
    redis_server: RedisServer, clock: ManualWallClock
) -> None:
    client_a, client_b = connect(redis_server.url), connect(redis_server.url)
    prefix = f"t{uuid.uuid4().hex[:6]}:"
    a = RedisTokenBucket(client_a, rate_per_s=1, burst=2, clock=clock, prefix=prefix)
    b = RedisTokenBucket(client_b, rate_per_s=1, burst=2, clock=clock, prefix=prefix)
    try:
        assert (await a.take(ALICE)).allowed and (await b.take(ALICE)).allowed
        assert await a.take(ALICE) == RateDecision(False, 1.0)
        assert await b.take(ALICE) == RateDecision(False, 1.0)
        key = a.key(ALICE)
        assert "alice" not in key
        ttl_ms = await client_a.pttl(key)
        assert 0 < ttl_ms <= 3000  # gone once the bucket would be full again
    finally:
        await client_a.aclose()
        await client_b.aclose()


async def test_a_dead_redis_is_a_store_error(clock: ManualWallClock) -> None:
    from tests.peers.tooling import free_port

    client = connect(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.5)
    limiter = RedisTokenBucket(client, rate_per_s=1, burst=1, clock=clock)
    try:
        with pytest.raises(StoreError):
            await limiter.take(ALICE)
    finally:
        await client.aclose()


def test_memory_buckets_are_bounded(clock: ManualWallClock) -> None:
    limiter = MemoryTokenBucket(rate_per_s=1, burst=1, clock=clock, max_keys=2)
    for key in ("a", "b", "c"):
        assert limiter.take_now(key).allowed
    assert not limiter.take_now("c").allowed
    assert limiter.take_now("a").allowed  # evicted, so it starts full again


@pytest.mark.parametrize(("seconds", "header"), [(2.0, "2"), (2.01, "3"), (0.2, "1"), (0, "1")])
def test_retry_after_is_whole_seconds_rounded_up(seconds: float, header: str) -> None:
    assert retry_after_header(seconds) == header


@pytest.mark.parametrize(("rate", "burst"), [(0, 1), (-1, 1), (1, 0)])
def test_a_bucket_needs_a_positive_rate_and_burst(rate: float, burst: int) -> None:
    with pytest.raises(ValueError):
        MemoryTokenBucket(rate_per_s=rate, burst=burst)


async def test_a_spent_bucket_refuses_that_principal_only_and_says_when_to_come_back(
    limiter, clock: ManualWallClock
) -> None:
    alice = Principal.for_token("https://as.example", "alice").key
    bob = Principal.for_api_key("bob").key
    for _ in range(3):
        assert (await limiter.take(alice)).allowed
    refused = await limiter.take(alice)
    assert not refused.allowed
    assert retry_after_header(refused.retry_after_s) == "2"
    assert (await limiter.take(bob)).allowed
