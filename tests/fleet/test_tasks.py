"""Tasks on a fleet: three `mrtr-gateway serve` processes on one Redis behind a
round-robin balancer (the fleet of `test_fleet`), in front of a real mcp 1.x server.

A task created through one replica is polled, answered and cancelled through the
others (the `Mcp-Name` header carries its id). Its owner killed with SIGKILL: a task
whose call was running ends `failed` with a clear error instead of staying `working`;
one whose call waited for answers is carried on by the replica the answers reach,
as far as the call allows (taken over where the upstream resumes its stream).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from gateway.protocol.tasks import EXTENSION
from tests.peers.tooling import LegacyServer, RedisServer
from tests.support.fleet import Fleet, until_dead
from tests.support.legacy import await_journal, legacy_tool
from tests.support.wire import ALL_CAPS, rpc

pytestmark = pytest.mark.peers

WITH_TASKS = {**ALL_CAPS, "extensions": {EXTENSION: {}}}
#: How long a task may take to show what it promises (its status, its open questions):
#: no timing is asserted, only that it comes.
SHOWN_WITHIN_S = 30.0


@pytest.fixture
async def fleet(fleet: Fleet) -> Fleet:
    """The fleet of `conftest`, once every replica serves tasks. A fresh replica holds
    tasks back until its first look at the releases present (one of the previous release,
    which knows no tasks, may be among them): a call it serves before is a plain call."""
    for replica in fleet.replicas:
        await serving_tasks(fleet, replica.base + "/mcp")
    return fleet


async def serving_tasks(fleet: Fleet, url: str) -> None:
    """Until the replica at `url` makes a task of a call that may be one, bounded: it
    has looked at the fleet (it does so as it beats)."""
    body = rpc("tools/call", {"name": "sleepy", "arguments": {"seconds": 0}}, caps=WITH_TASKS)
    async with asyncio.timeout(SHOWN_WITHIN_S):
        while True:
            status, reply = await fleet.post(url, body)
            assert status == 200, (status, reply)
            if reply["result"]["resultType"] == "task":
                return
            await asyncio.sleep(1.0)  # the fleet's heartbeat_s: it looks again then


async def tasks_rpc(fleet: Fleet, url: str, method: str, params: dict[str, Any]) -> dict:
    status, reply = await fleet.post(url, rpc(method, params, caps=WITH_TASKS))
    assert isinstance(reply, dict), (status, reply)
    return reply


async def create(fleet: Fleet, tool: str, arguments: dict[str, Any]) -> tuple[str, int]:
    """A task of `tool`, created through the balancer: its id and the owner's index."""
    before = len(fleet.balancer.served)
    body = rpc("tools/call", {"name": tool, "arguments": arguments}, caps=WITH_TASKS)
    status, reply = await fleet.post(fleet.url(), body)
    assert status == 200 and reply["result"]["resultType"] == "task", reply
    (served,) = [s for s in fleet.balancer.served[before:] if s.method == "tools/call"]
    return reply["result"]["taskId"], served.backend


