"""Tasks as transcripts on a manual clock: the tasks extension's service (`Tasks`) on the
call core of `tests/fakes` (a scripted legacy server behind the upstream port, an
in-memory task store). Time moves when the test moves it; nothing sleeps.

- A call still running after its policy's `after_s` becomes a task (its record written
  first), followed to its result; one that answers sooner is answered as before, and one
  that asks sooner is an ordinary MRTR round.
- Answers given with `tasks/update` resume the call; a cancel stops it upstream.
- Questions left unanswered for `limits.suspension_ttl_s` fail the task and end its call.
- A task past its TTL is unknown; one too many for the caps is refused, and a task that
  ends gives its place back.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from gateway.aio import spawn
from gateway.audit.trail import OFF, Audit
from gateway.config.model import ExposeConfig, ExposedList
from gateway.errors import InvalidParams, PrincipalTasksBusy, TasksFull
from gateway.protocol.inbound import FrontRequest, read_envelope
from gateway.protocol.state import AesGcmKeyRing, parse_key
from gateway.protocol.tasks import EXTENSION
from gateway.protocol.versions import Version
from gateway.store.tasks import MemoryTaskStore
from gateway.tasks.service import Tasks
from tests.fakes.audit import kept_trail
from tests.fakes.clock import SETTLE_TURNS, ManualClock
from tests.fakes.harness import EVERYTHING, KEY, WINDOW, Replica, call_tool, config
from tests.fakes.upstream import ScriptedServer, ScriptedSession

pytestmark = pytest.mark.timeout(10)  # a regression hangs on an event that never comes

WITH_TASKS = {**EVERYTHING, "extensions": {EXTENSION: {}}}
AFTER_S = 2.0
TTL_S = 60.0
TOOLS = {
    "greet": {"task": {"support": "optional", "after_s": AFTER_S, "ttl_s": TTL_S}},
    "ticket": {"task": {"support": "required", "after_s": AFTER_S, "ttl_s": TTL_S}},
}
RESULT = {"content": [{"type": "text", "text": "done"}]}


class WatchedTaskStore(MemoryTaskStore):
    """The in-memory task store, telling each record written (`written`)."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.written = asyncio.Event()

    async def put(
        self, task_id: str, sealed: str, expires_ms: int, *, final: bool, owner: str
    ) -> bool:
        done = await super().put(task_id, sealed, expires_ms, final=final, owner=owner)
        self.written.set()
        return done


class TaskReplica(Replica):
    """A replica's call core with the tasks extension's service in front of it."""

    def __init__(
        self, clock: ManualClock, server: ScriptedServer, audit: Audit = OFF, **limits: Any
    ) -> None:
        super().__init__(clock, server, settings=config(tools=TOOLS, **limits), audit=audit)
        self.task_store = WatchedTaskStore(clock)
        self.tasks = Tasks(
            bridge=self.bridge,
            store=self.task_store,
            codec=AesGcmKeyRing([parse_key(KEY, "test key")]),
            limits=self.config.limits,
            owner="r1",
            pools={"up": self.pool},
            bus=self.bus,  # the fleet of one
            audit=audit,
        )

    async def call_task(self, name: str = "greet", principal: str = "alice") -> dict[str, Any]:
        request = call_tool(name, caps=WITH_TASKS)
        return await self.tasks.call(self.upstream, request, principal, self.notify)

    async def tasks_rpc(
        self, method: str, params: dict[str, Any], principal: str = "alice"
    ) -> dict[str, Any]:
        return await self.tasks.serve(tasks_request(method, params), principal)

    async def until_status(self, task_id: str, status: str) -> dict[str, Any]:
        """`tasks/get` once the task's record says `status` (each record written is looked
        at: nothing polls)."""
        async with asyncio.timeout(5):
            while True:
                self.task_store.written.clear()
                task = await self.tasks_rpc("tasks/get", {"taskId": task_id})
                if task["status"] == status:
                    return task
                await self.task_store.written.wait()

    async def run_ended(self, task_id: str) -> None:
        """Until the task's run here has followed its call to the end."""
        run = self.tasks.runs.get(task_id)
        if run is not None and run.follower is not None:
            await asyncio.wait_for(asyncio.shield(run.follower), 5)


