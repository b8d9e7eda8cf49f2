"""Per-principal rate limits: a token bucket in memory or on Redis, one interface.

Each principal key (`Principal.key`) has a bucket of `burst` tokens refilled at
`rate_per_s`. `take(key)` spends one: allowed, or the seconds until a token is
back (for `Retry-After`, see `retry_after_header`); the front door turns a refusal
into `RateLimited` (429). Both read an injected wall clock, so refill is tested
without sleeping.

- `MemoryTokenBucket`: one replica's view; at most `max_keys` buckets (least
  recently used evicted: an evicted caller starts again with a full bucket).
- `RedisTokenBucket`: shared by the fleet; one Lua script per `take` (one round
  trip) reads, refills, spends and writes the bucket atomically, and expires it
  once it would be full again. The key is a hash of the principal, so subjects
  never appear in Redis. Redis errors become `StoreError` (503).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

from gateway.auth.ports import WallClock
from gateway.errors import StoreError
from gateway.store.redis_client import RedisClient, from_redis


@dataclass(frozen=True, slots=True)
class RateDecision:
    allowed: bool
    retry_after_s: float = 0.0  # 0 when allowed


class RateLimiter(Protocol):
    async def take(self, key: str) -> RateDecision:
        """Spend one token of `key`'s bucket, if there is one.

        Raises:
            StoreError: the shared store failed (Redis only).
        """
        ...


def retry_after_header(seconds: float) -> str:
    """`Retry-After` in whole seconds, rounded up, at least 1."""
    return str(max(1, math.ceil(seconds)))


def _check(rate_per_s: float, burst: int) -> None:
    if not rate_per_s > 0:
        raise ValueError("rate_per_s must be positive")
    if burst < 1:
        raise ValueError("burst must be at least 1")


class MemoryTokenBucket:
    """Token buckets in this process."""

    def __init__(
        self,
        *,
        rate_per_s: float,
        burst: int,
        clock: WallClock = time.time,
        max_keys: int = 100_000,
    ) -> None:
        _check(rate_per_s, burst)
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._clock = clock
        self._max_keys = max_keys
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, at

    def take_now(self, key: str) -> RateDecision:
        """`take` without awaiting."""
        now = self._clock()
        tokens, at = self._buckets.get(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + max(0.0, now - at) * self.rate_per_s)
        if tokens >= 1.0:
            decision = RateDecision(True)
            tokens -= 1.0
        else:
            decision = RateDecision(False, (1.0 - tokens) / self.rate_per_s)
        self._buckets[key] = (tokens, max(now, at))
        self._buckets.move_to_end(key)
        while len(self._buckets) > self._max_keys:
            self._buckets.popitem(last=False)
        return decision

    async def take(self, key: str) -> RateDecision:
        return self.take_now(key)


# KEYS[1] the bucket; ARGV rate per second, burst, now (seconds), ttl (ms).
# Returns {allowed (0/1), seconds to wait as a string} (Lua numbers become
# integers in replies, so the fraction travels as text).
_TAKE = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1])
local at = tonumber(state[2])
if tokens == nil or at == nil then
  tokens = burst
  at = now
end
if now > at then
  tokens = math.min(burst, tokens + (now - at) * rate)
  at = now
end
local allowed = 0
local wait = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
else
  wait = (1 - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens),
           'at', string.format('%.17g', at))
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {allowed, string.format('%.17g', wait)}
"""


class RedisTokenBucket:
    """Token buckets shared by every replica through Redis."""

    def __init__(
        self,
        client: RedisClient,
        *,
        rate_per_s: float,
        burst: int,
        clock: WallClock = time.time,
        prefix: str = "mrtr:rl:",
    ) -> None:
        _check(rate_per_s, burst)
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._client = client
        self._clock = clock
        self._prefix = prefix
        self._script = client.register_script(_TAKE)
        # Keep a bucket until it would be full again, plus a margin.
        self._ttl_ms = math.ceil(burst / rate_per_s * 1000) + 1000

    def key(self, principal_key: str) -> str:
        return self._prefix + hashlib.sha256(principal_key.encode()).hexdigest()[:32]

    async def take(self, key: str) -> RateDecision:
        args: list[str | int] = [
            repr(float(self.rate_per_s)),
            self.burst,
            repr(self._clock()),
            self._ttl_ms,
        ]
        try:
            allowed, wait = await self._script(keys=[self.key(key)], args=args)
        except Exception as exc:
            if not from_redis(exc):
                raise
            raise StoreError(f"Redis rate limit: {type(exc).__name__}: {exc}") from exc
        if int(allowed) == 1:
            return RateDecision(True)
        if isinstance(wait, bytes):
            wait = wait.decode()
        return RateDecision(False, float(wait))
