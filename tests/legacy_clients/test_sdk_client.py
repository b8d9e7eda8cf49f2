"""The official mcp 1.x client (`ClientSession` over `streamable_http_client`) through the
gateway's legacy lane gets what it gets directly from the same mcp 1.x server: the same
`initialize` answer, every tool (elicitation on the call's stream; sampling and roots on
the session's GET stream, where mcp 1.x servers send them), prompts, resources,
progress and log notifications, and the same errors."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest

from tests.peers.tooling import LegacyClient
from tests.support.inprocess import Gateway

pytestmark = pytest.mark.peers


def call(name: str, progress: bool = False, **arguments: Any) -> dict[str, Any]:
    return {"op": "call", "name": name, "arguments": arguments, "progress": progress}


def request(method: str, **args: Any) -> dict[str, Any]:
    return {"op": "request", "method": method, "args": args}


#: Every tool, prompt and resource of tests/peers/legacy_server.py a session can use on its
#: own ("{run}" is a run id of each session's own, so server-side counts start afresh).
STEPS = [
    request("list_tools"),
    request("list_prompts"),
    request("list_resources"),
    request("list_resource_templates"),
    call("echo", text="hi"),
    call("greet", run_id="{run}"),
    call("register", run_id="{run}"),
    call("confirm_action", action="deploy", run_id="{run}"),
    call("increment_counter", run_id="{run}"),
    call("summarize", text="a long text", run_id="{run}"),
    call("list_roots", run_id="{run}"),
    call("elicit_then_sample", run_id="{run}"),
    call("concurrent", run_id="{run}"),
    call("two_at_once", run_id="{run}"),
    call("progress_then_ask", progress=True, steps=2, run_id="{run}"),
    call("slow_progress", progress=True, steps=3),
    call("chatty", run_id="{run}"),
    call("connect_account", run_id="{run}"),
    call("pinger"),
    call("regional", region="eu", count=2),
    call("needs_connection", run_id="{run}"),
    call("connect", run_id="{run}"),
    call("needs_connection", run_id="{run}"),
    call("authorization_seen"),
    request("get_prompt", name="interview", arguments={"guest": "ada"}),
    request("get_prompt", name="plain", arguments={"word": "y"}),
    request("get_prompt", name="nope"),
    request("read_resource", uri="static://hello"),
    request("read_resource", uri="profile://bob"),
    request("read_resource", uri="missing://x"),
    request("ping"),
    request("set_logging_level", level="warning"),
    call("chatty", run_id="{run}-after"),
]


async def run_script(client: LegacyClient, url: str) -> dict[str, Any]:
    """The answers of a session of its own running `STEPS`, its run id written "{run}"."""
    run = uuid.uuid4().hex
    steps = json.loads(json.dumps(STEPS).replace("{run}", run))
    command = {"op": "script", "url": url, "steps": steps}
    answers = await asyncio.to_thread(client.run, command, 120.0)
    return json.loads(json.dumps(answers).replace(run, "{run}"))  # type: ignore[no-any-return]


async def test_the_mcp_1_client_gets_through_the_gateway_what_it_gets_directly(
    gateway: Gateway, legacy_client: LegacyClient
) -> None:
    direct = await run_script(legacy_client, gateway.upstream_url)
    through = await run_script(legacy_client, gateway.url)
    assert direct["get_stream"] and through["get_stream"]  # the session's GET stream held
    assert through["initialize"] == direct["initialize"]
    assert through["session_id"].startswith("lg1.")  # the gateway's, never the server's
    assert not direct["session_id"].startswith("lg1.")
    for step, want, got in zip(STEPS, direct["steps"], through["steps"], strict=True):
        assert got == want, step
    # What the steps prove was really asked of the client, in both runs alike:
    by_name = {
        (s.get("name") or s["method"]): answer
        for s, answer in zip(STEPS, through["steps"], strict=True)
    }
    assert by_name["greet"]["seen"]["elicitations"][0]["message"] == "What is your username?"
    assert by_name["greet"]["result"]["content"][0]["text"] == "Hello, alice!"
    assert by_name["summarize"]["seen"]["samplings"] == ["Summarize: a long text"]
    assert by_name["list_roots"]["seen"]["roots"] == 1
    assert by_name["concurrent"]["result"]["content"][0]["text"] == (
        "city=Paris model=SAMPLED[Say hi] roots=2"
    )
    assert [p["progress"] for p in by_name["slow_progress"]["progress"]] == [1, 2, 3]
    assert by_name["authorization_seen"]["result"]["content"][0]["text"] == "None"
