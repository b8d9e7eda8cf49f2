"""Two real mcp 1.x servers behind one endpoint, for 2026-07-28 clients: their tools
listed with their prefixes, an elicitation tool of each run through its rounds with each
server's own result, a retry's `requestState` good for its own upstream only, bare names
(`prefix: none`) with a shared one served by neither, a stopped server left out of the
lists while its calls fail and back once it restarts, prompts prefixed and a resource read
where it is listed, a task of the second server to its end (2025 clients:
`test_endpoint_sessions.py`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from gateway.protocol.inbound import SERVER_INFO_KEY
from gateway.protocol.tasks import EXTENSION
from tests.peers.tooling import PEER_READY, LegacyServer
from tests.support.inprocess import Gateway
from tests.support.legacy import legacy_tool
from tests.support.wire import ALL_CAPS, FROZEN, rpc

pytestmark = pytest.mark.peers

ALICE = {"action": "accept", "content": {"username": "alice"}}
BOB = {"action": "accept", "content": {"username": "bob"}}
JOINED = {"path": "/mcp", "upstreams": ["notes", "tickets"]}


@pytest.fixture(scope="module")
def tickets() -> Iterator[LegacyServer]:
    """The second server (the session's `legacy` is the first, `notes`)."""
    server = LegacyServer()
    yield server
    server.stop()


async def joined(
    make_gateway: Any,
    tickets: LegacyServer,
    endpoint: dict[str, Any] = JOINED,
    rules: dict[str, dict[str, Any]] | None = None,
) -> Gateway:
    """A gateway serving `legacy` (as notes) and `tickets` on one endpoint; `rules`: more
    of each upstream's settings, by its name."""
    rules = rules or {}
    gw: Gateway = await make_gateway(
        upstream={"name": "notes", **rules.get("notes", {})},
        upstreams_extra=[{"name": "tickets", "url": tickets.url, **rules.get("tickets", {})}],
        endpoints=[endpoint],
    )
    return gw


async def answer(gw: Gateway, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    status, reply, _ = await gw.post(body)
    reply = reply[-1] if isinstance(reply, list) else reply
    assert isinstance(reply, dict), reply
    return status, reply


def names(result: dict[str, Any]) -> set[str]:
    return {t["name"] for t in result["tools"]}


async def runs(url: str, run_id: str) -> int:
    """How many times `greet` ran for `run_id` on the server at `url` (asked of it)."""
    return int(await legacy_tool(url, "runs", {"tool": "greet", "run_id": run_id}))


async def test_both_servers_tools_are_listed_with_their_prefixes(
    make_gateway: Any, legacy: LegacyServer, tickets: LegacyServer
) -> None:
    gw = await joined(make_gateway, tickets)
    status, listed = await answer(gw, rpc("tools/list"))
    assert status == 200
    shown = names(listed["result"])
    assert {"notes_greet", "tickets_greet", "notes_echo", "tickets_echo"} <= shown
    assert all(n.startswith(("notes_", "tickets_")) for n in shown)
    assert listed["result"]["ttlMs"] > 0
    assert listed["result"]["_meta"][SERVER_INFO_KEY]["name"] == "notes+tickets"
    _, discovered = await answer(gw, rpc("server/discover"))
    result = discovered["result"]
    assert result["_meta"][SERVER_INFO_KEY]["name"] == "notes+tickets"
    # 2025 clients are served here too (tests/integration/test_endpoint_sessions.py).
    assert result["supportedVersions"][0] == "2026-07-28"
    assert "2025-11-25" in result["supportedVersions"]
    assert "tools" in result["capabilities"]


async def test_an_elicitation_tool_of_each_server_runs_its_rounds_on_its_own_server(
    make_gateway: Any, legacy: LegacyServer, tickets: LegacyServer
) -> None:
    gw = await joined(make_gateway, tickets)
    run_n, run_t = uuid.uuid4().hex, uuid.uuid4().hex
    asked = {}
    for name, run_id in (("notes_greet", run_n), ("tickets_greet", run_t)):
        _, first = await answer(
            gw, rpc("tools/call", {"name": name, "arguments": {"run_id": run_id}})
        )
        assert first["result"]["resultType"] == "input_required"
        asked[name] = first["result"]
    # Both parked at once. A round's state is good for its own upstream only: sent with
    # the other's name it is refused as any state not for this request is.
    (n_key,) = asked["notes_greet"]["inputRequests"]
    crossed = {
        "name": "tickets_greet",
        "arguments": {"run_id": run_n},
        "requestState": asked["notes_greet"]["requestState"],
        "inputResponses": {n_key: ALICE},
    }
    _, refused = await answer(gw, rpc("tools/call", crossed, rid=2))
    assert refused["error"] == FROZEN
    # Each retry repeats its prefixed name, reaches its own upstream, gets its own result.
    for name, run_id, who, text in (
        ("tickets_greet", run_t, BOB, "Hello, bob!"),
        ("notes_greet", run_n, ALICE, "Hello, alice!"),
    ):
        (key,) = asked[name]["inputRequests"]
        retry = {
            "name": name,
            "arguments": {"run_id": run_id},
            "requestState": asked[name]["requestState"],
            "inputResponses": {key: who},
        }
        _, done = await answer(gw, rpc("tools/call", retry, rid=3))
        assert done["result"]["content"][0]["text"] == text
    assert (await runs(legacy.url, run_n), await runs(tickets.url, run_n)) == (1, 0)
    assert (await runs(legacy.url, run_t), await runs(tickets.url, run_t)) == (0, 1)


async def test_prompts_are_prefixed_and_a_resource_is_read_from_the_server_that_lists_it(
    make_gateway: Any, legacy: LegacyServer, tickets: LegacyServer
) -> None:
    gw = await joined(
        make_gateway,
        tickets,
        JOINED,
        {
            "notes": {"expose": {"resources": {"allow": ["static://*"]}}},
            "tickets": {"expose": {"resources": {"allow": ["profile://*"]}}},
        },
    )
    _, prompts = await answer(gw, rpc("prompts/list"))
    assert {"notes_plain", "tickets_plain"} <= {p["name"] for p in prompts["result"]["prompts"]}
    _, got = await answer(
        gw, rpc("prompts/get", {"name": "tickets_plain", "arguments": {"word": "hi"}})
    )
    assert got["result"]["messages"][0]["content"]["text"] == "Say hi."
    _, resources = await answer(gw, rpc("resources/list"))
    assert [r["uri"] for r in resources["result"]["resources"]] == ["static://hello"]
    _, templates = await answer(gw, rpc("resources/templates/list"))
    listed = [t["uriTemplate"] for t in templates["result"]["resourceTemplates"]]
    assert listed == ["profile://{user}"]
    _, read = await answer(gw, rpc("resources/read", {"uri": "static://hello"}))
    assert read["result"]["contents"][0]["text"] == "hello resource"
    user = uuid.uuid4().hex
    _, asked = await answer(gw, rpc("resources/read", {"uri": f"profile://{user}"}))
    assert asked["result"]["resultType"] == "input_required"  # tickets' template, tickets' read
    runs_there = {"tool": "profile", "run_id": user}
    assert await legacy_tool(tickets.url, "runs", runs_there) == "1"
    assert await legacy_tool(legacy.url, "runs", runs_there) == "0"


async def test_a_task_of_the_second_server_is_polled_and_answered_to_its_end(
    make_gateway: Any, legacy: LegacyServer, tickets: LegacyServer
) -> None:
    gw = await joined(
        make_gateway, tickets, JOINED, {"tickets": {"tools": {"greet": {"task": "optional"}}}}
    )
    caps = {**ALL_CAPS, "extensions": {EXTENSION: {}}}
    run_id = uuid.uuid4().hex
    call_it = rpc(
        "tools/call", {"name": "tickets_greet", "arguments": {"run_id": run_id}}, caps=caps
    )
    _, created = await answer(gw, call_it)
    task_id = created["result"]["taskId"]
    async with asyncio.timeout(30):
        while True:
            _, got = await answer(gw, rpc("tasks/get", {"taskId": task_id}, caps=caps))
            task = got["result"]
            if task["status"] == "input_required":
                (key,) = task["inputRequests"]
                update = {"taskId": task_id, "inputResponses": {key: BOB}}
                await answer(gw, rpc("tasks/update", update, caps=caps))
            elif task["status"] == "completed":
                break
            await asyncio.sleep(task["pollIntervalMs"] / 1000)  # a client's poll
    assert task["result"]["content"][0]["text"] == "Hello, bob!"
    assert (await runs(legacy.url, run_id), await runs(tickets.url, run_id)) == (0, 1)


async def test_with_bare_names_each_is_served_by_its_server_and_a_shared_one_by_neither(
    make_gateway: Any, legacy: LegacyServer, tickets: LegacyServer
) -> None:
    gw = await joined(
        make_gateway,
        tickets,
        {**JOINED, "prefix": "none"},
        {
            "notes": {"expose": {"tools": {"allow": ["greet", "runs"]}}},
            "tickets": {"expose": {"tools": {"allow": ["echo", "runs"]}}},
        },
    )
    with capture_logs() as logs:
        _, listed = await answer(gw, rpc("tools/list"))
        assert names(listed["result"]) == {"greet", "echo"}
        status, shared = await answer(
            gw, rpc("tools/call", {"name": "runs", "arguments": {"tool": "greet", "run_id": "x"}})
        )
    assert status == 400 and shared["error"]["code"] == -32602
    told = [e for e in logs if e["event"] == "endpoint_name_shared"]
    assert told and all(e["log_level"] == "warning" for e in told)
    _, echoed = await answer(gw, rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}}))
    assert echoed["result"]["content"][0]["text"] == "hi"
    run_id = uuid.uuid4().hex
    _, greeted = await answer(
        gw, rpc("tools/call", {"name": "greet", "arguments": {"run_id": run_id}})
    )
    assert greeted["result"]["resultType"] == "input_required"
    assert await runs(legacy.url, run_id) == 1  # notes' greet: tickets does not show its own


