"""A legacy session serves one caller, on each path that hands sessions out, against the
real mcp 1.x server that keeps a value per session (`remember` / `recall`): parked calls
that share sessions (`pool.calls_per_session`), tasks, plain requests. Each caller is a
bearer credential of its own (without `auth`, the principal is its `Authorization`)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from gateway.protocol.tasks import EXTENSION
from tests.support.inprocess import Gateway
from tests.support.wire import ALL_CAPS, rpc

pytestmark = pytest.mark.peers

WITH_TASKS = {**ALL_CAPS, "extensions": {EXTENSION: {}}}


async def post(gw: Gateway, who: str, body: dict[str, Any]) -> dict[str, Any]:
    _, reply, _ = await gw.post(body, headers={"Authorization": f"Bearer {who}"})
    reply = reply[-1] if isinstance(reply, list) else reply
    assert isinstance(reply, dict) and "result" in reply, reply
    result: dict[str, Any] = reply["result"]
    return result


async def tool(gw: Gateway, who: str, name: str, caps: Any = None, **arguments: Any) -> Any:
    return await post(gw, who, rpc("tools/call", {"name": name, "arguments": arguments}, caps=caps))


def text(result: dict[str, Any]) -> str:
    return str(result["content"][0]["text"]) if result["content"] else ""


async def test_parked_calls_share_sessions_only_with_calls_of_their_own_caller(
    make_gateway: Any,
) -> None:
    gw = await make_gateway(upstream={"pool": {"calls_per_session": 4, "min_idle": 0}})
    secret = uuid.uuid4().hex
    assert text(await tool(gw, "alice", "remember", value=secret)) == "remembered"
    parked = await tool(gw, "alice", "greet")  # parked on alice's session, room for 3 more
    assert parked["resultType"] == "input_required"
    # Bob's calls find a session with room: never alice's.
    assert [text(await tool(gw, "bob", "recall")) for _ in range(4)] == [""] * 4
    assert text(await tool(gw, "alice", "recall")) == secret  # alice's joins her own
    pool = gw.bridge.runner.pools["legacy"]
    carried = {s.principal: pool._sharing.calls(s) for s in pool._sharing.sessions()}
    assert set(carried.values()) == {1} and len(carried) == 1  # alice's parked call


async def test_a_task_runs_on_a_session_of_its_own_caller(make_gateway: Any) -> None:
    gw = await make_gateway(upstream={"tools": {"recall": {"task": "optional"}}})
    secret = uuid.uuid4().hex
    assert text(await tool(gw, "alice", "remember", value=secret)) == "remembered"

    async def recall_as_task(who: str) -> str:
        created = await tool(gw, who, "recall", caps=WITH_TASKS)
        assert created["resultType"] == "task"
        async with asyncio.timeout(20):
            while True:
                get = rpc("tasks/get", {"taskId": created["taskId"]}, caps=WITH_TASKS)
                task = await post(gw, who, get)
                if task["status"] == "completed":
                    return text(task["result"])
                await asyncio.sleep(task["pollIntervalMs"] / 1000)

    assert await recall_as_task("bob") == ""
    assert await recall_as_task("alice") == secret


async def test_plain_requests_ride_on_their_callers_sessions(make_gateway: Any) -> None:
    gw = await make_gateway(upstream={"pool": {"min_idle": 0}})
    for who in ("alice", "bob"):
        assert text(await tool(gw, who, "remember", value=who)) == "remembered"
    pool = gw.bridge.runner.pools["legacy"]
    before = pool.sessions_per_caller()
    for who in ("alice", "bob"):
        listed = await post(gw, who, rpc("tools/list"))
        assert any(t["name"] == "recall" for t in listed["tools"])
    # Each list went on its caller's idle session: no session was opened for it.
    assert pool.sessions_per_caller() == before and sum(before.values()) == 2
