"""The TypeScript SDK 1.x client (`tests/peers/node/ts_client.mjs`), a second 2025 client
implementation, through three replicas behind a round-robin balancer: every tool, prompt
and resource of the mcp 1.x test server, with elicitation, sampling and roots asked of
it, gets what it gets from the server directly, over a Streamable HTTP upstream (passed
through by whichever replica) and a stdio one (held by one replica, the others
forwarding to it)."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest

from tests.legacy_clients.conftest import Fleet
from tests.legacy_clients.test_sdk_client import STEPS
from tests.peers.npm import run_ts_client
from tests.peers.tooling import LegacyServer

pytestmark = pytest.mark.peers


async def ts_script(url: str) -> dict[str, Any]:
    """The answers of a TypeScript client session of its own running `STEPS`."""
    run = uuid.uuid4().hex
    steps = json.loads(json.dumps(STEPS).replace("{run}", run))
    answers = await asyncio.to_thread(run_ts_client, url, steps)
    return json.loads(json.dumps(answers).replace(run, "{run}"))  # type: ignore[no-any-return]


@pytest.mark.parametrize("path", ["/mcp", "/local"])
async def test_the_typescript_client_gets_through_three_replicas_what_it_gets_directly(
    fleet: Fleet, legacy: LegacyServer, path: str
) -> None:
    direct = await ts_script(legacy.url)
    mark = len(fleet.balancer.served)
    through = await ts_script(fleet.url(path))
    assert through["session_id"].startswith("lg1.")
    assert through["initialize"]["serverInfo"] == direct["initialize"]["serverInfo"]
    for step, want, got in zip(STEPS, direct["steps"], through["steps"], strict=True):
        assert got == want, step
    by_name = {
        (s.get("name") or s["method"]): answer
        for s, answer in zip(STEPS, through["steps"], strict=True)
    }
    assert by_name["greet"]["seen"]["elicitations"] == ["What is your username?"]
    assert by_name["greet"]["result"]["content"][0]["text"] == "Hello, alice!"
    assert by_name["summarize"]["seen"]["samplings"] == ["Summarize: a long text"]
    assert by_name["list_roots"]["seen"]["roots"] == 1
    assert [p["progress"] for p in by_name["slow_progress"]["progress"]] == [1, 2, 3]
    served = fleet.balancer.served[mark:]
    assert {s.backend for s in served} == {0, 1, 2}  # each replica took some of it
    assert any(s.http == "GET" for s in served)  # the session's GET stream
    assert any(s.http == "POST" and s.method is None for s in served)  # answers posted
    assert any(s.http == "DELETE" for s in served)
