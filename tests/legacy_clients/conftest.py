"""Fixtures of the legacy lane's tests: the official mcp 1.x client as a long-lived peer,
an mcp 1.x server over HTTP+SSE, and three `mrtr-gateway serve` replicas sharing a real
Redis behind a round-robin balancer (`fleet`), serving the mcp 1.x server over Streamable
HTTP (/mcp), HTTP+SSE (/sse) and stdio (/local)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from functools import partial
from pathlib import Path

import pytest
import yaml
from aiohttp.test_utils import TestServer

from gateway.protocol.state import generate_key
from tests.peers.balancer import RoundRobin
from tests.peers.tooling import (
    GatewayProcess,
    LegacyServer,
    RedisServer,
    legacy_stdio_command,
    started_together,
)
from tests.support.outcome import LOG_TAIL, failed


@pytest.fixture(scope="session")
def sse_server() -> Iterator[LegacyServer]:
    server = LegacyServer(transport="sse")
    yield server
    server.stop()


class Fleet:
    def __init__(self, replicas: list[GatewayProcess], balancer: RoundRobin, lb: TestServer):
        self.replicas = replicas
        self.balancer = balancer
        self.lb = lb

    def url(self, path: str) -> str:
        return str(self.lb.make_url(path))


@pytest.fixture
async def fleet(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    redis_server: RedisServer,
    legacy: LegacyServer,
    sse_server: LegacyServer,
) -> AsyncIterator[Fleet]:
    config = {
        "store": {"url": redis_server.url, "key_prefix": f"t{uuid.uuid4().hex[:8]}:"},
        "fleet": {"heartbeat_s": 1.0},
        "sealing": {"audience": "bound-fleet-test"},
        "upstreams": [
            {"name": "http", "url": legacy.url, "path": "/mcp"},
            {"name": "sse", "url": sse_server.url, "transport": "sse", "path": "/sse"},
            {
                "name": "local",
                "command": legacy_stdio_command(tmp_path),
                "path": "/local",
                "pool": {"min_idle": 0},
            },
        ],
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {"MRTR_GATEWAY_SEALING_KEYS": generate_key()}
    replicas = await started_together(
        *(partial(GatewayProcess, path, env, f"replica-{i}") for i in range(3))
    )
    balancer = RoundRobin([r.base for r in replicas], skip_refused=True)
    lb = TestServer(balancer.app(), host="127.0.0.1")
    await lb.start_server()
    yield Fleet(list(replicas), balancer, lb)
    await lb.close()
    await asyncio.gather(*(asyncio.to_thread(r.stop) for r in replicas))
    if failed(request):
        for replica in replicas:
            print(f"--- {replica.replica_id} ---\n{replica.logs()[-LOG_TAIL:]}")
