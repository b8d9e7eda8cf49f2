"""Two real mcp 1.x servers behind one endpoint, on a fleet: three `mrtr-gateway serve`
processes on one Redis behind a round-robin balancer. A 2026-07-28 client lists both
servers' tools with their prefixes on every replica, runs an elicitation tool of each
server with each round answered through another replica than the one that asked, and gets
each server's own result (each server ran only its own call); a task of the second server
is polled and answered through other replicas to its end; a tool list change of the second
server, made through one replica, reaches a listen held on another. The official mcp 1.x
client (2025) holds one session on the endpoint and answers each server's questions
through replicas in turn, and reaches a stdio server's process, held by one replica, through
any replica.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.protocol.tasks import EXTENSION
from tests.peers.tooling import LegacyClient, LegacyServer, RedisServer, legacy_stdio_command
from tests.support.fleet import Fleet, fleet_of
from tests.support.legacy import legacy_tool
from tests.support.legacy_wire import HEADERS, call, initialize, send
from tests.support.listens import SUBSCRIPTION_ID, listening
from tests.support.wire import ALL_CAPS, rpc

pytestmark = pytest.mark.peers

WITH_TASKS = {**ALL_CAPS, "extensions": {EXTENSION: {}}}
SHOWN_WITHIN_S = 30.0


@pytest.fixture(scope="module")
def tickets() -> Iterator[LegacyServer]:
    """The second server (the session's `legacy` is the first, `notes`): it tells of
    changes (`add_tool`)."""
    server = LegacyServer(notifying=True)
    yield server
    server.stop()


@pytest.fixture
async def joined_fleet(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    redis_server: RedisServer,
    legacy: LegacyServer,
    tickets: LegacyServer,
) -> AsyncIterator[Fleet]:
    task = {"support": "optional", "poll_interval_ms": 100}
    config = {
        "store": {"url": redis_server.url, "key_prefix": f"t{uuid.uuid4().hex[:8]}:"},
        "sealing": {"audience": "endpoints-test"},
        "upstreams": [
            {"name": "notes", "url": legacy.url},
            {"name": "tickets", "url": tickets.url, "tools": {"greet": {"task": task}}},
        ],
        "endpoints": [{"path": "/mcp", "upstreams": ["notes", "tickets"]}],
    }
    async with fleet_of(config, tmp_path, request) as fleet:
        yield fleet


async def on(fleet: Fleet, replica: int, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    status, reply = await fleet.post(f"{fleet.replicas[replica].base}/mcp", body)
    assert isinstance(reply, dict), reply
    return status, reply


async def greets(url: str, run_id: str) -> int:
    """How many times `greet` ran for `run_id` on the server at `url` (asked of it)."""
    return int(await legacy_tool(url, "runs", {"tool": "greet", "run_id": run_id}))


async def test_each_servers_rounds_answered_on_other_replicas_reach_their_own_server(
    joined_fleet: Fleet, legacy: LegacyServer, tickets: LegacyServer
) -> None:
    fleet = joined_fleet
    for replica in range(3):
        _, listed = await on(fleet, replica, rpc("tools/list"))
        shown = {t["name"] for t in listed["result"]["tools"]}
        assert {"notes_greet", "tickets_greet", "notes_echo", "tickets_echo"} <= shown
    run_id = uuid.uuid4().hex
    for asked_on, (tool, name) in enumerate((("notes_greet", "alice"), ("tickets_greet", "bob"))):
        body = rpc("tools/call", {"name": tool, "arguments": {"run_id": run_id}})
        _, first = await on(fleet, asked_on, body)
        result = first["result"]
        assert result["resultType"] == "input_required", first
        (key,) = result["inputRequests"]
        params = {
            **body["params"],
            "requestState": result["requestState"],
            "inputResponses": {key: {"action": "accept", "content": {"username": name}}},
        }
        _, done = await on(fleet, asked_on + 1, {**body, "id": 2, "params": params})
        assert done["result"]["content"][0]["text"] == f"Hello, {name}!", done
    # Each server ran its own greet once, and only its own.
    assert await greets(legacy.url, run_id) == 1
    assert await greets(tickets.url, run_id) == 1


async def test_a_task_of_the_second_server_is_polled_and_answered_through_other_replicas(
    joined_fleet: Fleet, tickets: LegacyServer
) -> None:
    fleet = joined_fleet
    async with asyncio.timeout(SHOWN_WITHIN_S):
        # A fresh replica makes no task until its first look at the releases present (one
        # of the previous release would not know tasks): it looks as it beats. Each try
        # has a run of its own (one served as a plain call runs the tool's body too).
        while True:
            run_id = uuid.uuid4().hex
            arguments = {"run_id": run_id}
            body = rpc(
                "tools/call", {"name": "tickets_greet", "arguments": arguments}, caps=WITH_TASKS
            )
            created = (await on(fleet, 0, body))[1]
            if created["result"]["resultType"] == "task":
                break
            await asyncio.sleep(1.0)  # the fleet's heartbeat_s
    task_id = created["result"]["taskId"]
    replica, answered = 1, False
    async with asyncio.timeout(SHOWN_WITHIN_S):
        while True:
            replica = replica % 2 + 1  # replicas 1 and 2, never the owner
            got = await on(fleet, replica, rpc("tasks/get", {"taskId": task_id}, caps=WITH_TASKS))
            task = got[1]["result"]
            if task["status"] == "input_required" and not answered:
                (key,) = task["inputRequests"]
                answer = {"action": "accept", "content": {"username": "carol"}}
                update = {"taskId": task_id, "inputResponses": {key: answer}}
                await on(fleet, replica, rpc("tasks/update", update, caps=WITH_TASKS))
                answered = True
            elif task["status"] in ("completed", "failed", "cancelled"):
                break
            await asyncio.sleep(task["pollIntervalMs"] / 1000)  # the client's polling
    assert task["status"] == "completed", task
    assert task["result"]["content"][0]["text"] == "Hello, carol!"
    assert await greets(tickets.url, run_id) == 1


async def test_the_mcp_client_gets_each_servers_questions_through_replicas_in_turn(
    joined_fleet: Fleet, legacy: LegacyServer, tickets: LegacyServer, legacy_client: LegacyClient
) -> None:
    """A 2025 client (the official mcp 1.x client) through the balancer: one session on
    the endpoint, each server's elicitation (on the call's stream) and sampling (on the
    merged GET stream) answered by POSTs that land on replicas in turn, each answer
    reaching the server that asked."""
    fleet = joined_fleet
    name = f"fleet-joined-{uuid.uuid4().hex[:8]}"
    answers = {"What is your username?": {"action": "accept", "content": {"username": "ada"}}}
    command = {"op": "open", "session": name, "url": fleet.url(), "answers": answers}
    opened = await client_run(legacy_client, command)
    try:
        assert opened["initialize"]["serverInfo"]["name"] == "notes+tickets"
        for _ in range(3):  # the list on every replica
            listed = await client_run(
                legacy_client, {"op": "request", "session": name, "method": "list_tools"}
            )
            shown = {t["name"] for t in listed["result"]["tools"]}
            assert {"notes_greet", "tickets_greet", "notes_summarize"} <= shown
        await client_run(legacy_client, {"op": "get_streams", "session": name, "count": 1})
        before = len(fleet.balancer.served)
        for upstream, url in (("notes", legacy.url), ("tickets", tickets.url)):
            run_id = uuid.uuid4().hex
            step = {"op": "call", "session": name, "arguments": {"run_id": run_id}}
            greeted = await client_run(legacy_client, {**step, "name": f"{upstream}_greet"})
            assert greeted["result"]["content"][0]["text"] == "Hello, ada!", greeted
            step["arguments"]["text"] = f"a long text for {upstream}"
            summed = await client_run(legacy_client, {**step, "name": f"{upstream}_summarize"})
            assert not summed["result"]["isError"], summed
            assert len(summed["seen"]["samplings"]) == 1, summed
            other = tickets.url if upstream == "notes" else legacy.url
            assert await greets(url, run_id) == 1
            assert await greets(other, run_id) == 0
        # The client's answers (POSTs with no method) reached more than one replica.
        served = fleet.balancer.served[before:]
        answered = [s.backend for s in served if s.http == "POST" and s.method is None]
        assert len(answered) >= 4 and len(set(answered)) > 1, fleet.balancer.served[before:]
    finally:
        await client_run(legacy_client, {"op": "close", "session": name})
    # The client ended its session (DELETE): every replica answers its id with 404, also
    # for a request that reaches no server's session.
    for replica in fleet.replicas:
        async with fleet.http.post(
            f"{replica.base}/mcp",
            json={"jsonrpc": "2.0", "id": 9, "method": "ping"},
            headers={**HEADERS, "Mcp-Session-Id": opened["session_id"]},
        ) as pinged:
            assert pinged.status == 404, replica.replica_id


async def client_run(client: LegacyClient, command: dict[str, Any]) -> dict[str, Any]:
    return await asyncio.to_thread(client.run, command, 60.0)


@dataclass
class Replica:
    """One replica's endpoint, to hold a listen on."""

    http: aiohttp.ClientSession
    url: str


