"""A legacy server that is itself task-capable (2025-11-25 tasks), through the gateway.

server-everything (npm) marks `simulate-research-query` `execution.taskSupport:
"required"`: a 2026 client calling it without the tasks extension is told to declare it
(-32021); with it, the gateway calls the tool with legacy task augmentation and serves
the legacy task as a 2026 task, its ambiguity question included.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gateway.protocol.tasks import EXTENSION
from tests.peers.npm import EverythingServer
from tests.support.inprocess import Gateway
from tests.support.wire import ALL_CAPS, rpc

WITH_TASKS = {**ALL_CAPS, "extensions": {EXTENSION: {}}}
QUERY = {"name": "simulate-research-query", "arguments": {"topic": "python", "ambiguous": True}}


@pytest.fixture(scope="module")
def everything() -> Iterator[EverythingServer]:
    server = EverythingServer("streamableHttp")
    yield server
    server.stop()


@pytest.fixture
async def gw(make_gateway: Callable[..., Any], everything: EverythingServer) -> Gateway:
    gateway: Gateway = await make_gateway(everything.url)
    return gateway


async def get(gw: Gateway, task_id: str) -> dict[str, Any]:
    _, reply, _ = await gw.post(rpc("tasks/get", {"taskId": task_id}, caps=WITH_TASKS))
    return dict(reply["result"])


async def test_discover_advertises_the_extension_for_a_server_that_runs_tasks(
    gw: Gateway,
) -> None:
    found = (await gw.final(rpc("server/discover")))["result"]["capabilities"]
    assert found["extensions"] == {EXTENSION: {}} and "tasks" not in found


async def test_a_legacy_task_tool_needs_the_extension(gw: Gateway) -> None:
    reply = await gw.final(rpc("tools/call", QUERY))
    assert reply["error"]["code"] == -32021
    assert reply["error"]["data"]["requiredCapabilities"] == {"extensions": {EXTENSION: {}}}


async def test_simulate_research_query_completes_as_a_task_after_its_question(
    gw: Gateway,
) -> None:
    created = (await gw.final(rpc("tools/call", QUERY, caps=WITH_TASKS)))["result"]
    assert created["resultType"] == "task" and created["status"] == "working", created
    task_id = created["taskId"]
    seen = [created["status"]]
    async with asyncio.timeout(60):
        while True:
            task = await get(gw, task_id)
            if task["status"] != seen[-1]:
                seen.append(task["status"])
            if task["status"] == "input_required":
                break
            assert task["status"] == "working", task
            await asyncio.sleep(task["pollIntervalMs"] / 1000)
    ((key, question),) = task["inputRequests"].items()
    assert question["method"] == "elicitation/create"
    assert "python" in question["params"]["message"]
    assert "_meta" not in question["params"]  # no related-task on the 2026 side
    answer = {"action": "accept", "content": {"interpretation": "snake"}}
    update = rpc(
        "tasks/update", {"taskId": task_id, "inputResponses": {key: answer}}, caps=WITH_TASKS
    )
    _, ack, _ = await gw.post(update)
    assert ack["result"] == {"resultType": "complete"}
    async with asyncio.timeout(60):
        while task["status"] not in ("completed", "failed", "cancelled"):
            await asyncio.sleep(task["pollIntervalMs"] / 1000)
            task = await get(gw, task_id)
            if task["status"] != seen[-1]:
                seen.append(task["status"])
    # Polled: the moment of working between the answer and the end may be missed.
    assert seen in (
        ["working", "input_required", "working", "completed"],
        ["working", "input_required", "completed"],
    ), seen
    text = task["result"]["content"][0]["text"]
    assert "Research Report: python (snake)" in text
    assert (
        "_meta" not in task["result"]
        or "io.modelcontextprotocol/related-task" not in (task["result"]["_meta"])
    )


async def test_a_legacy_task_cancelled_is_cancelled_at_once(gw: Gateway) -> None:
    created = (await gw.final(rpc("tools/call", QUERY, caps=WITH_TASKS)))["result"]
    _, ack, _ = await gw.post(rpc("tasks/cancel", {"taskId": created["taskId"]}, caps=WITH_TASKS))
    assert ack["result"] == {"resultType": "complete"}
    assert (await get(gw, created["taskId"]))["status"] == "cancelled"