def tasks_request(method: str, params: dict[str, Any]) -> FrontRequest:
    """A `tasks/*` request as a 2026-07-28 client declaring the extension sends it."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": WITH_TASKS,
    }
    version = Version.parse("2026-07-28")
    assert version is not None
    return FrontRequest(
        id=9, method=method, params={**params, "_meta": meta}, envelope=read_envelope(version, meta)
    )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def server() -> ScriptedServer:
    return ScriptedServer()


@pytest.fixture
def replica(clock: ManualClock, server: ScriptedServer) -> TaskReplica:
    return TaskReplica(clock, server)


async def a_task(
    replica: TaskReplica, server: ScriptedServer, clock: ManualClock, name: str = "greet"
) -> tuple[dict[str, Any], ScriptedSession]:
    """A call the server keeps running past `after_s`: the task it became, and its session."""
    pending = spawn(replica.call_task(name), name="call")
    session = await server.next_call()
    await clock.armed(clock.now + AFTER_S)
    assert not pending.done()  # within the policy's wait: not a task yet
    clock.advance(AFTER_S)
    created = await asyncio.wait_for(pending, 5)
    assert created["resultType"] == "task" and created["status"] == "working"
    return created, session


async def test_a_call_still_running_after_its_wait_becomes_a_task_and_completes(
    replica: TaskReplica, server: ScriptedServer, clock: ManualClock
) -> None:
    created, session = await a_task(replica, server, clock)
    assert created["ttlMs"] == TTL_S * 1000 and "result" not in created
    task_id = created["taskId"]
    found = await replica.tasks_rpc("tasks/get", {"taskId": task_id})  # its record came first
    assert found["status"] == "working" and found["taskId"] == task_id
    assert len(replica.tasks.quota) == 1
    session.respond(RESULT)
    await replica.run_ended(task_id)
    done = await replica.tasks_rpc("tasks/get", {"taskId": task_id})
    assert done["status"] == "completed" and done["result"]["content"] == RESULT["content"]
    assert len(replica.tasks.quota) == 0 and task_id not in replica.tasks.runs
    rendered = replica.bridge.metrics.render().decode()
    assert 'mrtr_task_endings_total{status="completed"} 1.0' in rendered


async def test_an_optional_tool_answering_within_its_wait_answers_as_before(
    replica: TaskReplica, server: ScriptedServer, clock: ManualClock
) -> None:
    pending = spawn(replica.call_task(), name="call")
    session = await server.next_call()
    await clock.armed(clock.now + AFTER_S)
    clock.advance(AFTER_S - 0.001)
    session.respond(RESULT)
    reply = await asyncio.wait_for(pending, 5)
    assert reply["resultType"] == "complete" and "taskId" not in reply
    assert len(replica.tasks.quota) == 0 and replica.tasks.runs == {}


async def test_a_required_tool_answering_within_its_wait_is_a_task_created_completed(
    replica: TaskReplica, server: ScriptedServer
) -> None:
    pending = spawn(replica.call_task("ticket"), name="call")
    (await server.next_call()).respond(RESULT)
    created = await asyncio.wait_for(pending, 5)
    assert created["resultType"] == "task"
    await replica.run_ended(created["taskId"])
    done = await replica.tasks_rpc("tasks/get", {"taskId": created["taskId"]})
    assert done["status"] == "completed" and done["result"]["content"] == RESULT["content"]


async def test_a_question_within_the_wait_is_an_mrtr_round_not_a_task(
    replica: TaskReplica, server: ScriptedServer, clock: ManualClock
) -> None:
    pending = spawn(replica.call_task(), name="call")
    session = await server.next_call()
    session.elicit(7)
    await clock.armed(clock.now + WINDOW)
    clock.advance(WINDOW)
    first = await asyncio.wait_for(pending, 5)
    assert first["resultType"] == "input_required" and "taskId" not in first
    assert list(first["inputRequests"]) == ["elicit.username"]
    assert replica.tasks.runs == {} and len(replica.tasks.quota) == 0


async def asked(
    replica: TaskReplica, server: ScriptedServer, clock: ManualClock
) -> tuple[str, ScriptedSession]:
    """A task whose call asks one question after it became a task: published, waiting."""
    created, session = await a_task(replica, server, clock)
    task_id = created["taskId"]
    session.elicit(7)
    await clock.armed(clock.now + WINDOW)
    clock.advance(WINDOW)
    await replica.until_status(task_id, "input_required")
    return task_id, session


async def test_an_answer_given_with_tasks_update_resumes_the_call(
    replica: TaskReplica, server: ScriptedServer, clock: ManualClock
) -> None:
    task_id, session = await asked(replica, server, clock)
    waiting = await replica.tasks_rpc("tasks/get", {"taskId": task_id})
    assert waiting["status"] == "input_required"
    (key,) = waiting["inputRequests"]
    answer = {"action": "accept", "content": {"username": "ada"}}
    ack = await replica.tasks_rpc(
        "tasks/update", {"taskId": task_id, "inputResponses": {key: answer}}
    )
    assert ack == {"resultType": "complete"}
    sent = await server.next_sent()  # the question's answer, on the call's session
    assert sent["id"] == 7 and sent["result"] == {
        "action": "accept",
        "content": {"username": "ada"},
    }
    session.respond(RESULT)  # the call went on where it was parked: on its own session
    await replica.run_ended(task_id)
    done = await replica.tasks_rpc("tasks/get", {"taskId": task_id})
    assert done["status"] == "completed" and done["result"]["content"] == RESULT["content"]


async def test_a_tasks_changes_are_recorded_once_each_beside_its_calls_rounds(
    clock: ManualClock, server: ScriptedServer
) -> None:
    audit, sink = kept_trail("r1", clock)
    replica = TaskReplica(clock, server, audit=audit)
    task_id, session = await asked(replica, server, clock)
    (key,) = (await replica.tasks_rpc("tasks/get", {"taskId": task_id}))["inputRequests"]
    answer = {"action": "decline"}
    await replica.tasks_rpc("tasks/update", {"taskId": task_id, "inputResponses": {key: answer}})
    await server.next_sent()
    session.respond(RESULT)
    await replica.run_ended(task_id)
    changes = [e["kind"] for e in sink.events if e["kind"].startswith("task.")]
    assert changes == ["task.created", "task.input_required", "task.working", "task.completed"]
    assert {e["task_id"] for e in sink.events if e["kind"].startswith("task.")} == {task_id}
    assert [e["tool"] for e in sink.events if e["kind"] == "task.created"] == ["greet"]
    # The call the task runs is recorded as any: started and ended once, its round
    # asked and answered once, `decline` without content.
    calls = [e["kind"] for e in sink.events if not e["kind"].startswith("task.")]
    assert calls == ["call.started", "round.asked", "round.answered", "call.ended"]
    (answered,) = [e for e in sink.events if e["kind"] == "round.answered"]
    assert [a["action"] for a in answered["answers"]] == ["decline"]


async def test_questions_left_unanswered_fail_the_task_and_end_its_call(
    clock: ManualClock, server: ScriptedServer
) -> None:
    replica = TaskReplica(clock, server, suspension_ttl_s=30)
    task_id, _ = await asked(replica, server, clock)
    await clock.armed(clock.now + 30)  # the run waits for answers as long as a call parks
    clock.advance(30 - 0.001)
    for _ in range(SETTLE_TURNS):
        await asyncio.sleep(0)
    assert (await replica.tasks_rpc("tasks/get", {"taskId": task_id}))["status"] == "input_required"
    clock.advance(0.001)
    await replica.run_ended(task_id)
    failed = await replica.tasks_rpc("tasks/get", {"taskId": task_id})
    assert failed["status"] == "failed" and failed["error"]["data"] == {
        "reason": "suspension_ttl_s"
    }
    sent = [await server.next_sent() for _ in range(2)]
    assert "notifications/cancelled" in [m.get("method") for m in sent]  # the call ended upstream
    assert len(replica.tasks.quota) == 0


async def test_cancelling_a_working_task_cancels_its_call_upstream(
    replica: TaskReplica, server: ScriptedServer, clock: ManualClock
) -> None:
    created, _ = await a_task(replica, server, clock)
    task_id = created["taskId"]
    ack = await replica.tasks_rpc("tasks/cancel", {"taskId": task_id})
    assert ack == {"resultType": "complete"}
    assert (await replica.tasks_rpc("tasks/get", {"taskId": task_id}))["status"] == "cancelled"
    assert (await server.next_sent())["method"] == "notifications/cancelled"
    await replica.run_ended(task_id)
    assert len(replica.tasks.quota) == 0


async def test_a_task_past_its_ttl_is_unknown(
    replica: TaskReplica, server: ScriptedServer, clock: ManualClock
) -> None:
    created, session = await a_task(replica, server, clock)
    task_id = created["taskId"]
    session.respond(RESULT)
    await replica.run_ended(task_id)
    clock.advance(TTL_S - 0.001)  # its TTL counts from its creation
    assert (await replica.tasks_rpc("tasks/get", {"taskId": task_id}))["status"] == "completed"
    clock.advance(0.001)
    with pytest.raises(InvalidParams):
        await replica.tasks_rpc("tasks/get", {"taskId": task_id})


@pytest.mark.parametrize(("limits", "refusal"), [
    ({"max_tasks_per_principal": 1}, PrincipalTasksBusy),
    ({"max_tasks": 1}, TasksFull),
])  # fmt: skip
async def test_a_task_too_many_is_refused_and_one_ended_gives_its_place_back(
    clock: ManualClock, server: ScriptedServer, limits: dict[str, int], refusal: type
) -> None:
    replica = TaskReplica(clock, server, **limits)
    created, _ = await a_task(replica, server, clock)
    with pytest.raises(refusal):
        await replica.call_task()
    if refusal is PrincipalTasksBusy:  # another caller is still served
        others = spawn(replica.call_task(principal="bob"), name="bob")
        (await server.next_call()).respond(RESULT)
        assert (await asyncio.wait_for(others, 5))["resultType"] == "complete"
    await replica.tasks_rpc("tasks/cancel", {"taskId": created["taskId"]})
    await replica.run_ended(created["taskId"])
    again = spawn(replica.call_task(), name="again")
    (await server.next_call()).respond(RESULT)
    assert (await asyncio.wait_for(again, 5))["resultType"] == "complete"


async def test_a_task_of_a_tool_hidden_since_it_was_created_is_unknown(
    replica: TaskReplica, server: ScriptedServer, clock: ManualClock
) -> None:
    created, _ = await a_task(replica, server, clock)
    task_id = created["taskId"]
    assert (await replica.tasks_rpc("tasks/get", {"taskId": task_id}))["taskId"] == task_id
    # The gateway comes back with rules that hide the tool (a rolling change of config).
    upstream = replica.tasks.upstreams["up"]
    hidden = ExposeConfig(tools=ExposedList(deny=("greet",)))
    replica.tasks.upstreams["up"] = dataclasses.replace(upstream, expose=hidden)
    for method in ("tasks/get", "tasks/cancel"):
        with pytest.raises(InvalidParams):
            await replica.tasks_rpc(method, {"taskId": task_id})
