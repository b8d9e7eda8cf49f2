"""`clock.deadline` means the same on the loop's clock (where it is `asyncio.timeout_at`)
and on a test's manual clock (a timer of its own)."""

from __future__ import annotations

import asyncio

import pytest

from gateway import clock as clocks
from gateway.aio import spawn
from gateway.clock import Bound, Clock, SystemClock
from tests.fakes.clock import SETTLE_TURNS, START_WALL_MS, ManualClock


@pytest.fixture(params=["system", "manual"])
def clock(request: pytest.FixtureRequest) -> Clock:
    return SystemClock() if request.param == "system" else ManualClock()


async def test_a_body_that_does_not_wait_finishes_even_past_its_deadline(clock: Clock) -> None:
    async with clocks.deadline(clock, clock.monotonic() - 1):
        done = True
    assert done


async def test_a_body_waiting_past_its_deadline_times_out(clock: Clock) -> None:
    never = asyncio.get_running_loop().create_future()

    async def wait_past() -> None:
        async with clocks.deadline(clock, clock.monotonic() - 1):
            await never

    waiting = spawn(wait_past(), name="waits-past-its-deadline")
    await asyncio.wait({waiting}, timeout=5)  # a bound on the test, not what it checks
    assert waiting.done(), "the deadline did not interrupt the wait"
    assert isinstance(waiting.exception(), TimeoutError)


async def test_no_deadline_lets_the_body_wait_for_what_it_awaits(clock: Clock) -> None:
    ready = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(ready.set_result, "answer")
    async with clocks.deadline(clock, None):
        assert await ready == "answer"
    async with clocks.timeout(clock, None):
        pass


def test_the_backoff_doubles_from_its_base_after_each_failure_in_a_row_up_to_its_cap() -> None:
    backoff = clocks.Backoff(0.05, 0.5)
    assert [backoff.delay(n) for n in (1, 2, 3, 4, 5, 6)] == [0.05, 0.1, 0.2, 0.4, 0.5, 0.5]
    assert backoff.delay(0) == 0.05  # no failure yet counts as the first
    assert backoff.delay(100_000) == 0.5  # a long outage neither overflows nor passes the cap
    assert clocks.Backoff(45.0, 45.0).delay(3) == 45.0


async def test_a_deadline_moved_now_interrupts_the_body_and_one_moved_away_does_not(
    clock: Clock,
) -> None:
    never = asyncio.get_running_loop().create_future()
    moved: list[Bound] = []

    async def wait(first: float | None) -> None:
        async with clocks.deadline(clock, first) as bound:
            moved.append(bound)
            await never

    waiting = spawn(wait(None), name="waits-for-ever")
    await asyncio.sleep(0)
    (bound,) = moved
    bound.reschedule(clock.monotonic() + 3600)  # later: nothing happens now
    for _ in range(SETTLE_TURNS):
        await asyncio.sleep(0)
    assert not waiting.done() and not bound.expired()
    bound.reschedule(clock.monotonic())  # now: the body stops, as `asyncio.Timeout` does
    await asyncio.wait({waiting}, timeout=5)
    assert isinstance(waiting.exception(), TimeoutError) and bound.expired()


async def test_a_deadline_on_the_manual_clock_is_reached_only_as_time_is_moved() -> None:
    clock = ManualClock()
    never = asyncio.get_running_loop().create_future()

    async def wait() -> None:
        async with clocks.deadline(clock, 10.0) as bound:
            bound.reschedule(20.0)  # the body moves it: the first one no longer holds
            await never

    waiting = spawn(wait(), name="waits-past-its-deadline")
    await clock.armed(20.0)
    assert clock.pending() == [20.0]
    clock.advance(19.9)
    await asyncio.sleep(0)
    assert not waiting.done()
    clock.advance(0.1)
    await asyncio.wait({waiting}, timeout=5)
    assert isinstance(waiting.exception(), TimeoutError)


def test_the_manual_clocks_wall_time_moves_with_it_in_seconds_and_milliseconds() -> None:
    clock = ManualClock()
    clock.advance(1.5)
    assert round(clock.wall_s() * 1000) == clock.wall_ms() == START_WALL_MS + 1500
    assert abs(SystemClock().wall_s() * 1000 - SystemClock().wall_ms()) < 1000
