"""The catalog against the real mcp 1.x server, both eras: a hidden tool is absent from
every list and a direct call to it gets exactly what an absent tool gets, the server's own
answer to a name it does not know (its body never runs); a renamed tool answers to its new
name only, through elicitation rounds and as a task, while the server gets its own name;
lists are served from what the server last said.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from gateway.protocol.tasks import EXTENSION
from tests.support.inprocess import Gateway
from tests.support.legacy import body_runs, legacy_tool
from tests.support.legacy_wire import call, open_session, request, send
from tests.support.wire import ALL_CAPS, rpc

pytestmark = pytest.mark.peers

ALICE = {"action": "accept", "content": {"username": "alice"}}
RULES = {
    "expose": {"tools": {"deny": ["increment_*"]}},
    "tools": {
        "greet": {
            "name": "say_hello",
            "title": "Say hello",
            "description": "Greets you by name.",
            "task": "optional",
        },
        "echo": {"name": "say_back"},
    },
}


def tool_names(result: dict[str, Any]) -> list[str]:
    return [t["name"] for t in result["tools"]]


async def modern(gw: Gateway, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    status, reply, _ = await gw.post(body)
    reply = reply[-1] if isinstance(reply, list) else reply
    assert isinstance(reply, dict)
    return status, reply


def without(name: str, answer: Any) -> str:
    """An answer with the name it names replaced: two answers about two names compared."""
    return json.dumps(answer, sort_keys=True).replace(name, "<name>")


async def test_a_hidden_tool_is_absent_and_unknown_in_both_eras(make_gateway: Any) -> None:
    gw = await make_gateway(upstream=RULES)
    _, listed = await modern(gw, rpc("tools/list"))
    names = tool_names(listed["result"])
    assert "increment_counter" not in names and "say_back" in names and "echo" not in names
    run_id = uuid.uuid4().hex
    hidden = await modern(
        gw, rpc("tools/call", {"name": "increment_counter", "arguments": {"run_id": run_id}})
    )
    absent = await modern(gw, rpc("tools/call", {"name": "no_such_tool", "arguments": {}}))
    assert hidden[0] == absent[0] == 200
    assert hidden[1]["result"]["isError"] is True
    assert without("increment_counter", hidden[1]) == without("no_such_tool", absent[1])
    # 2025: the same, on a session of the client's own.
    session = await open_session(gw.http, gw.url, capabilities={"elicitation": {}})
    listed25 = await send(gw.http, gw.url, request("tools/list"), session=session)
    assert "increment_counter" not in tool_names(listed25.last["result"])
    h25 = await send(gw.http, gw.url, call("increment_counter", run_id=run_id), session=session)
    a25 = await send(gw.http, gw.url, call("no_such_tool"), session=session)
    assert h25.status == a25.status
    assert without("increment_counter", h25.last) == without("no_such_tool", a25.last)
    assert await body_runs(gw, "increment_counter", run_id) == 0  # never reached the server


async def test_a_renamed_tool_answers_to_its_new_name_only_through_rounds_and_as_a_task(
    make_gateway: Any,
) -> None:
    gw = await make_gateway(upstream=RULES)
    _, listed = await modern(gw, rpc("tools/list"))
    (shown,) = [t for t in listed["result"]["tools"] if t["name"] == "say_hello"]
    assert (shown["title"], shown["description"]) == ("Say hello", "Greets you by name.")
    assert "greet" not in tool_names(listed["result"])
    run_id = uuid.uuid4().hex
    _, first = await modern(
        gw, rpc("tools/call", {"name": "say_hello", "arguments": {"run_id": run_id}})
    )
    result = first["result"]
    assert result["resultType"] == "input_required"
    (key,) = result["inputRequests"]
    retry = {
        "name": "say_hello",
        "arguments": {"run_id": run_id},
        "requestState": result["requestState"],
        "inputResponses": {key: ALICE},
    }
    _, done = await modern(gw, rpc("tools/call", retry, rid=2))
    assert done["result"]["content"][0]["text"] == "Hello, alice!"
    assert await body_runs(gw, "greet", run_id) == 1  # the server ran its own `greet`
    _, old = await modern(gw, rpc("tools/call", {"name": "greet", "arguments": {}}))
    _, absent = await modern(gw, rpc("tools/call", {"name": "no_such_tool", "arguments": {}}))
    assert without("greet", old) == without("no_such_tool", absent)  # the old name: unknown
    # As a task (its policy keyed by the server's own name): asked, answered, completed.
    caps = {**ALL_CAPS, "extensions": {EXTENSION: {}}}
    task_run = uuid.uuid4().hex
    call_it = rpc("tools/call", {"name": "say_hello", "arguments": {"run_id": task_run}}, caps=caps)
    _, created = await modern(gw, call_it)
    task_id = created["result"]["taskId"]
    async with asyncio.timeout(30):
        while True:
            _, got = await modern(gw, rpc("tasks/get", {"taskId": task_id}, caps=caps))
            task = got["result"]
            if task["status"] == "input_required":
                (task_key,) = task["inputRequests"]
                update = {"taskId": task_id, "inputResponses": {task_key: ALICE}}
                await modern(gw, rpc("tasks/update", update, caps=caps))
            elif task["status"] == "completed":
                break
            await asyncio.sleep(task["pollIntervalMs"] / 1000)
    assert task["result"]["content"][0]["text"] == "Hello, alice!"
    # 2025: a new name works (the server gets its own), the old one is unknown.
    session = await open_session(gw.http, gw.url)
    echoed = await send(gw.http, gw.url, call("say_back", text="hi"), session=session)
    assert echoed.last["result"]["content"][0]["text"] == "hi"
    old25 = await send(gw.http, gw.url, call("echo", text="hi"), session=session)
    absent25 = await send(gw.http, gw.url, call("no_such_tool", text="hi"), session=session)
    assert without("echo", old25.last) == without("no_such_tool", absent25.last)


async def test_lists_are_served_from_the_catalog_within_its_ttl(make_gateway: Any) -> None:
    gw = await make_gateway()
    before = int(await legacy_tool(gw.upstream_url, "lists_served", {}))
    for _ in range(20):
        status, listed = await modern(gw, rpc("tools/list"))
        assert status == 200 and "echo" in tool_names(listed["result"])
    assert listed["result"]["ttlMs"] > 0
    served = int(await legacy_tool(gw.upstream_url, "lists_served", {})) - before
    assert served <= 2  # the catalog's fetch (and the tools' headers' own look)


async def test_a_hidden_tool_asked_for_is_a_refusal_in_the_audit_trail(
    make_gateway: Any, tmp_path: Path
) -> None:
    file = tmp_path / "audit.jsonl"
    gw = await make_gateway(upstream=RULES, audit={"file": {"path": str(file)}})
    status, _ = await modern(gw, rpc("tools/call", {"name": "increment_counter", "arguments": {}}))
    assert status == 200
    await modern(gw, rpc("tools/call", {"name": "no_such_tool", "arguments": {}}))
    await asyncio.sleep(0)  # the file's lines of the step are written as it ends
    events = [json.loads(line) for line in file.read_bytes().splitlines()]
    refused = [e for e in events if e["kind"] == "request.refused"]
    assert [(e["refusal"], e["tool"]) for e in refused] == [("tool_hidden", "increment_counter")]
