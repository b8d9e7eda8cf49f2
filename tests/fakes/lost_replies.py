"""A Redis script whose first run succeeds in Redis but whose reply is lost with its
connection, so that the store's ride-out runs it again."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError


class LosingFirstReply:
    """Wraps a registered script; `meanwhile`, if given, runs between the two runs (what
    another request does while the reply is on its way back)."""

    def __init__(
        self, script: Any, meanwhile: Callable[[], Awaitable[object]] | None = None
    ) -> None:
        self.script = script
        self.meanwhile = meanwhile
        self.runs = 0

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.runs += 1
        result = await self.script(*args, **kwargs)
        if self.runs == 1:
            if self.meanwhile is not None:
                await self.meanwhile()
            raise RedisConnectionError("the reply was lost with the connection")
        return result
