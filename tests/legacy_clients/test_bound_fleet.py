"""stdio and HTTP+SSE sessions of 2025 clients on three replicas behind a round-robin
balancer, sharing a real Redis: each session lives in the replica that opened it, and
the others forward its POSTs, the client's answers, its GET stream and its DELETE there
over the fleet bus. The official mcp 1.x client gets through them what it gets through
a Streamable HTTP route; the owner killed with SIGKILL ends its sessions with 404, and a
new session through another replica works; a replica relaying the session's GET stream
killed, the client reconnects its stream through another and the session goes on."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from tests.legacy_clients.conftest import Fleet
from tests.legacy_clients.test_sdk_client import STEPS, run_script
from tests.peers.tooling import LegacyClient
from tests.support.legacy_wire import call, open_session, send

pytestmark = pytest.mark.peers


@pytest.mark.parametrize("path", ["/local", "/sse"])
async def test_the_mcp_1_client_gets_the_same_through_replicas_forwarding_to_the_owner(
    fleet: Fleet, legacy_client: LegacyClient, path: str
) -> None:
    want = await run_script(legacy_client, fleet.url("/mcp"))
    mark = len(fleet.balancer.served)
    got = await run_script(legacy_client, fleet.url(path))
    assert got["get_stream"] and got["session_id"].startswith("lg1.")
    for step, expected, answer in zip(STEPS, want["steps"], got["steps"], strict=True):
        assert answer == expected, step
    served = fleet.balancer.served[mark:]
    owner = served[0].backend  # where initialize landed: the session's process is there
    assert served[0].method == "initialize"
    others = [s for s in served if s.backend != owner]
    # Each replica took some of the session's requests: the GET stream, POSTs, and the
    # client's answers to elicitation, sampling and roots (POSTs without a method).
    assert {s.backend for s in served} == {0, 1, 2}
    assert any(s.http == "POST" and s.method is None for s in others)
    assert any(s.http == "POST" and s.method == "tools/call" for s in others)
    assert any(s.http == "DELETE" for s in served)


@pytest.mark.parametrize("path", ["/local", "/sse"])
async def test_the_owner_killed_ends_its_sessions_with_404_and_a_new_one_works(
    fleet: Fleet, path: str
) -> None:
    url = fleet.url(path)
    async with aiohttp.ClientSession() as http:
        mark = len(fleet.balancer.served)
        session = await open_session(http, url)
        owner = fleet.balancer.served[mark].backend
        echoed = await send(http, url, call("echo", text="before"), session=session)
        assert echoed.status == 200 and echoed.last["result"]["content"][0]["text"] == "before"
        fleet.replicas[owner].kill9()
        gone = await send(http, url, call("echo", text="after"), session=session)
        assert gone.status == 404  # the client starts over
        again = await open_session(http, url)
        for _ in range(3):  # every POST of it on a replica that lives
            echoed = await send(http, url, call("echo", text="again"), session=again)
            assert echoed.status == 200
            assert echoed.last["result"]["content"][0]["text"] == "again"


async def test_a_replica_relaying_a_sessions_get_stream_killed_leaves_the_session_going(
    fleet: Fleet, legacy_client: LegacyClient
) -> None:
    name = "relay-killed"
    mark = len(fleet.balancer.served)
    opened = await asyncio.to_thread(
        legacy_client.run, {"op": "open", "session": name, "url": fleet.url("/local")}, 90.0
    )
    assert opened["get_stream"]
    try:
        served = fleet.balancer.served[mark:]
        owner = served[0].backend
        relay = [s for s in served if s.http == "GET"][-1].backend
        assert relay != owner  # the stream is the owner's, relayed by another replica
        fleet.replicas[relay].kill9()
        again = await asyncio.to_thread(
            legacy_client.run, {"op": "get_streams", "session": name, "count": 2, "timeout": 30}
        )
        assert again["statuses"][:2] == [200, 200]  # reconnected, the old stream replaced
        asks = {
            "greet": ({}, "Hello, alice!"),
            "summarize": ({"text": "v"}, "Summary: SAMPLED[Summarize: v]"),
        }
        for tool, (arguments, want) in asks.items():
            command = {"op": "call", "session": name, "name": tool, "arguments": arguments}
            reply = await asyncio.to_thread(legacy_client.run, command, 90.0)
            assert reply["result"]["content"][0]["text"] == want, tool
    finally:
        await asyncio.to_thread(legacy_client.run, {"op": "close", "session": name}, 90.0)
