"""2025 clients on an endpoint of two real mcp 1.x servers: one session of the client's
with a session of each server's behind it. The official mcp 1.x client lists both
servers' tools (prefixed), runs an elicitation tool of each (its question on the call's
stream) and a sampling tool of each (its question on the merged GET stream), its answers
reaching the server that asked, and gets the gateway's own approval question beside a
tool's; what a session remembers on one server stays in that server's session; an
unknown method or name is answered as a server answers it; a server down at
`initialize` is left out and its calls fail clearly; a tampered id gets 404, and an
ended one too, also for `ping` and lists (another endpoint's or caller's id:
`tests/protocol/test_endpoint_session.py`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.protocol import approval
from tests.peers.tooling import PEER_READY, LegacyClient, LegacyServer
from tests.support.inprocess import Gateway
from tests.support.legacy import legacy_tool
from tests.support.legacy_wire import call, initialize, open_session, request, send

pytestmark = pytest.mark.peers

JOINED = {"path": "/mcp", "upstreams": ["notes", "tickets"]}


@pytest.fixture(scope="module")
def tickets() -> Iterator[LegacyServer]:
    server = LegacyServer()
    yield server
    server.stop()


async def joined(make_gateway: Any, tickets: LegacyServer, **more: Any) -> Gateway:
    gw: Gateway = await make_gateway(
        upstream={"name": "notes"},
        upstreams_extra=[{"name": "tickets", "url": tickets.url}],
        endpoints=[{**JOINED, **more}],
    )
    return gw


async def client_run(client: LegacyClient, command: dict[str, Any]) -> dict[str, Any]:
    return await asyncio.to_thread(client.run, command, 60.0)


async def runs(url: str, tool: str, run_id: str) -> int:
    return int(await legacy_tool(url, "runs", {"tool": tool, "run_id": run_id}))


async def test_the_mcp_client_runs_each_servers_questions_through_one_session(
    make_gateway: Any, legacy: LegacyServer, tickets: LegacyServer, legacy_client: LegacyClient
) -> None:
    gw = await joined(make_gateway, tickets)
    name = f"joined-{uuid.uuid4().hex[:8]}"
    answers = {"What is your username?": {"action": "accept", "content": {"username": "ada"}}}
    command = {"op": "open", "session": name, "url": gw.url, "answers": answers}
    opened = await client_run(legacy_client, command)
    try:
        assert opened["initialize"]["serverInfo"]["name"] == "notes+tickets"
        assert "tools" in opened["initialize"]["capabilities"]
        listed = await client_run(
            legacy_client, {"op": "request", "session": name, "method": "list_tools"}
        )
        shown = {t["name"] for t in listed["result"]["tools"]}
        assert {"notes_greet", "tickets_greet", "notes_summarize", "tickets_summarize"} <= shown
        assert all(n.startswith(("notes_", "tickets_")) for n in shown)
        await client_run(legacy_client, {"op": "get_streams", "session": name, "count": 1})
        for upstream, url in (("notes", legacy.url), ("tickets", tickets.url)):
            run_id = uuid.uuid4().hex
            step = {"op": "call", "session": name, "arguments": {"run_id": run_id}}
            greeted = await client_run(legacy_client, {**step, "name": f"{upstream}_greet"})
            assert greeted["result"]["content"][0]["text"] == "Hello, ada!", greeted
            assert [e["message"] for e in greeted["seen"]["elicitations"]] == list(answers)
            step["arguments"]["text"] = f"a long text for {upstream}"
            summed = await client_run(legacy_client, {**step, "name": f"{upstream}_summarize"})
            assert not summed["result"]["isError"], summed
            assert len(summed["seen"]["samplings"]) == 1, summed
            # Each body ran once, on its own server only.
            other = tickets.url if upstream == "notes" else legacy.url
            assert await runs(url, "greet", run_id) == 1
            assert await runs(url, "summarize", run_id) == 1
            assert await runs(other, "greet", run_id) == 0
    finally:
        await client_run(legacy_client, {"op": "close", "session": name})


async def test_each_servers_session_behind_the_one_keeps_its_own(
    make_gateway: Any, tickets: LegacyServer
) -> None:
    gw = await joined(make_gateway, tickets)
    session = await open_session(gw.http, gw.url)
    await send(gw.http, gw.url, call("notes_remember", value="for-notes"), session=session)
    notes = await send(gw.http, gw.url, call("notes_recall", rid=2), session=session)
    tickets_recalled = await send(gw.http, gw.url, call("tickets_recall", rid=3), session=session)
    assert notes.last["result"]["content"][0]["text"] == "for-notes"
    assert tickets_recalled.last["result"]["content"][0]["text"] == ""
    # Another session of the same caller has sessions of its own behind it.
    other = await open_session(gw.http, gw.url)
    fresh = await send(gw.http, gw.url, call("notes_recall", rid=4), session=other)
    assert fresh.last["result"]["content"][0]["text"] == ""


async def test_a_session_id_is_good_on_its_endpoint_for_its_caller_until_it_ends(
    make_gateway: Any, tickets: LegacyServer
) -> None:
    gw = await joined(make_gateway, tickets)
    session = await open_session(gw.http, gw.url)
    pinged = await send(gw.http, gw.url, request("ping"), session=session)
    assert pinged.status == 200 and pinged.last["result"] == {}
    tampered = session[:-4] + ("AAAA" if not session.endswith("AAAA") else "BBBB")
    refused = await send(gw.http, gw.url, request("ping"), session=tampered)
    assert refused.status == 404
    missing = await send(gw.http, gw.url, request("ping"))
    assert missing.status == 400
    async with gw.http.delete(gw.url, headers={"Mcp-Session-Id": session}) as ended:
        assert ended.status == 200
    # Ended: the id leads to 404, also for what reaches no server's session.
    asked_after = (call("notes_echo", text="x"), call("nobody_echo"), request("ping"))
    for asked in (*asked_after, request("tools/list")):
        after = await send(gw.http, gw.url, asked, session=session)
        assert after.status == 404, asked


async def test_an_unknown_method_and_an_unknown_name_are_answered_as_a_server_answers(
    make_gateway: Any, tickets: LegacyServer
) -> None:
    """In a 200, as a server answers what it does not serve: the official client reads
    that (an error in a 4xx it does not), and an unknown name gets the servers' own
    answer to one, whether no upstream has it or its rules hide it."""
    gw = await joined(make_gateway, tickets, prefix="none")
    session = await open_session(gw.http, gw.url)
    unknown = await send(gw.http, gw.url, request("tasks/list"), session=session)
    assert unknown.status == 200 and unknown.last["error"]["code"] == -32601
    for name in ("nobody", "greet"):  # greet: both list it, so neither serves it
        asked = await send(gw.http, gw.url, call(name, text="x"), session=session)
        assert asked.status == 200, asked.last
        assert asked.last["result"]["isError"] is True
        assert asked.last["result"]["content"][0]["text"] == f"Unknown tool: {name}"


async def test_a_server_down_at_initialize_is_left_out_and_its_calls_fail_clearly(
    make_gateway: Any, tickets: LegacyServer
) -> None:
    gw = await joined(make_gateway, tickets)
    await asyncio.to_thread(tickets.stop)
    try:
        opened = await send(gw.http, gw.url, initialize())
        assert opened.status == 200, opened.last
        session = opened.headers["Mcp-Session-Id"]
        echoed = await send(gw.http, gw.url, call("notes_echo", text="up"), session=session)
        assert echoed.last["result"]["content"][0]["text"] == "up"
        down = await send(gw.http, gw.url, call("tickets_echo", text="x"), session=session)
        assert down.last["error"]["code"] == -32603
        assert "initialize again" in down.last["error"]["message"]
    finally:
        await asyncio.to_thread(tickets.start_ready, PEER_READY)
    # Back: a session begun now reaches it, without a gateway restart.
    session = await open_session(gw.http, gw.url)
    echoed = await send(gw.http, gw.url, call("tickets_echo", text="back"), session=session)
    assert echoed.last["result"]["content"][0]["text"] == "back"


async def test_the_mcp_client_approves_a_call_of_one_server_on_the_endpoint(
    make_gateway: Any, legacy: LegacyServer, tickets: LegacyServer, legacy_client: LegacyClient
) -> None:
    """The gateway's own question (an approval) and the tool's own question reach the
    2025 client on the endpoint, its answers each reach their asker, and the body runs
    once, on its own server."""
    gw: Gateway = await make_gateway(
        upstream={"name": "notes", "tools": {"increment_counter": {"approval": "required"}}},
        upstreams_extra=[{"name": "tickets", "url": tickets.url}],
        endpoints=[JOINED],
    )
    name = f"joined-approving-{uuid.uuid4().hex[:8]}"
    command = {"op": "open", "session": name, "url": gw.url, "caps": ["elicitation"]}
    await client_run(legacy_client, command)
    run_id = uuid.uuid4().hex
    try:
        called = await client_run(
            legacy_client,
            {
                "op": "call",
                "session": name,
                "name": "notes_increment_counter",
                "arguments": {"run_id": run_id},
            },
        )
        asked = [e["message"] for e in called["seen"]["elicitations"]]
        shown = approval.question("notes_increment_counter", "notes", {"run_id": run_id})
        assert asked == [shown["params"]["message"], "Increment the counter?"], asked
        assert called["result"]["content"][0]["text"] == "counter=1", called
        assert await runs(legacy.url, "increment_counter", run_id) == 1
        assert await runs(tickets.url, "increment_counter", run_id) == 0
    finally:
        await client_run(legacy_client, {"op": "close", "session": name})
