"""Calls sharing legacy sessions (`pool.calls_per_session`), against the real mcp 1.x server:
several parked calls on one session each resume with their own answers, and a question
the server sends on the session's GET stream is only routed while one call holds it."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from tests.support.inprocess import Gateway
from tests.support.legacy import body_runs, greet
from tests.support.wire import rpc

pytestmark = pytest.mark.peers

SHARED = {"pool": {"calls_per_session": 4}}


def named(name: str) -> dict[str, Any]:
    return {"elicit.username": {"action": "accept", "content": {"username": name}}}


async def park(gateway: Gateway, run_id: str) -> str:
    status, reply, _ = await gateway.post(greet(run_id))
    assert status == 200 and reply["result"]["resultType"] == "input_required", reply
    return str(reply["result"]["requestState"])


async def test_calls_sharing_a_session_each_resume_with_their_own_answers(make_gateway) -> None:
    gateway: Gateway = await make_gateway(upstream=SHARED)
    runs = [uuid.uuid4().hex for _ in range(6)]
    states = [await park(gateway, run_id) for run_id in runs]
    parked = list(gateway.bridge.calls.values())
    sessions = {call.session.id for call in parked}
    assert len(parked) == 6 and len(sessions) == 2  # 4 + 2, not one session per call
    replies = await asyncio.gather(
        *(
            gateway.post(greet(run_id, rid=2, state=state, answers=named(f"user{i}")))
            for i, (run_id, state) in enumerate(zip(runs, states, strict=True))
        )
    )
    texts = [reply["result"]["content"][0]["text"] for _, reply, _ in replies]
    assert texts == [f"Hello, user{i}!" for i in range(6)]  # no call got another's answer
    for run_id in runs:
        assert await body_runs(gateway, "greet", run_id) == 1


async def test_a_get_stream_question_is_routed_only_while_one_call_holds_the_session(
    make_gateway,
) -> None:
    gateway: Gateway = await make_gateway(upstream=SHARED)
    greeting = uuid.uuid4().hex
    state = await park(gateway, greeting)
    # mcp 1.x sends roots/list on the session's GET stream: with two calls on the session,
    # it cannot be told to be this one's, so it is answered as outside any call.
    ask_roots = rpc("tools/call", {"name": "list_roots", "arguments": {"run_id": "r1"}})
    status, reply, _ = await gateway.post(ask_roots)
    assert status == 200, reply
    result = reply["result"]
    assert result["resultType"] == "complete" and result["isError"] is True, result
    (session,) = {call.session.id for call in gateway.bridge.calls.values()}
    status, reply, _ = await gateway.post(greet(greeting, rid=2, state=state, answers=named("a")))
    assert reply["result"]["content"][0]["text"] == "Hello, a!"
    await gateway.until_calls_ended()
    # Alone on the session (the same one, given back), the call is asked the question.
    status, reply, _ = await gateway.post(ask_roots)
    assert reply["result"]["resultType"] == "input_required", reply
    assert list(reply["result"]["inputRequests"]) == ["roots"]
    (call,) = gateway.bridge.calls.values()
    assert call.session.id == session
