"""Approvals on a fleet: three `mrtr-gateway serve` processes on one Redis, behind a
round-robin balancer, in front of a real mcp 1.x server. A call of a tool that needs a
person's approval is asked on one replica and answered on another, in both eras: a 2026
client's retry, and a 2025 client's answer to the `elicitation/create` the gateway pushed
on its call's stream (the answer's POST lands on the next replica, which hands it to the
one waiting). The server's own count of the tool's runs is 0 after a decline, a cancel
and an approval of `false`, and exactly 1 after an accept; a 2026 approval, used once on
one replica, is refused as a replay on every other.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.protocol.legacy_asking import question_of
from gateway.protocol.sse import Parser
from tests.peers.tooling import LegacyServer, RedisServer
from tests.support.fleet import Fleet, fleet_of
from tests.support.legacy import legacy_tool
from tests.support.legacy_wire import HEADERS, VERSION, call, initialize, send
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
    async with fleet_of(config, tmp_path, request) as fleet:
        yield fleet


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


# -- 2025 clients ------------------------------------------------------------------------

NOT_APPROVED = [
    {"action": "decline"},
    {"action": "cancel"},
    {"action": "accept", "content": {"approve": False}},
]


async def legacy_call(
    fleet: Fleet, legacy: LegacyServer, run_id: str, answer: dict[str, Any]
) -> tuple[str, str, dict[str, Any]]:
    """A 2025 client's call of delete_note through the balancer, its approval answered with
    `answer`: the replica that asked, the one the answer reached, and the call's answer."""
    http = fleet.http
    opened = await send(http, fleet.url(), initialize(capabilities={"elicitation": {}}))
    session = opened.headers["Mcp-Session-Id"]
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await send(http, fleet.url(), initialized, session=session)).status == 202
    headers = {**HEADERS, "Mcp-Session-Id": session, "MCP-Protocol-Version": VERSION}
    body = json.dumps(call("delete_note", rid=9, note_id="n-1", run_id=run_id)).encode()
    async with asyncio.timeout(30):
        # A fresh replica asks no 2025 client anything until its first look at the
        # releases present (a replica of the previous release would pass the answer on to
        # the server): 503, send again. It looks as it beats.
        while (response := await http.post(fleet.url(), data=body, headers=headers)).status == 503:
            assert (await response.json())["error"]["data"]["reason"] == "upgrading"
            await asyncio.sleep(1.0)  # the fleet's heartbeat_s
    async with response:
        asked_by = fleet.balancer.served[-1].backend
        parser = Parser()

        async def next_message() -> Any:
            async with asyncio.timeout(30):
                while True:
                    frame = await response.content.readuntil(b"\n\n")
                    found = [json.loads(e.data) for e in parser.feed(frame) if e.data]
                    if found:
                        return found[0]

        question = await next_message()
        assert question["method"] == "elicitation/create", question
        assert "delete_note" in question["params"]["message"]
        named = question_of(question["id"])
        assert named is not None
        assert await runs(legacy, run_id) == 0  # asked before anything went upstream
        reply = {"jsonrpc": "2.0", "id": question["id"], "result": answer}
        answered = await send(http, fleet.url(), reply, session=session)
        assert answered.status == 202
        answered_by = fleet.balancer.served[-1].backend
        ended = await next_message()
    return asked_by, answered_by, ended


@pytest.mark.parametrize("answer", NOT_APPROVED, ids=["decline", "cancel", "false"])
async def test_a_2025_client_that_does_not_approve_runs_nothing(
    approving_fleet: Fleet, legacy: LegacyServer, answer: dict[str, Any]
) -> None:
    run_id = uuid.uuid4().hex
    asked_by, answered_by, ended = await legacy_call(approving_fleet, legacy, run_id, answer)
    assert asked_by != answered_by
    assert ended["id"] == 9 and ended["result"]["isError"] is True, ended
    assert await runs(legacy, run_id) == 0


async def test_a_2025_clients_approval_answered_on_another_replica_runs_the_tool_once(
    approving_fleet: Fleet, legacy: LegacyServer
) -> None:
    run_id = uuid.uuid4().hex
    asked_by, answered_by, ended = await legacy_call(approving_fleet, legacy, run_id, APPROVE)
    assert asked_by != answered_by
    assert (
        ended
        == {
            "jsonrpc": "2.0",
            "id": 9,
            "result": {"content": [{"type": "text", "text": "deleted n-1"}], "isError": False},
        }
        or ended["result"]["content"][0]["text"] == "deleted n-1"
    ), ended
    assert await runs(legacy, run_id) == 1
