"""A Redis client that drops the cancellation of a command in flight, as redis-py does
now and then: its send runs under `asyncio.wait_for`, which before Python 3.12 returns
the result of a send that ended as the cancellation arrived. There only in that moment,
here whenever a command is in flight: the worst case, every time."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from gateway.store.redis_client import RedisClient


class DroppingCancellations:
    """Wraps `client.execute_command` (the way of every command but a pipeline's).
    `started[NAME]` is set when a command of that name is sent; `dropped` counts the
    cancellations dropped; `stop()` lets them through again (a test's clean-up)."""

    def __init__(self, client: RedisClient) -> None:
        self.send = client.execute_command
        client.execute_command = self  # type: ignore[method-assign]
        self.started: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.dropped = 0
        self.dropping = True

    def stop(self) -> None:
        self.dropping = False

    async def __call__(self, *args: Any, **options: Any) -> Any:
        self.started[str(args[0]).upper()].set()
        # Not `spawn`: a command's failure is for its caller to see (through the shield),
        # not one of a background task to log; the frame holds the task until it ends.
        command = asyncio.get_running_loop().create_task(self.send(*args, **options))
        while True:
            try:
                return await asyncio.shield(command)
            except asyncio.CancelledError:
                if not self.dropping:
                    command.cancel()
                    raise
                self.dropped += 1
