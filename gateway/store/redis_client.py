"""Reaching Redis: a client for a store URL, and riding out a moment it cannot be reached.

URLs: `redis://[:password@]host:port/db`, `rediss://...` (TLS), `unix:///path?db=0`,
`redis+sentinel://host:port[,host:port]/service[/db]`, `redis+cluster://host:port`.
The store (`gateway.store.redis`), the fleet's bus and the rate limiter share it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import redis
import redis.asyncio as aioredis
import structlog
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import ExponentialBackoff
from redis.exceptions import (
    BusyLoadingError,
    ClusterDownError,
    MasterDownError,
    ReadOnlyError,
    RedisError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway import clock as clocks
from gateway.clock import Clock
from gateway.errors import ConfigError, StoreError

T = TypeVar("T")
log = structlog.get_logger("gateway.store")

RedisClient = aioredis.Redis | RedisCluster

#: How long a store or bus operation rides out an unreachable Redis (a restart, a
#: failover) before it fails: a client sees no error for an outage shorter than this.
RIDE_OUT_S = 3.0
# What a restart, a Sentinel failover (a demoted primary is read-only for a moment) or
# a Cluster failover (slots uncovered until a replica takes them) look like.
_OUTAGE = (
    RedisConnectionError,
    RedisTimeoutError,
    BusyLoadingError,
    TryAgainError,
    ClusterDownError,
    MasterDownError,
    ReadOnlyError,
    SlotNotCoveredError,
    OSError,
)


async def ride_out(clock: Clock, op: Callable[[], Awaitable[T]], budget_s: float = RIDE_OUT_S) -> T:
    """Run `op`, trying again while Redis cannot be reached, for up to `budget_s`.

    Every operation given here may run twice (its first reply lost with a dropped
    connection): each is idempotent, or its duplicate is harmless (see the callers).

    Raises:
        StoreError: Redis refused the operation, or stayed unreachable.
    """
    give_up = clock.monotonic() + budget_s
    delay = 0.05
    while True:
        try:
            return await op()
        except _OUTAGE as exc:
            if clock.monotonic() + delay > give_up:
                raise StoreError(f"Redis unreachable for {budget_s:g} s: {exc}") from exc
            log.info("store_unreachable_retrying", error=str(exc), retry_in_s=delay)
        except RedisError as exc:
            raise StoreError(f"Redis: {type(exc).__name__}: {exc}") from exc
        except Exception as exc:
            # The client itself failing mid topology change (a Cluster failover has been
            # seen to leave redis-py's slot table half-built, whatever the exception type):
            # an outage too, not a 500. A failure of the gateway's own code is raised as is.
            if not raised_by_client(exc):
                raise
            if clock.monotonic() + delay > give_up:
                raise StoreError(f"Redis client failed: {type(exc).__name__}: {exc}") from exc
            log.warning("store_client_failed_retrying", error=repr(exc), retry_in_s=delay)
        await clocks.sleep(clock, delay)
        delay = min(delay * 2, 0.5)


_CLIENT_DIR = str(Path(redis.__file__).parent) + os.sep


def raised_by_client(exc: BaseException) -> bool:
    """Whether `exc` came out of the Redis client library (a frame of it is on its way up),
    not from the gateway's own code alone."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.startswith(_CLIENT_DIR):
            return True
        tb = tb.tb_next
    return False


def from_redis(exc: BaseException) -> bool:
    """Whether `exc` is Redis failing (refused, out of reach) or its client failing inside
    (under uvloop, a write on a connection a failover just closed raises RuntimeError up
    through redis-py's writer), not the gateway's own code: what a loop that talks to
    Redis logs and rides out instead of dying on."""
    return isinstance(exc, (RedisError, OSError)) or raised_by_client(exc)


def stop_if_cancelled(exc: BaseException) -> None:
    """A cancellation that redis-py turned into a connection error is still a cancellation:
    a loop that carried on would hold up the shutdown that cancelled it.

    Raises:
        CancelledError: this task is being cancelled.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError() from exc


def text(raw: str | bytes) -> str:
    """A reply as text (the client returns bytes); bytes that are not UTF-8 are replaced,
    never raised from a loop that reads what any process may have written."""
    return raw.decode(errors="replace") if isinstance(raw, bytes) else raw


def connect(url: str, *, timeout_s: float = 2.0) -> RedisClient:
    """A client for `url` (standalone, Sentinel or Cluster); connections open lazily.

    Raises:
        ConfigError: the URL is not one of the supported forms.
    """
    common: dict[str, Any] = {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        "health_check_interval": 5,
        # Fail fast: a request waiting on a dead Redis helps nobody; one quick retry
        # covers a dropped pooled connection.
        "retry": Retry(ExponentialBackoff(cap=0.1, base=0.01), 1),
    }
    parts = urlsplit(url)
    if parts.scheme in ("redis", "rediss", "unix"):
        client: aioredis.Redis = aioredis.from_url(url, **common)
        return client
    if parts.scheme == "redis+cluster":
        return RedisCluster.from_url(url.replace("redis+cluster://", "redis://", 1), **common)
    if parts.scheme == "redis+sentinel":
        hosts = []
        for item in parts.netloc.rsplit("@", 1)[-1].split(","):
            host, _, port = item.partition(":")
            hosts.append((host, int(port or 26379)))
        path = [p for p in parts.path.split("/") if p]
        if not path:
            raise ConfigError(
                "store.url: a Sentinel URL needs the service name: redis+sentinel://h:26379/mymaster/0"
            )
        db = int(path[1]) if len(path) > 1 else 0
        sentinel = Sentinel(hosts, sentinel_kwargs={"socket_timeout": timeout_s}, **common)  # type: ignore[no-untyped-call,unused-ignore]
        master: aioredis.Redis = sentinel.master_for(path[0], db=db, password=parts.password)
        return master
    raise ConfigError(f"store.url: unsupported scheme {parts.scheme!r}")
