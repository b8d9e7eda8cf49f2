"""`Once`: set once, awaited by many, a waiter's cancellation touching nobody else."""

from __future__ import annotations

import asyncio
import contextvars

from gateway.aio import Once, cancel_and_wait, spawn


async def test_every_waiter_wakes_when_it_happens_and_later_waits_return_at_once() -> None:
    ended = Once()
    waiters = [spawn(ended.wait(), name=f"waiter-{i}") for i in range(3)]
    await asyncio.sleep(0)
    assert not ended.is_set() and not any(w.done() for w in waiters)
    ended.set()
    async with asyncio.timeout(5):
        await asyncio.gather(*waiters)
        await ended.wait()
    assert ended.is_set()


async def test_a_waiter_cancelled_leaves_the_others_waiting_and_setting_still_works() -> None:
    ended = Once()
    leaver = spawn(ended.wait(), name="leaver")
    stayer = spawn(ended.wait(), name="stayer")
    await asyncio.sleep(0)
    await cancel_and_wait(leaver)
    assert not stayer.done()
    ended.set()
    ended.set()  # twice is harmless
    async with asyncio.timeout(5):
        await stayer


async def test_a_detached_task_runs_in_an_empty_context_and_a_plain_one_in_a_copy() -> None:
    """What outlives a request (a session's streams) must not carry the request's
    context (its log fields, its trace span)."""
    bound: contextvars.ContextVar[str] = contextvars.ContextVar("bound", default="none")
    bound.set("the request")

    async def seen() -> str:
        return bound.get()

    assert await spawn(seen(), name="plain") == "the request"
    assert await spawn(seen(), name="detached", detached=True) == "none"
