"""Closing what a replica runs on Redis (the fleet's bus, its session ledger and change
feed, the store's client) ends, whatever state the Redis client is in: a read blocked in
the inbox's BLMOVE, Redis not answering (SIGSTOP), a cancellation the client dropped.
A replica whose close hangs never finishes its SIGTERM.

Each close is waited for with a generous bound: these tests say that it ends, not how
fast. Bounded waits never await the closing task itself (a task that drops its
cancellation would hold the test as it held the replica): `asyncio.wait`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.aio import spawn
from gateway.clock import Clock, SystemClock
from gateway.fleet import messages
from gateway.fleet.changes import ChangeFeed
from gateway.fleet.ledger import SessionLedger
from gateway.fleet.redis_bus import RedisBus
from gateway.store.redis import RedisStore
from gateway.store.redis_client import RedisClient, connect
from tests.fakes.clock import ManualClock
from tests.fakes.dropped_cancellations import DroppingCancellations
from tests.peers.tooling import RedisServer

#: Generous: a close that ends at all ends far sooner, even on a loaded machine.
ENDS_WITHIN_S = 60


async def ends(work: Awaitable[Any] | asyncio.Task[Any], what: str) -> None:
    """Wait for `work` to end, up to `ENDS_WITHIN_S`; fail, naming it, if it does not."""
    task = work if isinstance(work, asyncio.Task) else spawn(work, name=what)
    done, _ = await asyncio.wait({task}, timeout=ENDS_WITHIN_S)
    assert done, f"{what} still running after {ENDS_WITHIN_S} s"
    if not task.cancelled():
        task.result()  # its failure, if any


async def ignore(_message: messages.Message) -> None:
    return None


@asynccontextmanager
async def redis_sees(url: str, *commands: str) -> AsyncIterator[None]:
    """Until Redis has run each of `commands` (by its own account: MONITOR), once the
    body (which starts what sends them) is done."""
    watcher = aioredis.Redis.from_url(url)
    try:
        async with watcher.monitor() as monitor:
            yield
            unseen = {command.upper() for command in commands}
            async with asyncio.timeout(ENDS_WITHIN_S):
                while unseen:
                    ran = (await monitor.next_command())["command"].upper().split()
                    unseen.discard(ran[0] if ran else "")
    finally:
        await watcher.aclose()


def bus_on(client: RedisClient, prefix: str, clock: Clock | None = None) -> RedisBus:
    return RedisBus(
        client, prefix=prefix, replica_id="r1", heartbeat_s=1.0, clock=clock or SystemClock()
    )


def loop_named(tasks: list[asyncio.Task[None]], name: str) -> asyncio.Task[None]:
    return next(task for task in tasks if task.get_name() == name)


@pytest.fixture
def prefix() -> str:
    return f"close{uuid.uuid4().hex[:8]}:"


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A redis-server of this test's own, to pause: the session's goes on for the others."""
    server = RedisServer()
    yield server
    server.stop()  # resumed first if paused


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[RedisClient]:
    redis = connect(redis_server.url)
    yield redis
    await redis.aclose()


async def test_a_bus_closes_while_its_inbox_is_blocked_in_blmove(
    redis_server: RedisServer, prefix: str
) -> None:
    bus = bus_on(connect(redis_server.url), prefix)
    try:
        async with redis_sees(redis_server.url, "BLMOVE"):  # and blocks: the inbox is empty
            bus.start(ignore)
        await ends(bus.close(), "the bus's close")
        assert all(task.done() for task in bus._tasks)
        assert not await bus.client.exists(bus.replica_key("r1"))  # the others know it left
    finally:
        await bus.client.aclose()


async def test_a_bus_closes_while_its_client_drops_the_cancellation_of_its_read(
    redis_server: RedisServer, prefix: str
) -> None:
    """The hang seen on a busy machine: the inbox's BLMOVE returned as if it had not been
    cancelled, the loop read again, and the close waited on it for ever."""
    bus = bus_on(connect(redis_server.url), prefix)
    dropping = DroppingCancellations(bus.client)
    bus.start(ignore)
    try:
        await asyncio.wait_for(dropping.started["BLMOVE"].wait(), ENDS_WITHIN_S)
        await ends(bus.close(), "the bus's close")
        assert all(task.done() for task in bus._tasks)
        assert dropping.dropped  # the close's cancellation did reach the read
    finally:
        dropping.stop()  # a close that hung can end now: the test does not hang with it
        for task in bus._tasks:
            task.cancel()
        await asyncio.wait(bus._tasks, timeout=ENDS_WITHIN_S)
        await bus.client.aclose()


