"""A replica cut off from Redis while its calls are parked: the others judge it dead and
take its calls over, it resumes none of them, and once it is back it lets them go
without a word upstream. Exactly one replica resumes each call; each body runs once.
Real processes: redis-server, an mcp 1.x server with an event store, two replicas, one
of them reaching Redis through a proxy the test cuts."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
import yaml

from gateway.protocol.state import generate_key
from tests.peers.tcp_proxy import TcpProxy
from tests.peers.tooling import GatewayProcess, LegacyServer, RedisServer, started_together
from tests.support.legacy import ALICE, await_journal, legacy_tool
from tests.support.wire import default_headers, parse_sse_messages, rpc

pytestmark = pytest.mark.peers


async def post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=body, headers=default_headers(body)) as resp:
            raw = await resp.read()
            if resp.headers.get("Content-Type", "").startswith("text/event-stream"):
                return resp.status, parse_sse_messages(raw)[-1]
            return resp.status, json.loads(raw)


async def expired(redis_url: str, key: str) -> None:
    """Until Redis expires `key` (a keyspace notification listened to before looking)."""
    client = aioredis.from_url(redis_url)
    try:
        await client.config_set("notify-keyspace-events", "Ex")
        async with client.pubsub() as pubsub, asyncio.timeout(30):
            await pubsub.subscribe("__keyevent@0__:expired")
            async for message in pubsub.listen():
                if message["type"] == "subscribe":
                    if not await client.exists(key):
                        return
                elif message["type"] == "message" and message["data"] == key.encode():
                    return
    finally:
        await client.aclose()


@pytest.fixture
async def proxy(redis_server: RedisServer) -> AsyncIterator[TcpProxy]:
    proxy = TcpProxy(redis_server.port)
    await proxy.start()
    yield proxy
    await proxy.close()


@pytest.fixture
def resumable() -> Iterator[LegacyServer]:
    server = LegacyServer(event_store=True)
    yield server
    server.stop()


async def test_a_replica_cut_off_from_redis_resumes_nothing_that_was_taken_over(
    tmp_path: Path, redis_server: RedisServer, proxy: TcpProxy, resumable: LegacyServer
) -> None:
    prefix = f"p{uuid.uuid4().hex[:8]}:"
    env = {"MRTR_GATEWAY_SEALING_KEYS": generate_key()}

    def config(store_url: str, name: str) -> Path:
        path = tmp_path / f"{name}.yaml"
        data = {
            "store": {"url": store_url, "key_prefix": prefix},
            # The default's: a shorter beat would let a loaded machine lapse the lease of
            # the replica that keeps its Redis, not only of the one cut off.
            "fleet": {"heartbeat_s": 1.0},
            "upstreams": [{"name": "resumable", "url": resumable.url, "path": "/mcp"}],
        }
        path.write_text(yaml.safe_dump(data))
        return path

    via_proxy = f"redis://127.0.0.1:{proxy.port}/0"
    cut_off, survivor = await started_together(
        partial(GatewayProcess, config(via_proxy, "a"), env, "replica-a"),
        partial(GatewayProcess, config(redis_server.url, "b"), env, "replica-b"),
    )
    redis = aioredis.from_url(redis_server.url)
    try:
        runs = [uuid.uuid4().hex for _ in range(3)]
        states = []
        for run_id in runs:
            greet = {"name": "greet", "arguments": {"run_id": run_id}}
            status, first = await post(cut_off.url(), rpc("tools/call", greet))
            assert first["result"]["resultType"] == "input_required", first
            states.append(first["result"]["requestState"])
        owners = {
            json.loads(await redis.hget(k, "json"))["owner"]
            async for k in redis.scan_iter(f"{prefix}{{*}}:rec")
        }
        (owner,) = owners  # every parked call is the cut-off replica's
        assert owner.startswith("replica-a~")

        proxy.cut()
        await expired(redis_server.url, f"{prefix}{{replica:{owner}}}:beat")
        for run_id, state in zip(runs, states, strict=True):
            greet = {"name": "greet", "arguments": {"run_id": run_id}, "requestState": state}
            status, done = await post(
                survivor.url(), rpc("tools/call", {**greet, "inputResponses": ALICE}, rid=2)
            )
            assert done["result"]["content"][0]["text"] == "Hello, alice!", done
        await survivor.await_line('"event":"call_taken_over"', timeout=30)

        proxy.heal()
        handed_over = 0

        def each_handed_over(line: str) -> bool:
            nonlocal handed_over
            handed_over += '"event":"call_handed_over"' in line
            return handed_over == len(runs)

        # Back in the fleet, it lets each call go, quietly.
        await cut_off.await_line(each_handed_over, timeout=60)
        for run_id, state in zip(runs, states, strict=True):
            greet = {"name": "greet", "arguments": {"run_id": run_id}, "requestState": state}
            status, again = await post(
                cut_off.url(), rpc("tools/call", {**greet, "inputResponses": ALICE}, rid=3)
            )
            # The same retry sent again gets the same answer, and nothing runs again:
            assert again["result"]["content"][0]["text"] == "Hello, alice!", again
            text = await legacy_tool(resumable.url, "runs", {"tool": "greet", "run_id": run_id})
            assert text == "1"
            assert await await_journal(resumable.url, run_id, "accept") == ["accept"]
    finally:
        await redis.aclose()
        await asyncio.gather(*(asyncio.to_thread(r.stop) for r in (cut_off, survivor)))
