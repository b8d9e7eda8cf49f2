"""List changes across the fleet, on a real Redis: what one replica hears, the others'
listens hear, about a heartbeat later, and none hears its own change twice."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from gateway.clock import SystemClock
from gateway.fleet.changes import ChangeFeed
from gateway.store.redis_client import connect
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

    async def next(self) -> tuple[str, str]:
        async with asyncio.timeout(5):
            await self.arrived.wait()
        self.arrived.clear()
        return self.changes[-1]


async def test_a_change_one_replica_heard_reaches_the_others_and_not_itself_again(
    redis_server: RedisServer,
) -> None:
    client = connect(redis_server.url)
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    heard = {name: Heard() for name in ("a", "b")}
    feeds = {
        name: ChangeFeed(
            client,
            prefix=prefix,
            interval_s=0.05,
            clock=SystemClock(),
            relay=heard[name],
            upstreams=frozenset({"plain"}),
        )
        for name in heard
    }
    for feed in feeds.values():
        feed.start()
    try:
        async with asyncio.timeout(5):  # each has learnt the counts as they stand
            for feed in feeds.values():
                await feed.looked.wait()
        feeds["a"].heard("local", "notifications/tools/list_changed")  # stdio: a's own
        tools = "notifications/tools/list_changed"
        feeds["a"].heard("plain", tools)
        assert await heard["b"].next() == ("plain", tools)
        # b's own change comes back to a; by then a has looked past its own count.
        feeds["b"].heard("plain", "notifications/prompts/list_changed")
        assert await heard["a"].next() == ("plain", "notifications/prompts/list_changed")
        assert heard["a"].changes == [("plain", "notifications/prompts/list_changed")]
        assert heard["b"].changes == [("plain", tools)]
    finally:
        for feed in feeds.values():
            await feed.close()
        await client.aclose()


def test_a_replicas_own_count_hides_no_count_another_made_in_between() -> None:
    """a last saw 5; b counts (6), then a (7): a's listens still hear b's change."""
    heard = Heard()
    feed = ChangeFeed(
        None,  # type: ignore[arg-type]  # no Redis: the bookkeeping alone
        prefix="p:",
        interval_s=1.0,
        clock=SystemClock(),
        relay=heard,
        upstreams=frozenset({"u"}),
    )
    tools = "u|notifications/tools/list_changed"
    feed.take({tools: "5"}, first=True)
    feed.counted(tools, 7)
    feed.take({tools: "7"})
    assert heard.changes == [("u", "notifications/tools/list_changed")]
    feed.counted(tools, 8)  # nobody in between: its own, not news
    feed.take({tools: "8"})
    assert len(heard.changes) == 1


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
