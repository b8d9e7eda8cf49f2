"""A replica's heartbeat says whether it has written back its records since the store lost
its data, on a real Redis: a retry that finds no record reads it to know whether to wait
(`RedisBus.written_back`)."""

from __future__ import annotations

import asyncio

from gateway.fleet.redis_bus import RedisBus
from gateway.store.redis_client import connect
from tests.fakes.clock import ManualClock
from tests.peers.tooling import RedisServer

BEAT = 1.0


async def ignore(_payload: str) -> None:
    return None


async def test_a_heartbeat_says_when_its_replica_has_written_back_its_records(
    redis_server: RedisServer,
) -> None:
    clock = ManualClock()
    prefix = "write-back:"
    owner = RedisBus(
        connect(redis_server.url), prefix=prefix, replica_id="a", heartbeat_s=BEAT, clock=clock
    )
    other = RedisBus(
        connect(redis_server.url), prefix=prefix, replica_id="b", heartbeat_s=BEAT, clock=clock
    )
    writing, done = asyncio.Event(), asyncio.Event()

    async def write_back() -> None:
        writing.set()
        await done.wait()  # the records go back while the test looks

    owner.start(ignore, on_data_loss=write_back)
    try:
        assert await other.written_back("nobody") is None  # no heartbeat
        await clock.armed(clock.now + BEAT)  # the first beat is in
        clock.advance(BEAT)
        await clock.armed(clock.now + BEAT)  # the second says which epoch it holds
        assert await other.written_back("a") is True  # nothing was ever lost
        client = other.client
        await client.delete(f"{prefix}fleet:epoch", owner.replica_key("a"))  # Redis wiped
        assert await other.written_back("a") is None  # its heartbeat went with the data
        clock.advance(BEAT)  # it beats again, and finds the store lost its data
        await writing.wait()
        assert await other.written_back("a") is False  # alive, still writing back
        (restoring,) = [t for t in asyncio.all_tasks() if t.get_name() == "fleet-restore"]
        done.set()
        await restoring  # said at once, not at the next beat: the clock has not moved
        assert await other.written_back("a") is True
    finally:
        await owner.close()
        await owner.client.aclose()
        await other.client.aclose()
