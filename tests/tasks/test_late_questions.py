"""A question that comes after its task showed `input_required`: a transcript on the
manual clock, the call core on the fakes (`tests/fakes`), two replicas sharing one
store and one bus: `a` owns the task (runs its call), `b` reads its record.

The promise: every question the call has open appears in the task's `inputRequests` on
every replica, within `limits.coalesce_ms` (the window of the round that gathers it) of
its coming, whenever it comes. A sibling later than the window finds the call parked,
where nobody reads its stream: before the fix it stayed there, unseen, until the
questions shown were answered, so a client waiting to see them all waited for ever.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import pytest

from gateway.aio import spawn
from gateway.calls.bridge import Bridge
from gateway.fleet import messages
from gateway.protocol.inbound import FrontRequest, read_envelope
from gateway.protocol.state import AesGcmKeyRing, parse_key
from gateway.protocol.tasks import EXTENSION
from gateway.protocol.versions import Version
from gateway.store.tasks import MemoryTaskStore
from gateway.tasks.service import RECORD_PREFIX, Tasks
from tests.fakes.clock import SETTLE_TURNS, ManualClock
from tests.fakes.fleet import Network
from tests.fakes.harness import EVERYTHING, KEY, WINDOW, call_tool, two_replicas
from tests.fakes.upstream import ScriptedServer, ScriptedSession

pytestmark = pytest.mark.timeout(10)  # a regression hangs on an event: fail it in seconds

T = TypeVar("T")

WITH_TASKS = {**EVERYTHING, "extensions": {EXTENSION: {}}}
USERNAME = {"action": "accept", "content": {"username": "ada"}}
CITY = {"action": "accept", "content": {"city": "Paris"}}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def server() -> ScriptedServer:
    return ScriptedServer()


class WatchedTaskStore(MemoryTaskStore):
    """The replicas' task store, telling each write as it is made (`written`)."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.written = asyncio.Event()

    async def put(
        self, task_id: str, sealed: str, expires_ms: int, *, final: bool, owner: str
    ) -> bool:
        done = await super().put(task_id, sealed, expires_ms, final=final, owner=owner)
        self.written.set()
        return done


def inbox(bridge: Bridge, tasks: Tasks) -> Callable[[messages.Message], Awaitable[None]]:
    """A replica's inbox: a message for a task to its tasks, the rest to its call core."""

    async def serve(message: messages.Message) -> None:
        if isinstance(message, messages.ForTask):
            await tasks.told(message)
        else:
            await bridge.serve_forwarded(message)

    return serve


class TaskFleet:
    """`Tasks` on replicas `a` (the owner of what it creates) and `b`."""

    def __init__(self, clock: ManualClock, server: ScriptedServer) -> None:
        network = Network(clock)
        self.a, self.b = two_replicas(clock, server, network, {"greet": {"task": "optional"}})
        self.store = WatchedTaskStore(clock)
        codec = AesGcmKeyRing([parse_key(KEY, "test key")]).with_prefix(RECORD_PREFIX)
        self.tasks: dict[str, Tasks] = {}
        for name, replica in (("a", self.a), ("b", self.b)):
            tasks = Tasks(
                bridge=replica.bridge,
                store=self.store,
                codec=codec,
                limits=replica.config.limits,
                owner=name,
                pools={"up": replica.pool},
                bus=network.bus(name),
            )
            network.join(name, inbox(replica.bridge, tasks))  # as `gateway.compose` does
            self.tasks[name] = tasks

    async def create(self) -> str:
        created = await self.tasks["a"].call(
            self.a.upstream, call_tool(caps=WITH_TASKS), "alice", self.a.notify
        )
        assert created["resultType"] == "task"
        return str(created["taskId"])

    async def views(self, task_id: str) -> dict[str, dict[str, Any]]:
        """`tasks/get` on the owner (its run's task) and on the other (the record)."""
        return {
            name: await tasks.serve(request("tasks/get", taskId=task_id), "alice")
            for name, tasks in self.tasks.items()
        }

    async def showing(self, task_id: str, status: str, asked: set[str]) -> dict[str, Any]:
        """Until both replicas show the task in `status` asking `asked` (after a write)."""
        while True:
            self.store.written.clear()
            views = await self.views(task_id)
            if all(
                v["status"] == status and set(v.get("inputRequests", {})) == asked
                for v in views.values()
            ):
                return views
            await self.store.written.wait()


