"""Cross-replica plumbing on Redis: who is alive, and how a retry reaches a call's owner.

Each replica writes `<prefix>replica:<id>` every `heartbeat_s` with a TTL of two
heartbeats, so a replica that dies is known to be gone within about two heartbeats.
Each replica reads its own inbox list `<prefix>inbox:<id>` (BLPOP); a retry that lands
on another replica is pushed there, and the owner answers on a per-request reply list
that the receiving replica reads. Every wait is bounded; reply lists expire.

This module moves messages; what they mean is `gateway.bridge`'s business.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Coroutine
from typing import Any

import structlog
from redis.exceptions import RedisError

from gateway.aio import cancel_and_wait, spawn
from gateway.errors import StoreError
from gateway.store.redis import RedisClient

log = structlog.get_logger("gateway.fleet")

Handler = Callable[[dict[str, Any]], Coroutine[Any, Any, None]]
_REPLY_TTL_MS = 120_000
_POLL_S = 1.0


class Fleet:
    def __init__(
        self, client: RedisClient, *, prefix: str, replica_id: str, heartbeat_s: float
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.replica_id = replica_id
        self.heartbeat_s = heartbeat_s
        self._tasks: list[asyncio.Task[None]] = []
        self.healthy = False

    def replica_key(self, replica_id: str) -> str:
        return f"{self.prefix}replica:{replica_id}"

    def inbox_key(self, replica_id: str) -> str:
        return f"{self.prefix}inbox:{replica_id}"

    def new_reply_key(self) -> str:
        return f"{self.prefix}reply:{self.replica_id}:{time.monotonic_ns()}"

    def start(self, handler: Handler) -> None:
        self._tasks = [
            spawn(self._heartbeat(), name="fleet-heartbeat"),
            spawn(self._inbox(handler), name="fleet-inbox"),
        ]

    async def close(self) -> None:
        for task in self._tasks:
            await cancel_and_wait(task)
        try:
            await self.client.delete(self.replica_key(self.replica_id))
        except (RedisError, OSError):
            pass

    async def _heartbeat(self) -> None:
        ttl_ms = int(self.heartbeat_s * 2000)
        while True:
            try:
                await self.client.set(
                    self.replica_key(self.replica_id), str(time.time()), px=ttl_ms
                )
                if not self.healthy:
                    log.info("fleet_joined", replica=self.replica_id)
                self.healthy = True
            except (RedisError, OSError) as exc:
                if self.healthy:
                    log.warning("fleet_heartbeat_failed", error=str(exc))
                self.healthy = False
            await asyncio.sleep(self.heartbeat_s)

    async def _inbox(self, handler: Handler) -> None:
        key = self.inbox_key(self.replica_id)
        while True:
            try:
                popped = await self.client.blpop([key], timeout=_POLL_S)
            except (RedisError, OSError) as exc:
                log.warning("fleet_inbox_failed", error=str(exc))
                await asyncio.sleep(_POLL_S)
                continue
            if popped is None:
                continue
            try:
                message = json.loads(popped[1])
            except ValueError:
                log.warning("fleet_inbox_bad_message")
                continue
            spawn(handler(message), name=f"fleet-forwarded-{message.get('op')}")

    async def alive(self, replica_id: str) -> bool:
        """Whether `replica_id` is alive: its heartbeat key exists now, or reappears
        within one and a half heartbeats (a restarted Redis has lost every key until the
        replicas beat again, and a live owner must not be taken for dead).

        Raises:
            StoreError
        """
        loop = asyncio.get_running_loop()
        patience = loop.time() + 1.5 * self.heartbeat_s
        try:
            while not await self.client.exists(self.replica_key(replica_id)):
                if loop.time() > patience:
                    return False
                await asyncio.sleep(self.heartbeat_s / 4)
            return True
        except (RedisError, OSError) as exc:
            raise StoreError(f"Redis: {exc}") from exc

    async def send(self, replica_id: str, message: dict[str, Any]) -> None:
        """Push `message` into a replica's inbox. Raises: StoreError."""
        await self._push(self.inbox_key(replica_id), message)

    async def reply(self, key: str, message: dict[str, Any]) -> None:
        """Push one reply event for a forwarded request. Raises: StoreError."""
        await self._push(key, message)

    async def _push(self, key: str, message: dict[str, Any]) -> None:
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.rpush(key, json.dumps(message, separators=(",", ":")))
                pipe.pexpire(key, _REPLY_TTL_MS)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            raise StoreError(f"Redis: {exc}") from exc

    async def receive(self, key: str, timeout_s: float = _POLL_S) -> dict[str, Any] | None:
        """The next reply event on `key`, or None after `timeout_s`. Raises: StoreError."""
        try:
            popped = await self.client.blpop([key], timeout=timeout_s)
        except (RedisError, OSError) as exc:
            raise StoreError(f"Redis: {exc}") from exc
        if popped is None:
            return None
        message: dict[str, Any] = json.loads(popped[1])
        return message