async def stops_at_its_first_cancellation(
    loop: asyncio.Task[None], dropping: DroppingCancellations, command: str
) -> None:
    """Cancel `loop` once, while its client is sending `command` and drops the
    cancellation: the loop still ends (on the manual clock, one that slept on instead
    would sleep for ever)."""
    try:
        await asyncio.wait_for(dropping.started[command].wait(), ENDS_WITHIN_S)
        loop.cancel()
        await ends(loop, loop.get_name())
        assert loop.cancelled() and dropping.dropped
    finally:
        dropping.stop()
        loop.cancel()


async def test_the_inbox_stops_at_a_cancellation_its_client_dropped(
    client: RedisClient, prefix: str
) -> None:
    bus = bus_on(client, prefix, ManualClock())
    dropping = DroppingCancellations(client)
    bus.start(ignore)
    try:
        await stops_at_its_first_cancellation(
            loop_named(bus._tasks, "fleet-inbox"), dropping, "BLMOVE"
        )
    finally:
        await bus.close()


async def test_the_change_feed_stops_at_a_cancellation_its_client_dropped(
    client: RedisClient, prefix: str
) -> None:
    feed = ChangeFeed(
        client,
        prefix=prefix,
        interval_s=1.0,
        clock=ManualClock(),
        upstreams=frozenset({"u"}),
    )
    dropping = DroppingCancellations(client)
    feed.start(lambda _upstream, _method: None)  # its first look is at once
    try:
        assert feed._task is not None
        await stops_at_its_first_cancellation(feed._task, dropping, "HGETALL")
    finally:
        await feed.close()


async def test_the_ledgers_sweep_stops_at_a_cancellation_its_client_dropped(
    client: RedisClient, prefix: str
) -> None:
    clock = ManualClock()
    ledger = SessionLedger(
        client,
        prefix=prefix,
        replica_id="r1",
        heartbeat_key=lambda owner: f"{prefix}{{replica:{owner}}}:beat",
        pools={},
        clock=clock,
        interval_s=1.0,
        sweep_s=1.0,
    )
    dropping = DroppingCancellations(client)
    ledger.start()
    try:
        await clock.armed(clock.now + 1.0)
        clock.advance(1.0)  # a pass: it reads the ledgers' index first
        sweeper = loop_named(ledger._tasks, "fleet-sweeper")
        await stops_at_its_first_cancellation(sweeper, dropping, "SMEMBERS")
    finally:
        await ledger.close()


async def test_what_a_replica_runs_on_redis_closes_while_redis_does_not_answer(
    own_redis: RedisServer, prefix: str
) -> None:
    """Bus, ledger, change feed and store on one client, as a replica runs them, closed
    in the replica's order with Redis stopped (SIGSTOP: its sockets open, nothing read)."""
    client = connect(own_redis.url)
    clock = SystemClock()
    bus = bus_on(client, prefix)
    ledger = SessionLedger(
        client,
        prefix=prefix,
        replica_id="r1",
        heartbeat_key=bus.replica_key,
        pools={},
        clock=clock,
        interval_s=1.0,
        sweep_s=1.0,
    )
    feed = ChangeFeed(
        client,
        prefix=prefix,
        interval_s=1.0,
        clock=clock,
        upstreams=frozenset({"u"}),
    )
    store = RedisStore(client, prefix=prefix, clock=clock)
    try:
        # Each loop is under way: the inbox's read blocks in Redis, the beat is written,
        # the feed has looked; the ledger's first pass is a heartbeat away.
        async with redis_sees(own_redis.url, "BLMOVE", "SET", "HGETALL"):
            bus.start(ignore)
            ledger.start()
            feed.start(lambda _upstream, _method: None)
        feed.heard("u", "notifications/tools/list_changed")  # a count on its way
        own_redis.pause()
        await ends(ledger.close(), "the ledger's close")
        await ends(feed.close(), "the change feed's close")
        await ends(bus.close(), "the bus's close")
        await ends(store.close(), "the store's close")
        assert all(task.done() for task in [*bus._tasks, *ledger._tasks])
        assert feed._task is not None and feed._task.done()
    finally:
        own_redis.resume()
        await client.aclose()


async def test_a_loop_on_a_client_without_timeouts_is_stopped_by_closing_its_connections(
    own_redis: RedisServer, prefix: str
) -> None:
    """Redis stopped mid read, on a client with no socket timeout, that drops the
    cancellation: nothing but closing the connection under the read ends it."""
    client = aioredis.Redis.from_url(own_redis.url, socket_timeout=None)  # reads block for ever
    bus = bus_on(client, prefix, ManualClock())
    dropping = DroppingCancellations(client)
    bus.start(ignore)
    try:
        await asyncio.wait_for(dropping.started["BLMOVE"].wait(), ENDS_WITHIN_S)
        own_redis.pause()
        await ends(bus.close(), "the bus's close")
        assert all(task.done() for task in bus._tasks)
    finally:
        dropping.stop()
        own_redis.resume()
        for task in bus._tasks:
            task.cancel()
        await asyncio.wait(bus._tasks, timeout=ENDS_WITHIN_S)
        await client.aclose()
