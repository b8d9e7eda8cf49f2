"""The interactive tools of the legacy test server every bridge must complete, and the
mcp 2.x client that completes them."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from tests.peers.tooling import ModernClient
from tests.support.inprocess import Gateway
from tests.support.legacy import body_runs

# (tool, arguments, the questions it asks (input keys, those asked together in one list),
# the final text). Questions asked together arrive in one round, but for one that comes
# later than the gateway waits (`limits.coalesce_ms`: a loaded machine): it is asked in
# the next round, nothing lost (docs/protocol.md, "The bridge"). See `asked`.
CASES = [
    ("greet", {}, [["elicit.username"]], "Hello, alice!"),
    (
        "register",
        {},
        [["elicit.username"], ["elicit.age+color"]],
        "Registered alice (age 30) with favourite color green",
    ),
    (
        "summarize",
        {"text": "the quick fox"},
        [["sampling"]],
        "Summary: SAMPLED[Summarize: the quick fox]",
    ),
    (
        "list_roots",
        {},
        [["roots"]],
        "Roots: root-a=file:///srv/peers-root-a, root-b=file:///srv/peers-root-b",
    ),
    (
        "elicit_then_sample",
        {},
        [["elicit.topic"], ["sampling"]],
        "Haiku: SAMPLED[Haiku about autumn]",
    ),
    (
        "concurrent",
        {},
        [["elicit.city", "roots", "sampling"]],
        "city=Paris model=SAMPLED[Say hi] roots=2",
    ),
    (
        "two_at_once",
        {},
        [["elicit.city", "elicit.username"]],
        "a={'username': 'alice'} b={'city': 'Paris'}",
    ),
    ("increment_counter", {}, [["elicit.confirm"]], "counter=1"),
    ("connect_account", {}, [["elicit.url"]], "connect: accept"),
]
CASE_IDS = [case[0] for case in CASES]


def asked(rounds: list[list[str]], questions: list[list[str]]) -> bool:
    """Whether a client's `rounds` (the input keys of each) asked `questions`: each
    question once, those asked together in consecutive rounds of their own, in order."""
    left = [list(round_) for round_ in rounds]
    for together in questions:
        unasked = set(together)
        while unasked:
            if not left or not left[0] or not set(left[0]) <= unasked:
                return False
            unasked -= set(left.pop(0))
    return not left


async def drive(modern: ModernClient, command: dict[str, Any]) -> dict[str, Any]:
    """Run one command in the modern client without blocking the gateway's loop."""
    return await asyncio.to_thread(modern.run, command)


def text_of(reply: dict[str, Any]) -> str:
    """The text of a final result: tool content, resource contents or prompt messages."""
    result = reply.get("result")
    assert result is not None, reply
    if "content" in result:
        return " ".join(block.get("text", "") for block in result["content"])
    if "contents" in result:
        return " ".join(c.get("text", "") for c in result["contents"])
    return " ".join(m["content"]["text"] for m in result["messages"])


async def complete_case(
    gateway: Gateway,
    modern: ModernClient,
    tool: str,
    arguments: dict[str, Any],
    questions: list[list[str]],
    text: str,
) -> None:
    """The modern client completes `tool` through `gateway`, asked these questions
    (`asked`), with this text; the tool's body ran once and the gateway holds no call
    afterwards."""
    run_id = uuid.uuid4().hex
    command = {"op": "call_tool", "url": gateway.url, "name": tool}
    reply = await drive(modern, {**command, "arguments": {**arguments, "run_id": run_id}})
    assert asked(reply["rounds"], questions), reply["rounds"]
    assert text_of(reply) == text
    assert reply["result"]["resultType"] == "complete"
    assert await body_runs(gateway, tool, run_id) == 1
    assert gateway.bridge.calls == {}
