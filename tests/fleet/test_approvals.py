"""Approvals on a fleet: three `mrtr-gateway serve` processes on one Redis, in front of a
real mcp 1.x server. A 2026 client's call of a tool that needs a person's approval is asked
on one replica and answered on another; the server's own count of the tool's runs is 0
after a decline, a cancel and an approval of `false`, and exactly 1 after an accept; the
approval, used once on one replica, is refused as a replay on every other.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestServer

from gateway.protocol.state import generate_key
from tests.peers.balancer import RoundRobin
from tests.peers.tooling import GatewayProcess, LegacyServer, RedisServer, started_together
from tests.support.fleet import Fleet
from tests.support.legacy import legacy_tool
from tests.support.outcome import LOG_TAIL, failed
from tests.support.wire import rpc

pytestmark = pytest.mark.peers

KEY = "gateway.approval"
APPROVE = {"action": "accept", "content": {"approve": True}}


@pytest.fixture
async def approving_fleet(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    redis_server: RedisServer,
    legacy: LegacyServer,
) -> AsyncIterator[Fleet]:
    config = {
        "store": {"url": redis_server.url, "key_prefix": f"t{uuid.uuid4().hex[:8]}:"},
        "sealing": {"audience": "approvals-test"},
        "upstreams": [
            {
                "name": "notes",
                "url": legacy.url,
                "path": "/mcp",
                "tools": {"delete_note": {"approval": "required"}},
            }
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
    fleet = Fleet(list(replicas), balancer, lb, "")
    try:
        yield fleet
    finally:
        await fleet.http.close()
        await lb.close()
        await asyncio.gather(*(asyncio.to_thread(r.stop) for r in replicas))
        if failed(request):
            for replica in replicas:
                print(f"--- {replica.replica_id} ---\n{replica.logs()[-LOG_TAIL:]}")


async def on(fleet: Fleet, replica: int, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    status, reply = await fleet.post(f"{fleet.replicas[replica].base}/mcp", body)
    assert isinstance(reply, dict)
    return status, reply


def delete(run_id: str) -> dict[str, Any]:
    arguments = {"note_id": "n-1", "run_id": run_id}
    return rpc("tools/call", {"name": "delete_note", "arguments": arguments})


def answering(body: dict[str, Any], state: str, answer: Any) -> dict[str, Any]:
    params = {**body["params"], "requestState": state, "inputResponses": {KEY: answer}}
    return {**body, "id": 2, "params": params}


async def runs(legacy: LegacyServer, run_id: str) -> int:
    """The server's own count of delete_note's runs (asked of it directly)."""
    return int(await legacy_tool(legacy.url, "runs", {"tool": "delete_note", "run_id": run_id}))


@pytest.mark.parametrize(
    "answer",
    [
        {"action": "decline"},
        {"action": "cancel"},
        {"action": "accept", "content": {"approve": False}},
    ],
    ids=["decline", "cancel", "false"],
)
async def test_an_answer_that_does_not_approve_runs_nothing_on_any_replica(
    approving_fleet: Fleet, legacy: LegacyServer, answer: dict[str, Any]
) -> None:
    fleet = approving_fleet
    run_id = uuid.uuid4().hex
    _, asked = await on(fleet, 0, delete(run_id))
    state = asked["result"]["requestState"]
    assert list(asked["result"]["inputRequests"]) == [KEY]
    status, reply = await on(fleet, 1, answering(delete(run_id), state, answer))
    assert status == 200 and reply["result"]["isError"] is True, reply
    # Used on one replica: a replay on another is refused.
    status, reply = await on(fleet, 2, answering(delete(run_id), state, APPROVE))
    assert status == 400 and reply["error"]["code"] == -32602
    assert await runs(legacy, run_id) == 0


async def test_an_approval_answered_on_another_replica_runs_the_tool_once(
    approving_fleet: Fleet, legacy: LegacyServer
) -> None:
    fleet = approving_fleet
    run_id = uuid.uuid4().hex
    _, asked = await on(fleet, 0, delete(run_id))
    state = asked["result"]["requestState"]
    assert await runs(legacy, run_id) == 0
    # The same approval sent to two replicas at once: one runs the tool, one is refused.
    replies = await asyncio.gather(
        on(fleet, 1, answering(delete(run_id), state, APPROVE)),
        on(fleet, 2, answering(delete(run_id), state, APPROVE)),
    )
    statuses = sorted(status for status, _ in replies)
    assert statuses == [200, 400], replies
    done = next(reply for status, reply in replies if status == 200)
    assert done["result"]["content"][0]["text"] == "deleted n-1"
    assert await runs(legacy, run_id) == 1
