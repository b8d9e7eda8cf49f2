"""Regressions found in review: cancellation at awkward moments, lost sessions, abandoned
claims, hostile trace context and headers. Each would leak a call or a session, or run a
tool twice, without its fix."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator

import aiohttp
import pytest

from gateway.aio import spawn
from gateway.protocol.call import Trigger
from gateway.protocol.capabilities import ClientCaps
from gateway.upstream.pool import PoolLimits, SessionPool
from gateway.upstream.session import Endpoint
from tests.conftest import Gateway, rpc
from tests.integration.test_bridge_peers import body_runs
from tests.integration.test_mrtr_wire import ALICE, greet
from tests.peers.tooling import LegacyServer

pytestmark = pytest.mark.peers


@pytest.fixture
def restartable_with_ids() -> Iterator[LegacyServer]:
    server = LegacyServer(event_store=True)
    yield server
    server.stop()


async def test_an_ending_interrupted_by_cancellation_still_releases_everything(
    gateway: Gateway,
) -> None:
    await gateway.post(greet(uuid.uuid4().hex))
    (call,) = gateway.bridge.calls.values()
    pool = gateway.bridge.pools["legacy"]
    sessions = pool.size
    ending = spawn(gateway.bridge._end(call, Trigger.CANCEL, "test"), name="test-ending")
    await asyncio.sleep(0)  # the ending has started and awaits the upstream
    ending.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await ending
    async with asyncio.timeout(5):
        await call.ended.wait()
    assert gateway.bridge.calls == {} and gateway.bridge.parked == 0
    assert call.pump is not None and call.pump.done()  # its reader is stopped too
    assert pool.size == sessions - 1  # the call's session was closed, not kept


async def test_a_caller_cancelled_while_a_session_opens_gives_its_slot_back(
    legacy: LegacyServer,
) -> None:
    async with aiohttp.ClientSession() as http:
        endpoint = Endpoint(name="legacy", url=legacy.url, headers={}, timeout_s=5)
        pool = SessionPool(
            http, endpoint, PoolLimits(min_idle=0, max_sessions=2, acquire_timeout_s=2)
        )
        caps = ClientCaps(roots=True)
        for _ in range(4):
            opening = spawn(pool.acquire(caps), name="test-acquire")
            await asyncio.sleep(0.001)  # inside initialize, on the wire
            opening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                session = await opening
                pool.release(session, reuse=False)  # it finished before the cancel landed
        session = await pool.acquire(caps)  # would wait for a free slot and give up: 503
        assert session.alive
        pool.release(session, reuse=False)
        await pool.close()


async def test_a_call_the_upstream_accepted_is_never_sent_again_after_its_session_is_lost(
    make_gateway, restartable_with_ids: LegacyServer
) -> None:
    gateway = await make_gateway(restartable_with_ids.url)
    run_id = uuid.uuid4().hex
    call = spawn(
        gateway.post(
            rpc(
                "tools/call",
                {"name": "close_then_work", "arguments": {"seconds": 3, "run_id": run_id}},
            )
        ),
        name="test-call",
    )
    async with asyncio.timeout(10):
        while await body_runs(gateway, "close_then_work", run_id) == 0:
            await asyncio.sleep(0.05)
    await asyncio.to_thread(restartable_with_ids.restart)  # its sessions are forgotten
    status, reply, _ = await call
    assert status == 502 and reply["error"]["code"] == -32603
    # the new server process never saw the call: re-sending it would have run the body again
    assert await body_runs(gateway, "close_then_work", run_id) == 0


async def test_a_parked_call_whose_claimer_never_resumes_it_still_ends(make_gateway) -> None:
    gateway = await make_gateway(limits={"suspension_ttl_s": 0.2, "hold_timeout_s": 0.3})
    await gateway.post(greet(uuid.uuid4().hex))
    (call,) = gateway.bridge.calls.values()
    assert await gateway.bridge.store.claim(call.id, 1) is not None  # a claimer that then vanishes
    async with asyncio.timeout(5):
        await call.ended.wait()
    assert gateway.bridge.calls == {} and gateway.bridge.parked == 0
    assert await gateway.bridge.store.get(call.id) is None


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

    from tests.conftest import default_headers

    headers = CIMultiDict(default_headers(body))
    headers.add("Mcp-Param-Region", "us")
    headers.add("Mcp-Param-Region", "eu")
    async with gateway.http.post(gateway.url, json=body, headers=headers) as resp:
        assert resp.status == 400
        assert (await resp.json())["error"]["code"] == -32020


async def test_principal_counts_are_forgotten_when_their_calls_end(gateway: Gateway) -> None:
    run_id = uuid.uuid4().hex
    status, first, _ = await gateway.post(greet(run_id), headers={"Authorization": "Bearer once"})
    assert gateway.bridge._parked_by_principal
    await gateway.post(
        greet(run_id, rid=2, state=first["result"]["requestState"], answers=ALICE),
        headers={"Authorization": "Bearer once"},
    )
    assert dict(gateway.bridge._parked_by_principal) == {}


async def test_internal_details_stay_out_of_client_errors(make_gateway) -> None:
    dead = await make_gateway("http://127.0.0.1:9/mcp")
    status, reply, _ = await dead.post(rpc("tools/list"))
    assert status == 502
    assert reply["error"]["message"] == "The upstream MCP server failed"
