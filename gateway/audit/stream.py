"""A Redis stream the whole fleet writes its events to, and `mrtr-gateway audit tail` and
a SIEM's shipper read.

Each event is one entry of two fields: `id` (the event's id) and `event` (its JSON).
A writer task sends what the backlog holds, up to `BATCH` events in one script
(`ADD`: every `XADD` of the batch at once, the stream trimmed to about `max_len`
entries). A batch that fails (Redis out of reach, a failover) is kept whole and sent
again after 0.1 s, then longer, up to 5 s; meanwhile new events wait in the backlog,
bounded. A batch sent again may have landed the first time (its reply lost with the
connection): the script then looks through the stream's newest `LOOK_BACK` entries and
adds only the events it does not find, so an event is in the stream once.

A Redis that restarted empty has lost the events it held; those the writers still hold
are written to it when it is back. Ship the stream elsewhere for keeping
(docs/operations.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import structlog

from gateway import clock as clocks
from gateway.aio import spawn
from gateway.audit.backlog import Backlog
from gateway.audit.metrics import AuditMetrics
from gateway.audit.sinks import BATCH, RETRY
from gateway.clock import Clock
from gateway.store.redis_client import (
    RedisClient,
    close_client,
    from_redis,
    stop_if_cancelled,
    stop_loops,
)

log = structlog.get_logger("gateway.audit")

#: How many of the stream's newest entries a batch sent again looks through.
LOOK_BACK = 10_000
#: How long a stopping gateway gives the writer to send what it holds.
CLOSE_S = 2.0

# KEYS[1]: the stream. ARGV[1]: its MAXLEN (about), ARGV[2]: how many of its newest
# entries to look through for the batch's ids (0: none, a first sending), then an id and
# an event for each event of the batch. Returns how many were added.
ADD = """
local seen = {}
local look = tonumber(ARGV[2])
if look > 0 then
  for _, entry in ipairs(redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', look)) do
    local fields = entry[2]
    for i = 1, #fields, 2 do
      if fields[i] == 'id' then seen[fields[i + 1]] = true end
    end
  end
end
local added = 0
for i = 3, #ARGV, 2 do
  if not seen[ARGV[i]] then
    redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'id', ARGV[i], 'event', ARGV[i + 1])
    added = added + 1
  end
end
return added
"""


class StreamSink:
    """Events added to the Redis stream `key` (see the module docstring)."""

    name = "stream"

    def __init__(
        self,
        client: RedisClient,
        key: str,
        *,
        max_len: int,
        bound: int,
        metrics: AuditMetrics,
        clock: Clock,
        owns_client: bool = True,
    ) -> None:
        self.client = client
        self.key = key
        self.max_len = max_len
        self.clock = clock
        self.owns_client = owns_client
        self.backlog: Backlog[tuple[str, bytes]] = Backlog(self.name, bound, metrics)
        self._add = client.register_script(ADD)
        self._batch: list[tuple[str, bytes]] = []  # being sent, and sent again as it is
        self._sent = False  # the batch was sent at least once (it may have landed)
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()  # nothing held, nothing being sent
        self._idle.set()
        self._failing = asyncio.Event()  # a write failed, and none has worked since
        self._task: asyncio.Task[None] | None = None

    def write(self, event: Mapping[str, Any], line: bytes) -> None:
        self.backlog.add((str(event["id"]), line))
        self._idle.clear()
        self._wake.set()

    def start(self) -> None:
        if self._task is None:
            self._task = spawn(self._run(), name="audit-stream", detached=True)

    def reopen(self) -> None:
        pass

    async def drained(self) -> None:
        """Wait until the sink holds nothing (everything given was written or dropped)."""
        await self._idle.wait()

    async def failing(self) -> None:
        """Wait until a write has failed (and none has worked since)."""
        await self._failing.wait()

    async def _run(self) -> None:
        failures = 0
        while True:
            if not self._batch:
                if not self.backlog:
                    self._idle.set()
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                self._batch, self._sent = self.backlog.take(BATCH), False
            try:
                await self._send()
            except Exception as exc:
                stop_if_cancelled(exc)
                if not from_redis(exc):
                    # The gateway's own defect: the batch is dropped, the writer lives on.
                    log.error("audit_stream_write_failed", exc_info=exc)
                    self.backlog.drop(len(self._batch), why="write failed")
                    self._batch = []
                    continue
                self.backlog.failed(str(exc) or type(exc).__name__)
                self._failing.set()
                failures += 1
                await clocks.sleep(self.clock, RETRY.delay(failures))
                continue
            stop_if_cancelled()
            self._failing.clear()
            failures = 0
            sent, self._batch = len(self._batch), []
            self.backlog.wrote(sent)

    async def _send(self) -> None:
        args: list[Any] = [self.max_len, LOOK_BACK if self._sent else 0]
        for event_id, line in self._batch:
            args += (event_id, line)
        self._sent = True  # from here on, it may land whatever is raised
        await self._add(keys=[self.key], args=args)

    async def close(self) -> None:
        """Give the writer `CLOSE_S` to send what it holds, then stop it; what is left is
        counted as dropped."""
        if self._task is not None:
            try:
                await asyncio.wait_for(self._idle.wait(), CLOSE_S)
            except TimeoutError:
                pass
            await stop_loops(self.client, [self._task])
            self._task = None
        left = len(self.backlog) + len(self._batch)
        self.backlog.take(len(self.backlog))
        self._batch = []
        self.backlog.drop(left, why="stopped before it could be written")
        if self.owns_client:
            await close_client(self.client)
