"""The gateway asks first, for 2026 clients, against the real mcp 1.x server: a tool that
needs a person's approval is answered `input_required` with the gateway's own question, and
the server's own count of the tool's runs says what reached it: nothing after a decline, a
cancel, a `false`, a retry with other arguments or a replayed approval; exactly one run
after an approval, whose own questions then follow as ordinary rounds. `approval_ttl_s`
covers the next calls until the tool's definition changes; a task's first question is the
approval.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from gateway.protocol import approval
from gateway.protocol.tasks import EXTENSION
from tests.peers.tooling import LegacyClient, LegacyServer
from tests.support.inprocess import Gateway
from tests.support.legacy import body_runs
from tests.support.legacy_wire import call, open_session, send
from tests.support.wire import ALL_CAPS, rpc

pytestmark = pytest.mark.peers

KEY = "gateway.approval"
APPROVE = {"action": "accept", "content": {"approve": True}}
NOT_APPROVED = [
    {"action": "decline"},
    {"action": "cancel"},
    {"action": "accept", "content": {"approve": False}},
]
REQUIRED = {"tools": {"delete_note": {"approval": "required"}}}


@pytest.fixture(scope="module")
def notifying() -> Iterator[LegacyServer]:
    """A server of its own, whose tools' definitions a test changes."""
    server = LegacyServer(notifying=True)
    yield server
    server.stop()


