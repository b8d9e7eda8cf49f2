"""Behaviour a mutation review found no transcript guarding: each test here kills one
hand-made mutant of the call core (expiry left behind, a forward given up early, an
ending that is not idempotent, a lost call's record kept, ...)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from gateway.aio import spawn
from gateway.config import parse_config
from gateway.errors import (
    CallLost,
    MissingClientCapability,
    RpcError,
    StateTooLarge,
)
from gateway.fleet import messages
from gateway.protocol.call import Phase, Trigger
from gateway.protocol.inbound import FrontRequest, read_envelope
from gateway.protocol.versions import Version
from tests.fakes.fleet import POLL_S
from tests.fakes.harness import (
    ALICE,
    EVERYTHING,
    KEY,
    WINDOW,
    Replica,
    ask_username,
    call_tool,
    config,
    two_replicas,
)


async def resume_to_end(replica, server, session, first):
    retry = spawn(
        replica.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r"
    )
    await server.next_sent()
    session.respond()
    return await retry


async def test_a_principal_whose_call_completed_may_park_again(clock, server):  # M03
    replica = Replica(clock, server, settings=config(max_parked_per_principal=1))
    first, session = await ask_username(replica, server, clock)
    await resume_to_end(replica, server, session, first)
    assert replica.bridge.calls.principals_parked == {}
    assert (await ask_username(replica, server, clock))[0]["resultType"] == "input_required"


async def test_a_resumed_call_leaves_no_expiry_behind(replica, server, clock):  # M04
    first, session = await ask_username(replica, server, clock)
    (call,) = replica.bridge.calls.values()
    expiry = call.expiry
    await resume_to_end(replica, server, session, first)
    assert expiry is not None and expiry.done() and clock.pending() == []


async def test_a_drain_that_times_out_leaves_no_timer_behind(replica, server, clock):  # M21
    await ask_username(replica, server, clock)
    (call,) = replica.bridge.calls.values()
    drain = spawn(replica.bridge.drain(30.0), name="drain")
    await clock.armed(clock.now + 30.0)
    clock.advance(30.0)
    await drain
    assert call.expiry is not None and call.expiry.done() and clock.pending() == []


async def test_an_owner_refuses_a_forward_for_another_round(clock, server, network):  # M26
    a, _ = two_replicas(clock, server, network)
    await ask_username(a, server, clock)
    (call,) = a.bridge.calls.values()
    bus = network.bus("b")
    reply = bus.new_reply_key()
    stale = messages.Resume(
        call.id, 2, 2, "tools/call", call_tool(rid=2, answers=ALICE).params, reply
    )
    await bus.send("a", messages.encode(stale))
    async with asyncio.timeout(5):  # a wrongly resumed call would wait on the upstream forever
        failure = messages.decode(await bus.receive(reply) or "null")
    assert isinstance(failure, messages.Failure) and failure.error["code"] == -32603
    assert call.phase is Phase.SUSPENDED and server.nothing_sent()


async def test_a_replica_restarted_under_its_old_id_takes_its_call_over(
    clock, server, network
):  # M27
    a, _ = two_replicas(clock, server, network)
    first, session = await ask_username(a, server, clock)
    restarted = Replica(clock, server, store=a.store, bus=network.bus("a"), settings=config("a"))
    network.join("a", restarted.bridge.serve_forwarded)  # alive again, its calls gone
    retry = spawn(
        restarted.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r"
    )
    adopted = await server.next_call()
    assert restarted.pool.adopted == [session.id] and (await server.next_sent())["id"] == 7
    adopted.respond()
    assert (await retry)["resultType"] == "complete" and not network.delivered


async def test_a_forward_is_not_given_up_before_the_hold_timeout(clock, server, network):  # M28
    a, b = two_replicas(clock, server, network)
    first, _ = await ask_username(a, server, clock)

    async def deaf(payload):
        return None

    network.handlers["a"] = deaf
    retry = spawn(b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r")
    for _ in range(int(b.config.limits.hold_timeout_s / POLL_S)):
        poll = spawn(network.polls.get(), name="poll")
        await asyncio.wait([poll, retry], return_when=asyncio.FIRST_COMPLETED)
        poll.cancel()
        assert not retry.done(), f"gave up after {clock.now:g} s"
        clock.advance(POLL_S)
    retry.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await retry


async def test_a_replay_journal_too_large_still_ends_the_call(clock, server):  # M33
    replica = Replica(
        clock, server, settings=config(tools={"greet": {"mode": "replay"}}, max_state_bytes=300)
    )
    with pytest.raises(StateTooLarge):
        await ask_username(replica, server, clock)
    (session,) = server.sessions
    assert (await server.next_sent())["method"] == "notifications/cancelled"
    assert len(replica.bridge.calls) == 0 and replica.bridge.parked == 0
    assert replica.pool.released_reuse(session) is False


async def test_a_lost_call_forgets_its_record(clock, server, network):  # M35
    server.resumable = False
    a, b = two_replicas(clock, server, network)
    first, _ = await ask_username(a, server, clock)
    (call_id,) = a.bridge.calls  # the gateway's call id, not session.call_id
    assert await b.store.get(call_id) is not None
    network.kill("a")
    with pytest.raises(CallLost):
        await b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE))
    assert await b.store.get(call_id) is None


async def test_a_session_with_unread_messages_is_not_reused(replica, server):  # M36
    pending = spawn(replica.call(call_tool()), name="call")
    session = await server.next_call()
    session.respond()
    session.on_standalone({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    assert (await pending)["resultType"] == "complete"
    assert replica.pool.released_reuse(session) is False


async def test_resuming_a_call_that_ended_meanwhile_is_call_lost(replica, server, clock):  # M39
    first, _ = await ask_username(replica, server, clock)
    (call,) = replica.bridge.calls.values()
    await replica.bridge.lifecycle.end(call, Trigger.EXPIRE, "test")
    with pytest.raises(CallLost):
        await replica.bridge.runner.resume(
            call, call_tool(rid=2, state=first["requestState"], answers=ALICE), replica.notify, 1
        )


async def test_a_resource_read_that_needed_a_round_is_not_cached(clock, server):  # M41
    replica = Replica(
        clock,
        server,
        settings=parse_config(
            {
                "replica_id": "r1",
                "sealing": {"audience": "transcripts"},
                "upstreams": [
                    {"name": "up", "url": "http://u.invalid/mcp", "cache": {"ttl_ms": 60000}}
                ],
            },
            env={"MRTR_GATEWAY_SEALING_KEYS": KEY},
        ),
    )

    def read(rid, **extra):
        meta = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": EVERYTHING,
        }
        params = {"uri": "doc://x", "_meta": meta, **extra}
        return FrontRequest(
            rid, "resources/read", params, read_envelope(Version.parse("2026-07-28"), meta)
        )

    pending = spawn(replica.call(read(1)), name="read")
    session = await server.next_call()
    session.elicit(7)
    await clock.armed(clock.now + WINDOW)
    clock.advance(WINDOW)
    first = await pending
    retry = spawn(
        replica.call(read(2, requestState=first["requestState"], inputResponses=ALICE)), name="r"
    )
    await server.next_sent()
    session.respond({"contents": []})
    result = await retry
    assert result["ttlMs"] == 0 and result["cacheScope"] == "private"


async def test_a_replay_mode_round_ignores_full_parking_caps(clock, server):  # M48
    replica = Replica(
        clock, server, settings=config(tools={"greet": {"mode": "replay"}}, max_parked_calls=1)
    )
    parked = spawn(replica.call(call_tool("park")), name="park")
    (await server.next_call()).elicit(1)
    await clock.armed(clock.now + WINDOW)
    clock.advance(WINDOW)
    assert (await parked)["resultType"] == "input_required" and replica.bridge.parked == 1
    assert (await ask_username(replica, server, clock))[0]["resultType"] == "input_required"


async def test_a_url_round_needs_the_url_elicitation_capability(replica, server):  # M49
    pending = spawn(replica.call(call_tool(caps={"elicitation": {"form": {}}})), name="call")
    visit = {"url": "https://auth.example/start", "message": "Sign in", "elicitationId": "e1"}
    (await server.next_call()).respond(
        error={"code": -32042, "message": "visit", "data": {"elicitations": [visit]}}
    )
    with pytest.raises(MissingClientCapability) as refused:
        await pending
    assert refused.value.data == {"requiredCapabilities": {"elicitation": {"url": {}}}}


async def test_an_unreachable_upstream_does_not_stop_a_drain(replica, server, clock):  # M53
    _, session = await ask_username(replica, server, clock)
    (call,) = replica.bridge.calls.values()
    server.unreachable = True
    drain = spawn(replica.bridge.drain(30.0), name="drain")
    await clock.armed(clock.now + 30.0)
    clock.advance(30.0)
    await drain  # must not raise UpstreamError
    assert call.phase is Phase.CANCELLED and replica.pool.released_reuse(session) is False
    assert await replica.store.get(call.id) is None


async def test_closing_while_a_call_is_already_ending_is_harmless(replica, server, clock):  # M62
    await ask_username(replica, server, clock)
    (call,) = replica.bridge.calls.values()
    closing = spawn(replica.bridge.close(), name="close")  # will still find the call registered
    await replica.bridge.lifecycle.end(call, Trigger.EXPIRE, "deadline")
    await closing  # IllegalTransition if `end` were not idempotent
    assert call.phase is Phase.EXPIRED
    assert (await server.next_sent())["result"] == {"action": "cancel"}
    assert (await server.next_sent())["params"]["reason"] == "deadline"
    assert server.nothing_sent()


async def test_a_forwarded_retry_failing_at_its_owner_fails_at_the_receiver(
    clock, server, network
):  # M71
    a, b = two_replicas(clock, server, network)
    first, session = await ask_username(a, server, clock)
    retry = spawn(b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r")
    await server.next_sent()
    session.break_stream()
    with pytest.raises(RpcError) as failed:
        await retry
    assert (
        failed.value.status == 502
        and "start the request again" in failed.value.error_object()["message"]
    )
