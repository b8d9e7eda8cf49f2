"""Both eras recorded alike: the official mcp 1.x client (a 2025 host) through the legacy
lane in front of a real mcp 1.x server, its questions answered by its own callbacks; the
trail holds its session, its calls and each question pushed to it and its answer, as it
holds a 2026 client's."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.peers.tooling import LegacyClient
from tests.support import trail as joined

pytestmark = pytest.mark.peers


async def test_a_2025_hosts_calls_are_recorded_with_their_questions_and_answers(
    make_gateway: Callable[..., Any], legacy_client: LegacyClient, tmp_path: Path
) -> None:
    path = tmp_path / "audit.jsonl"
    gateway = await make_gateway(audit={"file": {"path": str(path)}, "log": False})
    run = uuid.uuid4().hex
    command = {
        "op": "script",
        "url": gateway.url,
        "answers": {"Really deploy?": {"action": "decline"}},
        "steps": [
            {"op": "call", "name": "greet", "arguments": {"run_id": run}},
            {"op": "call", "name": "confirm_action", "arguments": {"action": "deploy"}},
        ],
    }
    answers = await asyncio.to_thread(legacy_client.run, command, 60.0)
    greeted, confirmed = (step["result"] for step in answers["steps"])
    assert greeted["content"][0]["text"] == "Hello, alice!"  # its answer reached the server
    assert confirmed["content"][0]["text"] == "deploy: decline"
    events = joined.from_lines(path.read_bytes().splitlines())
    assert [e["kind"] for e in events] == [
        "session.opened",
        "call.started",
        "round.asked",
        "round.answered",
        "call.ended",
        "call.started",
        "round.asked",
        "round.answered",
        "call.ended",
        "session.closed",
    ]
    assert {e["era"] for e in events} == {"2025"} and len({e["session"] for e in events}) == 1
    greet, confirm = events[1:5], events[5:9]
    assert len({e["call_id"] for e in greet}) == len({e["call_id"] for e in confirm}) == 1
    assert [a["action"] for a in greet[2]["answers"]] == ["accept"]
    assert confirm[2]["answers"] == [
        {
            "key": confirm[1]["questions"][0]["key"],
            "method": "elicitation/create",
            "action": "decline",
        }
    ]
    assert [(e["outcome"], e["rounds"], e["tool"]) for e in (greet[3], confirm[3])] == [
        ("complete", 1, "greet"),
        ("complete", 1, "confirm_action"),
    ]
    assert joined.problems({"file": events}) == []
    assert run.encode() not in path.read_bytes() and b"alice" not in path.read_bytes()
