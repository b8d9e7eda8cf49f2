"""Two replicas sharing a store and a bus, in one process: a retry that reaches the
replica not holding its call, and every branch of an owner that is gone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from structlog.testing import capture_logs

from gateway.aio import cancel_and_wait, spawn
from gateway.calls.admission import CLAIMER_PATIENCE_BEATS
from gateway.errors import (
    CallLost,
    InvalidRequestState,
    PrincipalBusy,
    RelayedError,
    RoundInProgress,
    StoreError,
    TakeoverUnavailable,
    UpstreamError,
)
from gateway.fleet import messages
from gateway.protocol.call import Phase
from gateway.protocol.inbound import FrontRequest
from gateway.store.base import PARKED
from gateway.store.memory import MemoryStore
from tests.fakes.clock import ManualClock
from tests.fakes.fleet import POLL_S, Network, OneTripStore
from tests.fakes.harness import (
    ALICE,
    WINDOW,
    Replica,
    ask_username,
    call_tool,
    config,
    replicas,
    two_replicas,
)
from tests.fakes.upstream import ScriptedServer, ScriptedSession


async def test_a_retry_at_another_replica_is_forwarded_to_the_live_owner(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    a, b = two_replicas(clock, server, network)
    first, session = await ask_username(a, server, clock)
    request = call_tool(rid=2, state=first["requestState"], answers=ALICE, progress="p")
    retry = spawn(b.call(request), name="retry")
    assert (await server.next_sent())["result"]["content"] == {"username": "alice"}
    assert session.request is not None
    token = session.request["params"]["_meta"]["progressToken"]
    session.notify("notifications/progress", {"progressToken": token, "progress": 1})
    session.respond({"content": [{"type": "text", "text": "Hello, alice!"}]})
    result = await retry
    assert result["content"][0]["text"] == "Hello, alice!"
    assert b.notified == [
        {
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {"progressToken": "p", "progress": 1},
        }
    ]
    assert [type(m) for _, m in network.delivered] == [messages.Resume]
    assert len(a.bridge.calls) == 0 and len(b.bridge.calls) == 0


async def test_a_forward_goes_with_the_claim_of_its_round_where_the_store_can_push_it(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    a, b = two_replicas(clock, server, network, store=OneTripStore(clock, network))
    first, session = await ask_username(a, server, clock)
    retry = spawn(b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r")
    assert (await server.next_sent())["result"]["content"] == {"username": "alice"}
    session.respond({"content": [{"type": "text", "text": "Hello, alice!"}]})
    assert (await retry)["content"][0]["text"] == "Hello, alice!"
    assert [(owner, type(m)) for owner, m in network.delivered] == [("a", messages.Resume)]
    assert network.bus_deliveries == []  # no second trip to deliver it
    # Without such a store, the bus delivers it after the claim (the other tests here).


async def test_a_client_leaving_while_the_claim_carries_its_forward_cancels_it_at_the_owner(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    store = OneTripStore(clock, network)
    a, b = two_replicas(clock, server, network, store=store)
    first, session = await ask_username(a, server, clock)
    (call,) = a.bridge.calls.values()
    store.stall = asyncio.Event()
    retry = spawn(b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r")
    await server.next_sent()  # the owner got the forward and answered upstream ...
    retry.cancel()  # ... while the claim's own reply had not come back
    cancelled = await server.next_sent()
    assert cancelled["params"] == {"requestId": session.call_id, "reason": "client disconnected"}
    await call.ended.wait()
    assert call.phase is Phase.CANCELLED
    assert [type(m) for _, m in network.delivered] == [messages.Resume, messages.Cancel]


async def test_a_claim_that_finds_the_owner_without_a_heartbeat_pushes_nothing(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    a, b = two_replicas(clock, server, network, store=OneTripStore(clock, network))
    first, session = await ask_username(a, server, clock)
    network.kill("a")
    retry = spawn(b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r")
    adopted = await server.next_call()  # taken over, as when the bus finds it dead
    assert adopted.id == session.id and b.pool.adopted == [session.id]
    assert (await server.next_sent())["result"]["content"] == {"username": "alice"}
    adopted.respond({"content": [{"type": "text", "text": "taken over"}]})
    assert (await retry)["content"][0]["text"] == "taken over"
    assert not network.delivered and network.bus_deliveries == []  # nor sent it after


async def test_a_client_leaving_a_forwarded_retry_cancels_the_call_at_its_owner(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    a, b = two_replicas(clock, server, network)
    first, session = await ask_username(a, server, clock)
    (call,) = a.bridge.calls.values()
    retry = spawn(b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r")
    await server.next_sent()
    retry.cancel()
    cancelled = await server.next_sent()
    assert cancelled["params"] == {"requestId": session.call_id, "reason": "client disconnected"}
    await call.ended.wait()
    assert call.phase is Phase.CANCELLED
    assert [type(m) for _, m in network.delivered] == [messages.Resume, messages.Cancel]


async def test_a_dead_owners_call_is_taken_over_where_its_stream_stopped(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    a, b = two_replicas(clock, server, network)
    first, session = await ask_username(a, server, clock)
    record = await a.store.get(next(iter(a.bridge.calls)))
    assert record is not None and record.last_event_id is not None
    network.kill("a")
    retry = spawn(b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r")
    adopted = await server.next_call()
    assert adopted.id == session.id and b.pool.adopted == [session.id]
    assert adopted.resumed_after == record.last_event_id
    answer = await server.next_sent()
    assert answer["id"] == 7 and answer["result"]["content"] == {"username": "alice"}
    adopted.respond({"content": [{"type": "text", "text": "taken over"}]})
    assert (await retry)["content"][0]["text"] == "taken over"
    assert not network.delivered  # nothing was sent to the dead owner


async def test_a_replay_safe_call_is_replayed_from_its_journal_when_takeover_is_impossible(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    a, b = two_replicas(clock, server, network, tools={"greet": {"replay_safe": True}})
    first, session = await ask_username(a, server, clock)
    retry = spawn(a.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r")
    await server.next_sent()
    session.elicit(8, "color")  # round 2: the journal now holds the username
    await clock.armed(clock.now + WINDOW)
    clock.advance(WINDOW)
    second = await retry
    network.kill("a")
    assert session.id is not None
    server.forgotten.add(session.id)  # the upstream lost the session too
    color = {"elicit.color": {"action": "accept", "content": {"color": "red"}}}
    replay = spawn(
        b.call(call_tool(rid=3, state=second["requestState"], answers=color)), name="replay"
    )
    again = await server.next_call()
    assert again is not session and again.request is not None
    assert again.request["method"] == "tools/call"  # run afresh
    again.elicit(1)
    again.elicit(2, "color")
    assert (await server.next_sent())["result"]["content"] == {"username": "alice"}
    assert (await server.next_sent())["result"]["content"] == {"color": "red"}
    again.respond()
    replayed = await replay
    assert replayed["resultType"] == "complete"
    # The client never saw it and sends the retry again: the replay ran under a new call
    # id, and its outcome was kept under the old one's.
    # No record, and its owner has no heartbeat: looked for until the owner's patience ends.
    beat = b.config.fleet.heartbeat_s
    resent = call_tool(rid=3, state=second["requestState"], answers=color)
    sent_again = spawn(b.call(resent), name="sent-again")
    limit = CLAIMER_PATIENCE_BEATS * beat * 2
    assert await clock.run_until_done(sent_again, step=beat / 8, limit=limit) == replayed
    assert server.nothing_sent() and server.calls.empty()  # nothing ran again


async def test_a_call_whose_owner_died_is_lost_when_neither_takeover_nor_replay_can_serve(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    server.resumable = False  # no SSE event ids: nowhere to resume the stream from
    a, b = two_replicas(clock, server, network)
    first, session = await ask_username(a, server, clock)
    (call_id,) = a.bridge.calls
    assert await b.store.get(call_id) is not None
    network.kill("a")
    with pytest.raises(CallLost) as lost:
        await b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE))
    assert lost.value.status == 502 and lost.value.code == -32603
    assert server.calls.empty()  # the tool was never run a second time
    assert await b.store.get(call_id) is None
    # The stranded upstream call is cancelled on its session, not left to run on.
    cancelled = await server.next_sent()
    assert cancelled["method"] == "notifications/cancelled"
    assert cancelled["params"]["requestId"] == session.call_id
    assert b.pool.adopted == [session.id] and b.pool.released[-1][1] is False


async def test_an_owner_dying_after_taking_a_forward_hands_the_call_to_takeover(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    a, b = two_replicas(clock, server, network)
    first, session = await ask_username(a, server, clock)
    retry = spawn(b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r")
    await server.next_sent()  # the owner took the retry and answered upstream ...
    await network.polls.get()  # ... and the receiving replica waits for its reply
    network.kill("a")
    await clock.armed(clock.now + POLL_S)
    clock.advance(POLL_S)
    taken = await server.next_call()  # the receiving replica continues the stream
    assert taken.id == session.id and b.pool.adopted == [session.id]
    assert (await server.next_sent())["result"]["content"] == {"username": "alice"}
    taken.respond({"content": [{"type": "text", "text": "Hello, alice!"}]})
    assert (await retry)["content"][0]["text"] == "Hello, alice!"


async def test_a_forward_the_dead_owner_never_read_is_taken_back_and_replayed(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    server.resumable = False
    a, b = two_replicas(clock, server, network, tools={"greet": {"replay_safe": True}})
    first, _ = await ask_username(a, server, clock)
    network.stalled.add("a")  # alive, its inbox not read yet
    retry = spawn(b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r")
    await network.polls.get()
    network.kill("a")
    await clock.armed(clock.now + POLL_S)
    clock.advance(POLL_S)
    again = await server.next_call()  # replayed from its journal on the receiving replica
    again.elicit(1)
    assert (await server.next_sent())["result"]["content"] == {"username": "alice"}
    again.respond({"content": [{"type": "text", "text": "Hello, alice!"}]})
    assert (await retry)["content"][0]["text"] == "Hello, alice!"
    assert network.held["a"] == []  # taken back: the dead owner's inbox holds nothing


async def test_an_owner_that_never_answers_a_forward_is_given_up_after_the_hold_timeout(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    a, b = two_replicas(clock, server, network)
    first, _ = await ask_username(a, server, clock)

    async def deaf(message: messages.Message) -> None:  # alive, beating, never serving its inbox
        return None

    network.handlers["a"] = deaf
    retry = spawn(b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r")
    await network.polls.get()
    clock.advance(b.config.limits.hold_timeout_s + 5 + POLL_S)
    with pytest.raises(UpstreamError) as failed:
        await retry
    assert failed.value.status == 502


async def test_a_reply_the_receiving_replica_does_not_read_fails_the_retry_whole(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    """A reply decoded once, and refused whole when it is none this release reads (a
    newer release's version): the retry fails as from the owner, nothing half-read."""
    a, b = two_replicas(clock, server, network)
    first, _ = await ask_username(a, server, clock)
    owner = network.bus("a")

    async def newer(message: messages.Message) -> None:
        assert isinstance(message, messages.Resume)
        await owner.reply(message.reply, '{"op":"outcome","result":{},"v":3}')

    network.handlers["a"] = newer
    retry = spawn(b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r")
    with pytest.raises(UpstreamError) as failed:
        await retry
    assert failed.value.status == 502  # not a ValueError: nothing half-read
    assert server.nothing_sent()  # the owner's session was never touched


async def test_an_owner_asked_for_a_round_it_no_longer_holds_answers_call_lost(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    two_replicas(clock, server, network)
    bus = network.bus("b")
    reply = bus.new_reply_key()
    params = call_tool(rid=2, answers=ALICE).params
    resume = messages.Resume("gone", 1, 2, "tools/call", params, reply)
    await bus.send("a", messages.encode(resume))
    payload = await bus.receive(reply)
    assert payload is not None
    failure = messages.decode(payload)
    assert isinstance(failure, messages.Failure)
    assert failure.status == 502 and failure.error["code"] == -32603


async def test_a_message_no_replica_understands_is_dropped(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    a, _ = two_replicas(clock, server, network)
    bus = network.bus("b")
    await bus.send("a", '{"op":"resume","call":"x"}')
    await bus.send("a", "not json at all")
    assert [payload for _, payload in network.undecoded] == [
        '{"op":"resume","call":"x"}',
        "not json at all",
    ]
    assert network.delivered == []  # dropped as the bus decoded them: nobody handed them
    with capture_logs() as logs:  # decoded, but no message an owner serves
        await a.bridge.serve_forwarded(messages.Outcome({"resultType": "complete"}))
        await a.bridge.serve_forwarded(messages.ExchangeHead(200, {}))
    assert [e["kind"] for e in logs if e["event"] == "fleet_unexpected_message"] == [
        "Outcome",
        "ExchangeHead",
    ]
    assert len(a.bridge.calls) == 0


async def test_the_parked_call_cap_per_principal_holds_across_replicas(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    store = MemoryStore(clock)  # what every replica shares (Redis in production)
    a, b = (
        Replica(
            clock,
            server,
            store=store,
            bus=network.bus(n),
            settings=config(n, max_parked_per_principal=1),
        )
        for n in ("a", "b")
    )
    first, session = await ask_username(a, server, clock, principal="alice")
    with pytest.raises(PrincipalBusy) as busy:
        await ask_username(b, server, clock, principal="alice")
    assert busy.value.status == 429
    assert (await server.next_sent())["result"] == {"action": "cancel"}  # b's call is released
    await ask_username(b, server, clock, principal="bob")  # others are still served
    retry = spawn(a.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r")
    await server.next_sent()
    session.respond()
    await retry  # alice's call is done: she may park again, on either replica
    assert (await ask_username(b, server, clock, principal="alice"))[0]["resultType"] == (
        "input_required"
    )


@pytest.mark.parametrize("replay_safe", [False, True])
async def test_a_process_session_dies_with_its_owner_lost_or_replayed(
    clock: ManualClock, server: ScriptedServer, network: Network, replay_safe: bool
) -> None:
    server.adoptable = False  # stdio or HTTP+SSE: nobody else can continue the session
    tools = {"greet": {"replay_safe": True}} if replay_safe else None
    a, b = two_replicas(clock, server, network, tools=tools)
    first, _ = await ask_username(a, server, clock)
    network.kill("a")
    retry = spawn(b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r")
    if not replay_safe:
        with pytest.raises(CallLost):
            await retry
        assert server.calls.empty() and not b.pool.adopted
        return
    again = await server.next_call()  # run afresh, the answer taken from the journal
    again.elicit(1)
    assert (await server.next_sent())["result"]["content"] == {"username": "alice"}
    again.respond()
    assert (await retry)["resultType"] == "complete" and not b.pool.adopted


async def claimed_by_a(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> tuple[Replica, Replica, asyncio.Task[dict[str, Any]], ScriptedSession]:
    """a parks a call and claims its retry; the client's retry sent again runs at b."""
    a, b = two_replicas(clock, server, network)
    first, session = await ask_username(a, server, clock)
    (call_id,) = a.bridge.calls
    assert await a.store.claim(call_id, 1, "a") is not None
    retry = spawn(b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r")
    return a, b, retry, session


async def owner_killed(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> tuple[Replica, Replica, dict[str, Any], ScriptedSession, str]:
    """A call parked at a, which is then killed: b, the retry's receiver, finds it gone."""
    a, b = two_replicas(clock, server, network)
    first, session = await ask_username(a, server, clock)
    (call_id,) = a.bridge.calls
    network.kill("a")
    return a, b, first, session, call_id


async def completes_by_takeover(
    server: ScriptedServer, session: ScriptedSession, retry: asyncio.Task[dict[str, Any]]
) -> None:
    """The stream goes on at the retrying replica, on the same upstream session."""
    taken = await server.next_call()
    assert taken.id == session.id
    assert (await server.next_sent())["result"]["content"] == {"username": "alice"}
    taken.respond({"content": [{"type": "text", "text": "Hello, alice!"}]})
    assert (await retry)["content"][0]["text"] == "Hello, alice!"


async def test_a_round_whose_claimer_died_resuming_it_is_claimed_again_and_taken_over(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    _, _, retry, session = await claimed_by_a(clock, server, network)
    network.kill("a")  # a died resuming it, before the retry sent again runs at b
    await completes_by_takeover(server, session, retry)


async def test_a_round_being_resumed_by_a_live_replica_is_not_claimed_again(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    _, b, retry, _ = await claimed_by_a(clock, server, network)  # a is resuming it
    ttl = CLAIMER_PATIENCE_BEATS * b.config.fleet.heartbeat_s
    for _ in range(8):  # b gives a's heartbeat its TTL to lapse; a beats on
        await clock.armed(clock.now + ttl / 8)
        clock.advance(ttl / 8)
    with pytest.raises(InvalidRequestState):
        await retry
    assert server.nothing_sent()


async def test_a_claimer_killed_a_moment_ago_is_waited_for_until_its_heartbeat_lapses(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    _, b, retry, session = await claimed_by_a(clock, server, network)
    step = CLAIMER_PATIENCE_BEATS * b.config.fleet.heartbeat_s / 8
    await clock.armed(clock.now + step)  # its heartbeat is still there ...
    network.kill("a")  # ... until it lapses
    clock.advance(step)
    await completes_by_takeover(server, session, retry)


async def test_a_retry_sent_again_gets_the_outcome_its_first_sending_had(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    a, b = two_replicas(clock, server, network)
    first, session = await ask_username(a, server, clock)
    retry = call_tool(rid=2, state=first["requestState"], answers=ALICE)
    answered = spawn(b.call(retry), name="r")  # forwarded to a, which resumes the call
    await server.next_sent()
    session.respond({"content": [{"type": "text", "text": "Hello, alice!"}]})
    result = await answered
    # The client never saw it (the relaying replica died, say) and sends it again: the
    # call ended, its record is gone for good (its owner has all its records in the
    # store), and the outcome kept for the round answers it at once.
    for replica in (a, b):
        assert await replica.call(retry) == result
    assert server.nothing_sent()  # nothing ran a second time


async def test_an_owner_killed_right_after_parking_the_next_round_leaves_its_outcome(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    a, b = two_replicas(clock, server, network)
    first, session = await ask_username(a, server, clock)
    shared, parked = a.bridge.suspender.store, asyncio.Event()

    class DiesAfterParking:
        """a's store: a writes round 2, and is killed before it does anything else."""

        def __getattr__(self, name: str) -> Any:
            return getattr(shared, name)

        async def park_held(self, record: Any, until_ms: int, cap: int, kept: Any = None) -> bool:
            await shared.park_held(record, until_ms, cap, *([kept] if kept else []))
            network.kill("a")
            parked.set()
            await asyncio.Event().wait()  # nothing after the write ever happens
            return True

    a.bridge.suspender.store = DiesAfterParking()  # type: ignore[assignment]
    retry = call_tool(rid=2, state=first["requestState"], answers=ALICE)
    lost = spawn(a.call(retry), name="never-answered")
    await server.next_sent()  # the answer reached the server, which asks again
    session.elicit(8, "color")
    await clock.armed(clock.now + WINDOW)
    clock.advance(WINDOW)
    await parked.wait()
    # The client never got round 2 and sends its retry again, to b: round 1 was resumed,
    # and its outcome was kept in the very write that parked round 2.
    again = await b.call(retry)
    assert again["resultType"] == "input_required"
    assert list(again["inputRequests"]) == ["elicit.color"]
    lost.cancel()


async def test_a_call_lost_with_its_owner_frees_its_place_among_its_principals_parked_calls(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    """Told its call was lost and to start again, the client can: the lost call's place
    under `max_parked_per_principal` went with its record (it was held to the deadline)."""
    server.resumable = False
    a, b = two_replicas(clock, server, network, max_parked_per_principal=1)
    first, _ = await ask_username(a, server, clock)
    network.kill("a")
    with pytest.raises(CallLost):
        await b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE))
    again, _ = await ask_username(b, server, clock)
    assert again["resultType"] == "input_required"


async def resuming_at_a_for_dead_b(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> tuple[Replica, Replica, FrontRequest, ScriptedSession, asyncio.Task[dict[str, Any]]]:
    """a parks a call; its retry reaches b, which claims the round and forwards it; a is
    resuming it (its answer went upstream) when b dies."""
    a, b, c = replicas(clock, server, network, ("a", "b", "c"))
    first, session = await ask_username(a, server, clock)
    retry = call_tool(rid=2, state=first["requestState"], answers=ALICE)
    at_b = spawn(b.call(retry), name="at-b")
    assert (await server.next_sent())["result"]["content"] == {"username": "alice"}
    await network.polls.get()  # b waits for a's reply ...
    network.kill("b")  # ... and dies (its task, a dead process's, is left to itself)
    return a, c, retry, session, at_b


@pytest.mark.parametrize("again_at", ["a", "c"])
async def test_a_retry_sent_again_while_its_owner_resumes_the_round_is_told_to_retry(
    clock: ManualClock, server: ScriptedServer, network: Network, again_at: str
) -> None:
    """Its first receiver died: the round is taken from it, but the owner is resuming it
    still, so the call is neither lost nor run twice. The retry is told to come again
    (503), and that retry gets the round's outcome, once the owner has it."""
    a, c, retry, session, at_b = await resuming_at_a_for_dead_b(clock, server, network)
    receiver = a if again_at == "a" else c
    with pytest.raises((RoundInProgress, RelayedError)) as busy:
        await receiver.call(retry)
    assert busy.value.status == 503
    assert busy.value.error_object()["data"] == {"reason": "round_in_progress"}
    (record,) = [await a.store.get(call_id) for call_id in a.bridge.calls]
    assert record is not None and record.status == PARKED  # the round was given back
    session.respond({"content": [{"type": "text", "text": "Hello, alice!"}]})
    await a.bridge.calls.idle.wait()
    again = await receiver.call(retry)  # the outcome a kept for the round, its record gone
    assert again["content"][0]["text"] == "Hello, alice!"
    assert server.nothing_sent()  # the answer went upstream once
    await at_b


async def test_a_takeover_the_upstream_cannot_take_now_leaves_the_call_for_the_next_retry(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    a, b, first, session, call_id = await owner_killed(clock, server, network)
    server.unreachable = True  # the session cannot be adopted for now
    retry = call_tool(rid=2, state=first["requestState"], answers=ALICE)
    with pytest.raises(TakeoverUnavailable) as deferred:
        await b.call(retry)
    assert deferred.value.status == 503  # retry the same request, not start again
    assert deferred.value.error_object()["data"] == {"reason": "takeover_unavailable"}
    record = await b.store.get(call_id)
    assert record is not None and record.status == PARKED and record.owner == "a"
    server.unreachable = False
    again = spawn(b.call(retry), name="again")  # the same retry: the takeover goes ahead
    await completes_by_takeover(server, session, again)


async def test_a_takeover_whose_client_leaves_while_adopting_leaves_the_call_for_the_next_retry(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    a, b, first, session, call_id = await owner_killed(clock, server, network)
    server.adopt_gate = asyncio.Event()
    retry = call_tool(rid=2, state=first["requestState"], answers=ALICE)
    left = spawn(b.call(retry), name="left")
    await server.adopt_waiting.wait()
    await cancel_and_wait(left)  # the client went away while the session was adopted
    await asyncio.gather(*(t for t in asyncio.all_tasks() if t.get_name().startswith("give-")))
    record = await b.store.get(call_id)
    assert record is not None and record.status == PARKED and record.owner == "a"
    server.adopt_gate.set()
    again = spawn(b.call(retry), name="again")
    await completes_by_takeover(server, session, again)


async def test_a_client_leaving_while_a_deferred_takeover_gives_its_round_back_does_not_stop_it(
    clock: ManualClock, server: ScriptedServer, network: Network, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, first, session, call_id = await owner_killed(clock, server, network)
    server.unreachable = True
    give_back, giving, gate = b.store.give_back, asyncio.Event(), asyncio.Event()

    async def slow_give_back(*args: Any, **kwargs: Any) -> bool:
        giving.set()
        await gate.wait()
        return await give_back(*args, **kwargs)

    monkeypatch.setattr(b.store, "give_back", slow_give_back)
    retry = call_tool(rid=2, state=first["requestState"], answers=ALICE)
    left = spawn(b.call(retry), name="left")
    await giving.wait()
    await cancel_and_wait(left)  # the client went away while the round was given back
    gate.set()
    await asyncio.gather(*(t for t in asyncio.all_tasks() if t.get_name().startswith("give-")))
    record = await b.store.get(call_id)
    assert record is not None and record.status == PARKED and record.owner == "a"
    server.unreachable = False
    monkeypatch.undo()
    again = spawn(b.call(retry), name="again")
    await completes_by_takeover(server, session, again)


@pytest.mark.parametrize("how", ["reply_lost", "client_left"])
async def test_a_takeover_the_store_fails_to_record_leaves_the_call_for_the_next_retry(
    how: str,
    clock: ManualClock,
    server: ScriptedServer,
    network: Network,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`take` reached the store, naming b, but b never learnt it: the round goes back
    naming a again (b holds no call), and b lets go of the session without ending it."""
    a, b, first, session, call_id = await owner_killed(clock, server, network)
    take, written = b.store.take, asyncio.Event()

    async def take_then_fail(record: Any, owner: str) -> bool:
        assert await take(record, owner)
        written.set()
        if how == "reply_lost":
            raise StoreError("Redis: connection reset")
        await asyncio.Event().wait()  # the client leaves meanwhile
        return True

    monkeypatch.setattr(b.store, "take", take_then_fail)
    retry = call_tool(rid=2, state=first["requestState"], answers=ALICE)
    if how == "reply_lost":
        with pytest.raises(StoreError):
            await b.call(retry)
    else:
        left = spawn(b.call(retry), name="left")
        await written.wait()
        await cancel_and_wait(left)
        await asyncio.gather(*(t for t in asyncio.all_tasks() if t.get_name().startswith("give-")))
    record = await b.store.get(call_id)
    assert record is not None and record.status == PARKED and record.owner == "a"
    (adopted,) = [s for s in server.sessions if s.id == session.id and s is not session]
    assert b.pool.discarded == [adopted]  # let go of, not ended: the call is still upstream
    assert b.pool.released_reuse(adopted) is None
    monkeypatch.undo()
    again = spawn(b.call(retry), name="again")
    await completes_by_takeover(server, session, again)


async def test_a_takeover_of_a_call_that_ended_meanwhile_is_lost_and_holds_nothing(
    clock: ManualClock, server: ScriptedServer, network: Network, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, first, session, call_id = await owner_killed(clock, server, network)
    take = b.store.take

    async def gone_first(record: Any, owner: str) -> bool:
        await b.store.delete(call_id)  # it lapsed between the claim and the take
        return await take(record, owner)

    monkeypatch.setattr(b.store, "take", gone_first)
    with pytest.raises(CallLost):
        await b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE))
    (adopted,) = [s for s in server.sessions if s.id == session.id and s is not session]
    assert b.pool.discarded == [adopted]
    assert not b.bridge.calls


async def test_a_forward_handled_to_its_end_is_not_served_again_when_it_comes_again(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    """A message the owner's inbox hands over a second time (its removal from the taken
    list failed, and it was taken up again) is the same forward: not served twice."""
    a, b = two_replicas(clock, server, network)
    first, session = await ask_username(a, server, clock)
    retry = spawn(b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r")
    assert (await server.next_sent())["result"]["content"] == {"username": "alice"}
    session.respond({"content": [{"type": "text", "text": "Hello, alice!"}]})
    assert (await retry)["content"][0]["text"] == "Hello, alice!"
    ((owner, resume),) = network.delivered
    assert owner == "a" and isinstance(resume, messages.Resume)
    served = a.bridge.routing
    assert served is not None
    await served.serve_message(resume)  # the same message, handed over again
    assert network.replies[resume.reply].empty()  # nothing served: no answer, no failure
    assert server.nothing_sent() and server.calls.empty()
