"""Every legacy transport behind the same bridge, with real peers: the official mcp 1.x
python server over stdio and over HTTP+SSE (2024-11-05), our TypeScript SDK 1.x server
over stdio, and a third-party server from the npm registry (server-everything) over all
three transports, each driven by the mcp 2.x client pinned to 2026-07-28."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.peers.npm import EverythingServer, everything_stdio_command, ts_server_command
from tests.peers.tooling import LegacyServer, legacy_stdio_command
from tests.support.cases import CASE_IDS, CASES, complete_case, drive, text_of
from tests.support.inprocess import Gateway
from tests.support.wire import rpc

pytestmark = pytest.mark.peers


@pytest.fixture(scope="module")
def sse_legacy() -> Iterator[LegacyServer]:
    server = LegacyServer(transport="sse")
    yield server
    server.stop()


@pytest.fixture(params=["stdio", "sse"])
async def legacy_over(
    request: pytest.FixtureRequest,
    make_gateway: Callable[..., Any],
    sse_legacy: LegacyServer,
    tmp_path: Path,
) -> Gateway:
    """The gateway in front of the mcp 1.x python server over stdio, or over HTTP+SSE."""
    if request.param == "stdio":
        upstream = {"command": legacy_stdio_command(tmp_path), "pool": {"min_idle": 1}}
        gateway: Gateway = await make_gateway(upstream=upstream)
    else:
        gateway = await make_gateway(sse_legacy.url, upstream={"transport": "sse"})
    return gateway


@pytest.mark.parametrize(("tool", "arguments", "questions", "text"), CASES, ids=CASE_IDS)
async def test_every_interactive_tool_completes_over_stdio_and_sse(
    legacy_over: Gateway,
    modern,
    tool: str,
    arguments: dict[str, Any],
    questions: list[list[str]],
    text: str,
) -> None:
    await complete_case(legacy_over, modern, tool, arguments, questions, text)


async def test_progress_prompts_and_resources_over_stdio_and_sse(
    legacy_over: Gateway, modern
) -> None:
    url = legacy_over.url
    command = {"op": "call_tool", "url": url, "name": "progress_then_ask", "progress": True}
    reply = await drive(modern, {**command, "arguments": {"steps": 2, "run_id": "p"}})
    assert [p["progress"] for p in reply["progress"]] == [1.0, 2.0, 3.0, 4.0]
    assert reply["rounds"] == [["elicit.confirm"]] and text_of(reply) == "done (accept)"
    prompt = await drive(
        modern, {"op": "get_prompt", "url": url, "name": "interview", "arguments": {"guest": "g"}}
    )
    assert prompt["rounds"] == [["elicit.topic"]] and text_of(prompt) == "Interview g about autumn."
    resource = await drive(modern, {"op": "read_resource", "url": url, "uri": "profile://ada"})
    assert resource["rounds"] == [["elicit.age+color"]] and text_of(resource) == "ada: green, 30"


async def test_many_concurrent_calls_over_stdio_each_have_a_process_and_their_own_answers(
    make_gateway: Callable[..., Any], tmp_path: Path
) -> None:
    upstream = {"command": legacy_stdio_command(tmp_path), "pool": {"min_idle": 0}}
    gateway: Gateway = await make_gateway(upstream=upstream)
    names = [f"user{n}" for n in range(8)]
    firsts = await asyncio.gather(
        *(
            gateway.final(rpc("tools/call", {"name": "greet", "arguments": {}}, rid=n))
            for n in range(8)
        )
    )
    states = [reply["result"]["requestState"] for reply in firsts]
    pids = {call.session.pid for call in gateway.bridge.calls.values()}  # type: ignore[attr-defined]
    assert len(gateway.bridge.calls) == 8 and len(pids) == 8  # a process per parked call
    retries = [
        rpc(
            "tools/call",
            {
                "name": "greet",
                "arguments": {},
                "requestState": state,
                "inputResponses": {
                    "elicit.username": {"action": "accept", "content": {"username": name}}
                },
            },
            rid=100 + n,
        )
        for n, (state, name) in enumerate(zip(states, names, strict=True))
    ]
    finals = await asyncio.gather(*(gateway.final(body) for body in reversed(retries)))
    texts = [reply["result"]["content"][0]["text"] for reply in finals]
    assert texts == [f"Hello, {name}!" for name in reversed(names)]


async def test_our_typescript_sdk_server_over_stdio(
    make_gateway: Callable[..., Any], modern
) -> None:
    gateway: Gateway = await make_gateway(upstream={"command": ts_server_command()})
    url = gateway.url
    cases = [
        ("greet", {}, [["elicit.username"]], "Hello, alice!"),
        ("summarize", {"text": "t"}, [["sampling"]], "SAMPLED[Summarize: t]"),
        ("list_roots", {}, [["roots"]], "file:///srv/peers-root-a,file:///srv/peers-root-b"),
        ("large", {"size": 1 << 20}, [], "x" * (1 << 20)),
    ]
    for tool, arguments, rounds, text in cases:
        reply = await drive(
            modern, {"op": "call_tool", "url": url, "name": tool, "arguments": arguments}
        )
        assert reply["rounds"] == rounds, tool
        assert text in text_of(reply), tool
    progress = await drive(
        modern,
        {"op": "call_tool", "url": url, "name": "progress", "arguments": {}, "progress": True},
    )
    assert len(progress["progress"]) == 3
    prompt = await drive(
        modern,
        {"op": "get_prompt", "url": url, "name": "ask_prompt", "arguments": {"question": "why"}},
    )
    assert "why" in str(prompt["result"]["messages"])
    resource = await drive(modern, {"op": "read_resource", "url": url, "uri": "info://server"})
    assert "mrtr-ts-peer" in str(resource["result"]["contents"])


EVERYTHING_FORM = {  # answers that fit server-everything's elicitation form
    "action": "accept",
    "content": {
        "name": "Ada",
        "check": True,
        "email": "ada@example.com",
        "homepage": "https://ada.example",
        "birthdate": "1815-12-10",
        "integer": 7,
        "number": 3,
        "untitledSingleSelectEnum": "Ross",
        "untitledMultipleSelectEnum": ["Guitar"],
        "titledSingleSelectEnum": "hero-1",
        "titledMultipleSelectEnum": ["fish-1"],
        "legacyTitledEnum": "pet-1",
    },
}


@pytest.fixture(params=["stdio", "sse", "streamableHttp"])
def everything(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """server-everything (npm), reached over one of its three transports."""
    if request.param == "stdio":
        yield {"command": everything_stdio_command()}
        return
    server = EverythingServer(request.param)
    try:
        yield {
            "url": server.url,
            "transport": "sse" if request.param == "sse" else "streamable-http",
        }
    finally:
        server.stop()


async def test_a_third_party_server_from_npm_over_each_transport(
    make_gateway: Callable[..., Any], everything: dict[str, Any], modern
) -> None:
    url_or_none = everything.pop("url", None)
    upstream = {**everything, "inputs": [{"key": "profile", "fields": ["name", "email"]}]}
    gateway: Gateway = await make_gateway(url_or_none, upstream=upstream)
    url = gateway.url
    elicited = await drive(
        modern,
        {
            "op": "call_tool",
            "url": url,
            "name": "trigger-elicitation-request",
            "arguments": {},
            "answers": {"profile": EVERYTHING_FORM},
        },
    )
    assert elicited["rounds"] == [["profile"]] and "Ada" in text_of(elicited)
    sampled = await drive(
        modern,
        {
            "op": "call_tool",
            "url": url,
            "name": "trigger-sampling-request",
            "arguments": {"prompt": "hi"},
        },
    )
    # server-everything asks for the client's roots as a session starts: when the session
    # it asks on already belongs to this call, that question rides in the call's rounds
    # (in the sampling's, or one of its own when it comes late).
    asked_keys = [key for round_ in sampled["rounds"] for key in round_]
    assert sorted(asked_keys) in (["sampling"], ["roots", "sampling"]), sampled["rounds"]
    assert "SAMPLED" in text_of(sampled)
    roots = await drive(
        modern, {"op": "call_tool", "url": url, "name": "get-roots-list", "arguments": {}}
    )
    assert "file:///srv/peers-root-a" in text_of(roots)
    progress = await drive(
        modern,
        {
            "op": "call_tool",
            "url": url,
            "name": "trigger-long-running-operation",
            "arguments": {"duration": 1, "steps": 2},
            "progress": True,
        },
    )
    assert len(progress["progress"]) == 2
    prompt = await drive(
        modern,
        {"op": "get_prompt", "url": url, "name": "args-prompt", "arguments": {"city": "Paris"}},
    )
    assert "Paris" in str(prompt["result"]["messages"])
    resource = await drive(
        modern,
        {"op": "read_resource", "url": url, "uri": "demo://resource/dynamic/text/1"},
    )
    assert resource["result"]["contents"]
