"""A fleet under test: gateway processes behind a round-robin balancer, and how a test
sees one of its replicas die. The fixture that starts one is `tests/fleet/conftest.py`'s."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import redis.asyncio as aioredis
from aiohttp.test_utils import TestServer

from tests.peers.balancer import RoundRobin
from tests.peers.tooling import GatewayProcess
from tests.support.wire import default_headers, parse_sse_messages


class Fleet:
    def __init__(
        self, replicas: list[GatewayProcess], balancer: RoundRobin, lb: TestServer, prefix: str
    ) -> None:
        self.replicas = replicas
        self.balancer = balancer
        self.lb = lb
        self.prefix = prefix
        self.http = aiohttp.ClientSession()

    def url(self, path: str = "/mcp") -> str:
        return str(self.lb.make_url(path))

    async def post(self, url: str, body: dict[str, Any], **headers: str) -> tuple[int, Any]:
        send = {**default_headers(body), **headers}
        async with self.http.post(url, json=body, headers=send) as resp:
            raw = await resp.read()
            if resp.headers.get("Content-Type", "").startswith("text/event-stream"):
                return resp.status, parse_sse_messages(raw)[-1]
            return resp.status, json.loads(raw)


async def until_dead(fleet: Fleet, redis_url: str, replica: GatewayProcess) -> None:
    """Wait until the fleet sees the replica gone: Redis expired its heartbeat key (a keyspace
    notification, listened to before looking, so it cannot be missed), bounded."""
    client = aioredis.from_url(redis_url)
    # Its heartbeat is under its name and this start's incarnation: `<name>~<incarnation>`.
    pattern = f"{fleet.prefix}{{replica:{replica.replica_id}~*}}:beat"
    found = [k async for k in client.scan_iter(pattern)]
    key = found[0] if found else b"(already gone)"
    try:
        await client.config_set("notify-keyspace-events", "Ex")  # on every (re)started server
        async with client.pubsub() as pubsub, asyncio.timeout(30):
            await pubsub.subscribe("__keyevent@0__:expired")
            async for message in pubsub.listen():
                if message["type"] == "subscribe":  # confirmed: no expiry can be missed now
                    if not await client.exists(key):
                        return
                elif message["type"] == "message" and message["data"] == key:
                    return
    finally:
        await client.aclose()
