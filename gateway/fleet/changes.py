"""List changes across the fleet: what one replica's sessions hear, every replica's listens hear.

A legacy server often tells a list change only to the session whose call made it, so one
replica hears it. That replica hands it to its own listens at once (`Listens.publish`) and
counts it in Redis (`<prefix>fleet:changes`, a hash of `<upstream>|<method>` to a count).
Every replica reads that hash once a heartbeat and hands each change whose count moved
since it last looked (by another replica's hand: its own counts it notes as it makes them)
to its listens, so a change reaches a listen on another replica within about a heartbeat.
A count that went down (Redis lost its data) is taken as a change too, and so, rarely, is
one read just before this replica's own count landed: these are hints, "fetch it again",
and a spare one costs a client a fetch.

The hash is a few fields per upstream, kept without expiry; a count is one integer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from gateway import clock as clocks
from gateway.aio import cancel_and_wait, spawn
from gateway.clock import Clock
from gateway.store.redis_client import RedisClient, from_redis, text

log = structlog.get_logger("gateway.fleet")

#: Told of a change another replica heard: the upstream's name and the method.
Relay = Callable[[str, str], None]


class ChangeFeed:
    def __init__(
        self,
        client: RedisClient,
        *,
        prefix: str,
        interval_s: float,
        clock: Clock,
        relay: Relay,
    ) -> None:
        self.client = client
        self.key = f"{prefix}fleet:changes"
        self.interval_s = interval_s
        self.clock = clock
        self.relay = relay
        self._seen: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None
        self._counting: set[asyncio.Task[None]] = set()
        self._failing = False

    def start(self) -> None:
        self._task = spawn(self._watch(), name="fleet-changes")

    async def close(self) -> None:
        await cancel_and_wait(self._task)
        for task in list(self._counting):
            await cancel_and_wait(task)

    def heard(self, upstream: str, method: str) -> None:
        """This replica heard a list change: count it for the others (in a task)."""
        task = spawn(self._count(f"{upstream}|{method}"), name="fleet-change-count")
        self._counting.add(task)
        task.add_done_callback(self._counting.discard)

    async def _count(self, field: str) -> None:
        try:
            count = int(await self.client.hincrby(self.key, field, 1))
        except Exception as exc:
            if not from_redis(exc):
                raise
            log.warning("fleet_change_not_counted", field=field, error=str(exc))
            return
        self._seen[field] = max(self._seen.get(field, 0), count)

    async def _watch(self) -> None:
        first = True
        while True:
            try:
                counts = await self.client.hgetall(self.key)
            except Exception as exc:
                if not from_redis(exc):
                    raise
                if not self._failing:
                    log.warning("fleet_changes_unread", error=str(exc))
                self._failing = True
            else:
                self._failing = False
                self._take(counts, first)
                first = False
            await clocks.sleep(self.clock, self.interval_s)

    def _take(self, counts: dict[bytes | str, bytes | str], first: bool) -> None:
        """Hand on each change whose count moved since the last look (the first look only
        learns the counts)."""
        for raw_field, raw_count in counts.items():
            field = text(raw_field)
            try:
                count = int(text(raw_count))
            except ValueError:
                continue
            seen, self._seen[field] = self._seen.get(field), count
            upstream, _, method = field.rpartition("|")
            if not first and count != seen and upstream:
                self.relay(upstream, method)
