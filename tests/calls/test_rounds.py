"""Rounds that park nothing (replay mode, URL rounds), answers given up front, and the
endings of a replica: drain and close. Transcripts on a manual clock."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from gateway.aio import spawn
from gateway.errors import CallLost, Draining, StateTooLarge
from gateway.protocol.call import Phase, Trigger
from tests.fakes.clock import ManualClock
from tests.fakes.harness import (
    ALICE,
    WINDOW,
    Replica,
    ask_username,
    call_tool,
    config,
    letting_go,
)
from tests.fakes.upstream import ScriptedServer

REPLAYED = {"greet": {"mode": "replay"}}
COLOR = {"elicit.color": {"action": "accept", "content": {"color": "red"}}}


async def test_a_replay_mode_round_parks_nothing_and_its_retry_runs_afresh_from_the_journal(
    clock: ManualClock, server: ScriptedServer
) -> None:
    replica = Replica(clock, server, settings=config(tools=REPLAYED))
    first, session = await ask_username(replica, server, clock)
    assert first["resultType"] == "input_required" and replica.bridge.parked == 0
    assert len(replica.store) == 0  # type: ignore[arg-type]
    stopped = await server.next_sent()  # the run is cancelled where it waits, unanswered
    assert stopped["method"] == "notifications/cancelled"
    retry = spawn(
        replica.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="retry"
    )
    again = await server.next_call()
    assert again is not session
    again.elicit(1)  # the same question: answered from the journal, not asked again
    assert (await server.next_sent())["result"]["content"] == {"username": "alice"}
    again.elicit(2, "color")
    await clock.armed(clock.now + WINDOW)
    clock.advance(WINDOW)
    second = await retry
    assert list(second["inputRequests"]) == ["elicit.color"]
    third = spawn(
        replica.call(call_tool(rid=3, state=second["requestState"], answers=COLOR)), name="third"
    )
    assert (await server.next_sent())["method"] == "notifications/cancelled"
    last = await server.next_call()
    last.elicit(1)
    last.elicit(2, "color")
    assert (await server.next_sent())["id"] == 1
    assert (await server.next_sent())["result"]["content"] == {"color": "red"}
    last.respond()
    assert (await third)["resultType"] == "complete"


async def test_a_replay_journal_that_outgrows_its_cap_is_refused(
    clock: ManualClock, server: ScriptedServer
) -> None:
    replica = Replica(clock, server, settings=config(tools=REPLAYED, max_state_bytes=300))
    with pytest.raises(StateTooLarge) as refused:
        await ask_username(replica, server, clock)
    assert refused.value.data == {"reason": "max_state_bytes"} and refused.value.status == 502


async def test_a_url_elicitation_error_becomes_a_round_and_the_retry_runs_the_request_again(
    replica: Replica, server: ScriptedServer
) -> None:
    pending = spawn(replica.call(call_tool()), name="call")
    session = await server.next_call()
    visit = {"url": "https://auth.example/start", "message": "Sign in", "elicitationId": "e1"}
    session.respond(error={"code": -32042, "message": "visit", "data": {"elicitations": [visit]}})
    first = await pending
    (request,) = first["inputRequests"].values()
    assert request["params"] == {
        "mode": "url",
        "message": "Sign in",
        "url": "https://auth.example/start",
    }
    answers = {key: {"action": "accept"} for key in first["inputRequests"]}
    retry = spawn(
        replica.call(call_tool(rid=2, state=first["requestState"], answers=answers)), name="retry"
    )
    again = await server.next_call()
    again.respond({"content": [{"type": "text", "text": "signed in"}]})
    assert (await retry)["content"][0]["text"] == "signed in"


async def test_answers_supplied_with_the_first_request_are_used_without_a_round(
    replica: Replica, server: ScriptedServer
) -> None:
    pending = spawn(replica.call(call_tool(answers=ALICE)), name="call")
    session = await server.next_call()
    session.elicit(3)
    assert (await server.next_sent())["id"] == 3
    session.respond()
    assert (await pending)["resultType"] == "complete" and replica.bridge.parked == 0


async def test_a_question_the_server_withdraws_is_not_asked(
    replica: Replica, server: ScriptedServer, clock: ManualClock
) -> None:
    pending = spawn(replica.call(call_tool()), name="call")
    session = await server.next_call()
    session.elicit(3)
    session.elicit(4, "color")
    session.notify("notifications/cancelled", {"requestId": 3})
    await clock.armed(clock.now + WINDOW)
    clock.advance(WINDOW)
    assert list((await pending)["inputRequests"]) == ["elicit.color"]


async def test_a_draining_replica_refuses_new_calls_and_waits_for_the_ones_it_holds(
    replica: Replica, server: ScriptedServer, clock: ManualClock
) -> None:
    first, session = await ask_username(replica, server, clock)
    drain = spawn(replica.bridge.drain(30.0), name="drain")
    await clock.armed(clock.now + 30.0)
    with pytest.raises(Draining) as refused:
        await replica.call(call_tool(rid=5))
    assert refused.value.status == 503 and refused.value.data == {"reason": "draining"}
    retry = spawn(
        replica.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="retry"
    )
    await server.next_sent()
    session.respond()
    await retry
    await drain  # ended with its last call, before its timeout
    assert server.nothing_sent()


async def test_a_drain_does_not_wait_for_a_parked_call_whose_upstream_is_lost(
    replica: Replica, server: ScriptedServer, clock: ManualClock
) -> None:
    """Its stream ended while it was parked: no retry can complete it, so a drain left
    with only such calls ends at once (the call cancelled), not at its timeout."""
    _, session = await ask_username(replica, server, clock)
    (call,) = replica.bridge.calls.values()
    session.break_stream()
    assert replica.bridge.calls.lost == 1
    await asyncio.wait_for(replica.bridge.drain(30.0), 5)  # the clock never moves
    assert call.phase is Phase.CANCELLED and replica.bridge.calls.lost == 0


async def test_the_retry_of_a_lost_parked_call_is_told_it_is_gone(
    replica: Replica, server: ScriptedServer, clock: ManualClock
) -> None:
    """Its session is given back (closed) as the stream is lost, so its slot serves new
    calls at once; the call waits for its retry, which is told, and nothing is given
    back twice."""
    first, session = await ask_username(replica, server, clock)
    (call,) = replica.bridge.calls.values()
    session.break_stream()
    await letting_go(call.id)
    assert replica.pool.released == [(session, False)]  # closed and ended upstream
    assert len(replica.bridge.calls) == 1  # still there for its retry
    with pytest.raises(CallLost):
        await replica.call(call_tool(rid=2, state=first["requestState"], answers=ALICE))
    assert len(replica.bridge.calls) == 0 and replica.bridge.calls.lost == 0
    assert replica.pool.released == [(session, False)]  # once


async def test_a_lost_call_is_waited_for_no_more_but_the_others_still_are(
    replica: Replica, server: ScriptedServer, clock: ManualClock
) -> None:
    first, alive = await ask_username(replica, server, clock)
    _, lost = await ask_username(replica, server, clock)
    lost.break_stream()
    drain = spawn(replica.bridge.drain(30.0), name="drain")
    await clock.armed(clock.now + 30.0)
    assert not drain.done()  # the call that can still complete holds it
    retry = spawn(
        replica.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="retry"
    )
    await server.next_sent()
    alive.respond()
    await retry
    await asyncio.wait_for(drain, 5)  # then only the lost one is left: over
    assert len(replica.bridge.calls) == 0


async def test_a_drain_that_times_out_cancels_what_is_left_upstream(
    replica: Replica, server: ScriptedServer, clock: ManualClock
) -> None:
    await ask_username(replica, server, clock)
    (call,) = replica.bridge.calls.values()
    drain = spawn(replica.bridge.drain(30.0), name="drain")
    await clock.armed(clock.now + 30.0)
    clock.advance(30.0)
    await drain
    assert call.phase is Phase.CANCELLED
    assert (await server.next_sent())["result"] == {"action": "cancel"}
    assert (await server.next_sent())["params"]["reason"] == "gateway shutting down"


async def test_an_ending_interrupted_by_cancellation_still_releases_everything(
    replica: Replica, server: ScriptedServer, clock: ManualClock
) -> None:
    _, session = await ask_username(replica, server, clock)
    (call,) = replica.bridge.calls.values()
    ending = spawn(replica.bridge.lifecycle.end(call, Trigger.CANCEL, "test"), name="ending")
    sent = await server.next_sent()  # the ending is under way, on the wire
    assert sent["result"] == {"action": "cancel"}
    ending.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await ending
    await call.ended.wait()
    assert len(replica.bridge.calls) == 0 and replica.bridge.parked == 0
    assert call.pump is not None and call.pump.done()
    assert replica.pool.released_reuse(session) is False
    assert await replica.store.get(call.id) is None