async def modern(gw: Gateway, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    status, reply, _ = await gw.post(body)
    reply = reply[-1] if isinstance(reply, list) else reply
    assert isinstance(reply, dict)
    return status, reply


def delete(run_id: str, note: str = "n-1", **params: Any) -> dict[str, Any]:
    arguments = {"note_id": note, "run_id": run_id}
    return rpc("tools/call", {"name": "delete_note", "arguments": arguments, **params})


async def asked(gw: Gateway, body: dict[str, Any]) -> dict[str, Any]:
    """The approval round a call is answered with (nothing went upstream)."""
    status, reply = await modern(gw, body)
    result = reply["result"]
    assert status == 200 and result["resultType"] == "input_required", reply
    assert list(result["inputRequests"]) == [KEY]
    assert result["requestState"].startswith("ap1.")
    return dict(result)


def answering(body: dict[str, Any], round_: dict[str, Any], answer: Any) -> dict[str, Any]:
    params = dict(body["params"])
    params.update(requestState=round_["requestState"], inputResponses={KEY: answer})
    return {**body, "id": 2, "params": params}


@pytest.mark.parametrize("answer", NOT_APPROVED, ids=["decline", "cancel", "false"])
async def test_a_call_not_approved_never_reaches_the_server(
    make_gateway: Any, answer: dict[str, Any]
) -> None:
    gw = await make_gateway(upstream=REQUIRED)
    run_id = uuid.uuid4().hex
    first = delete(run_id)
    round_ = await asked(gw, first)
    question = round_["inputRequests"][KEY]
    assert question["method"] == "elicitation/create"
    params = question["params"]
    assert params["mode"] == "form" and "delete_note" in params["message"]
    assert '"note_id": "n-1"' in params["message"]
    assert params["requestedSchema"]["properties"]["approve"]["type"] == "boolean"
    status, reply = await modern(gw, answering(first, round_, answer))
    result = reply["result"]
    assert status == 200 and result["resultType"] == "complete" and result["isError"] is True
    assert "not run" in result["content"][0]["text"]
    assert await body_runs(gw, "delete_note", run_id) == 0


async def test_an_approved_call_runs_once_and_its_approval_is_used_once(
    make_gateway: Any,
) -> None:
    gw = await make_gateway(upstream=REQUIRED)
    run_id = uuid.uuid4().hex
    first = delete(run_id)
    round_ = await asked(gw, first)
    assert await body_runs(gw, "delete_note", run_id) == 0  # asking touched nothing
    # Other arguments with this approval: refused, nothing runs.
    other = answering(delete(run_id, note="n-2"), round_, APPROVE)
    status, reply = await modern(gw, other)
    assert status == 400 and reply["error"]["code"] == -32602, reply
    # A retry without the answer: refused too.
    bare = answering(first, round_, APPROVE)
    del bare["params"]["inputResponses"]
    status, reply = await modern(gw, bare)
    assert status == 400 and reply["error"]["code"] == -32602
    assert await body_runs(gw, "delete_note", run_id) == 0
    status, reply = await modern(gw, answering(first, round_, APPROVE))
    assert status == 200 and reply["result"]["content"][0]["text"] == "deleted n-1", reply
    assert await body_runs(gw, "delete_note", run_id) == 1
    # The same approval again: replayed, refused.
    status, reply = await modern(gw, answering(first, round_, APPROVE))
    assert status == 400 and reply["error"]["code"] == -32602
    assert await body_runs(gw, "delete_note", run_id) == 1


async def test_the_tools_own_question_follows_the_approval(make_gateway: Any) -> None:
    gw = await make_gateway(upstream={"tools": {"increment_counter": {"approval": "required"}}})
    run_id = uuid.uuid4().hex
    first = rpc("tools/call", {"name": "increment_counter", "arguments": {"run_id": run_id}})
    round_ = await asked(gw, first)
    _, reply = await modern(gw, answering(first, round_, APPROVE))
    own = reply["result"]
    assert own["resultType"] == "input_required" and KEY not in own["inputRequests"], own
    (key,) = own["inputRequests"]
    params = dict(first["params"])
    params.update(
        requestState=own["requestState"],
        inputResponses={key: {"action": "accept", "content": {"confirm": True}}},
    )
    _, reply = await modern(gw, {**first, "id": 3, "params": params})
    assert reply["result"]["content"][0]["text"] == "counter=1", reply
    assert await body_runs(gw, "increment_counter", run_id) == 1


async def test_an_approval_covers_the_ttl_until_the_definition_changes(
    make_gateway: Any, notifying: LegacyServer
) -> None:
    rules = {**REQUIRED, "approval_ttl_s": 600, "catalog": {"ttl_s": 0}}
    gw = await make_gateway(notifying.url, upstream=rules)
    run_id = uuid.uuid4().hex
    first = delete(run_id)
    round_ = await asked(gw, first)
    await modern(gw, answering(first, round_, APPROVE))
    # Within the time, the same caller's next call is not asked.
    _, reply = await modern(gw, delete(run_id, note="n-3"))
    assert reply["result"]["content"][0]["text"] == "deleted n-3", reply
    assert await body_runs(gw, "delete_note", run_id) == 2
    # Another caller is asked.
    other = delete(run_id)
    status, reply, _ = await gw.post(other, headers={"Authorization": "Bearer someone-else"})
    assert reply["result"]["resultType"] == "input_required"
    # The tool's definition changes: asked again.
    change = {"name": "delete_note", "description": "Deletes for good.", "read_only": False}
    _, changed = await modern(gw, rpc("tools/call", {"name": "redescribe", "arguments": change}))
    assert changed["result"]["content"][0]["text"] == "redescribed delete_note"
    await asked(gw, delete(run_id, note="n-4"))
    assert await body_runs(gw, "delete_note", run_id) == 2


async def test_a_client_without_elicitation_gets_a_clear_error(make_gateway: Any) -> None:
    gw = await make_gateway(upstream=REQUIRED)
    run_id = uuid.uuid4().hex
    status, reply = await modern(
        gw,
        {
            **delete(run_id),
            "params": {
                **delete(run_id)["params"],
                "_meta": {**rpc("x", caps={})["params"]["_meta"]},
            },
        },
    )
    assert status == 400 and reply["error"]["code"] == -32021, reply
    assert "approval" in reply["error"]["message"]
    assert reply["error"]["data"]["requiredCapabilities"] == {"elicitation": {"form": {}}}
    assert await body_runs(gw, "delete_note", run_id) == 0


async def test_destructive_asks_for_what_the_annotations_say_may_destroy(
    make_gateway: Any,
) -> None:
    gw = await make_gateway(
        upstream={"approval": "destructive", "tools": {"echo": {"approval": "none"}}}
    )
    run_id = uuid.uuid4().hex
    await asked(gw, delete(run_id))
    read = rpc("tools/call", {"name": "read_note", "arguments": {"note_id": "n", "run_id": run_id}})
    _, reply = await modern(gw, read)
    assert reply["result"]["content"][0]["text"] == "note n"
    # A tool that says nothing of itself is destructive by the spec's defaults.
    await asked(gw, rpc("tools/call", {"name": "greet", "arguments": {"run_id": run_id}}))
    # A tool's own `none` wins.
    _, reply = await modern(gw, rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}}))
    assert reply["result"]["content"][0]["text"] == "hi"


