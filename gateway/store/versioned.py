"""What the stores of small versioned data in Redis share (the marks of approvals and of
ended sessions, the tools' pins): where their keys begin, which version of their kind
they write (the fleet's, `gateway.protocol.formats`), their clock, and each operation
riding out a moment Redis cannot be reached (`ride_out`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import ClassVar, TypeVar

from gateway.clock import Clock, SystemClock
from gateway.protocol import formats
from gateway.protocol.formats import Kind
from gateway.store.redis_client import RIDE_OUT_S, RedisClient, ride_out

T = TypeVar("T")


class VersionedOnRedis:
    """A store of one `kind` of the fleet's data in Redis."""

    kind: ClassVar[Kind]

    def __init__(
        self,
        client: RedisClient,
        *,
        prefix: str = "mrtr:",
        version: Callable[[], int] | None = None,
        clock: Clock | None = None,
        ride_out_s: float = RIDE_OUT_S,
    ) -> None:
        """`version`: the version of `kind` to write now (the fleet's level's); this
        release's own when not given."""
        self.client = client
        self.prefix = prefix
        self.version = version or (lambda: formats.written(self.kind, formats.LEVEL))
        self.clock = clock or SystemClock()
        self.ride_out_s = ride_out_s

    async def _run(self, op: Callable[[], Awaitable[T]]) -> T:
        return await ride_out(self.clock, op, self.ride_out_s)
