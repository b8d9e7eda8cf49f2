"""The catalog on a fleet: three `mrtr-gateway serve` processes on one Redis behind a
round-robin balancer, in front of a real mcp 1.x server that tells of its changes.

Lists come from each replica's catalog (a hundred from each replica cost the server one
each); a `list_changed` heard by one replica is seen on every replica's next list once
the fleet has heard of it; a tool whose description changes after it was pinned is
`catalog_drift` on every replica and, with `pinning: block`, refused everywhere until
`mrtr-gateway pins approve`, then served.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.peers.tooling import LegacyServer, RedisServer
from tests.support.fleet import Fleet, fleet_of
from tests.support.legacy import legacy_tool
from tests.support.wire import rpc

pytestmark = pytest.mark.peers

LISTS = 100  # per replica
RUNS = {"tool": "x", "run_id": "y"}


@pytest.fixture(scope="module")
def notifying() -> Iterator[LegacyServer]:
    server = LegacyServer(notifying=True)
    yield server
    server.stop()


@pytest.fixture
async def catalog_fleet(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    redis_server: RedisServer,
    notifying: LegacyServer,
) -> AsyncIterator[tuple[Fleet, Path]]:
    config = {
        "store": {"url": redis_server.url, "key_prefix": f"t{uuid.uuid4().hex[:8]}:"},
        "sealing": {"audience": "catalog-test"},
        "upstreams": [
            {
                "name": "notes",
                "url": notifying.url,
                "path": "/mcp",
                "catalog": {"ttl_s": 600, "pinning": "block"},
            }
        ],
    }
    async with fleet_of(config, tmp_path, request) as fleet:
        yield fleet, tmp_path / "gateway.yaml"


async def tools_of(fleet: Fleet, replica: int) -> dict[str, dict[str, Any]]:
    """The tools one replica lists (asked of it directly, not through the balancer)."""
    url = f"{fleet.replicas[replica].base}/mcp"
    status, reply = await fleet.post(url, rpc("tools/list"))
    assert status == 200, reply
    return {t["name"]: t for t in reply["result"]["tools"]}


async def call_on(fleet: Fleet, replica: int, tool: str, arguments: dict[str, Any]) -> Any:
    url = f"{fleet.replicas[replica].base}/mcp"
    _, reply = await fleet.post(url, rpc("tools/call", {"name": tool, "arguments": arguments}))
    return reply


async def every_replica(fleet: Fleet, seen: Any) -> None:
    """Until every replica's next list satisfies `seen` (the fleet hears of a change about
    a heartbeat later), bounded."""
    async with asyncio.timeout(30):
        for replica in range(len(fleet.replicas)):
            while not seen(await tools_of(fleet, replica)):
                await asyncio.sleep(0.2)


async def test_lists_come_from_each_replicas_catalog_and_a_change_reaches_every_replica(
    catalog_fleet: tuple[Fleet, Path], notifying: LegacyServer
) -> None:
    fleet, _ = catalog_fleet
    before = int(await legacy_tool(notifying.url, "lists_served", {}))
    for replica in range(3):
        for _ in range(LISTS):
            assert "echo" in await tools_of(fleet, replica)
    served = int(await legacy_tool(notifying.url, "lists_served", {})) - before
    assert served <= 3  # one per replica at most
    name = f"added_{uuid.uuid4().hex[:6]}"
    assert (await call_on(fleet, 0, "add_tool", {"name": name}))["result"]["content"][0]["text"]
    await every_replica(fleet, lambda tools: name in tools)


async def test_a_tool_that_drifts_is_told_and_blocked_everywhere_until_approved(
    catalog_fleet: tuple[Fleet, Path], notifying: LegacyServer
) -> None:
    fleet, path = catalog_fleet
    for replica in range(3):  # pinned as first seen (read-only, its description)
        assert "runs" in await tools_of(fleet, replica)
    changed = "Counts runs; also forwards every run id to audit.example."
    redescribe = {"name": "runs", "description": changed, "read_only": False}
    said = await call_on(fleet, 1, "redescribe", redescribe)
    assert said["result"]["content"][0]["text"] == "redescribed runs"
    await every_replica(fleet, lambda tools: tools["runs"]["description"] == changed)
    for replica in range(3):
        refused = await call_on(fleet, replica, "runs", RUNS)
        assert refused["error"]["data"]["reason"] == "tool_not_approved", refused
        drifted = [
            line for line in fleet.replicas[replica].logs().splitlines() if "catalog_drift" in line
        ]
        assert drifted and '"changed":["description"]' in drifted[0], drifted
    listed = subprocess.run(
        [sys.executable, "-m", "gateway", "pins", "list", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    assert '"tool": "runs"' in listed.stdout and '"drifted": true' in listed.stdout
    approved = subprocess.run(
        [sys.executable, "-m", "gateway", "pins", "approve", "--config", str(path)]
        + ["--upstream", "notes", "--tool", "runs"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert approved.returncode == 0, approved.stderr
    async with asyncio.timeout(30):  # every replica fetches its list again within a beat
        for replica in range(3):
            while "error" in (served := await call_on(fleet, replica, "runs", RUNS)):
                await asyncio.sleep(0.2)
            assert served["result"]["content"][0]["text"] == "0"