async def run_task(gw: Gateway, body: dict[str, Any], answer: Any) -> dict[str, Any]:
    caps = body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
    _, created = await modern(gw, body)
    task_id = created["result"]["taskId"]
    questions: list[list[str]] = []
    async with asyncio.timeout(30):
        while True:
            _, got = await modern(gw, rpc("tasks/get", {"taskId": task_id}, caps=caps))
            task = got["result"]
            if task["status"] == "input_required":
                questions.append(list(task["inputRequests"]))
                update = {"taskId": task_id, "inputResponses": {KEY: answer}}
                await modern(gw, rpc("tasks/update", update, caps=caps))
            elif task["status"] in ("completed", "failed", "cancelled"):
                break
            await asyncio.sleep(task["pollIntervalMs"] / 1000)  # the client's polling
    assert questions and questions[0] == [KEY]
    return dict(task)


async def test_a_tasks_first_question_is_the_approval(make_gateway: Any) -> None:
    task = {"support": "optional", "poll_interval_ms": 100}
    gw = await make_gateway(
        upstream={"tools": {"delete_note": {"approval": "required", "task": task}}}
    )
    caps = {**ALL_CAPS, "extensions": {EXTENSION: {}}}
    run_id = uuid.uuid4().hex
    declined = await run_task(
        gw,
        {
            **delete(run_id),
            "params": {**delete(run_id)["params"], "_meta": rpc("x", caps=caps)["params"]["_meta"]},
        },
        {"action": "decline"},
    )
    assert declined["status"] == "completed" and declined["result"]["isError"] is True
    assert await body_runs(gw, "delete_note", run_id) == 0
    approved = await run_task(
        gw,
        {
            **delete(run_id),
            "params": {**delete(run_id)["params"], "_meta": rpc("x", caps=caps)["params"]["_meta"]},
        },
        APPROVE,
    )
    assert approved["status"] == "completed"
    assert approved["result"]["content"][0]["text"] == "deleted n-1"
    assert await body_runs(gw, "delete_note", run_id) == 1


async def test_every_approval_asked_and_answered_is_recorded(make_gateway: Any) -> None:
    with capture_logs() as logs:
        gw = await make_gateway(upstream=REQUIRED, audit={"log": True})
        run_id = uuid.uuid4().hex
        first = delete(run_id)
        round_ = await asked(gw, first)
        await modern(gw, answering(first, round_, {"action": "decline"}))
        second = await asked(gw, first)
        await modern(gw, answering(first, second, APPROVE))
        async with gw.http.get(str(gw.server.make_url("/metrics"))) as response:
            scraped = await response.text()
    events = [line["audit"] for line in logs if line.get("event") == "audit"]
    approvals = [e for e in events if e["kind"].startswith("approval.")]
    assert [(e["kind"], e.get("approved")) for e in approvals] == [
        ("approval.asked", None),
        ("approval.answered", False),
        ("approval.asked", None),
        ("approval.answered", True),
    ]
    assert approvals[0]["approval_id"] == approvals[1]["approval_id"] != approvals[2]["approval_id"]
    assert approvals[1]["answer"] == {
        "key": KEY,
        "method": "elicitation/create",
        "action": "decline",
    }
    assert all(e["tool"] == "delete_note" and e["era"] == "2026" for e in approvals)
    assert "note_id" not in str(approvals)  # the question's text is content: not kept by default
    # The call that went on is recorded as any call, after its approval.
    started = [e for e in events if e["kind"] == "call.started"]
    assert [e["tool"] for e in started] == ["delete_note"]
    for outcome in ("asked", "approved", "declined"):
        count = 2 if outcome == "asked" else 1
        assert f'mrtr_approvals_total{{outcome="{outcome}",upstream="legacy"}} {count}.0' in scraped


