"""The decisive end-to-end proof: the official mcp 2.x client, pinned to 2026-07-28,
completes every interactive tool of an unmodified mcp 1.x server through the gateway,
with the expected rounds, and each tool body runs exactly once."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.support.cases import CASE_IDS, CASES, complete_case, drive, text_of
from tests.support.inprocess import Gateway
from tests.support.legacy import body_runs  # also imported from here by test_robustness.py

pytestmark = pytest.mark.peers


@pytest.mark.parametrize(("tool", "arguments", "questions", "text"), CASES, ids=CASE_IDS)
async def test_modern_client_completes_legacy_tool_through_gateway(
    gateway: Gateway,
    modern,
    tool: str,
    arguments: dict[str, Any],
    questions: list[list[str]],
    text: str,
) -> None:
    await complete_case(gateway, modern, tool, arguments, questions, text)


@pytest.mark.parametrize(
    ("answer", "text"),
    [
        ({"action": "accept", "content": {"confirm": True}}, "deploy: confirmed"),
        ({"action": "accept", "content": {"confirm": False}}, "deploy: not confirmed"),
        ({"action": "decline"}, "deploy: decline"),
        ({"action": "cancel"}, "deploy: cancel"),
    ],
)
async def test_each_elicitation_action_reaches_the_legacy_tool(
    gateway: Gateway, modern, answer: dict[str, Any], text: str
) -> None:
    run_id = uuid.uuid4().hex
    reply = await drive(
        modern,
        {
            "op": "call_tool",
            "url": gateway.url,
            "name": "confirm_action",
            "arguments": {"action": "deploy", "run_id": run_id},
            "answers": {"elicit.confirm": answer},
        },
    )
    assert reply["rounds"] == [["elicit.confirm"]]
    assert text_of(reply) == text
    assert await body_runs(gateway, "confirm_action", run_id) == 1


async def test_url_elicitation_reaches_the_client_without_the_legacy_elicitation_id(
    gateway: Gateway, modern
) -> None:
    reply = await drive(
        modern,
        {
            "op": "call_tool",
            "url": gateway.url,
            "name": "connect_account",
            "arguments": {"run_id": "u1"},
        },
    )
    (asked,) = reply["seen"]["elicitations"]
    assert asked["params"] == {
        "mode": "url",
        "message": "Connect your account",
        "url": "https://example.com/connect?x=1",
    }


async def test_progress_is_relayed_under_each_rounds_own_token(gateway: Gateway, modern) -> None:
    run_id = uuid.uuid4().hex
    reply = await drive(
        modern,
        {
            "op": "call_tool",
            "url": gateway.url,
            "name": "progress_then_ask",
            "arguments": {"steps": 2, "run_id": run_id},
            "progress": True,
        },
    )
    assert reply["rounds"] == [["elicit.confirm"]]
    assert [p["message"] for p in reply["progress"]] == [
        "before 1",
        "before 2",
        "after 1",
        "after 2",
    ]
    assert [p["progress"] for p in reply["progress"]] == [1.0, 2.0, 3.0, 4.0]
    assert text_of(reply) == "done (accept)"


async def test_an_eliciting_resource_template_is_read_through_the_gateway(
    gateway: Gateway, modern
) -> None:
    user = uuid.uuid4().hex[:8]
    reply = await drive(
        modern, {"op": "read_resource", "url": gateway.url, "uri": f"profile://{user}"}
    )
    assert reply["rounds"] == [["elicit.age+color"]]
    assert text_of(reply) == f"{user}: green, 30"
    assert await body_runs(gateway, "profile", user) == 1


async def test_an_eliciting_prompt_is_got_through_the_gateway(gateway: Gateway, modern) -> None:
    guest = uuid.uuid4().hex[:8]
    reply = await drive(
        modern,
        {
            "op": "get_prompt",
            "url": gateway.url,
            "name": "interview",
            "arguments": {"guest": guest},
        },
    )
    assert reply["rounds"] == [["elicit.topic"]]
    assert text_of(reply) == f"Interview {guest} about autumn."
    assert await body_runs(gateway, "interview", guest) == 1


async def test_log_messages_reach_only_a_client_that_asked_and_at_its_level(
    gateway: Gateway, modern
) -> None:
    quiet = await drive(
        modern, {"op": "call_tool", "url": gateway.url, "name": "chatty", "arguments": {}}
    )
    assert quiet["logs"] == []
    loud = await drive(
        modern,
        {
            "op": "call_tool",
            "url": gateway.url,
            "name": "chatty",
            "arguments": {},
            "log_level": "warning",
        },
    )
    assert [entry["level"] for entry in loud["logs"]] == ["warning"]
    assert text_of(loud) == "chatty accept"


async def test_a_client_without_the_capability_gets_minus_32021_and_the_call_is_cancelled(
    gateway: Gateway, modern
) -> None:
    run_id = uuid.uuid4().hex
    reply = await drive(
        modern,
        {
            "op": "call_tool",
            "url": gateway.url,
            "name": "greet",
            "arguments": {"run_id": run_id},
            "caps": ["sampling", "roots"],
        },
    )
    assert reply["error"]["code"] == -32021
    assert reply["error"]["data"] == {"requiredCapabilities": {"elicitation": {"form": {}}}}
    assert gateway.bridge.calls == {}


async def test_plain_requests_pass_through_with_2026_decorations(gateway: Gateway, modern) -> None:
    listed = await drive(modern, {"op": "list_tools", "url": gateway.url})
    names = {tool["name"] for tool in listed["result"]["tools"]}
    assert {"greet", "register", "summarize", "echo"} <= names
    reply = await drive(
        modern, {"op": "call_tool", "url": gateway.url, "name": "echo", "arguments": {"text": "hi"}}
    )
    assert reply["rounds"] == [] and text_of(reply) == "hi"


async def test_discover_describes_the_legacy_server_as_a_2026_server(
    gateway: Gateway, modern
) -> None:
    reply = await drive(modern, {"op": "discover", "url": gateway.url})
    result = reply["result"]
    # 2026-07-28 first (a 2026 client picks it), then the revisions the legacy lane serves.
    assert result["supportedVersions"] == ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"]
    assert result["resultType"] == "complete"
    assert "tools" in result["capabilities"]
    assert result["cacheScope"] == "private" and result["ttlMs"] == 0
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "peers-legacy-py"
