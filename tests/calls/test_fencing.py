"""Fencing: a replica cut off from the fleet (it cannot renew its lease) resumes none of
its calls, and once a call was taken over elsewhere its old owner lets it go without a
word upstream: exactly one replica ever resumes a call. Two replicas on fakes."""

from __future__ import annotations

import asyncio

import pytest

from gateway.aio import spawn
from gateway.calls.live import LiveCall
from gateway.errors import LeaseLost, RelayedError, RoundInProgress, StoreError
from gateway.protocol.call import Phase
from gateway.store.base import Kept, SuspendedCall
from gateway.store.memory import MemoryStore
from tests.fakes.clock import ManualClock
from tests.fakes.fleet import POLL_S, Network
from tests.fakes.harness import (
    ALICE,
    WINDOW,
    Replica,
    ask_username,
    call_tool,
    letting_go,
    two_replicas,
)
from tests.fakes.upstream import ScriptedServer, ScriptedSession


async def test_a_replica_without_its_lease_resumes_nothing_and_uses_up_no_round(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    a, _ = two_replicas(clock, server, network)
    first, session = await ask_username(a, server, clock)
    network.cut_off.add("a")
    retry = call_tool(rid=2, state=first["requestState"], answers=ALICE)
    with pytest.raises(LeaseLost) as refused:
        await a.call(retry)
    assert refused.value.status == 503 and server.nothing_sent()
    network.cut_off.discard("a")  # the lease is back: the same retry resumes the call
    (call,) = a.bridge.calls.values()
    task = spawn(a.call(retry), name="retry")
    assert (await server.next_sent())["result"]["content"] == {"username": "alice"}
    session.respond()
    assert (await task)["resultType"] == "complete" and call.phase is Phase.DONE


async def take_over_in_store(a_store, call_id: str, new_owner: str) -> None:
    """What another replica's takeover leaves in the store: the round claimed, itself named."""
    claimed = await a_store.claim(call_id, 1)
    assert claimed is not None and await a_store.take(claimed, new_owner)


async def test_a_call_taken_over_elsewhere_is_let_go_at_its_deadline_without_a_word(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    a, _ = two_replicas(clock, server, network)
    await ask_username(a, server, clock)
    (call,) = a.bridge.calls.values()
    await take_over_in_store(a.store, call.id, "b")
    ttl = a.config.limits.suspension_ttl_s
    await clock.armed(clock.now + ttl)
    clock.advance(ttl)  # the deadline: the round is claimed by someone else ...
    grace = min(a.config.limits.hold_timeout_s, 30.0)
    await clock.armed(clock.now + grace)
    clock.advance(grace)  # ... and nobody resumed it here: the record names b
    await call.ended.wait()
    assert call.phase is Phase.HANDED_OVER and not a.bridge.calls
    assert server.nothing_sent()  # no answer, no cancellation: b's call goes on
    assert a.pool.discarded == [call.session] and a.pool.released == []
    assert (await a.store.get(call.id)) is not None  # b's record is left alone


async def test_a_lost_stream_of_a_call_taken_over_elsewhere_leaves_the_session_alone(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    """Its stream ends here (the server moved it to the replica that took the call over):
    the session is let go of quietly, not ended upstream under the new owner's call."""
    a, _ = two_replicas(clock, server, network)
    _, session = await ask_username(a, server, clock)
    (call,) = a.bridge.calls.values()
    await take_over_in_store(a.store, call.id, "b")
    session.break_stream()
    await letting_go(call.id)
    assert a.pool.discarded == [session] and a.pool.released == []
    assert server.nothing_sent()


async def test_after_a_time_cut_off_a_replica_lets_go_of_the_calls_taken_meanwhile(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    a, _ = two_replicas(clock, server, network)
    await ask_username(a, server, clock)
    await ask_username(a, server, clock)
    taken, kept = a.bridge.calls.values()
    await take_over_in_store(a.store, taken.id, "b")
    await a.bridge.hand_over_lost()
    assert taken.phase is Phase.HANDED_OVER and a.pool.discarded == [taken.session]
    assert kept.phase is Phase.SUSPENDED and list(a.bridge.calls) == [kept.id]
    assert server.nothing_sent()


async def test_a_call_still_being_parked_when_the_lease_comes_back_is_kept(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    class SlowStore(MemoryStore):
        """Parking waits for the test (a store riding out a failover)."""

        def __init__(self, clock: ManualClock) -> None:
            super().__init__(clock)
            self.parking = asyncio.Event()
            self.go_on = asyncio.Event()

        async def park_held(
            self, record: SuspendedCall, until_ms: int, cap: int, kept: Kept | None = None
        ) -> bool:
            self.parking.set()
            await self.go_on.wait()
            return await super().park_held(record, until_ms, cap, kept)

    a, _ = two_replicas(clock, server, network)
    slow = SlowStore(clock)
    a.bridge.suspender.store = slow
    pending = spawn(a.call(call_tool()), name="call")
    session = await server.next_call()
    session.elicit(7)
    await clock.armed(clock.now + WINDOW)
    clock.advance(WINDOW)
    await slow.parking.wait()  # suspended, its record not written yet ...
    await a.bridge.hand_over_lost()  # ... when the lease comes back: not judged
    slow.go_on.set()
    assert (await pending)["resultType"] == "input_required"
    (call,) = a.bridge.calls.values()
    assert call.phase is Phase.SUSPENDED and a.pool.discarded == []


async def test_a_forward_the_cut_off_owner_refuses_gives_the_round_back(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    a, b = two_replicas(clock, server, network)
    first, session = await ask_username(a, server, clock)
    network.cut_off.add("a")  # a still beats for b (partly cut off), but holds no lease
    retry = call_tool(rid=2, state=first["requestState"], answers=ALICE)
    with pytest.raises(RelayedError) as refused:
        await b.call(retry)
    assert refused.value.status == 503 and server.nothing_sent()
    network.cut_off.discard("a")
    again = spawn(b.call(retry), name="again")  # the round was given back: it resumes
    assert (await server.next_sent())["result"]["content"] == {"username": "alice"}
    session.respond()
    assert (await again)["resultType"] == "complete"


async def test_an_old_owner_back_from_the_dead_forwards_the_next_round_to_the_new_owner(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    """a was taken for dead, b took its call over and parked round 2; a comes back with
    its stale copy of round 1 before letting go of it. Round 2's retry reaching a must be
    resumed by b, its owner now: a's copy is dropped, nothing said upstream."""
    a, b = two_replicas(clock, server, network)
    first, session = await ask_username(a, server, clock)
    (stale,) = a.bridge.calls.values()
    network.kill("a")
    retry = spawn(b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r")
    adopted = await server.next_call()
    assert adopted.id == session.id
    assert (await server.next_sent())["result"]["content"] == {"username": "alice"}
    adopted.elicit(8, field="city", message="City?")
    await clock.armed(clock.now + WINDOW)
    clock.advance(WINDOW)
    second = await retry
    assert second["resultType"] == "input_required"
    network.alive.add("a")  # a is back, and has not yet let go of its stale copy
    answers = {"elicit.city": {"action": "accept", "content": {"city": "Oslo"}}}
    at_a = spawn(a.call(call_tool(rid=3, state=second["requestState"], answers=answers)), name="a")
    sent = await server.next_sent()
    assert sent["id"] == 8 and sent["result"]["content"] == {"city": "Oslo"}
    adopted.respond({"content": [{"type": "text", "text": "Hello, alice of Oslo!"}]})
    assert (await at_a)["content"][0]["text"] == "Hello, alice of Oslo!"
    assert stale.phase is Phase.HANDED_OVER and not a.bridge.calls and not b.bridge.calls
    assert server.nothing_sent()  # a said nothing upstream on b's session
    assert a.pool.discarded == [session] and a.pool.released == []


class UnreachableStore(MemoryStore):
    """Redis down at the call's deadline: its claim cannot be made."""

    async def claim(self, call_id: str, round_: int, claimer: str = "") -> SuspendedCall | None:
        raise StoreError("Redis: unreachable")


async def at_the_deadline_with_the_store_down(
    clock: ManualClock, server: ScriptedServer, network: Network, *, lapse: bool
) -> LiveCall:
    a, _ = two_replicas(clock, server, network)
    await ask_username(a, server, clock)
    (call,) = a.bridge.calls.values()
    if lapse:  # the lease lapsed and came back since the call parked: b may have it now
        network.cut_off.add("a")
        network.reconnect("a")
    a.bridge.lifecycle.store = UnreachableStore(clock)
    ttl = a.config.limits.suspension_ttl_s
    await clock.armed(clock.now + ttl)
    clock.advance(ttl)
    await call.ended.wait()
    return call


async def test_a_call_owned_throughout_is_cancelled_upstream_at_its_deadline_with_the_store_down(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    """Held without a break since it parked, the lease proves nobody took the call over: it
    ends upstream too, so the server's handler does not wait on its question for ever."""
    call = await at_the_deadline_with_the_store_down(clock, server, network, lapse=False)
    assert call.phase is Phase.EXPIRED
    assert (await server.next_sent())["result"] == {"action": "cancel"}
    assert (await server.next_sent())["method"] == "notifications/cancelled"


async def test_a_call_parked_before_a_lapse_of_the_lease_is_let_go_quietly_with_the_store_down(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    call = await at_the_deadline_with_the_store_down(clock, server, network, lapse=True)
    assert call.phase is Phase.HANDED_OVER and server.nothing_sent()


async def taken_while_serving(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> tuple[Replica, Replica, LiveCall, ScriptedSession]:
    """a took b's forward and answered upstream, then was cut off: its lease lapsed, and b,
    finding it dead, took the call over and parked round 2, while a still serves round 1."""
    a, b = two_replicas(clock, server, network)
    first, session = await ask_username(a, server, clock)
    (call,) = a.bridge.calls.values()
    retry = spawn(b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r")
    assert (await server.next_sent())["result"]["content"] == {"username": "alice"}  # by a
    await network.polls.get()  # b waits for a's reply
    network.kill("a")  # its heartbeat lapsed: b finds it dead ...
    network.cut_off.add("a")  # ... while a, cut off, still serves the round
    await clock.armed(clock.now + POLL_S)
    clock.advance(POLL_S)
    taken = await server.next_call()  # b takes the call over where the stream stopped
    assert taken.id == session.id
    assert (await server.next_sent())["result"]["content"] == {"username": "alice"}  # by b
    taken.elicit(8, field="city", message="City?")
    await clock.armed(clock.now + WINDOW)
    clock.advance(WINDOW)
    assert (await retry)["resultType"] == "input_required"
    return a, b, call, session


async def test_an_owner_cut_off_while_serving_a_round_says_nothing_on_the_taken_call(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    """When a's round ends (its hold timeout here), a must say nothing upstream on b's
    call and leave b's record alone."""
    a, b, call, session = await taken_while_serving(clock, server, network)
    clock.advance(a.config.limits.hold_timeout_s)  # nothing answers a's round any more
    await call.ended.wait()
    assert call.phase is Phase.HANDED_OVER and not a.bridge.calls
    assert server.nothing_sent()  # no answer released, no cancellation on b's call
    assert a.pool.discarded == [session] and a.pool.released == []
    record = await b.store.get(call.id)
    assert record is not None and (record.owner, record.round) == ("b", 2)


async def test_an_owner_cut_off_while_serving_says_nothing_once_the_new_owners_record_is_gone(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    """b holds the call now, but its record is gone (the store lost its data): a record
    that is gone is no proof the call is a's again, so a still says nothing upstream."""
    a, b, call, session = await taken_while_serving(clock, server, network)
    await b.store.forget(call.id, call.principal)
    clock.advance(a.config.limits.hold_timeout_s)
    await call.ended.wait()
    assert call.phase is Phase.HANDED_OVER and server.nothing_sent()
    assert a.pool.discarded == [session] and a.pool.released == []


async def test_an_owner_cut_off_while_serving_a_round_parks_nothing_over_the_new_owner(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    """A question still reaching a's stream ends its round as a park: the record is b's,
    and a lets the call go instead of writing its own round over b's."""
    a, b, call, session = await taken_while_serving(clock, server, network)
    question = {"message": "Age?", "requestedSchema": {"type": "object", "properties": {}}}
    call.inbox.put_nowait(
        {"jsonrpc": "2.0", "id": 9, "method": "elicitation/create", "params": question}
    )
    await clock.armed(clock.now + WINDOW)
    clock.advance(WINDOW)
    await call.ended.wait()
    assert call.phase is Phase.HANDED_OVER and not a.bridge.calls and server.nothing_sent()
    record = await b.store.get(call.id)
    assert record is not None and (record.owner, record.round) == ("b", 2)


async def test_a_takeover_of_a_round_its_owner_ended_meanwhile_backs_off(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    """b judged a dead and began to take the call over, but a lived: it parked round 2
    before b could name itself the owner. b's takeover gives up (its claim holds no round
    now) and the client, sent again, gets a's round 2: the call goes on once, at a."""
    a, b = two_replicas(clock, server, network)
    first, session = await ask_username(a, server, clock)
    (call,) = a.bridge.calls.values()
    request = call_tool(rid=2, state=first["requestState"], answers=ALICE)
    retry = spawn(b.call(request), name="r")
    assert (await server.next_sent())["result"]["content"] == {"username": "alice"}  # by a
    await network.polls.get()
    server.adopt_gate = asyncio.Event()
    network.kill("a")
    network.cut_off.add("a")
    await clock.armed(clock.now + POLL_S)
    clock.advance(POLL_S)
    await server.adopt_waiting.wait()  # b is adopting the session ...
    session.elicit(8, field="city", message="City?")  # ... as a's round asks again
    await clock.armed(clock.now + WINDOW)
    clock.advance(WINDOW)
    for _ in range(100):  # a parks round 2: the store still names it the owner
        if (await a.store.get(call.id)).round == 2:  # type: ignore[union-attr]
            break
        await asyncio.sleep(0)
    assert call.phase is Phase.SUSPENDED
    server.adopt_gate.set()
    with pytest.raises(RoundInProgress) as backed_off:
        await retry
    assert backed_off.value.status == 503
    assert server.nothing_sent()  # b sent nothing upstream
    assert [s.id for s in b.pool.discarded] == [session.id]
    record = await a.store.get(call.id)
    assert record is not None and (record.owner, record.round) == ("a", 2)
    again = await b.call(request)  # the client sends the retry again
    assert again["resultType"] == "input_required" and "elicit.city" in again["inputRequests"]


async def test_a_resumed_round_whose_record_is_gone_after_a_lease_break_is_let_go_quietly(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    """The record of a round resumed on a is gone (the store lost its data), and a's lease
    broke and came back meanwhile. A record can be gone while another replica, which took
    the call over, still runs it: a must not park over it nor cancel it upstream, so it
    lets the call go, and its client is told to retry (503)."""
    a, _ = two_replicas(clock, server, network)
    first, session = await ask_username(a, server, clock)
    (call,) = a.bridge.calls.values()
    retry = spawn(a.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r")
    assert (await server.next_sent())["result"]["content"] == {"username": "alice"}
    await a.store.forget(call.id, call.principal)  # the store came back empty
    network.cut_off.add("a")
    network.reconnect("a")  # the lease, lost meanwhile, is back in a new term
    session.elicit(8, field="city", message="City?")
    await clock.armed(clock.now + WINDOW)
    clock.advance(WINDOW)
    with pytest.raises(LeaseLost):
        await retry
    assert call.phase is Phase.HANDED_OVER and not a.bridge.calls
    assert server.nothing_sent()  # no answer released, no cancellation upstream
    assert await a.store.get(call.id) is None  # nothing written over whoever holds it
