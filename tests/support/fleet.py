"""A fleet under test: gateway processes behind a round-robin balancer, and how a test
sees one of its replicas die. The fixture that starts one is `tests/fleet/conftest.py`'s;
a test with a configuration of its own starts one with `fleet_of`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
import yaml
from aiohttp.test_utils import TestServer

from gateway.protocol.state import generate_key
from tests.peers.balancer import RoundRobin
from tests.peers.tooling import GatewayProcess, started_together
from tests.support.outcome import LOG_TAIL, failed
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


@asynccontextmanager
async def fleet_of(
    config: dict[str, Any],
    tmp_path: Path,
    request: pytest.FixtureRequest,
    *,
    replicas: int = 3,
    env: dict[str, str] | None = None,
) -> AsyncIterator[Fleet]:
    """`replicas` `mrtr-gateway serve` processes of `config` (its `store` a test Redis),
    started together behind a round-robin balancer, with fresh sealing keys unless `env`
    gives them; stopped by PID at the end, their logs printed when the test failed."""
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    env = env if env is not None else {"MRTR_GATEWAY_SEALING_KEYS": generate_key()}
    started = await started_together(
        *(partial(GatewayProcess, path, env, f"replica-{i}") for i in range(replicas))
    )
    balancer = RoundRobin([r.base for r in started])
    lb = TestServer(balancer.app(), host="127.0.0.1")
    await lb.start_server()
    fleet = Fleet(list(started), balancer, lb, "")
    try:
        yield fleet
    finally:
        await fleet.http.close()
        await lb.close()
        await asyncio.gather(*(asyncio.to_thread(r.stop) for r in started))
        if failed(request):
            for replica in started:
                print(f"--- {replica.replica_id} ---\n{replica.logs()[-LOG_TAIL:]}")
