"""Regressions found in review, against real peers: lost sessions, hostile trace context and
headers, internal details. Each would run a tool twice or leak something without its fix.
(Cancellation at awkward moments and abandoned claims are transcripts in tests/calls.)"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from gateway.aio import spawn
from tests.peers.tooling import LegacyServer
from tests.support.inprocess import Gateway
from tests.support.legacy import ALICE, await_journal, body_runs, greet
from tests.support.wire import rpc

pytestmark = pytest.mark.peers


@pytest.fixture
def restartable_with_ids() -> Iterator[LegacyServer]:
    server = LegacyServer(event_store=True)
    yield server
    server.stop()


async def test_a_call_the_upstream_accepted_is_never_sent_again_after_its_session_is_lost(
    make_gateway, restartable_with_ids: LegacyServer
) -> None:
    gateway = await make_gateway(restartable_with_ids.url)
    run_id = uuid.uuid4().hex
    # The tool works for longer than the test runs: it is cut off by the restart (SIGKILL:
    # a SIGTERM would let it finish), whatever the time the restart takes. A tool that
    # finished first would be answered on the stream the gateway resumes.
    arguments = {"seconds": 3600, "run_id": run_id}
    call = spawn(
        gateway.post(rpc("tools/call", {"name": "close_then_work", "arguments": arguments})),
        name="test-call",
    )
    assert await await_journal(restartable_with_ids.url, run_id, "started") == ["started"]
    # Its sessions are forgotten.
    await asyncio.to_thread(restartable_with_ids.restart, kill=True)
    status, reply, _ = await call
    assert status == 502 and reply["error"]["code"] == -32603
    # the new server process never saw the call: re-sending it would have run the body again
    assert await body_runs(gateway, "close_then_work", run_id) == 0


@pytest.fixture
def restartable() -> Iterator[LegacyServer]:
    server = LegacyServer()
    yield server
    server.stop()


async def test_calls_parked_when_the_server_restarted_give_their_sessions_back_at_once(
    make_gateway, restartable: LegacyServer
) -> None:
    """A restart of the legacy server loses the streams of the calls parked on it. They
    held every session `max_sessions` allows: given back as their streams are lost, a new
    call is served at once, not refused (503) after waiting for a slot, while the lost
    calls wait for their retries (told the call is gone) or their deadline."""
    pool = {"max_sessions": 3, "min_idle": 0, "acquire_timeout_s": 5}
    gateway = await make_gateway(restartable.url, upstream={"pool": pool})
    states = []
    for run_id in ("parked-1", "parked-2"):  # with the shared session: all three slots
        status, first, _ = await gateway.post(greet(run_id))
        assert first["result"]["resultType"] == "input_required", first
        states.append((run_id, first["result"]["requestState"]))
    await asyncio.to_thread(restartable.restart)
    # Set once no call held could still complete: both are lost.
    await asyncio.wait_for(gateway.bridge.calls.idle.wait(), 30)
    assert gateway.bridge.calls.lost == 2 and len(gateway.bridge.calls) == 2
    status, reply, _ = await gateway.post(
        rpc("tools/call", {"name": "echo", "arguments": {"text": "after the restart"}})
    )
    assert status == 200 and reply["result"]["content"][0]["text"] == "after the restart"
    run_id, state = states[0]
    status, lost, _ = await gateway.post(greet(run_id, rid=2, state=state, answers=ALICE))
    assert status == 502 and "start the request again" in lost["error"]["message"], lost


async def test_hostile_trace_context_is_dropped_not_sent_upstream(gateway: Gateway) -> None:
    evil = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\nX-Injected: 1"
    status, reply, _ = await gateway.post(rpc("tools/list", traceparent=evil, tracestate="a\nb"))
    assert status == 200 and reply["result"]["tools"]
    status, reply, _ = await gateway.post(
        rpc("tools/call", {"name": "traced", "arguments": {}}, traceparent=evil)
    )
    assert reply["result"]["content"][0]["text"] == "meta=None header=None"


async def test_a_duplicated_mcp_param_header_is_refused(gateway: Gateway) -> None:
    body = rpc("tools/call", {"name": "regional", "arguments": {"region": "eu"}})
    from multidict import CIMultiDict

    from tests.support.wire import default_headers

    headers = CIMultiDict(default_headers(body))
    headers.add("Mcp-Param-Region", "us")
    headers.add("Mcp-Param-Region", "eu")
    async with gateway.http.post(gateway.url, json=body, headers=headers) as resp:
        assert resp.status == 400
        assert (await resp.json())["error"]["code"] == -32020


async def test_internal_details_stay_out_of_client_errors(make_gateway) -> None:
    dead = await make_gateway("http://127.0.0.1:9/mcp")
    status, reply, _ = await dead.post(rpc("tools/list"))
    assert status == 502
    assert reply["error"]["message"] == "The upstream MCP server failed"
