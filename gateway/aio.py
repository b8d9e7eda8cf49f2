"""Async hygiene: every background task is named and strongly referenced.

A bare `asyncio.create_task` can be garbage-collected mid-flight and hides its
exception; `spawn` keeps the task in a set until it ends and logs a crash.
Ruff's TID251 bans the bare call elsewhere.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from typing import Any, TypeVar

import structlog

T = TypeVar("T")

_tasks: set[asyncio.Task[Any]] = set()
_log = structlog.get_logger("gateway.aio")


def _done(task: asyncio.Task[Any]) -> None:
    _tasks.discard(task)
    if not task.cancelled() and task.exception() is not None:
        _log.error("background_task_failed", task=task.get_name(), exc_info=task.exception())


def spawn(coro: Coroutine[Any, Any, T], *, name: str, detached: bool = False) -> asyncio.Task[T]:
    """Run `coro` in a named, referenced task. `detached`: in an empty context of its own
    rather than a copy of the caller's, for what outlives the request that happened to
    start it (a session's streams, the pool's openers): it must not log as that request
    (`request_id`, `call_id` bound by structlog) nor be traced under its span."""
    context = contextvars.Context() if detached else None
    task = asyncio.get_running_loop().create_task(coro, name=name, context=context)
    _tasks.add(task)
    task.add_done_callback(_done)
    return task


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel `task` and wait for it to finish, swallowing its cancellation."""
    if task is None or task.done():
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
    except Exception:  # noqa: BLE001 - it was being cancelled; its failure is logged by _done
        pass


class Once:
    """Something that happens once (a call's end), for any number to wait on.

    `asyncio.Event`'s interface, lighter: a future only once someone waits, where an
    Event keeps a deque from the start. Each of thousands of parked calls holds one.
    """

    __slots__ = ("_happened", "_future")

    def __init__(self) -> None:
        self._happened = False
        self._future: asyncio.Future[None] | None = None

    def set(self) -> None:
        self._happened = True
        if self._future is not None and not self._future.done():
            self._future.set_result(None)

    def is_set(self) -> bool:
        return self._happened

    async def wait(self) -> None:
        if self._happened:
            return
        if self._future is None:
            self._future = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._future)  # a waiter cancelled does not cancel the others
