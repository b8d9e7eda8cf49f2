"""The store loses its data (a Redis restart without persistence): the owner writes back
the records of the calls it holds, a retry that came first waits for them, and a call
whose record cannot come back is ended at once. Two replicas on fakes."""

from __future__ import annotations

from gateway.aio import spawn
from gateway.calls.admission import MISSING_RECORD_BEATS
from gateway.errors import StoreError
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


async def test_a_retry_after_the_store_lost_its_data_resumes_the_written_back_call(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    a, b = two_replicas(clock, server, network)
    first, session = await ask_username(a, server, clock)
    (call_id,) = a.bridge.calls
    store = a.store
    assert isinstance(store, MemoryStore)
    lose_everything(store)
    retry = spawn(b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r")
    grace = MISSING_RECORD_BEATS * b.config.fleet.heartbeat_s
    await clock.armed(clock.now + grace)  # the record is missing: the retry waits a beat
    await a.bridge.restore_records()  # the owner's heartbeat saw the loss
    assert (await store.get(call_id)) is not None and list(store._held["alice"]) == [call_id]
    clock.advance(grace)
    assert (await server.next_sent())["result"]["content"] == {"username": "alice"}
    session.respond({"content": [{"type": "text", "text": "Hello, alice!"}]})
    assert (await retry)["content"][0]["text"] == "Hello, alice!"


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
