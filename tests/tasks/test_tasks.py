"""Legacy tool calls served as tasks, through a gateway in front of a real mcp 1.x server.

The client side is the 2026-07-28 wire as the conformance suite speaks it (no SDK
drives the tasks extension yet): `tools/call` declaring the extension in its own
`_meta`, then `tasks/get`, `tasks/update` and `tasks/cancel` with `Mcp-Name`, polled at
the task's own `pollIntervalMs` as a client polls. What is a matter of time (a task's
wait, its TTL, questions left unanswered, the caps given back) is told as transcripts on
a manual clock in `test_task_transcripts.py`; these check the real server's side.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from gateway.protocol.formats import LEVEL, PREVIOUS
from gateway.protocol.tasks import EXTENSION
from tests.support.inprocess import Gateway
from tests.support.legacy import await_journal, body_runs
from tests.support.wire import ALL_CAPS, rpc

WITH_TASKS = {**ALL_CAPS, "extensions": {EXTENSION: {}}}
TOOLS = {
    "sleepy": {"task": "optional"},
    "two_at_once": {"task": "optional"},
    "hold": {"task": {"support": "optional", "ttl_s": 600}},
    "greet": {"task": {"support": "required", "after_s": 5}},
    "progress_then_ask": {"task": "optional"},
}


@pytest.fixture
async def gw(make_gateway: Callable[..., Any]) -> Gateway:
    gateway: Gateway = await make_gateway(upstream={"tools": TOOLS})
    return gateway


async def call(gw: Gateway, name: str, arguments: dict[str, Any], **kw: Any) -> dict[str, Any]:
    reply = await gw.final(rpc("tools/call", {"name": name, "arguments": arguments}, **kw))
    assert isinstance(reply, dict)
    return reply


async def tasks_rpc(
    gw: Gateway, method: str, params: dict[str, Any], *, caps: Any = WITH_TASKS, auth: str = ""
) -> dict[str, Any]:
    headers = {"Authorization": auth} if auth else None
    _, reply, _ = await gw.post(rpc(method, params, caps=caps), headers=headers)
    assert isinstance(reply, dict)
    return reply


async def until_shown(
    gw: Gateway, task_id: str, shown: Callable[[dict[str, Any]], bool], timeout: float = 20.0
) -> dict[str, Any]:
    """Poll `tasks/get` (at the task's own interval) until what it shows is `shown`."""
    async with asyncio.timeout(timeout):
        while True:
            task = (await tasks_rpc(gw, "tasks/get", {"taskId": task_id}))["result"]
            if shown(task):
                return task
            await asyncio.sleep(task["pollIntervalMs"] / 1000)


async def until(gw: Gateway, task_id: str, *statuses: str, timeout: float = 20.0) -> dict:
    """Poll until the task shows one of `statuses` (`until_shown`)."""
    return await until_shown(gw, task_id, lambda task: task["status"] in statuses, timeout)


def text_of(result: dict[str, Any]) -> str:
    return str(result["content"][0]["text"])


async def test_a_long_call_becomes_a_task_that_completes_with_its_result(gw: Gateway) -> None:
    created = (await call(gw, "sleepy", {"seconds": 0.5}, caps=WITH_TASKS))["result"]
    assert created["resultType"] == "task" and created["status"] == "working"
    assert "result" not in created and "requestState" not in created
    # Found at once: the record was written before the client heard of the task.
    first = (await tasks_rpc(gw, "tasks/get", {"taskId": created["taskId"]}))["result"]
    assert first["taskId"] == created["taskId"] and first["resultType"] == "complete"
    done = await until(gw, created["taskId"], "completed")
    assert text_of(done["result"]) == "slept 0.5"
    assert "resultType" not in done["result"]


async def test_without_the_extension_an_optional_tool_answers_as_before(gw: Gateway) -> None:
    reply = await call(gw, "sleepy", {"seconds": 0})
    assert reply["result"]["resultType"] == "complete" and "taskId" not in reply["result"]


async def test_a_required_tool_refuses_a_client_without_the_extension(gw: Gateway) -> None:
    reply = await call(gw, "greet", {})
    assert reply["error"]["code"] == -32021
    assert reply["error"]["data"]["requiredCapabilities"] == {"extensions": {EXTENSION: {}}}


async def test_tasks_methods_need_the_extension_before_anything_else(gw: Gateway) -> None:
    for method in ("tasks/get", "tasks/update", "tasks/cancel"):
        reply = await tasks_rpc(gw, method, {"taskId": "nope"}, caps=ALL_CAPS)
        assert reply["error"]["code"] == -32021, method


async def test_an_early_question_is_an_mrtr_round_and_its_answer_a_task(gw: Gateway) -> None:
    """A required tool asking within `after_s`: its question comes back as an ordinary
    round; the retry that finishes it is answered as a task already completed."""
    run_id = uuid.uuid4().hex
    first = (await call(gw, "greet", {"run_id": run_id}, caps=WITH_TASKS))["result"]
    assert first["resultType"] == "input_required" and "taskId" not in first
    (key,) = first["inputRequests"]
    answer = {"action": "accept", "content": {"username": "ada"}}
    params = {
        "name": "greet",
        "arguments": {"run_id": run_id},
        "requestState": first["requestState"],
        "inputResponses": {key: answer},
    }
    created = (await gw.final(rpc("tools/call", params, caps=WITH_TASKS)))["result"]
    assert created["resultType"] == "task" and "requestState" not in created
    done = await until(gw, created["taskId"], "completed")
    assert text_of(done["result"]) == "Hello, ada!"


async def test_partial_answers_reach_the_call_as_they_arrive(gw: Gateway) -> None:
    created = (await call(gw, "two_at_once", {}, caps=WITH_TASKS))["result"]
    task_id = created["taskId"]
    # Both questions shown, however late the second comes (tests/tasks/test_late_questions.py).
    asked = await until_shown(
        gw,
        task_id,
        lambda task: task["status"] == "input_required" and len(task["inputRequests"]) == 2,
    )
    first, second = sorted(asked["inputRequests"])
    schema = asked["inputRequests"][first]["params"]["requestedSchema"]
    field = next(iter(schema["properties"]))
    ack = await tasks_rpc(
        gw,
        "tasks/update",
        {
            "taskId": task_id,
            "inputResponses": {first: {"action": "accept", "content": {field: "x"}}},
        },
    )
    assert ack["result"] == {"resultType": "complete"}
    now = (await tasks_rpc(gw, "tasks/get", {"taskId": task_id}))["result"]
    assert now["status"] == "input_required" and set(now["inputRequests"]) == {second}
    schema = now["inputRequests"][second]["params"]["requestedSchema"]
    field = next(iter(schema["properties"]))
    await tasks_rpc(
        gw,
        "tasks/update",
        {
            "taskId": task_id,
            "inputResponses": {second: {"action": "accept", "content": {field: "y"}}},
        },
    )
    done = await until(gw, task_id, "completed")
    assert "x" in text_of(done["result"]) and "y" in text_of(done["result"])


async def test_cancelling_a_task_waiting_for_input_cancels_the_call_upstream(gw: Gateway) -> None:
    run_id = uuid.uuid4().hex
    created = (await call(gw, "hold", {"run_id": run_id}, caps=WITH_TASKS))["result"]
    await until(gw, created["taskId"], "input_required")
    ack = await tasks_rpc(gw, "tasks/cancel", {"taskId": created["taskId"]})
    assert ack["result"] == {"resultType": "complete"}
    task = (await tasks_rpc(gw, "tasks/get", {"taskId": created["taskId"]}))["result"]
    assert task["status"] == "cancelled"
    assert "cancelled" in await await_journal(gw.upstream_url, run_id, "cancelled")
    again = await tasks_rpc(gw, "tasks/cancel", {"taskId": created["taskId"]})
    assert again["result"] == {"resultType": "complete"}


async def test_cancelling_a_working_task_cancels_the_call_upstream(gw: Gateway) -> None:
    run_id = uuid.uuid4().hex
    created = await call(gw, "sleepy", {"seconds": 60, "run_id": run_id}, caps=WITH_TASKS)
    task_id = created["result"]["taskId"]
    async with asyncio.timeout(20):  # cancelled once the tool runs upstream
        while await body_runs(gw, "sleepy", run_id) == 0:
            await asyncio.sleep(0.05)
    await tasks_rpc(gw, "tasks/cancel", {"taskId": task_id})
    assert (await tasks_rpc(gw, "tasks/get", {"taskId": task_id}))["result"]["status"] == (
        "cancelled"
    )
    assert "cancelled" in await await_journal(gw.upstream_url, run_id, "cancelled")


async def test_progress_shows_as_the_status_message(gw: Gateway) -> None:
    created = (await call(gw, "progress_then_ask", {"steps": 2}, caps=WITH_TASKS))["result"]
    asked = await until(gw, created["taskId"], "input_required")
    assert asked["statusMessage"] == "before 2"  # the latest progress, said before it asked
    (key,) = asked["inputRequests"]
    answer = {"action": "accept", "content": {"confirm": True}}
    await tasks_rpc(
        gw, "tasks/update", {"taskId": created["taskId"], "inputResponses": {key: answer}}
    )
    done = await until(gw, created["taskId"], "completed")
    assert text_of(done["result"]) == "done (accept)" and "statusMessage" not in done


async def test_another_callers_task_is_unknown(gw: Gateway) -> None:
    created = (await call(gw, "sleepy", {"seconds": 5}, caps=WITH_TASKS))["result"]
    for method, extra in (
        ("tasks/get", {}),
        ("tasks/cancel", {}),
        ("tasks/update", {"inputResponses": {}}),
    ):
        reply = await tasks_rpc(
            gw, method, {"taskId": created["taskId"], **extra}, auth="Bearer someone-else"
        )
        assert reply["error"]["code"] == -32602, method
    # ...and it was not cancelled by the stranger.
    task = (await tasks_rpc(gw, "tasks/get", {"taskId": created["taskId"]}))["result"]
    assert task["status"] == "working"
    await tasks_rpc(gw, "tasks/cancel", {"taskId": created["taskId"]})


async def test_an_unknown_task_is_invalid_params(gw: Gateway) -> None:
    reply = await tasks_rpc(gw, "tasks/get", {"taskId": "task-does-not-exist"})
    assert reply["error"]["code"] == -32602


async def test_a_result_over_the_cap_fails_the_task(make_gateway: Callable[..., Any]) -> None:
    gw: Gateway = await make_gateway(
        upstream={"tools": {"sleepy": {"task": "optional"}}},
        limits={"max_task_result_bytes": 10},
    )
    created = (await call(gw, "sleepy", {"seconds": 0.1}, caps=WITH_TASKS))["result"]
    failed = await until(gw, created["taskId"], "failed", "completed")
    assert failed["status"] == "failed" and failed["error"]["code"] == -32603


async def test_discover_advertises_the_extension_only_with_a_task_policy(
    gw: Gateway, make_gateway: Callable[..., Any]
) -> None:
    found = (await gw.final(rpc("server/discover")))["result"]["capabilities"]
    assert found["extensions"] == {EXTENSION: {}} and "tasks" not in found
    plain: Gateway = await make_gateway()
    found = (await plain.final(rpc("server/discover")))["result"]["capabilities"]
    assert "extensions" not in found and "tasks" not in found


async def test_a_malformed_answer_is_refused_and_the_question_stays_asked(gw: Gateway) -> None:
    created = (await call(gw, "hold", {"run_id": uuid.uuid4().hex}, caps=WITH_TASKS))["result"]
    asked = await until(gw, created["taskId"], "input_required")
    (key,) = asked["inputRequests"]
    bad = {"taskId": created["taskId"], "inputResponses": {key: {"action": "maybe"}}}
    reply = await tasks_rpc(gw, "tasks/update", bad)
    assert reply["error"]["code"] == -32602
    still = (await tasks_rpc(gw, "tasks/get", {"taskId": created["taskId"]}))["result"]
    assert still["status"] == "input_required" and set(still["inputRequests"]) == {key}
    await tasks_rpc(gw, "tasks/cancel", {"taskId": created["taskId"]})


async def test_while_a_replica_of_the_previous_release_lives_no_call_becomes_a_task(
    make_gateway: Callable[..., Any],
) -> None:
    """Replicas of the previous release know no tasks (their `tasks/get` is -32601): while
    one of them beats (as this replica's fleet level saw at its last look), an optional
    tool answers as it would without a policy, and a required one is refused for now
    (503, `upgrading`); once none is left, calls become tasks again."""
    gw: Gateway = await make_gateway(upstream={"tools": TOOLS})
    level = gw.bridge.suspender.level
    level.observe([PREVIOUS, LEVEL], 0.0)  # a replica of the previous release beats
    reply = await call(gw, "sleepy", {"seconds": 0.2}, caps=WITH_TASKS)
    assert reply["result"]["resultType"] == "complete" and "taskId" not in reply["result"]
    assert text_of(reply["result"]) == "slept 0.2"
    status, refused, response = await gw.post(
        rpc("tools/call", {"name": "greet", "arguments": {}}, caps=WITH_TASKS)
    )
    assert status == 503 and response.headers.get("Retry-After")
    assert refused["error"]["code"] == -32603
    assert refused["error"]["data"]["reason"] == "upgrading"
    level.observe([LEVEL], 1.0)  # it is gone
    created = (await call(gw, "sleepy", {"seconds": 0.2}, caps=WITH_TASKS))["result"]
    assert created["resultType"] == "task"
    assert text_of((await until(gw, created["taskId"], "completed"))["result"]) == "slept 0.2"
