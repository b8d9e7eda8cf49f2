"""Reaching Redis: a client for a store URL, riding out a moment it cannot be reached, and
stopping the loops that use it and the client itself, bounded whatever Redis does.

URLs: `redis://[:password@]host:port/db`, `rediss://...` (TLS), `unix:///path?db=0`,
`redis+sentinel://host:port[,host:port]/service[/db]`, `redis+cluster://host:port`.
The store (`gateway.store.redis`), the fleet's bus and the rate limiter share it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Iterable
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
from gateway.aio import spawn
from gateway.clock import Backoff, Clock
from gateway.errors import ConfigError, StoreError

T = TypeVar("T")
log = structlog.get_logger("gateway.store")

RedisClient = aioredis.Redis | RedisCluster

#: How long a store or bus operation rides out an unreachable Redis (a restart, a
#: failover) before it fails: a client sees no error for an outage shorter than this.
RIDE_OUT_S = 3.0
#: Between its tries: short at first (a dropped connection is back at once), longer as
#: the outage lasts.
RIDE_OUT_BACKOFF = Backoff(0.05, 0.5)
#: How long a loop on Redis, or a client, may take to stop when told to, before the
#: client's connections are closed under it (twice `connect`'s socket timeout: a
#: command in flight has had time to fail by itself).
STOP_S = 4.0
#: How long a close's last command to Redis (a clean-up that expires anyway) may take.
LAST_WORD_S = 2.0
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
    tries = 0
    while True:
        tries += 1
        delay = RIDE_OUT_BACKOFF.delay(tries)  # the wait should this try fail
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


def stop_if_cancelled(exc: BaseException | None = None) -> None:
    """Stop a loop that talks to Redis if its task is being cancelled, whatever the
    client did with the cancellation: redis-py may turn it into a connection error
    (`exc`), or drop it and return as if nothing happened. Its send runs under
    `asyncio.wait_for`, which before Python 3.12 returns the result of a send that ended
    as the cancellation arrived. A loop that carried on would never end, and whoever
    awaits it would wait as long. Called after a failed call and once a round.

    Raises:
        CancelledError: this task is being cancelled.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError() from exc


async def stop_loops(
    client: RedisClient, tasks: Iterable[asyncio.Task[Any]], *, bound_s: float = STOP_S
) -> None:
    """Cancel `tasks`, loops that talk to Redis through `client`, and wait for them to
    end, bounded whatever state the client is in (`_ended`)."""
    running = [task for task in tasks if not task.done()]
    for task in running:
        task.cancel()
    await _ended(client, running, bound_s)


async def last_word(
    client: RedisClient,
    op: Callable[[], Awaitable[object]],
    *,
    what: str,
    bound_s: float = LAST_WORD_S,
) -> None:
    """Run `op`, a close's last command to Redis (a heartbeat taken out), bounded whatever
    state the client is in: given `bound_s`, then cancelled (`_ended`). What it would
    have cleaned up expires in Redis anyway: a failure of Redis is logged, not raised.
    """

    async def run() -> None:
        try:
            await op()
        except Exception as exc:
            if not from_redis(exc):
                raise
            log.info("redis_close_step_failed", step=what, error=str(exc))

    task = spawn(run(), name=what)
    await asyncio.wait({task}, timeout=bound_s)
    if not task.done():
        task.cancel()
        await _ended(client, [task], bound_s)
    if task.done() and not task.cancelled() and (failure := task.exception()) is not None:
        raise failure  # the gateway's own code failing


async def _ended(client: RedisClient, tasks: list[asyncio.Task[Any]], bound_s: float) -> None:
    """Wait for cancelled `tasks` to end. One still running after `bound_s` (Redis
    stopped answering mid command) has the client's connections closed under it, so
    that the command fails at once, and `bound_s` more; one running after that is named
    in the log and left.

    The tasks are never awaited, not even under a timeout: a task that dropped its
    cancellation (see `stop_if_cancelled`) holds whoever awaits it, and a timeout cannot
    end that wait (`Task.cancel` hands its cancellation to the awaited task, and returns).
    """
    running = set(tasks)
    for last in (False, True):
        if not running:
            return
        _, running = await asyncio.wait(running, timeout=bound_s)
        if running and not last:
            await _drop_connections(client, bound_s)
            for task in running:
                task.cancel()
    for task in running:
        log.warning("redis_task_stuck", task=task.get_name())


async def _drop_connections(client: RedisClient, bound_s: float) -> None:
    """Close every connection of `client`, those in use included; the client opens new
    ones when it is used again."""
    try:
        async with asyncio.timeout(bound_s):
            if isinstance(client, RedisCluster):
                await client.aclose()  # its topology learnt again at its next command
            else:
                await client.connection_pool.disconnect()
    except Exception as exc:  # the connections are going anyway
        if not (from_redis(exc) or isinstance(exc, TimeoutError)):
            raise
        log.info("redis_disconnect_failed", error=str(exc))


async def close_client(client: RedisClient, *, bound_s: float = STOP_S) -> None:
    """Close `client` and its connections, bounded whatever state they are in."""
    try:
        async with asyncio.timeout(bound_s):
            await client.aclose()
    except Exception as exc:
        if not (from_redis(exc) or isinstance(exc, TimeoutError)):
            raise
        log.warning("redis_close_failed", error=str(exc))


async def replicas_with(client: RedisClient, key: str, replicas: int, wait_ms: int) -> int:
    """Redis `WAIT`: how many replicas have the writes made so far (to `key`'s node on a
    Cluster), waiting at most `wait_ms` for `replicas` of them.

    Raises: what the client raises (the caller's `ride_out` translates it).
    """
    if isinstance(client, RedisCluster):
        node = client.get_node_from_key(key)
        return int(await client.execute_command("WAIT", replicas, wait_ms, target_nodes=node))
    waited = client.execute_command("WAIT", replicas, wait_ms)  # type: ignore[no-untyped-call]
    return int(await waited)


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