# -- 2025 clients (the official mcp 1.x client, its elicitation callback) -----------------


async def client_run(client: LegacyClient, command: dict[str, Any]) -> dict[str, Any]:
    return await asyncio.to_thread(client.run, command, 60.0)


async def legacy_session(
    client: LegacyClient, gw: Gateway, caps: list[str], answers: dict[str, Any]
) -> str:
    name = f"approving-{uuid.uuid4().hex[:8]}"
    command = {"op": "open", "session": name, "url": gw.url, "caps": caps, "answers": answers}
    await client_run(client, command)
    return name


def approval_message(tool: str, arguments: dict[str, Any]) -> str:
    return str(approval.question(tool, "legacy", arguments)["params"]["message"])


@pytest.mark.parametrize("answer", NOT_APPROVED, ids=["decline", "cancel", "false"])
async def test_a_2025_client_is_asked_on_its_calls_stream_and_not_approving_runs_nothing(
    make_gateway: Any, legacy_client: LegacyClient, answer: dict[str, Any]
) -> None:
    gw = await make_gateway(upstream=REQUIRED)
    run_id = uuid.uuid4().hex
    arguments = {"note_id": "n-1", "run_id": run_id}
    answers = {approval_message("delete_note", arguments): answer}
    name = await legacy_session(legacy_client, gw, ["elicitation"], answers)
    try:
        command = {"op": "call", "session": name, "name": "delete_note", "arguments": arguments}
        called = await client_run(legacy_client, command)
        assert [e["message"] for e in called["seen"]["elicitations"]] == list(answers)
        assert called["result"]["isError"] is True, called
        assert await body_runs(gw, "delete_note", run_id) == 0
    finally:
        await client_run(legacy_client, {"op": "close", "session": name})


async def test_a_2025_clients_approval_and_the_tools_own_question_both_reach_their_askers(
    make_gateway: Any, legacy_client: LegacyClient
) -> None:
    gw = await make_gateway(upstream={"tools": {"increment_counter": {"approval": "required"}}})
    run_id = uuid.uuid4().hex
    # The client accepts every question with what its schema asks (approve: true, confirm: true).
    name = await legacy_session(legacy_client, gw, ["elicitation"], {})
    try:
        command = {
            "op": "call",
            "session": name,
            "name": "increment_counter",
            "arguments": {"run_id": run_id},
        }
        called = await client_run(legacy_client, command)
        messages = [e["message"] for e in called["seen"]["elicitations"]]
        assert messages == [
            approval_message("increment_counter", {"run_id": run_id}),
            "Increment the counter?",
        ]
        assert called["result"]["content"][0]["text"] == "counter=1", called
        assert await body_runs(gw, "increment_counter", run_id) == 1
    finally:
        await client_run(legacy_client, {"op": "close", "session": name})


async def test_a_2025_client_without_elicitation_gets_the_clear_error(make_gateway: Any) -> None:
    gw = await make_gateway(upstream=REQUIRED)
    run_id = uuid.uuid4().hex
    session = await open_session(gw.http, gw.url, capabilities={})
    answer = await send(
        gw.http, gw.url, call("delete_note", note_id="n-1", run_id=run_id), session=session
    )
    error = answer.last["error"]
    assert answer.status == 400 and error["code"] == -32021, answer
    assert "approval" in error["message"]
    assert error["data"]["requiredCapabilities"] == {"elicitation": {"form": {}}}
    assert await body_runs(gw, "delete_note", run_id) == 0
