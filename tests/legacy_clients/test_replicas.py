"""One legacy session on three replicas behind a round-robin balancer: nothing is held per
session in any replica (the session id is the state), so each POST of the session may
land on another replica, the client's answer to a server's question reaches the upstream
through whichever replica gets it, and a replica stopped under the session's GET stream
only makes the client reconnect through another one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from gateway.app import build_app
from gateway.web.serving import Served, serve
from tests.peers.balancer import RoundRobin
from tests.peers.tooling import LegacyClient, LegacyServer
from tests.support.inprocess import gateway_config

pytestmark = pytest.mark.peers


class Fleet:
    def __init__(self, replicas: list[Served], balancer: RoundRobin, lb: TestServer) -> None:
        self.replicas, self.balancer, self.lb = replicas, balancer, lb
        self.url = str(lb.make_url("/mcp"))
        self.stopped: set[int] = set()

    async def stop(self, index: int) -> None:
        self.stopped.add(index)
        await self.replicas[index].close()


@pytest.fixture
async def fleet(legacy: LegacyServer) -> AsyncIterator[Fleet]:
    replicas = []
    for index in range(3):
        config = gateway_config(legacy.url, replica_id=f"replica-{index}")
        replicas.append(await serve(build_app(config), "127.0.0.1", 0, idle_timeout_s=75))
    balancer = RoundRobin([f"http://127.0.0.1:{r.port}" for r in replicas], skip_refused=True)
    lb = TestServer(balancer.app(), host="127.0.0.1")
    await lb.start_server()
    fleet = Fleet(replicas, balancer, lb)
    yield fleet
    await lb.close()
    for index, replica in enumerate(replicas):
        if index not in fleet.stopped:
            await replica.close()


async def run(client: LegacyClient, command: dict[str, Any]) -> dict[str, Any]:
    return await asyncio.to_thread(client.run, command, 90.0)


def text(reply: dict[str, Any]) -> str:
    assert "result" in reply, reply
    return str(reply["result"]["content"][0]["text"])


async def test_a_sessions_requests_land_on_different_replicas_and_its_questions_get_answered(
    fleet: Fleet, legacy_client: LegacyClient
) -> None:
    name = "across"
    opened = await run(legacy_client, {"op": "open", "session": name, "url": fleet.url})
    assert opened["get_stream"] and opened["session_id"].startswith("lg1.")
    try:
        greeted = await run(legacy_client, {"op": "call", "session": name, "name": "greet"})
        assert text(greeted) == "Hello, alice!"
        summary = await run(
            legacy_client,
            {"op": "call", "session": name, "name": "summarize", "arguments": {"text": "t"}},
        )  # sampling: sent on the GET stream, answered through another replica
        assert text(summary) == "Summary: SAMPLED[Summarize: t]"
        haiku = await run(
            legacy_client, {"op": "call", "session": name, "name": "elicit_then_sample"}
        )
        assert text(haiku) == "Haiku: SAMPLED[Haiku about autumn]"
    finally:
        await run(legacy_client, {"op": "close", "session": name})
    served = fleet.balancer.served
    posts = [s for s in served if s.http == "POST"]
    assert {s.backend for s in posts} == {0, 1, 2}
    # The answer to greet's elicitation (the POST after greet's tools/call, a response)
    # went to another replica than the one streaming greet's call to the client.
    call_at = next(i for i, s in enumerate(posts) if s.method == "tools/call")
    answer = posts[call_at + 1]
    assert answer.method is None and answer.backend != posts[call_at].backend


async def test_a_replica_stopped_under_a_get_stream_leaves_the_session_going_on_another(
    fleet: Fleet, legacy_client: LegacyClient
) -> None:
    name = "survivor"
    opened = await run(legacy_client, {"op": "open", "session": name, "url": fleet.url})
    assert opened["get_stream"]
    try:
        holder = [s for s in fleet.balancer.served if s.http == "GET"][-1].backend
        await fleet.stop(holder)
        again = await run(
            legacy_client, {"op": "get_streams", "session": name, "count": 2, "timeout": 30}
        )
        assert again["statuses"][:2] == [200, 200]  # reconnected, through another replica
        assert [s.backend for s in fleet.balancer.served if s.http == "GET"][-1] != holder
        summary = await run(
            legacy_client,
            {"op": "call", "session": name, "name": "summarize", "arguments": {"text": "u"}},
        )  # asked on the new GET stream: the session goes on
        assert text(summary) == "Summary: SAMPLED[Summarize: u]"
        greeted = await run(legacy_client, {"op": "call", "session": name, "name": "greet"})
        assert text(greeted) == "Hello, alice!"
    finally:
        await run(legacy_client, {"op": "close", "session": name})
