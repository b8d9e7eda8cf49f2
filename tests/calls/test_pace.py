"""Coalescing at the tool's pace: the window is waited out until a tool has shown it asks
one question at a time, then a round closes as soon as nothing more is buffered; a late
sibling brings the window back. Pure `Pace` rules, then transcripts on a manual clock."""

from __future__ import annotations

from gateway.aio import spawn
from gateway.calls.pace import LEARN_AFTER, Pace
from tests.fakes.clock import ManualClock
from tests.fakes.harness import ALICE, WINDOW, Replica, ask_username, call_tool
from tests.fakes.upstream import ScriptedServer

GREET = ("legacy", "tools/call", "greet")


def test_a_target_waits_the_window_until_it_has_shown_lone_questions_enough_times() -> None:
    pace = Pace(0.01, learn_after=3)
    for _ in range(2):
        assert pace.grace_s(GREET) == 0.01
        pace.round_closed(GREET, 1)
    pace.round_closed(GREET, 1)
    assert pace.solitary(GREET) and pace.grace_s(GREET) == 0.0
    pace.round_closed(GREET, 1)
    assert pace.solitary(GREET)


def test_siblings_in_a_round_or_late_make_a_target_wait_again() -> None:
    pace = Pace(0.01, learn_after=2)
    pace.round_closed(GREET, 1)
    pace.round_closed(GREET, 2)  # a gather: counting starts over
    pace.round_closed(GREET, 1)
    assert not pace.solitary(GREET)
    pace.round_closed(GREET, 1)
    assert pace.solitary(GREET)
    pace.sibling_late(GREET)
    assert pace.grace_s(GREET) == 0.01


def test_targets_are_learned_apart_and_memory_is_bounded() -> None:
    pace = Pace(0.01, learn_after=1, max_targets=2)
    other = ("legacy", "tools/call", "other")
    pace.round_closed(GREET, 1)
    pace.round_closed(other, 1)
    assert pace.solitary(GREET) and pace.solitary(other)
    pace.round_closed(("legacy", "tools/call", "third"), 1)  # the least recent is forgotten
    assert not pace.solitary(GREET) and pace.solitary(other)


async def learn_greet(replica: Replica, server: ScriptedServer, clock: ManualClock) -> None:
    """Enough rounds of one question each, every one after the whole window."""
    for _ in range(LEARN_AFTER):
        first, session = await ask_username(replica, server, clock)
        retry = spawn(
            replica.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="retry"
        )
        await server.next_sent()
        session.respond()
        assert (await retry)["resultType"] == "complete"


async def test_a_solitary_tools_round_closes_without_waiting_the_window(
    replica: Replica, server: ScriptedServer, clock: ManualClock
) -> None:
    await learn_greet(replica, server, clock)
    started = clock.now
    pending = spawn(replica.call(call_tool()), name="call")
    session = await server.next_call()
    session.elicit(7)
    first = await pending  # no clock advance: the round did not wait
    assert list(first["inputRequests"]) == ["elicit.username"] and clock.now == started


async def test_a_solitary_tool_still_gets_siblings_that_are_already_buffered_in_one_round(
    replica: Replica, server: ScriptedServer, clock: ManualClock
) -> None:
    await learn_greet(replica, server, clock)
    pending = spawn(replica.call(call_tool()), name="call")
    session = await server.next_call()
    session.elicit(7)
    session.elicit(8, "color")  # back to back: in the inbox before the round closes
    first = await pending
    assert sorted(first["inputRequests"]) == ["elicit.color", "elicit.username"]


async def test_a_late_sibling_is_asked_in_the_next_round_and_the_tool_waits_again(
    replica: Replica, server: ScriptedServer, clock: ManualClock
) -> None:
    await learn_greet(replica, server, clock)
    pending = spawn(replica.call(call_tool()), name="call")
    session = await server.next_call()
    session.elicit(7)
    first = await pending
    session.elicit(8, "color")  # it came after the round closed: nothing is lost
    retry = spawn(
        replica.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="retry"
    )
    assert (await server.next_sent())["id"] == 7
    await clock.armed(clock.now + WINDOW)  # the tool is no longer solitary: it waits
    clock.advance(WINDOW)
    second = await retry
    assert list(second["inputRequests"]) == ["elicit.color"]
    assert not replica.bridge.runner.pace.solitary(GREET)
