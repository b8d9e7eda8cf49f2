"""On a fleet, a call that parks takes its session off the list of those a survivor may
end (`gateway.fleet.ledger`), before its client is answered; if Redis cannot be told,
the call does not park. Transcripts on a manual clock."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.aio import spawn
from gateway.errors import StoreError
from tests.fakes.clock import ManualClock
from tests.fakes.harness import WINDOW, Replica, call_tool
from tests.fakes.upstream import ScriptedServer, ScriptedSession


async def asking(
    replica: Replica, server: ScriptedServer, clock: ManualClock
) -> tuple[asyncio.Task[dict[str, Any]], ScriptedSession]:
    """`greet` started, its one question asked and its window closed: the call parks."""
    pending = spawn(replica.call(call_tool()), name="first")
    session = await server.next_call()
    session.elicit(7)
    await clock.armed(clock.now + WINDOW)
    clock.advance(WINDOW)
    return pending, session


async def test_a_parking_call_takes_its_session_off_the_ledger_before_its_client_is_answered(
    clock: ManualClock, server: ScriptedServer
) -> None:
    withdrawn: list[tuple[str, str | None]] = []
    answered: list[bool] = []

    async def withdraw(upstream: str, session_id: str | None) -> None:
        withdrawn.append((upstream, session_id))
        answered.append(pending.done())

    replica = Replica(clock, server, withdraw=withdraw)
    pending, session = await asking(replica, server, clock)
    first = await pending
    assert first["resultType"] == "input_required" and replica.bridge.parked == 1
    assert withdrawn == [("up", session.id)] and answered == [False]


async def test_a_call_does_not_park_when_the_ledger_cannot_be_told(
    clock: ManualClock, server: ScriptedServer
) -> None:
    async def withdraw(upstream: str, session_id: str | None) -> None:
        raise StoreError("Redis unreachable for 3 s")

    replica = Replica(clock, server, withdraw=withdraw)
    pending, _ = await asking(replica, server, clock)
    with pytest.raises(StoreError):
        await pending
    assert replica.bridge.parked == 0 and len(replica.store) == 0  # type: ignore[arg-type]
    released = await server.next_sent()  # the call is given up upstream, not left running:
    assert released["id"] == 7 and "method" not in released  # its question released,
    cancelled = await server.next_sent()
    assert cancelled["method"] == "notifications/cancelled"  # then the call cancelled
