"""`clock.deadline` means the same on the loop's clock (where it is `asyncio.timeout_at`)
and on a test's manual clock (a timer of its own)."""

from __future__ import annotations

import asyncio

import pytest

from gateway import clock as clocks
from gateway.aio import spawn
from gateway.clock import Clock, SystemClock
from tests.fakes.clock import ManualClock


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