async def until_shown(
    fleet: Fleet, url: str, task_id: str, shown: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """Poll `tasks/get` through `url` (the balancer: a replica each time), at the task's
    own `pollIntervalMs`, until what it shows is `shown`, bounded."""
    async with asyncio.timeout(SHOWN_WITHIN_S):
        while True:
            task = (await tasks_rpc(fleet, url, "tasks/get", {"taskId": task_id}))["result"]
            if shown(task):
                return task
            await asyncio.sleep(task["pollIntervalMs"] / 1000)


async def until(fleet: Fleet, url: str, task_id: str, *statuses: str) -> dict[str, Any]:
    """Poll until the task shows one of `statuses` (`until_shown`)."""
    return await until_shown(fleet, url, task_id, lambda task: task["status"] in statuses)


def asked(task: dict[str, Any]) -> set[str]:
    """The keys of the questions a task shows open."""
    return set(task["inputRequests"]) if task["status"] == "input_required" else set()


def backends(fleet: Fleet, since: int, method: str) -> set[int]:
    return {s.backend for s in fleet.balancer.served[since:] if s.method == method}


async def test_a_task_is_answered_in_parts_through_replicas_other_than_its_owner(
    fleet: Fleet,
) -> None:
    task_id, owner = await create(fleet, "two_at_once", {"run_id": uuid.uuid4().hex})
    before = len(fleet.balancer.served)
    # Both questions are shown, on whichever replica, however late the second comes.
    shown = await until_shown(fleet, fleet.url(), task_id, lambda task: len(asked(task)) == 2)
    others = [r.base + "/mcp" for i, r in enumerate(fleet.replicas) if i != owner]
    answers = {}
    for key, request in shown["inputRequests"].items():
        field = next(iter(request["params"]["requestedSchema"]["properties"]))
        answers[key] = {"action": "accept", "content": {field: f"v-{key}"}}
    first, second = sorted(answers)
    ack = await tasks_rpc(
        fleet,
        others[0],
        "tasks/update",
        {"taskId": task_id, "inputResponses": {first: answers[first]}},
    )
    assert ack["result"] == {"resultType": "complete"}
    # The owner takes the answer (pushed into its inbox): then only the other is asked.
    await until_shown(fleet, fleet.url(), task_id, lambda task: asked(task) == {second})
    await tasks_rpc(
        fleet,
        others[1],
        "tasks/update",
        {"taskId": task_id, "inputResponses": {second: answers[second]}},
    )
    done = await until(fleet, fleet.url(), task_id, "completed")
    text = done["result"]["content"][0]["text"]
    assert f"v-{first}" in text and f"v-{second}" in text
    assert len(backends(fleet, before, "tasks/get")) == 3  # polled on every replica


async def test_a_task_is_cancelled_through_another_replica_and_its_call_upstream(
    fleet: Fleet, legacy: LegacyServer
) -> None:
    run_id = uuid.uuid4().hex
    task_id, owner = await create(fleet, "hold", {"run_id": run_id})
    await until(fleet, fleet.url(), task_id, "input_required")
    other = fleet.replicas[(owner + 1) % 3].base + "/mcp"
    ack = await tasks_rpc(fleet, other, "tasks/cancel", {"taskId": task_id})
    assert ack["result"] == {"resultType": "complete"}
    cancelled = await until(fleet, fleet.url(), task_id, "cancelled", "failed", "completed")
    assert cancelled["status"] == "cancelled"
    assert "cancelled" in await await_journal(legacy.url, run_id, "cancelled")


async def test_the_routing_name_must_be_the_task_id_on_every_replica(fleet: Fleet) -> None:
    task_id, _ = await create(fleet, "sleepy", {"seconds": 30})
    for _ in range(3):
        body = rpc("tasks/get", {"taskId": task_id}, caps=WITH_TASKS)
        status, reply = await fleet.post(fleet.url(), body, **{"Mcp-Name": "task-someone-else"})
        assert (status, reply["error"]["code"]) == (400, -32020)
    await tasks_rpc(fleet, fleet.url(), "tasks/cancel", {"taskId": task_id})


async def test_a_task_whose_owner_is_killed_ends_failed_never_stuck_working(
    fleet: Fleet, redis_server: RedisServer
) -> None:
    task_id, owner_index = await create(fleet, "sleepy", {"seconds": 120})
    owner = fleet.replicas[owner_index]
    survivor = fleet.replicas[(owner_index + 1) % 3].base + "/mcp"
    working = (await tasks_rpc(fleet, survivor, "tasks/get", {"taskId": task_id}))["result"]
    assert working["status"] == "working"
    owner.kill9()
    await until_dead(fleet, redis_server.url, owner)
    failed = await until(fleet, survivor, task_id, "failed", "completed", "cancelled")
    assert failed["status"] == "failed"
    assert failed["error"]["code"] == -32603 and "replica" in failed["error"]["message"]
    # Every replica left says the same: the failure is in the record, not one replica's view.
    other = fleet.replicas[(owner_index + 2) % 3].base + "/mcp"
    again = (await tasks_rpc(fleet, other, "tasks/get", {"taskId": task_id}))["result"]
    assert again["status"] == "failed"


async def test_a_task_waiting_for_answers_is_carried_on_after_its_owner_is_killed(
    fleet: Fleet, redis_server: RedisServer, resumable: LegacyServer
) -> None:
    """The upstream resumes its streams (an event store): the call is taken over where
    it waits, and its body runs once."""
    run_id = uuid.uuid4().hex
    body = rpc("tools/call", {"name": "greet", "arguments": {"run_id": run_id}}, caps=WITH_TASKS)
    owner, survivor = fleet.replicas[0], fleet.replicas[1].base + "/resumable"
    status, reply = await fleet.post(owner.base + "/resumable", body)
    task_id = reply["result"]["taskId"]
    asked = await until(fleet, survivor, task_id, "input_required")
    owner.kill9()
    await until_dead(fleet, redis_server.url, owner)
    # Still waiting for its answer on every replica left: nothing of it was lost.
    assert (await tasks_rpc(fleet, survivor, "tasks/get", {"taskId": task_id}))["result"][
        "status"
    ] == "input_required"
    (key,) = asked["inputRequests"]
    answer = {"action": "accept", "content": {"username": "alice"}}
    update = {"taskId": task_id, "inputResponses": {key: answer}}
    ack = await tasks_rpc(fleet, survivor, "tasks/update", update)
    assert ack["result"] == {"resultType": "complete"}
    done = await until(fleet, fleet.replicas[2].base + "/resumable", task_id, "completed", "failed")
    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"] == "Hello, alice!"
    runs = await legacy_tool(resumable.url, "runs", {"tool": "greet", "run_id": run_id})
    assert runs == "1"
    await fleet.replicas[1].await_line('"event":"task_carried_on"', timeout=30)
    await fleet.replicas[1].await_line('"event":"call_taken_over"', timeout=30)


async def test_a_task_whose_waiting_call_cannot_go_on_fails_when_answered(
    fleet: Fleet, redis_server: RedisServer, legacy: LegacyServer
) -> None:
    """No event store, not replay-safe: the call died with its owner; the answer that
    would resume it learns so, and the task fails saying it was lost."""
    run_id = uuid.uuid4().hex
    body = rpc("tools/call", {"name": "hold", "arguments": {"run_id": run_id}}, caps=WITH_TASKS)
    owner, survivor = fleet.replicas[0], fleet.replicas[1].base + "/mcp"
    status, reply = await fleet.post(owner.base + "/mcp", body)
    task_id = reply["result"]["taskId"]
    asked = await until(fleet, survivor, task_id, "input_required")
    owner.kill9()
    await until_dead(fleet, redis_server.url, owner)
    (key,) = asked["inputRequests"]
    answer = {"action": "accept", "content": {"confirm": True}}
    update = {"taskId": task_id, "inputResponses": {key: answer}}
    await tasks_rpc(fleet, survivor, "tasks/update", update)
    failed = await until(fleet, survivor, task_id, "failed", "completed")
    assert failed["status"] == "failed" and failed["error"]["code"] == -32603
    assert "lost" in failed["error"]["message"]
    assert await legacy_tool(legacy.url, "runs", {"tool": "hold", "run_id": run_id}) == "1"
