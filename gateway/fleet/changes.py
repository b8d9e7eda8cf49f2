"""List changes across the fleet: what one replica's sessions hear, every replica's listens hear.

A legacy server often tells a list change only to the session whose call made it, so one
replica hears it. That replica hands it to its own listens at once (`Listens.publish`) and
counts it in Redis (`<prefix>fleet:changes`, a hash of `<upstream>|<method>` to a count).
Every replica reads that hash once a heartbeat and hands each change whose count moved
since it last looked (by another replica's hand: its own counts it notes as it makes them,
when nobody else counted in between) to its listens, so a change reaches a listen on
another replica within about a heartbeat. A count that went down (Redis lost its data) is
taken as a change too, and so is a count another replica made while this one counted:
these are hints, "fetch it again", and a spare one costs a client a fetch. Only upstreams
every replica reaches alike are counted: a stdio server is each replica's own.

Counts are made by one writer at a time: the changes heard while a count is on its way
are added up per field and counted in one `HINCRBY` each, so a burst of changes costs
Redis a few commands, not one per change. A count Redis refused (it is out of reach) is
kept and made again once the hash can be read again, so the others hear of the change
late rather than never.

The hash is a few fields per upstream, kept without expiry; a count is one integer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from gateway import clock as clocks
from gateway.aio import spawn
from gateway.clock import Clock
from gateway.store.redis_client import RedisClient, from_redis, stop_if_cancelled, stop_loops, text

log = structlog.get_logger("gateway.fleet")

#: Told of a change another replica heard: the upstream's name and the method.
RelayChange = Callable[[str, str], None]


class ChangeFeed:
    def __init__(
        self,
        client: RedisClient,
        *,
        prefix: str,
        interval_s: float,
        clock: Clock,
        upstreams: frozenset[str],
    ) -> None:
        """`upstreams`: those every replica reaches alike (not stdio: each replica's
        servers are its own), whose changes are worth telling the others."""
        self.client = client
        self.key = f"{prefix}fleet:changes"
        self.interval_s = interval_s
        self.clock = clock
        self.upstreams = upstreams
        self.looked = asyncio.Event()  # the counts were read once
        self._seen: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None
        self._pending: dict[str, int] = {}  # field -> changes heard, not yet counted
        self._counting: asyncio.Task[None] | None = None  # the one writer, while it runs
        self._closed = False
        self._stalled = False  # Redis refused a count: the rest wait for a look that works
        self._unread = self._uncounted = False  # logged once until it works again

    def start(self, relay: RelayChange) -> None:
        """Read the counts once a heartbeat: each change another replica heard, to `relay`
        (this replica's listens)."""
        self._task = spawn(self._watch(relay), name="fleet-changes", detached=True)

    async def close(self) -> None:
        """Stop reading; the count under way gets a moment to land. Bounded, whatever
        state the client is in."""
        self._closed = True  # no count starts after this one
        if self._counting is not None:
            await asyncio.wait({self._counting}, timeout=2)  # never awaited: see stop_loops
        tasks = [task for task in (self._task, self._counting) if task is not None]
        await stop_loops(self.client, tasks)

    async def settled(self) -> None:
        """Wait until the counts under way have landed or failed."""
        while (task := self._counting) is not None:
            await asyncio.gather(task, return_exceptions=True)

    def heard(self, upstream: str, method: str) -> None:
        """This replica heard a list change: count it for the others (in a task)."""
        if self._closed or upstream not in self.upstreams:
            return
        field = f"{upstream}|{method}"
        self._pending[field] = self._pending.get(field, 0) + 1
        self._count_soon()

    def _count_soon(self) -> None:
        if self._counting is None and self._pending and not (self._stalled or self._closed):
            self._counting = spawn(self._count(), name="fleet-change-count", detached=True)
            self._counting.add_done_callback(self._counted_all)

    def _counted_all(self, task: asyncio.Task[None]) -> None:
        if self._counting is task:
            self._counting = None
        self._count_soon()  # what came in meanwhile

    async def _count(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, {}
            for field, n in batch.items():
                stop_if_cancelled()  # a cancellation the client dropped (see there)
                try:
                    count = int(await self.client.hincrby(self.key, field, n))
                except Exception as exc:
                    for kept, m in batch.items():  # this one and those after it: later
                        if m:
                            self._pending[kept] = self._pending.get(kept, 0) + m
                    stop_if_cancelled(exc)
                    if not from_redis(exc):
                        raise
                    if not self._uncounted:
                        log.warning("fleet_change_not_counted", field=field, error=str(exc))
                    self._uncounted = self._stalled = True
                    return
                batch[field] = 0  # counted
                if self._uncounted:
                    log.info("fleet_change_counted_again")
                    self._uncounted = False
                self.counted(field, count, n)

    def counted(self, field: str, count: int, n: int = 1) -> None:
        """This replica's own count of `field` went up by `n` to `count`: not news for its
        listens, unless another replica counted in between (then the next look hands that
        on)."""
        if count == self._seen.get(field, 0) + n:  # a field not seen yet was at 0
            self._seen[field] = count

    async def _watch(self, relay: RelayChange) -> None:
        first = True
        while True:
            try:
                counts = await self.client.hgetall(self.key)
            except Exception as exc:
                stop_if_cancelled(exc)
                if not from_redis(exc):
                    raise
                if not self._unread:
                    log.warning("fleet_changes_unread", error=str(exc))
                self._unread = True
            else:
                if self._unread:
                    log.info("fleet_changes_read_again")
                self._unread = False
                for upstream, method in self.take(counts, first):
                    relay(upstream, method)
                if self._stalled:  # Redis answers again: make the counts it refused
                    self._stalled = False
                    self._count_soon()
                first = False
                self.looked.set()
            stop_if_cancelled()  # a cancellation the client dropped (see there)
            await clocks.sleep(self.clock, self.interval_s)

    def take(
        self, counts: dict[bytes | str, bytes | str], first: bool = False
    ) -> list[tuple[str, str]]:
        """Each change whose count moved since the last look, as (upstream, method), to hand
        on (the first look only learns the counts)."""
        moved = []
        for raw_field, raw_count in counts.items():
            field = text(raw_field)
            try:
                count = int(text(raw_count))
            except ValueError:
                continue
            seen, self._seen[field] = self._seen.get(field), count
            upstream, _, method = field.rpartition("|")
            if not first and count != seen and upstream:
                moved.append((upstream, method))
        return moved
