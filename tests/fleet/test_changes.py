"""List changes across the fleet, on a real Redis: what one replica hears, the others'
listens hear, about a heartbeat later, and none hears its own change twice."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from structlog.testing import capture_logs

from gateway.clock import SystemClock
from gateway.fleet.changes import ChangeFeed
from gateway.store.redis_client import connect
from tests.fakes.clock import ManualClock
from tests.peers.tooling import LegacyServer, RedisServer
from tests.support.listens import SUBSCRIPTION_ID, call, listening

pytestmark = pytest.mark.peers


class Heard:
    """What a replica's listens were handed, with an event per arrival."""

    def __init__(self) -> None:
        self.changes: list[tuple[str, str]] = []
        self.arrived = asyncio.Event()

    def __call__(self, upstream: str, method: str) -> None:
        self.changes.append((upstream, method))
        self.arrived.set()

    async def next(self, timeout: float = 30) -> tuple[str, str]:
        async with asyncio.timeout(timeout):
            await self.arrived.wait()
        self.arrived.clear()
        return self.changes[-1]


async def test_a_change_one_replica_heard_reaches_the_others_and_not_itself_again(
    redis_server: RedisServer,
) -> None:
    """Each look is made when the test moves the clock, after the count it follows has
    landed: a look that read a replica's own count before its reply came back would hand
    it on as news (a spare hint, which the feed allows), and this test is about the rest."""
    client = connect(redis_server.url)
    clock = ManualClock()
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    heard = {name: Heard() for name in ("a", "b")}
    feeds = {
        name: ChangeFeed(
            client,
            prefix=prefix,
            interval_s=1.0,
            clock=clock,
            upstreams=frozenset({"plain"}),
        )
        for name in heard
    }

    async def everyone_looks() -> None:
        for feed in feeds.values():
            feed.looked.clear()
        clock.advance(1.0)
        async with asyncio.timeout(30):
            for feed in feeds.values():
                await feed.looked.wait()  # set as it goes to sleep until the next

    for name, feed in feeds.items():
        feed.start(heard[name])
    try:
        async with asyncio.timeout(30):  # each has learnt the counts as they stand
            for feed in feeds.values():
                await feed.looked.wait()
        feeds["a"].heard("local", "notifications/tools/list_changed")  # stdio: a's own
        tools = "notifications/tools/list_changed"
        feeds["a"].heard("plain", tools)
        await feeds["a"].settled()
        await everyone_looks()
        assert heard["b"].changes == [("plain", tools)]
        # b's own change comes to a; a has looked past its own count.
        feeds["b"].heard("plain", "notifications/prompts/list_changed")
        await feeds["b"].settled()
        await everyone_looks()
        assert heard["a"].changes == [("plain", "notifications/prompts/list_changed")]
        assert heard["b"].changes == [("plain", tools)]
    finally:
        for feed in feeds.values():
            await feed.close()
        await client.aclose()


def test_a_replicas_own_count_hides_no_count_another_made_in_between() -> None:
    """a last saw 5; b counts (6), then a (7): a's listens still hear b's change."""
    feed = ChangeFeed(
        None,  # type: ignore[arg-type]  # no Redis: the bookkeeping alone
        prefix="p:",
        interval_s=1.0,
        clock=SystemClock(),
        upstreams=frozenset({"u"}),
    )
    tools = "u|notifications/tools/list_changed"
    assert feed.take({tools: "5"}, first=True) == []
    feed.counted(tools, 7)
    assert feed.take({tools: "7"}) == [("u", "notifications/tools/list_changed")]
    feed.counted(tools, 8)  # nobody in between: its own, not news
    assert feed.take({tools: "8"}) == []


async def test_a_listen_on_one_replica_hears_a_change_a_call_made_on_another(
    make_gateway, redis_server: RedisServer
) -> None:
    server = LegacyServer(notifying=True)
    try:
        shared: dict[str, Any] = {
            "store": {"url": redis_server.url, "key_prefix": f"t{uuid.uuid4().hex[:8]}:"},
            "fleet": {"heartbeat_s": 0.2, "orphan_sweep_s": 0.4},
        }
        a = await make_gateway(server.url, **shared)
        b = await make_gateway(server.url, **shared)
        async with listening(b, {"toolsListChanged": True}) as stream:
            assert (await stream.next())["params"]["notifications"] == {"toolsListChanged": True}
            assert await call(a, "add_tool", {"name": "made_on_a"}) == "added made_on_a"
            change = await stream.next()
        assert change == {
            "jsonrpc": "2.0",
            "method": "notifications/tools/list_changed",
            "params": {"_meta": {SUBSCRIPTION_ID: "l-1"}},
        }
    finally:
        server.stop()


def feed_on(client: Any, prefix: str) -> ChangeFeed:
    return ChangeFeed(
        client,
        prefix=prefix,
        interval_s=0.05,
        clock=SystemClock(),
        upstreams=frozenset({"plain"}),
    )


async def hincrbys(client: Any) -> int:
    stats = await client.info("commandstats")
    return int(stats.get("cmdstat_hincrby", {}).get("calls", 0))


async def test_a_burst_of_changes_is_counted_in_a_few_commands_and_in_full(
    redis_server: RedisServer,
) -> None:
    client = connect(redis_server.url)
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    feed = feed_on(client, prefix)
    tools, prompts = "notifications/tools/list_changed", "notifications/prompts/list_changed"
    try:
        before = await hincrbys(client)
        for _ in range(50):
            feed.heard("plain", tools)
            feed.heard("plain", prompts)
        await feed.settled()
        counts = await client.hgetall(f"{prefix}fleet:changes")
        assert {k.decode(): int(v) for k, v in counts.items()} == {
            f"plain|{tools}": 50,
            f"plain|{prompts}": 50,
        }
        # One count in flight when the burst began, then one per field for the rest.
        assert await hincrbys(client) - before <= 3
        # All of them its own: none is news to its own listens on the next look.
        assert feed.take(counts) == []
    finally:
        await feed.close()
        await client.aclose()


async def test_a_change_counted_while_redis_is_out_reaches_the_others_once_it_is_back() -> None:
    """Redis restarts empty: the count it refused is made again, and b hears of it."""
    redis = RedisServer()
    client = connect(redis.url)
    heard = {name: Heard() for name in ("a", "b")}
    feeds = {name: feed_on(client, "p:") for name in heard}
    tools = "notifications/tools/list_changed"
    try:
        for name, feed in feeds.items():
            feed.start(heard[name])
        async with asyncio.timeout(30):
            for feed in feeds.values():
                await feed.looked.wait()
        redis.kill()
        with capture_logs() as logs:
            feeds["a"].heard("plain", tools)
            feeds["a"].heard("plain", tools)
            await feeds["a"].settled()  # refused, after the client rode the outage out
        # Said once for both (the looks failing meanwhile say so in their own words).
        refused = [e for e in logs if e["event"].startswith("fleet_change_")]
        assert [e["event"] for e in refused] == ["fleet_change_not_counted"]
        redis.start()
        assert await heard["b"].next(timeout=30) == ("plain", tools)
        await feeds["a"].settled()
        assert int(await client.hget("p:fleet:changes", f"plain|{tools}")) == 2
        assert heard["a"].changes == []
    finally:
        async with asyncio.timeout(10):  # bounded even with Redis gone again
            redis.kill()
            for feed in feeds.values():
                await feed.close()
        await client.aclose()
        redis.stop()