def request(method: str, **params: Any) -> FrontRequest:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": WITH_TASKS,
    }
    version = Version.parse("2026-07-28")
    assert version is not None
    return FrontRequest(9, method, {**params, "_meta": meta}, read_envelope(version, meta))


async def within(clock: ManualClock, waited: Coroutine[Any, Any, T], seconds: float) -> T:
    """`waited` done while at most `seconds` pass on the manual clock."""
    return await clock.run_until_done(spawn(waited, name="awaited"), step=WINDOW, limit=seconds)


async def settle() -> None:
    """The loop's ready callbacks run (the fakes do no I/O): what follows has happened."""
    for _ in range(SETTLE_TURNS):
        await asyncio.sleep(0)


async def first_question(
    fleet: TaskFleet, server: ScriptedServer, clock: ManualClock
) -> tuple[str, ScriptedSession, dict[str, Any]]:
    """A task created on `a`, its call asking one question: shown on both replicas."""
    task_id = await fleet.create()
    session = await server.next_call()
    session.elicit(1, "username")
    asked = fleet.showing(task_id, "input_required", {"elicit.username"})
    return task_id, session, await within(clock, asked, WINDOW)


async def test_a_question_after_the_task_showed_input_required_appears_on_every_replica(
    clock: ManualClock, server: ScriptedServer
) -> None:
    fleet = TaskFleet(clock, server)
    task_id, session, views = await first_question(fleet, server, clock)
    assert views["a"] == views["b"]  # the owner's run and the record say the same
    rounds = fleet.a.bridge.calls.parked, len(server.sessions)

    # A ping while the call is parked is not a question: no round is spent on it.
    session.ask(50, "ping", {})
    await settle()
    assert server.nothing_sent() and fleet.a.bridge.parked == 1

    # The sibling comes late, the call parked: shown on both, within the window of the
    # round that gathers it, with the question still open under its key.
    session.elicit(2, "city", "City?")
    both = {"elicit.username", "elicit.city"}
    views = await within(clock, fleet.showing(task_id, "input_required", both), WINDOW)
    assert views["a"] == views["b"]
    assert views["b"]["inputRequests"]["elicit.city"]["params"]["message"] == "City?"
    assert await server.next_sent() == {"jsonrpc": "2.0", "id": 50, "result": {}}  # the ping
    assert (fleet.a.bridge.calls.parked, len(server.sessions)) == rounds  # the same call

    # The first answer, through the other replica: the second question alone is left.
    update = request("tasks/update", taskId=task_id, inputResponses={"elicit.username": USERNAME})
    assert await fleet.tasks["b"].serve(update, "alice") == {"resultType": "complete"}
    assert (await server.next_sent())["id"] == 1
    await within(clock, fleet.showing(task_id, "input_required", {"elicit.city"}), WINDOW)

    # Answered while the retry of the first answer is under way: sent once its round closes.
    update = request("tasks/update", taskId=task_id, inputResponses={"elicit.city": CITY})
    await fleet.tasks["b"].serve(update, "alice")
    assert (await within(clock, server.next_sent(), WINDOW))["result"] == CITY
    session.respond({"content": [{"type": "text", "text": "Hello, ada of Paris!"}]})
    views = await within(clock, fleet.showing(task_id, "completed", set()), WINDOW)
    assert views["b"]["result"]["content"][0]["text"] == "Hello, ada of Paris!"


async def test_a_question_after_the_first_answer_was_taken_is_shown_beside_the_one_left(
    clock: ManualClock, server: ScriptedServer
) -> None:
    """Two questions open, one answered (its retry under way), then a third comes while
    the call is parked again asking the other: both open ones are shown."""
    fleet = TaskFleet(clock, server)
    task_id, session, _ = await first_question(fleet, server, clock)
    session.elicit(2, "city", "City?")
    both = {"elicit.username", "elicit.city"}
    await within(clock, fleet.showing(task_id, "input_required", both), WINDOW)
    update = request("tasks/update", taskId=task_id, inputResponses={"elicit.username": USERNAME})
    await fleet.tasks["a"].serve(update, "alice")  # on the owner this time
    assert (await server.next_sent())["id"] == 1
    await within(clock, fleet.showing(task_id, "input_required", {"elicit.city"}), WINDOW)
    session.elicit(3, "age", "Age?")
    later = {"elicit.city", "elicit.age"}
    await within(clock, fleet.showing(task_id, "input_required", later), WINDOW)
    assert fleet.a.bridge.parked == 1
