"""The suspended-call store on Redis, shared by every replica of a fleet.

Keys are hash-tagged by call id (`<prefix>{<call>}:rec`), so one call's keys share a
cluster slot. A record lives until `GRACE_MS` after its deadline (PX). The claim
is one Lua script: it moves a record parked at the given round to resuming and
returns it, or returns nothing; two replicas can never both resume a round.

A record is written in the version every live replica reads (`level`, from the fleet's
heartbeats); any version this release reads is read.

The client and its URLs are `gateway.store.redis_client`'s; every redis-py error
becomes `StoreError` (`ride_out`).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar

import structlog
from redis.asyncio.cluster import RedisCluster

from gateway.clock import Clock, SystemClock
from gateway.protocol import formats
from gateway.protocol.formats import FleetLevel, Kind
from gateway.store import redis_scripts as lua
from gateway.store.base import (
    GRACE_MS,
    PARKED,
    RESUMING,
    Delivery,
    Kept,
    Reply,
    SuspendedCall,
)
from gateway.store.redis_client import (
    RIDE_OUT_S,
    RedisClient,
    close_client,
    from_redis,
    replicas_with,
    ride_out,
    text,
)

T = TypeVar("T")
log = structlog.get_logger("gateway.store")


class RedisStore:
    in_process = False

    def __init__(
        self,
        client: RedisClient,
        *,
        prefix: str = "mrtr:",
        clock: Clock | None = None,
        ride_out_s: float = RIDE_OUT_S,
        replicas_acked: int = 0,
        wait_ms: int = 200,
        level: FleetLevel | None = None,
    ) -> None:
        """`level`: the fleet's format level, which says the version records are written
        in (`gateway.protocol.formats`); None: this release's own."""
        self.level = level or formats.single()
        self.replicas_acked = replicas_acked
        self.wait_ms = wait_ms
        self.client = client
        self.ride_out_s = ride_out_s
        self.clock = clock or SystemClock()
        self.prefix = prefix
        self._claim = client.register_script(lua.CLAIM)
        self._claim_delivering = client.register_script(lua.CLAIM_DELIVERING)
        self._steal = client.register_script(lua.STEAL)
        self._hold = client.register_script(lua.HOLD)
        self._park_held = client.register_script(lua.PARK_HELD)
        self._restore = client.register_script(lua.RESTORE)
        self._take = client.register_script(lua.TAKE)
        self._give_back = client.register_script(lua.GIVE_BACK)
        # A cluster keeps a principal's set and a call's record in different slots,
        # which one script may not touch: there, holding and parking are two trips.
        self._one_trip = not isinstance(client, RedisCluster)

    def _json(self, record: SuspendedCall) -> str:
        """`record` as every live replica reads it."""
        return record.to_json(self.level.version(Kind.RECORD))

    def key(self, call_id: str) -> str:
        return f"{self.prefix}{{{call_id}}}:rec"

    async def _run(self, op: Callable[[], Awaitable[T]]) -> T:
        return await ride_out(self.clock, op, self.ride_out_s)

    async def park(self, record: SuspendedCall, kept: Kept | None = None) -> None:
        ttl_ms = record.deadline_ms + GRACE_MS - self.clock.wall_ms()
        key = self.key(record.call_id)
        if ttl_ms <= 0:  # lapsed already: there is nothing to park
            await self.delete(record.call_id, kept)
            return

        async def write() -> None:
            # One transaction: the outcome's key shares the record's cluster slot.
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.delete(key)
                pipe.hset(
                    key,
                    mapping={
                        "json": self._json(record),
                        "round": record.round,
                        "status": record.status,
                    },
                )
                pipe.pexpire(key, ttl_ms)
                if kept is not None:
                    self._keep(pipe, record.call_id, kept)
                await pipe.execute()

        await self._run(write)

    def outcome_key(self, call_id: str, round_: int) -> str:
        return f"{self.prefix}{{{call_id}}}:out:{round_}"

    def _keep(self, pipe: Any, call_id: str, kept: Kept) -> None:
        pipe.set(self.outcome_key(call_id, kept.round), kept.outcome, px=max(1, kept.ttl_ms))

    async def get(self, call_id: str) -> SuspendedCall | None:
        raw, status, claimer = await self._run(
            lambda: self.client.hmget(self.key(call_id), ["json", "status", "claimer"])
        )
        if raw is None:
            return None
        record = SuspendedCall.from_json(raw)
        if status in (RESUMING, RESUMING.encode()):
            return record.claimed(text(claimer or b""))
        return record

    async def claim(self, call_id: str, round_: int, claimer: str = "") -> SuspendedCall | None:
        # Run twice (a reply lost with its connection), the attempt finds its own claim.
        attempt = secrets.token_hex(8)
        args: list[str | int] = [round_, PARKED, RESUMING, claimer, attempt]
        found = await self._run(lambda: self._claim(keys=[self.key(call_id)], args=args))
        if not found:
            return None
        return SuspendedCall.from_json(found[0]).claimed(claimer, attempt)

    async def claim_delivering(
        self, call_id: str, round_: int, claimer: str, delivery: Delivery
    ) -> tuple[SuspendedCall | None, bool | None]:
        if not self._one_trip:  # a cluster: the inbox lives in another slot
            return await self.claim(call_id, round_, claimer), None
        keys = [self.key(call_id), delivery.heartbeat_key, delivery.inbox_key]
        attempt = secrets.token_hex(8)
        args: list[str | int] = [round_, PARKED, RESUMING, claimer, attempt]
        args += [delivery.payload, delivery.ttl_ms]
        # Run twice (a reply lost with its connection), the attempt finds its own claim and
        # learns whether the first run pushed: nothing is pushed twice, nothing refused.
        found = await self._run(lambda: self._claim_delivering(keys=keys, args=args))
        if not found:
            return None, None
        raw, pushed = found
        return SuspendedCall.from_json(raw).claimed(claimer, attempt), bool(pushed)

    async def steal(
        self, call_id: str, round_: int, dead: str, claimer: str
    ) -> SuspendedCall | None:
        attempt = secrets.token_hex(8)
        args: list[str | int] = [round_, RESUMING, dead, claimer, attempt]
        raw = await self._run(lambda: self._steal(keys=[self.key(call_id)], args=args))
        if not raw:
            return None
        return SuspendedCall.from_json(raw).claimed(claimer, attempt)

    async def delete(self, call_id: str, kept: Kept | None = None) -> None:
        if kept is None:
            await self._run(lambda: self.client.delete(self.key(call_id)))
            return

        async def write() -> None:
            async with self.client.pipeline(transaction=True) as pipe:
                self._keep(pipe, call_id, kept)
                pipe.delete(self.key(call_id))
                await pipe.execute()

        await self._run(write)

    async def forget(
        self, call_id: str, principal: str, kept: Kept | None = None, reply: Reply | None = None
    ) -> bool:
        if not self._one_trip:  # a cluster: the keys live in different slots
            await self.delete(call_id, kept)
            await self.unhold(principal, call_id)
            return False

        async def write() -> None:
            async with self.client.pipeline(transaction=True) as pipe:
                if kept is not None:
                    self._keep(pipe, call_id, kept)
                pipe.delete(self.key(call_id))
                pipe.zrem(self.held_key(principal), call_id)
                if reply is not None:  # pushed twice if the write is: read once (the bus)
                    pipe.rpush(reply.key, reply.payload)
                    pipe.pexpire(reply.key, reply.ttl_ms)
                await pipe.execute()

        await self._run(write)
        return reply is not None

    def held_key(self, principal: str) -> str:
        digest = hashlib.sha256(principal.encode()).hexdigest()[:32]
        return f"{self.prefix}principal:{digest}:parked"

    async def hold(self, principal: str, call_id: str, until_ms: int, cap: int) -> bool:
        now = self.clock.wall_ms()
        ttl = max(1, until_ms - now + GRACE_MS)
        args: list[str | int] = [now, call_id, until_ms, cap, ttl]
        held = await self._run(lambda: self._hold(keys=[self.held_key(principal)], args=args))
        return bool(held)

    async def park_held(
        self, record: SuspendedCall, until_ms: int, cap: int, kept: Kept | None = None
    ) -> bool:
        held = await self._park_held_once(record, until_ms, cap, kept)
        if held:
            await self._replicated(self.key(record.call_id))
        return held

    async def _replicated(self, key: str) -> None:
        """Wait (bounded) until `replicas_acked` replicas have what was written to `key`;
        fewer is logged, not failed: the call is parked either way."""
        if not self.replicas_acked:
            return
        acked = await self._run(
            lambda: replicas_with(self.client, key, self.replicas_acked, self.wait_ms)
        )
        if acked < self.replicas_acked:
            log.warning("store_write_not_replicated", acked=acked, wanted=self.replicas_acked)

    async def _park_held_once(
        self, record: SuspendedCall, until_ms: int, cap: int, kept: Kept | None
    ) -> bool:
        ttl_ms = record.deadline_ms + GRACE_MS - self.clock.wall_ms()
        if not self._one_trip or ttl_ms <= 0:
            if not await self.hold(record.principal, record.call_id, until_ms, cap):
                return False
            await self.park(record, kept)
            return True
        now = self.clock.wall_ms()
        keys = [self.held_key(record.principal), self.key(record.call_id)]
        if kept is not None:
            keys.append(self.outcome_key(record.call_id, kept.round))
        args: list[str | int | bytes] = [
            now,
            record.call_id,
            until_ms,
            cap,
            max(1, until_ms - now + GRACE_MS),
        ]
        args += [self._json(record), record.round, record.status, ttl_ms]
        if kept is not None:
            args += [kept.outcome, max(1, kept.ttl_ms)]
        held = await self._run(lambda: self._park_held(keys=keys, args=args))
        return bool(held)

    async def recall(self, call_id: str, round_: int) -> bytes | None:
        raw = await self._run(lambda: self.client.get(self.outcome_key(call_id, round_)))
        return None if raw is None else raw.encode() if isinstance(raw, str) else bytes(raw)

    async def give_back(self, claim: SuspendedCall, *, untake: bool = False) -> bool:
        args = _claim_args(claim) + [PARKED]
        if untake:  # the json as parked, naming its owner before the takeover
            args.append(self._json(replace(claim, status=PARKED, claimer="")))
        keys = [self.key(claim.call_id)]
        return bool(await self._run(lambda: self._give_back(keys=keys, args=args)))

    async def take(self, record: SuspendedCall, owner: str) -> bool:
        # The json keeps the status it was parked with; the hash field says claimed.
        taken = self._json(replace(record, owner=owner, status=PARKED))
        keys = [self.key(record.call_id)]
        args = _claim_args(record) + [taken]
        return bool(await self._run(lambda: self._take(keys=keys, args=args)))

    async def restore(self, record: SuspendedCall, until_ms: int) -> bool:
        now = self.clock.wall_ms()
        ttl_ms = record.deadline_ms + GRACE_MS - now
        if ttl_ms <= 0:
            return False
        key = self.key(record.call_id)
        if not self._one_trip:  # a cluster: the two keys live in different slots
            if await self._run(lambda: self.client.exists(key)):
                return False
            await self.park(record)
            await self.hold(record.principal, record.call_id, until_ms, cap=1 << 30)
            return True
        keys = [self.held_key(record.principal), key]
        args: list[str | int] = [record.call_id, until_ms, max(1, until_ms - now + GRACE_MS)]
        args += [self._json(record), record.round, record.status, ttl_ms]
        return bool(await self._run(lambda: self._restore(keys=keys, args=args)))

    async def unhold(self, principal: str, call_id: str) -> None:
        await self._run(lambda: self.client.zrem(self.held_key(principal), call_id))

    async def ping(self) -> bool:
        try:
            return bool(await self.client.ping())
        except Exception as exc:
            if not from_redis(exc):
                raise
            return False

    async def close(self) -> None:
        """Close the client; bounded, whatever state its connections are in."""
        await close_client(self.client)


def _claim_args(claim: SuspendedCall) -> list[str | int]:
    """The arguments by which a script knows a claim (`_WHILE_CLAIMED`)."""
    return [claim.round, RESUMING, claim.claimer, claim.attempt]