async def test_a_change_of_the_second_server_reaches_a_listen_held_on_another_replica(
    joined_fleet: Fleet,
) -> None:
    fleet = joined_fleet
    held_on = Replica(fleet.http, f"{fleet.replicas[0].base}/mcp")
    async with listening(held_on, {"toolsListChanged": True}) as stream:
        ack = await stream.next()
        assert ack["params"]["notifications"] == {"toolsListChanged": True}  # tickets'
        added = f"t{uuid.uuid4().hex[:8]}"
        body = rpc("tools/call", {"name": "tickets_add_tool", "arguments": {"name": added}})
        _, done = await on(fleet, 1, body)
        assert done["result"]["content"][0]["text"] == f"added {added}", done
        change = await stream.next(timeout=SHOWN_WITHIN_S)  # about a heartbeat later
    assert change == {
        "jsonrpc": "2.0",
        "method": "notifications/tools/list_changed",
        "params": {"_meta": {SUBSCRIPTION_ID: "l-1"}},
    }
    _, listed = await on(fleet, 0, rpc("tools/list"))
    assert f"tickets_{added}" in {t["name"] for t in listed["result"]["tools"]}


async def test_a_2025_session_reaches_its_stdio_servers_process_through_any_replica(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    redis_server: RedisServer,
    legacy: LegacyServer,
) -> None:
    """A stdio server's session is a process on the replica that opened it: a 2025
    client's requests for it, landing on replicas in turn, are passed to that replica and
    reach that one process (what it remembers, it recalls); the HTTP server's session
    behind the same id is reached directly."""
    config = {
        "store": {"url": redis_server.url, "key_prefix": f"t{uuid.uuid4().hex[:8]}:"},
        "sealing": {"audience": "endpoints-stdio-test"},
        "upstreams": [
            {"name": "notes", "url": legacy.url},
            {"name": "files", "command": legacy_stdio_command(tmp_path)},
        ],
        "endpoints": [{"path": "/mcp", "upstreams": ["notes", "files"]}],
    }
    async with fleet_of(config, tmp_path, request) as fleet:
        url = fleet.url()
        opened = await send(fleet.http, url, initialize())
        assert opened.status == 200, opened.last
        session = opened.headers["Mcp-Session-Id"]
        remembered = await send(
            fleet.http, url, call("files_remember", value="v1"), session=session
        )
        assert remembered.status == 200, remembered.last
        await send(fleet.http, url, call("notes_remember", value="n1", rid=2), session=session)
        before = len(fleet.balancer.served)
        for rid in range(3, 9):  # each lands on the next replica
            upstream, value = ("files", "v1") if rid % 2 else ("notes", "n1")
            recalled = await send(
                fleet.http, url, call(f"{upstream}_recall", rid=rid), session=session
            )
            assert recalled.last["result"]["content"][0]["text"] == value, recalled.last
        assert {s.backend for s in fleet.balancer.served[before:]} == {0, 1, 2}
