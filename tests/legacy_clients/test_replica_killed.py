"""A replica killed with SIGKILL under a 2025 client's open GET stream, the session's
upstream a Streamable HTTP one: nothing of the session was in that replica, so the
official mcp 1.x client reconnects its stream through another replica and the session
goes on there, the server's questions on the new stream included. (Replicas stopped
cleanly: `test_replicas.py`; a stdio session's owner killed: `test_bound_fleet.py`.)"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.legacy_clients.conftest import Fleet
from tests.peers.tooling import LegacyClient

pytestmark = pytest.mark.peers


async def run(client: LegacyClient, command: dict[str, Any]) -> dict[str, Any]:
    return await asyncio.to_thread(client.run, command, 90.0)


def text(reply: dict[str, Any]) -> str:
    assert "result" in reply, reply
    return str(reply["result"]["content"][0]["text"])


async def test_a_replica_killed_under_a_get_stream_leaves_the_session_going_on_another(
    fleet: Fleet, legacy_client: LegacyClient
) -> None:
    name = "killed-under-stream"
    opened = await run(legacy_client, {"op": "open", "session": name, "url": fleet.url("/mcp")})
    assert opened["get_stream"]
    try:
        holder = [s for s in fleet.balancer.served if s.http == "GET"][-1].backend
        fleet.replicas[holder].kill9()
        again = await run(
            legacy_client, {"op": "get_streams", "session": name, "count": 2, "timeout": 30}
        )
        assert again["statuses"][:2] == [200, 200]  # reconnected, through another replica
        summary = await run(
            legacy_client,
            {"op": "call", "session": name, "name": "summarize", "arguments": {"text": "k"}},
        )  # sampling, which mcp 1.x sends on the GET stream: the new one carries it
        assert text(summary) == "Summary: SAMPLED[Summarize: k]"
        greeted = await run(legacy_client, {"op": "call", "session": name, "name": "greet"})
        assert text(greeted) == "Hello, alice!"
    finally:
        await run(legacy_client, {"op": "close", "session": name})