async def test_a_stopped_server_is_left_out_of_lists_its_calls_fail_and_it_comes_back(
    make_gateway: Any, legacy: LegacyServer, tickets: LegacyServer
) -> None:
    # Lists fetched at every request (a stopped server's list is not served from before).
    fresh = {"catalog": {"ttl_s": 0.001}}
    gw = await joined(make_gateway, tickets, JOINED, {"notes": fresh, "tickets": fresh})
    _, listed = await answer(gw, rpc("tools/list"))
    assert "tickets_echo" in names(listed["result"])
    await asyncio.to_thread(tickets.kill9)
    try:
        with capture_logs() as logs:
            status, without = await answer(gw, rpc("tools/list"))
        assert status == 200
        shown = names(without["result"])
        assert "notes_echo" in shown and not any(n.startswith("tickets_") for n in shown)
        assert without["result"]["ttlMs"] == 0  # served without one: not to be kept
        assert [e["upstream"] for e in logs if e["event"] == "endpoint_upstream_omitted"] == [
            "tickets"
        ]
        status, failed = await answer(
            gw, rpc("tools/call", {"name": "tickets_echo", "arguments": {"text": "hi"}})
        )
        assert status == 502 and failed["error"]["code"] == -32603
        _, echoed = await answer(
            gw, rpc("tools/call", {"name": "notes_echo", "arguments": {"text": "still"}})
        )
        assert echoed["result"]["content"][0]["text"] == "still"
    finally:
        await asyncio.to_thread(tickets.start_ready, PEER_READY)
    # Restarted: back in the list and called, without a gateway restart.
    _, back = await answer(gw, rpc("tools/list"))
    assert "tickets_echo" in names(back["result"])
    _, echoed = await answer(
        gw, rpc("tools/call", {"name": "tickets_echo", "arguments": {"text": "back"}})
    )
    assert echoed["result"]["content"][0]["text"] == "back"
