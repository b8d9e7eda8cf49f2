"""How the gateway copes with what real legacy servers do: streams closed mid-call,
server requests outside any call, pings, restarts, several upstreams."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.peers.tooling import LegacyServer
from tests.support.cases import drive, text_of
from tests.support.inprocess import Gateway
from tests.support.legacy import (
    ALICE,
    await_journal,
    body_runs,
    greet,
    legacy_tool,
    write_journal,
)
from tests.support.wire import FROZEN, default_headers, parse_sse_messages, rpc

pytestmark = pytest.mark.peers


@pytest.fixture(scope="module")
def resumable() -> Iterator[LegacyServer]:
    """An mcp 1.x server with an event store: SSE events carry ids, streams can be resumed."""
    server = LegacyServer(event_store=True)
    yield server
    server.stop()


@pytest.fixture
def restartable() -> Iterator[LegacyServer]:
    server = LegacyServer()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def late_listener() -> Iterator[LegacyServer]:
    """An mcp 1.x server that takes half a second to hold each session's GET stream."""
    server = LegacyServer(slow_get_ms=500)
    yield server
    server.stop()


async def test_a_session_serves_no_call_before_the_server_holds_its_get_stream(
    make_gateway, late_listener: LegacyServer, modern
) -> None:
    """mcp 1.x sends `create_message` without a related request on the session's GET
    stream, and drops it if it does not hold that stream yet: a call started on a session
    as soon as its handshake is over lost its question, and waited out its hold timeout."""
    gateway = await make_gateway(
        late_listener.url, limits={"hold_timeout_s": 5}, upstream={"pool": {"min_idle": 0}}
    )
    command = {"op": "call_tool", "url": gateway.url, "name": "summarize"}
    reply = await drive(modern, {**command, "arguments": {"text": "late"}})
    assert reply["rounds"] == [["sampling"]], reply
    assert text_of(reply) == "Summary: SAMPLED[Summarize: late]"


async def test_a_stream_the_server_closes_mid_call_is_resumed_with_last_event_id(
    make_gateway, resumable: LegacyServer, modern
) -> None:
    gateway = await make_gateway(resumable.url)
    run_id = uuid.uuid4().hex
    reply = await drive(
        modern,
        {
            "op": "call_tool",
            "url": gateway.url,
            "name": "poll_then_ask",
            "arguments": {"run_id": run_id},
            "progress": True,
        },
    )
    assert reply["rounds"] == [["elicit.confirm"]]
    assert text_of(reply) == "resumed: accept"
    assert [p["message"] for p in reply["progress"]] == ["before the break", "after the break"]
    assert await body_runs(gateway, "poll_then_ask", run_id) == 1


async def journal_of(url: str, run_id: str) -> list[str]:
    text = await legacy_tool(url, "journal", {"run_id": run_id})
    return text.split(",") if text else []


async def held_question(gateway: Gateway, run_id: str) -> None:
    """Until the question `late_roots` asks after its call is held by the session that
    carried the call (it is idle now), bounded."""
    await await_journal(gateway.upstream_url, run_id, "roots:asking")
    pool = gateway.bridge.runner.pools["legacy"]
    async with asyncio.timeout(10):
        while not any(session.held for session in pool._idle):
            await asyncio.sleep(0.01)


async def test_a_question_asked_between_calls_is_asked_in_the_callers_next_call(
    gateway: Gateway,
) -> None:
    """Held by its session, the question is the first round of the session's next call
    (its caller's), whose own request reaches the server only once it is answered."""
    run_id = uuid.uuid4().hex
    _, reply, _ = await gateway.post(
        rpc("tools/call", {"name": "late_roots", "arguments": {"run_id": run_id}})
    )
    assert reply["result"]["content"][0]["text"] == "asked later"
    await held_question(gateway, run_id)
    call = {"name": "echo", "arguments": {"text": "the caller's own call"}}
    _, asked, _ = await gateway.post(rpc("tools/call", call))
    result = asked["result"]
    assert result["resultType"] == "input_required"
    [(key, question)] = result["inputRequests"].items()
    assert question["method"] == "roots/list"
    assert await journal_of(gateway.upstream_url, run_id) == ["roots:asking"]  # not answered
    roots = {"roots": [{"uri": "file:///work", "name": "work"}]}
    retry = {**call, "inputResponses": {key: roots}, "requestState": result["requestState"]}
    _, done, _ = await gateway.post(rpc("tools/call", retry))
    assert done["result"]["resultType"] == "complete"
    assert done["result"]["content"][0]["text"] == "the caller's own call"
    assert await journal_of(gateway.upstream_url, run_id) == ["roots:asking", "roots:['work']"]


async def test_a_question_no_call_comes_to_ask_is_answered_after_the_bound(
    make_gateway: Any,
) -> None:
    gateway = await make_gateway(upstream={"pool": {"outside_question_s": 0.5}})
    run_id = uuid.uuid4().hex
    _, reply, _ = await gateway.post(
        rpc("tools/call", {"name": "late_roots", "arguments": {"run_id": run_id}})
    )
    assert reply["result"]["content"][0]["text"] == "asked later"
    journal = await await_journal(gateway.upstream_url, run_id, "roots:error -32601")
    assert journal == ["roots:asking", "roots:error -32601"]
    # The session that asked was retired: it carries an answer its caller never gave.
    pool = gateway.bridge.runner.pools["legacy"]
    assert not any(session.held or session.held.lapsed for session in pool._idle)


