"""Where tasks' records are kept: in this process (one replica) or in Redis (a fleet).

A record is an opaque sealed string (`gateway.tasks` seals the whole record, results
included, with the `requestState` keys), written whole by whoever changes the task and
kept until the task's TTL runs out: past it, the task is unknown on every replica.
Nothing here reads a record, so nothing here can leak one. Beside it the store keeps
two facts in the clear: whether the task has ended, and which replica owns it (runs
its call). Only the owner writes the record, and a record written as ended is never
written again (`put` refuses both others); another replica becomes the owner with
`take`, atomically, only from the owner it names (one that died): to end the task for
that death, or to carry its call on. An owner only cut off that comes back cannot write
over what was decided meanwhile.
"""

from __future__ import annotations

import heapq
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

import structlog

from gateway.clock import Clock, SystemClock
from gateway.store.redis_client import RIDE_OUT_S, RedisClient, replicas_with, ride_out, text

log = structlog.get_logger("gateway.store")

T = TypeVar("T")


class TaskStore(Protocol):
    async def put(
        self, task_id: str, sealed: str, expires_ms: int, *, final: bool, owner: str
    ) -> bool:
        """Write the task's record (`final`: the task has ended) as its `owner`, kept until
        `expires_ms` (wall clock); False, and nothing written, when the record is final
        already or another replica owns it now.

        Raises: StoreError.
        """
        ...

    async def take(self, task_id: str, dead: str, owner: str) -> bool:
        """Make `owner` the task's owner if `dead` still is and the task has not ended;
        False otherwise (another replica took it first, or it ended).

        Raises: StoreError.
        """
        ...

    async def get(self, task_id: str) -> str | None:
        """The task's record, or None (never written, or expired). Raises: StoreError."""
        ...


class MemoryTaskStore:
    """A dict in this process; records past their expiry are dropped as time passes."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or SystemClock()
        self._records: dict[str, _Kept] = {}
        self._expiries: list[tuple[int, str]] = []  # a heap: the next to expire first

    async def put(
        self, task_id: str, sealed: str, expires_ms: int, *, final: bool, owner: str
    ) -> bool:
        self._drop_expired()
        kept = self._records.get(task_id)
        if kept is not None and (kept.final or kept.owner != owner):
            return False
        if expires_ms <= self.clock.wall_ms():
            self._records.pop(task_id, None)
            return True
        if kept is None or kept.expires_ms != expires_ms:
            heapq.heappush(self._expiries, (expires_ms, task_id))
        self._records[task_id] = _Kept(sealed, expires_ms, final, owner)
        return True

    async def take(self, task_id: str, dead: str, owner: str) -> bool:
        self._drop_expired()
        kept = self._records.get(task_id)
        if kept is None or kept.final or kept.owner != dead:
            return False
        kept.owner = owner
        return True

    async def get(self, task_id: str) -> str | None:
        self._drop_expired()
        kept = self._records.get(task_id)
        return None if kept is None else kept.sealed

    def _drop_expired(self) -> None:
        now = self.clock.wall_ms()
        while self._expiries and self._expiries[0][0] <= now:
            expires_ms, task_id = heapq.heappop(self._expiries)
            kept = self._records.get(task_id)
            if kept is not None and kept.expires_ms == expires_ms:
                del self._records[task_id]


@dataclass(slots=True)
class _Kept:
    sealed: str
    expires_ms: int
    final: bool
    owner: str


#: Write a record as its owner, unless it is final already or another replica owns it:
#: KEYS[1] the task's hash; ARGV the sealed record, 1 or 0 (final), its TTL in ms, the
#: writer. 1 when written.
PUT = """
if redis.call('HGET', KEYS[1], 'final') == '1' then return 0 end
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner and owner ~= ARGV[4] then return 0 end
redis.call('HSET', KEYS[1], 'rec', ARGV[1], 'final', ARGV[2], 'owner', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""

#: Take a task over from the owner it names (ARGV[1]) for ARGV[2], unless it ended.
TAKE = """
if redis.call('HGET', KEYS[1], 'final') == '1' then return 0 end
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'owner', ARGV[2])
return 1
"""


class RedisTaskStore:
    """One hash per task (`<prefix>task:{<id>}`: the sealed record, whether it is final),
    expiring with the task. With `replicas_acked`, a write waits (bounded by `wait_ms`)
    until that many Redis replicas have it, as a parked call's does: a failover then
    keeps the task."""

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
        self._put = client.register_script(PUT)
        self._take = client.register_script(TAKE)

    def key(self, task_id: str) -> str:
        return f"{self.prefix}task:{{{task_id}}}"

    async def _run(self, op: Callable[[], Awaitable[T]]) -> T:
        return await ride_out(self.clock, op, self.ride_out_s)

    async def put(
        self, task_id: str, sealed: str, expires_ms: int, *, final: bool, owner: str
    ) -> bool:
        key = self.key(task_id)
        ttl_ms = expires_ms - self.clock.wall_ms()
        if ttl_ms <= 0:
            await self._run(lambda: self.client.delete(key))
            return True
        args: list[str | int] = [sealed, int(final), ttl_ms, owner]
        written = await self._run(lambda: self._put(keys=[key], args=args))
        if written and self.replicas_acked:
            acked = await self._run(
                lambda: replicas_with(self.client, key, self.replicas_acked, self.wait_ms)
            )
            if acked < self.replicas_acked:
                log.warning("task_write_not_replicated", acked=acked, wanted=self.replicas_acked)
        return bool(written)

    async def take(self, task_id: str, dead: str, owner: str) -> bool:
        key = self.key(task_id)
        return bool(await self._run(lambda: self._take(keys=[key], args=[dead, owner])))

    async def get(self, task_id: str) -> str | None:
        raw = await self._run(lambda: self.client.hget(self.key(task_id), "rec"))
        return None if raw is None else text(raw)
