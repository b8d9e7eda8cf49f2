"""A client that leaves while its retry claims the round, or while the resume waits for a
deadline's expiry to stop: the round is not left claimed and resumed by nobody, and a
resumed call does not stay running for nobody."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from structlog.testing import capture_logs

from gateway.aio import spawn
from gateway.calls import lifecycle
from gateway.errors import StoreError
from gateway.protocol.call import Phase
from gateway.store.base import PARKED, RESUMING, SuspendedCall
from gateway.store.memory import MemoryStore
from tests.fakes.clock import ManualClock
from tests.fakes.fleet import Network
from tests.fakes.harness import ALICE, Replica, ask_username, call_tool, two_replicas
from tests.fakes.upstream import ScriptedServer


class ClaimHeld(MemoryStore):
    """A store whose claims are made at once but answered only when `answer` is set: a
    reply on its way back while the client leaves."""

    in_process = False  # its claims wait, as a remote store's do

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.holding = False
        self.made = asyncio.Event()
        self.answer = asyncio.Event()

    async def claim(self, call_id: str, round_: int, claimer: str = "") -> SuspendedCall | None:
        claimed = await super().claim(call_id, round_, claimer)
        if self.holding:
            self.made.set()
            await self.answer.wait()
        return claimed


async def until(condition: Any) -> None:
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("never came true")


async def leave_while_claiming(store: ClaimHeld, retrying: Replica, state: str) -> None:
    store.holding = True
    retry = spawn(retrying.call(call_tool(rid=2, state=state, answers=ALICE)), name="retry")
    await store.made.wait()
    retry.cancel()
    with pytest.raises(asyncio.CancelledError):
        await retry
    store.holding = False
    store.answer.set()


async def test_a_claim_whose_client_left_is_given_back_for_its_next_retry(
    clock: ManualClock, server: ScriptedServer
) -> None:
    store = ClaimHeld(clock)
    replica = Replica(clock, server, store=store)
    first, session = await ask_username(replica, server, clock)
    (call,) = replica.bridge.calls.values()
    await leave_while_claiming(store, replica, first["requestState"])
    await until(lambda: store._records[call.id].status == PARKED)
    assert call.phase is Phase.SUSPENDED and server.nothing_sent()  # nothing delivered

    again = spawn(
        replica.call(call_tool(rid=3, state=first["requestState"], answers=ALICE)), name="r"
    )
    answer = await server.next_sent()
    assert answer["result"]["content"] == {"username": "alice"}
    session.respond({"content": [{"type": "text", "text": "Hello, alice"}]})
    assert (await again)["content"][0]["text"] == "Hello, alice"


async def test_a_forwarding_claim_whose_client_left_is_given_back(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    store = ClaimHeld(clock)
    a, b = two_replicas(clock, server, network, store=store)
    first, session = await ask_username(a, server, clock)
    (call,) = a.bridge.calls.values()
    await leave_while_claiming(store, b, first["requestState"])
    await until(lambda: store._records[call.id].status == PARKED)

    again = spawn(a.call(call_tool(rid=3, state=first["requestState"], answers=ALICE)), name="r")
    assert (await server.next_sent())["result"]["content"] == {"username": "alice"}
    session.respond()
    assert (await again)["content"] == []


async def test_a_client_leaving_while_the_resume_stops_the_expiry_ends_the_call(
    clock: ManualClock, server: ScriptedServer
) -> None:
    """The deadline's expiry runs (it found the round claimed and waits for the resume);
    the resume stops it and waits for it to end, and the client leaves just then."""
    store = ClaimHeld(clock)
    replica = Replica(clock, server, store=store)
    first, session = await ask_username(replica, server, clock)
    (call,) = replica.bridge.calls.values()
    store.holding = True
    retry = spawn(
        replica.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r"
    )
    await store.made.wait()  # the round is claimed; its answer is on its way
    store.holding = False
    clock.advance((call.parked_ms[1] - clock.wall_ms()) / 1000 + 1)  # past the deadline:
    # the expiry starts, finds the round claimed,
    grace = clock.now + lifecycle.CLAIM_GRACE_S
    await clock.armed(grace)  # and waits for the resume
    assert store._records[call.id].status == RESUMING
    store.answer.set()
    await until(lambda: call.phase is Phase.RUNNING)  # resumed; stopping the expiry
    retry.cancel()
    with pytest.raises(asyncio.CancelledError):
        await retry
    released, cancelled = await server.next_sent(), await server.next_sent()
    assert released == {"jsonrpc": "2.0", "id": 7, "result": {"action": "cancel"}}
    assert cancelled["method"] == "notifications/cancelled"
    await until(lambda: call.phase is Phase.CANCELLED and call.id not in replica.bridge.calls)


class ClaimFailing(MemoryStore):
    in_process = False

    async def claim(self, call_id: str, round_: int, claimer: str = "") -> SuspendedCall | None:
        raise StoreError("Redis: unreachable")


async def test_a_claim_the_store_fails_is_the_requests_error_and_no_background_failure(
    clock: ManualClock, server: ScriptedServer
) -> None:
    store = ClaimFailing(clock)
    replica = Replica(clock, server, store=store)
    first, _ = await ask_username(replica, server, clock)
    with capture_logs() as logs:
        with pytest.raises(StoreError):
            await replica.call(call_tool(rid=2, state=first["requestState"], answers=ALICE))
        await asyncio.sleep(0)  # a failed task's callback would have logged by now
    assert [e for e in logs if e["log_level"] == "error"] == []