async def test_server_pings_are_answered_by_the_gateway(gateway: Gateway, modern) -> None:
    reply = await drive(
        modern, {"op": "call_tool", "url": gateway.url, "name": "pinger", "arguments": {}}
    )
    assert reply["rounds"] == [] and text_of(reply) == "pong received"


async def test_a_restarted_legacy_server_gets_fresh_sessions(
    make_gateway, restartable: LegacyServer, modern
) -> None:
    gateway = await make_gateway(restartable.url)
    first = await drive(
        modern, {"op": "call_tool", "url": gateway.url, "name": "greet", "arguments": {}}
    )
    assert text_of(first) == "Hello, alice!"
    await asyncio.to_thread(restartable.restart)
    status, listed, _ = await gateway.post(rpc("tools/list"))
    assert status == 200 and listed["result"]["tools"]
    run_id = uuid.uuid4().hex
    again = await drive(
        modern,
        {"op": "call_tool", "url": gateway.url, "name": "greet", "arguments": {"run_id": run_id}},
    )
    assert again["rounds"] == [["elicit.username"]] and text_of(again) == "Hello, alice!"
    assert await body_runs(gateway, "greet", run_id) == 1


async def test_a_call_parked_when_the_server_restarts_is_reported_lost(
    make_gateway, restartable: LegacyServer
) -> None:
    gateway = await make_gateway(restartable.url)
    run_id = uuid.uuid4().hex
    status, reply, _ = await gateway.post(greet(run_id))
    state = reply["result"]["requestState"]
    await asyncio.to_thread(restartable.restart)
    status, reply, _ = await gateway.post(greet(run_id, rid=2, state=state, answers=ALICE))
    assert status == 502
    assert reply["error"]["code"] == -32603
    assert "start the request again" in reply["error"]["message"]
    assert gateway.bridge.calls == {}


async def test_each_upstream_is_served_on_its_own_path_with_its_own_states(
    make_gateway, legacy: LegacyServer, resumable: LegacyServer
) -> None:
    gateway = await make_gateway(
        legacy.url,
        upstream={"path": "/a"},
        upstreams_extra=[{"name": "other", "url": resumable.url, "path": "/b"}],
    )
    a, b = gateway.url.replace("/mcp", "/a"), gateway.url.replace("/mcp", "/b")
    run_id = uuid.uuid4().hex
    status, reply, _ = await gateway.post(greet(run_id), url=a)
    state = reply["result"]["requestState"]
    status, reply, _ = await gateway.post(greet(run_id, rid=2, state=state, answers=ALICE), url=b)
    assert (status, reply["error"]) == (400, FROZEN)
    status, reply, _ = await gateway.post(greet(run_id, rid=3, state=state, answers=ALICE), url=a)
    assert reply["result"]["content"][0]["text"] == "Hello, alice!"
    status, _, _ = await gateway.post(rpc("tools/list"))
    assert status == 404  # /mcp is not configured here


async def test_a_principal_with_too_many_parked_calls_gets_429(make_gateway) -> None:
    gateway = await make_gateway(limits={"max_parked_per_principal": 2})
    for i in range(2):
        status, reply, _ = await gateway.post(greet(f"p{i}"), headers={"Authorization": "Bearer a"})
        assert reply["result"]["resultType"] == "input_required"
    status, reply, _ = await gateway.post(greet("p3"), headers={"Authorization": "Bearer a"})
    assert status == 429 and reply["error"]["data"] == {"reason": "max_parked_per_principal"}
    status, reply, _ = await gateway.post(greet("p4"), headers={"Authorization": "Bearer b"})
    assert reply["result"]["resultType"] == "input_required"
    assert gateway.bridge.parked == 3


async def test_a_long_silent_round_is_held_open_with_sse_keepalives(make_gateway) -> None:
    gateway = await make_gateway(limits={"keepalive_s": 0.1})
    run_id = uuid.uuid4().hex
    # A tool that works silently until the test says it is done: here, after two keepalives.
    arguments = {"run_id": run_id, "entry": "done", "timeout_s": 60}
    body = rpc("tools/call", {"name": "await_journal", "arguments": arguments})
    async with gateway.http.post(gateway.url, json=body, headers=default_headers(body)) as resp:
        assert resp.headers["Content-Type"] == "text/event-stream"
        raw = b""
        async with asyncio.timeout(10):
            while raw.count(b": keepalive") < 2:
                chunk = await resp.content.readany()
                assert chunk, raw  # the stream must stay open while the tool works
                raw += chunk
        await write_journal(gateway.upstream_url, run_id, "done")
        raw += await resp.content.read()
    (final,) = parse_sse_messages(raw)
    assert final["result"]["content"][0]["text"] == "done"


async def test_a_round_past_the_hold_timeout_fails_and_is_cancelled_upstream(make_gateway) -> None:
    gateway = await make_gateway(limits={"hold_timeout_s": 0.3})
    run_id = uuid.uuid4().hex
    body = rpc("tools/call", {"name": "sleepy", "arguments": {"seconds": 30, "run_id": run_id}})
    status, reply, _ = await gateway.post(body)
    assert status == 502 and reply["error"]["code"] == -32603
    assert "did not answer within 0.3 s" in reply["error"]["message"]
    assert await await_journal(gateway.upstream_url, run_id, "cancelled") == ["cancelled"]
    assert gateway.bridge.calls == {}
