"""The `max_sessions` slots of one upstream's pool: a session open, opening or closing
takes one; a caller finding none free waits a bounded time for one.

While it waits, the caller may be handed a session instead (one given back idle for it,
`instead`), and idle sessions are closed to make room (`make_room`), both the pool's to
say. A slot freed, or a session given back idle, wakes the callers waiting (`wake`, in a
task of its own and only when someone waits: the common release costs no task).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from gateway.aio import spawn
from gateway.errors import SessionsBusy
from gateway.upstream.port import PooledSession


class Slots:
    def __init__(self, name: str, total: int, timeout_s: float) -> None:
        self.name = name  # the upstream's, for errors
        self.total = total
        self.timeout_s = timeout_s
        self.taken = 0
        self._freed = asyncio.Condition()
        self.waiting = 0  # callers inside `_freed` (waiting for a slot or an idle session)

    @property
    def full(self) -> bool:
        return self.taken >= self.total

    async def take(
        self,
        instead: Callable[[], PooledSession | None] = lambda: None,
        make_room: Callable[[], bool] = lambda: False,
    ) -> PooledSession | None:
        """Take a slot (None), or the session `instead` finds while waiting for one.

        Raises:
            SessionsBusy: every slot stayed in use for `timeout_s`.
        """
        try:
            async with asyncio.timeout(self.timeout_s):
                async with self._freed:
                    self.waiting += 1  # under the lock: a release now notifies
                    try:
                        while self.full:
                            if session := instead():
                                return session
                            if not make_room():
                                await self._freed.wait()
                    finally:
                        self.waiting -= 1
        except TimeoutError:
            raise SessionsBusy(
                f"all {self.total} upstream sessions of {self.name!r} are busy"
            ) from None
        self.taken += 1
        return None

    def give_back(self) -> None:
        """A slot freed (a session closed, or one that failed to open)."""
        self.taken -= 1
        self.wake()

    def wake(self) -> None:
        """`notify` in a task of its own, only when someone waits."""
        if self.waiting:
            spawn(self.notify(), name=f"pool-freed-{self.name}", detached=True)

    async def notify(self) -> None:
        """Wake those waiting for a slot: one was freed, or a session went back idle."""
        if not self.waiting:
            return
        async with self._freed:
            self._freed.notify_all()
