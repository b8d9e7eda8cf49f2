"""The fleet fixtures: a resumable legacy server, and three gateway replicas on one Redis
behind a round-robin balancer (`tests.support.fleet.Fleet`)."""

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
from tests.support.fleet import Fleet
from tests.support.outcome import LOG_TAIL, failed


@pytest.fixture(scope="module")
def resumable() -> Iterator[LegacyServer]:
    server = LegacyServer(event_store=True)
    yield server
    server.stop()


@pytest.fixture
async def fleet(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    redis_server: RedisServer,
    legacy: LegacyServer,
    resumable: LegacyServer,
) -> AsyncIterator[Fleet]:
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    config = {
        "store": {"url": redis_server.url, "key_prefix": prefix},
        # Sweeps for dead replicas' sessions run often, so every test that kills one also
        # shows that a parked call's session is never ended by them. The heartbeat is the
        # default's: a shorter one would let a loaded machine (a beat late by more than a
        # beat) lapse a live replica's lease, and hand its calls over mid test.
        "fleet": {"heartbeat_s": 1.0, "drain_timeout_s": 20, "orphan_sweep_s": 2.0},
        "sealing": {"audience": "fleet-test"},
        "upstreams": [
            {
                "name": "plain",
                "url": legacy.url,
                "path": "/mcp",
                "tools": {
                    "register": {"replay_safe": True},
                    "progress_then_ask": {"mode": "replay"},
                    # tasks on a fleet (tests/fleet/test_tasks.py)
                    "sleepy": {"task": "optional"},
                    "two_at_once": {"task": "optional"},
                    "hold": {"task": "optional"},
                },
            },
            {
                "name": "resumable",
                "url": resumable.url,
                "path": "/resumable",
                "tools": {"greet": {"task": "optional"}},  # tests/fleet/test_tasks.py
            },
            {  # calls share sessions: a replica's death strands several calls of one
                "name": "shared",
                "url": resumable.url,
                "path": "/shared",
                "pool": {"calls_per_session": 4},
            },
            {  # a stdio server: a process per session, which dies with its replica
                "name": "local",
                "command": legacy_stdio_command(tmp_path),
                "path": "/local",
                "pool": {"min_idle": 0},
                "tools": {"register": {"replay_safe": True}},
            },
        ],
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {"MRTR_GATEWAY_SEALING_KEYS": generate_key()}
    replicas = await started_together(
        *(partial(GatewayProcess, path, env, f"replica-{i}") for i in range(3))
    )
    balancer = RoundRobin([r.base for r in replicas])
    lb = TestServer(balancer.app(), host="127.0.0.1")
    await lb.start_server()
    fleet = Fleet(list(replicas), balancer, lb, prefix)
    yield fleet
    await fleet.http.close()
    await lb.close()
    await asyncio.gather(*(asyncio.to_thread(r.stop) for r in replicas))
    if failed(request):  # what each replica logged, in the failure's report
        for replica in replicas:
            print(f"--- {replica.replica_id} ---\n{replica.logs()[-LOG_TAIL:]}")
