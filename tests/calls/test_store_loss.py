"""The store loses its data (a Redis restart without persistence): the owner writes back
the records of the calls it holds, a retry that came first waits for them, and a call
whose record cannot come back is ended at once. Two replicas on fakes."""

from __future__ import annotations

import pytest

from gateway.aio import spawn
from gateway.calls.admission import CLAIMER_PATIENCE_BEATS, WRITE_BACK_BEATS
from gateway.errors import InvalidRequestState, StoreError
from gateway.protocol.call import Phase
from gateway.store.base import SuspendedCall
from gateway.store.memory import MemoryStore
from tests.fakes.clock import ManualClock
from tests.fakes.fleet import Network
from tests.fakes.harness import ALICE, ask_username, call_tool, two_replicas
from tests.fakes.upstream import ScriptedServer


def lose_everything(store: MemoryStore) -> None:
    store._records.clear()
    store._held.clear()


async def test_a_retry_whose_look_comes_before_the_write_back_waits_for_it(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    """The race the chaos suite found under load: Redis restarted empty, and a retry looks
    for its record before the owner has written it back (the owner's heartbeat, slow on
    a busy machine, has not even noticed yet). It waits for as long as the owner its
    state names is alive and not done, past the beat and a half it used to give."""
    a, b = two_replicas(clock, server, network)
    first, session = await ask_username(a, server, clock)
    (call_id,) = a.bridge.calls
    store = a.store
    assert isinstance(store, MemoryStore)
    lose_everything(store)
    network.data_lost()
    retry = spawn(b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r")
    beat = b.config.fleet.heartbeat_s
    waited = clock.now + 4 * beat  # far past the one look more of the old grace
    while clock.now < waited:
        await clock.armed(clock.now + CLAIMER_PATIENCE_BEATS * beat / 8)  # it looks again
        clock.advance(CLAIMER_PATIENCE_BEATS * beat / 8)
    assert not retry.done() and await store.get(call_id) is None
    await a.bridge.restore_records()  # the owner's heartbeat saw the loss: written back
    network.written_back("a")
    assert (await store.get(call_id)) is not None and list(store._held["alice"]) == [call_id]
    result = spawn(clock.run_until_done(retry, step=beat / 8, limit=beat), name="until")
    assert (await server.next_sent())["result"]["content"] == {"username": "alice"}
    session.respond({"content": [{"type": "text", "text": "Hello, alice!"}]})
    assert (await result)["content"][0]["text"] == "Hello, alice!"


async def test_a_record_still_missing_once_its_owner_wrote_back_is_refused_at_once(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    a, b = two_replicas(clock, server, network)
    first, _ = await ask_username(a, server, clock)
    lose_everything(a.store)  # type: ignore[arg-type]
    network.data_lost()
    network.written_back("a")  # nothing of it came back: the call is gone for good
    with pytest.raises(InvalidRequestState):  # the manual clock never moves: no wait
        await b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE))


@pytest.mark.parametrize("owner", ["slow", "gone"])
async def test_a_retry_waits_for_a_write_back_only_so_long(
    clock: ManualClock, server: ScriptedServer, network: Network, owner: str
) -> None:
    """An owner that never finishes writing back is waited for `WRITE_BACK_BEATS`; one
    with no heartbeat, for as long as a replica may take to beat again."""
    a, b = two_replicas(clock, server, network)
    first, _ = await ask_username(a, server, clock)
    lose_everything(a.store)  # type: ignore[arg-type]
    network.data_lost()
    if owner == "gone":
        network.kill("a")
    retry = spawn(b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r")
    beat = b.config.fleet.heartbeat_s
    bound = (WRITE_BACK_BEATS if owner == "slow" else CLAIMER_PATIENCE_BEATS) * beat
    started = clock.now
    with pytest.raises(InvalidRequestState):
        await clock.run_until_done(retry, step=beat / 8, limit=2 * bound)
    assert clock.now - started >= bound  # it waited its whole bound, no more than twice


async def test_a_record_that_exists_again_is_not_overwritten(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    a, _ = two_replicas(clock, server, network)
    await ask_username(a, server, clock)
    (call_id,) = a.bridge.calls
    claimed = await a.store.claim(call_id, 1)  # another replica holds the round now
    assert claimed is not None
    await a.bridge.restore_records()
    record = await a.store.get(call_id)
    assert record is not None and record.status == claimed.status


class BrokenStore(MemoryStore):
    async def restore(self, record: SuspendedCall, until_ms: int) -> bool:
        raise StoreError("Redis: still unreachable")


async def test_a_call_whose_record_cannot_come_back_is_ended_and_cancelled_at_once(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    a, _ = two_replicas(clock, server, network)
    a.bridge.lifecycle.store = BrokenStore(clock)
    await ask_username(a, server, clock)
    (call,) = a.bridge.calls.values()
    await a.bridge.restore_records()
    assert call.phase is Phase.FAILED and not a.bridge.calls
    released = await server.next_sent()  # the server's question is let go ...
    assert released["id"] == 7 and released["result"]["action"] == "cancel"
    assert (await server.next_sent())["method"] == "notifications/cancelled"  # ... the call too
