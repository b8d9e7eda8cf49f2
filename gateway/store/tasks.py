"""Where tasks' records are kept: in this process (one replica) or in Redis (a fleet).

A record is an opaque sealed string (`gateway.tasks` seals the whole record, results
included, with the `requestState` keys), written whole by whoever changes the task and
kept until the task's TTL runs out: past it, the task is unknown on every replica.
Nothing here reads a record, so nothing here can leak one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

import structlog

from gateway.clock import Clock, SystemClock
from gateway.store.redis_client import RIDE_OUT_S, RedisClient, replicas_with, ride_out, text

log = structlog.get_logger("gateway.store")

T = TypeVar("T")


class TaskStore(Protocol):
    async def put(self, task_id: str, sealed: str, expires_ms: int) -> None:
        """Write the task's record, kept until `expires_ms` (wall clock).

        Raises: StoreError.
        """
        ...

    async def get(self, task_id: str) -> str | None:
        """The task's record, or None (never written, or expired). Raises: StoreError."""
        ...

    async def delete(self, task_id: str) -> None:
        """Raises: StoreError."""
        ...


class MemoryTaskStore:
    """A dict in this process; a record past its expiry is dropped when next looked up."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or SystemClock()
        self._records: dict[str, tuple[str, int]] = {}

    async def put(self, task_id: str, sealed: str, expires_ms: int) -> None:
        self._drop_expired()
        self._records[task_id] = (sealed, expires_ms)

    async def get(self, task_id: str) -> str | None:
        kept = self._records.get(task_id)
        if kept is None:
            return None
        if kept[1] <= self.clock.wall_ms():
            del self._records[task_id]
            return None
        return kept[0]

    async def delete(self, task_id: str) -> None:
        self._records.pop(task_id, None)

    def _drop_expired(self) -> None:
        now = self.clock.wall_ms()
        for task_id in [t for t, (_, until) in self._records.items() if until <= now]:
            del self._records[task_id]


class RedisTaskStore:
    """One string key per task (`<prefix>task:{<id>}`), expiring with the task (PX). With
    `replicas_acked`, a write waits (bounded by `wait_ms`) until that many Redis replicas
    have it, as a parked call's does: a failover then keeps the task."""

    def __init__(
        self,
        client: RedisClient,
        *,
        prefix: str = "mrtr:",
        clock: Clock | None = None,
        ride_out_s: float = RIDE_OUT_S,
        replicas_acked: int = 0,
        wait_ms: int = 200,
    ) -> None:
        self.client = client
        self.replicas_acked = replicas_acked
        self.wait_ms = wait_ms
        self.prefix = prefix
        self.clock = clock or SystemClock()
        self.ride_out_s = ride_out_s

    def key(self, task_id: str) -> str:
        return f"{self.prefix}task:{{{task_id}}}"

    async def _run(self, op: Callable[[], Awaitable[T]]) -> T:
        return await ride_out(self.clock, op, self.ride_out_s)

    async def put(self, task_id: str, sealed: str, expires_ms: int) -> None:
        ttl_ms = expires_ms - self.clock.wall_ms()
        if ttl_ms <= 0:
            await self.delete(task_id)
            return
        key = self.key(task_id)
        await self._run(lambda: self.client.set(key, sealed, px=ttl_ms))
        if self.replicas_acked:
            acked = await self._run(
                lambda: replicas_with(self.client, key, self.replicas_acked, self.wait_ms)
            )
            if acked < self.replicas_acked:
                log.warning("task_write_not_replicated", acked=acked, wanted=self.replicas_acked)

    async def get(self, task_id: str) -> str | None:
        raw = await self._run(lambda: self.client.get(self.key(task_id)))
        return None if raw is None else text(raw)

    async def delete(self, task_id: str) -> None:
        await self._run(lambda: self.client.delete(self.key(task_id)))
