"""Ending the upstream sessions of a replica that died without ending them.

A replica stopped in order ends its sessions upstream (DELETE). One killed (SIGKILL, the
OOM killer, a lost node) cannot, and a legacy server keeps them until its own expiry
(mcp 1.x: 30 minutes of no request), each holding the server's memory and, where the
server caps its sessions, a place. So each replica keeps in Redis the sessions it holds
and no call does (`<prefix>{replica:<owner>}:sessions`, a hash of `[upstream, session
id]` (version 1) or `[2, upstream, session id]` (version 2; `entry_field`, in the version
the fleet reads) to the negotiated version; looked at every heartbeat, written when it
changed), and
names itself in `<prefix>ledgers`. Every replica sweeps: a ledger whose owner's heartbeat
is gone on two passes in a row (a Redis restart loses every heartbeat for a moment) is
taken by one survivor (a lock key); each entry is claimed (taken off, only while the
owner's heartbeat is still absent) and its session ended upstream. What could not be
ended is listed again for the next pass, until the ledger expires.

Never ended this way: a session a parked call holds, which another replica may take
over. A call that parks takes its session off (`withdraw`, always a round trip) before
its client is answered; the session is listed again once it is idle. The one window: a
replica taken for dead while it runs, parking a call on an idle session in the moment a
survivor has claimed it. Sessions nobody else can reach (stdio, HTTP+SSE) are never listed.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

import structlog

from gateway import clock as clocks
from gateway.aio import spawn
from gateway.clock import Clock
from gateway.errors import UpstreamError
from gateway.protocol.formats import FleetLevel, Kind, readable, single
from gateway.protocol.versions import Version
from gateway.store.redis_client import (
    RedisClient,
    last_word,
    ride_out,
    stop_if_cancelled,
    stop_loops,
    text,
)

log = structlog.get_logger("gateway.fleet")

#: How long a ledger outlives its last write: by then a legacy server has expired the
#: sessions itself (mcp 1.x after 30 minutes), so there is nothing left to end.
LEDGER_TTL_MS = 3_600_000
#: A ledger that has not changed is written again this often anyway (its TTL renewed).
REFRESH_S = 60.0
#: How long a survivor has a dead replica's ledger to itself.
SWEEP_LOCK_MS = 60_000
#: Sessions a sweep ends at once.
PARALLEL = 8
_SESSION_ID = re.compile(r"[\x21-\x7e]{1,1024}\Z")


# KEYS[1] the owner's heartbeat, KEYS[2] its ledger (one cluster slot); ARGV[1] an entry.
# -1: the owner beats again; 0: the entry is gone (withdrawn, or claimed); 1: claimed.
_CLAIM = """
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
return redis.call('HDEL', KEYS[2], ARGV[1])
"""
# KEYS[1] a sweep's lock; ARGV[1] its holder: released only by whoever holds it.
_UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def roll_call_key(prefix: str) -> str:
    """`<prefix>ledgers`: every replica with a ledger, which is every replica of the fleet
    from about a heartbeat after its start (0.1.0's too): the bus reads it to learn whose
    heartbeats to look at (`RedisBus.look_at_fleet`)."""
    return f"{prefix}ledgers"


def entry_field(upstream: str, session_id: str, version: int) -> str:
    """A ledger entry's field in `version` (1: the previous release's, without a mark)."""
    return json.dumps([upstream, session_id] if version == 1 else [version, upstream, session_id])


def read_entry(field: str) -> tuple[str, str]:
    """The upstream and session id of a ledger entry's field, of any version read here.

    Raises:
        ValueError: not an entry of a version read here.
    """
    entry = json.loads(field)
    if not isinstance(entry, list):
        raise ValueError("a ledger entry is a JSON array")
    version = 1 if len(entry) == 2 else entry[0] if len(entry) == 3 else None
    if version not in readable(Kind.SESSION_ENTRY) or version == 1 and len(entry) != 2:
        raise ValueError("a ledger entry of a version not read here")
    upstream, session_id = entry[-2:]
    if not isinstance(upstream, str) or not isinstance(session_id, str):
        raise ValueError("a ledger entry names an upstream and a session id")
    return upstream, session_id


class Pool(Protocol):
    def idle_ids(self) -> dict[str, str]: ...

    async def end_other(self, session_id: str, version: Version) -> int: ...


CountOutcome = Callable[[str, str], None]  # (upstream, outcome), counted by the caller


class SessionLedger:
    def __init__(
        self,
        client: RedisClient,
        *,
        prefix: str,
        replica_id: str,
        heartbeat_key: Callable[[str], str],
        pools: Mapping[str, Pool],
        clock: Clock,
        interval_s: float,
        sweep_s: float,
        counted: CountOutcome | None = None,
        level: FleetLevel | None = None,
    ) -> None:
        """`level`: the fleet's format level (which version of an entry to write)."""
        self.level = level or single()
        self.client = client
        self.prefix = prefix
        self.replica_id = replica_id
        self.heartbeat_key = heartbeat_key
        self.pools = pools
        self.clock = clock
        self.interval_s = interval_s
        self.sweep_s = sweep_s
        self._counted = counted
        self._published: dict[str, str] = {}  # what the ledger in Redis holds now
        self._written_at = float("-inf")
        self._lock = asyncio.Lock()  # a write and a withdrawal never interleave
        self._suspects: set[str] = set()  # owners found gone on the last pass
        self._tasks: list[asyncio.Task[None]] = []
        self._failing = {"publish": False, "sweep": False}
        self._claim = client.register_script(_CLAIM)
        self._unlock = client.register_script(_UNLOCK)

    def key(self, owner: str) -> str:
        return f"{self.prefix}{{replica:{owner}}}:sessions"

    @property
    def index_key(self) -> str:
        return roll_call_key(self.prefix)

    # -- this replica's ledger -----------------------------------------------------------

    def snapshot(self) -> dict[str, str]:
        entry = self.level.version(Kind.SESSION_ENTRY)
        return {
            entry_field(name, session_id, entry): version
            for name, pool in self.pools.items()
            for session_id, version in pool.idle_ids().items()
        }

    async def publish(self) -> None:
        """Write the ledger if it changed (or is due for a refresh). Raises: RedisError."""
        async with self._lock:
            entries = self.snapshot()
            now = self.clock.monotonic()
            if entries == self._published and now - self._written_at < REFRESH_S:
                return
            key = self.key(self.replica_id)
            # Until the write is known to be done, what Redis holds is not known: written
            # again at the next beat whatever it holds then.
            self._written_at = float("-inf")
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.delete(key)
                if entries:
                    pipe.hset(key, items=[part for pair in entries.items() for part in pair])
                    pipe.pexpire(key, LEDGER_TTL_MS)
                pipe.sadd(self.index_key, self.replica_id)
                await pipe.execute()
            self._published, self._written_at = entries, now

    async def withdraw(self, upstream: str, session_id: str | None) -> None:
        """A call parks on this session: off the ledger before its client is answered.

        Always a round trip (made beside the record's write): what this replica last
        wrote may not be what Redis holds (a write whose reply was lost, a failover).

        Raises:
            StoreError: Redis could not be told (the call must not park).
        """
        if session_id is None:
            return
        # In either version: the level may have moved since the entry was written.
        fields = [
            entry_field(upstream, session_id, v) for v in sorted(readable(Kind.SESSION_ENTRY))
        ]
        key = self.key(self.replica_id)
        async with self._lock:  # after a write that listed it, never before
            await ride_out(self.clock, lambda: self.client.hdel(key, *fields))
            self._published = {k: v for k, v in self._published.items() if k not in fields}

    # -- the dead's ledgers --------------------------------------------------------------

    async def sweep(self) -> int:
        """One pass: end the sessions of replicas found gone on this pass and the last;
        how many the servers ended. Raises: RedisError."""
        owners = {text(o) for o in await self.client.smembers(self.index_key)}
        gone = set()
        for owner in sorted(owners - {self.replica_id}):
            if not await self.client.exists(self.heartbeat_key(owner)):
                gone.add(owner)
        ripe, self._suspects = gone & self._suspects, gone
        ended = 0
        for owner in sorted(ripe):
            ended += await self._sweep(owner)
        return ended

    async def _sweep(self, owner: str) -> int:
        lock = f"{self.prefix}{{replica:{owner}}}:sweeping"
        if not await self.client.set(lock, self.replica_id, nx=True, px=SWEEP_LOCK_MS):
            return 0  # another survivor has it
        key = self.key(owner)
        try:
            entries = {text(k): text(v) for k, v in (await self.client.hgetall(key)).items()}
            outcomes: Counter[str] = Counter()
            slots = asyncio.Semaphore(PARALLEL)

            async def end(field: str, version: str) -> None:
                async with slots:
                    # Each entry is claimed (taken off) before its DELETE, only while the
                    # owner is still gone: one withdrawn meanwhile, or of an owner back in
                    # the fleet, is left alone, and no two survivors end one session.
                    beat = self.heartbeat_key(owner)
                    if await self._claim(keys=[beat, key], args=[field]) != 1:
                        return
                    outcome = await self._end(field, version)
                    if outcome == "failed":  # listed again, for the next pass
                        await self.client.hset(key, field, version)
                outcomes[outcome] += 1

            await asyncio.gather(*(end(f, v) for f, v in entries.items()))
            if not await self.client.exists(key):
                await self.client.srem(self.index_key, owner)
            if outcomes:
                left = outcomes["failed"]
                event = "orphaned_sessions_left" if left else "orphaned_sessions_ended"
                log.info(event, replica=owner, **dict(sorted(outcomes.items())))
            return outcomes["ended"]
        finally:
            await self._unlock(keys=[lock], args=[self.replica_id])

    async def _end(self, field: str, version: str) -> str:
        """End one listed session: `ended`, `gone` (the server no longer knew it),
        `refused`, `failed` (tried again next pass) or `unknown` (no such upstream here,
        or an entry that does not read)."""
        try:
            upstream, session_id = read_entry(field)
            pool = self.pools.get(upstream)
            if pool is None or not _SESSION_ID.match(session_id):
                raise ValueError(field)  # the spec's session ids are visible ASCII
            status = await pool.end_other(session_id, Version(version))
        except (ValueError, TypeError):
            log.info("orphaned_session_unknown", entry=field[:200])
            return "unknown"
        except UpstreamError as exc:
            log.info("orphaned_session_not_ended", upstream=upstream, error=exc.message)
            outcome = "failed"
        else:
            outcome = "ended" if status < 300 else "gone" if status == 404 else "refused"
        if self._counted is not None:
            self._counted(upstream, outcome)
        return outcome

    # -- running -------------------------------------------------------------------------

    def start(self) -> None:
        self._tasks = [
            spawn(self._every(self.interval_s, self.publish, "publish"), name="fleet-ledger"),
            spawn(self._every(self.sweep_s, self.sweep, "sweep"), name="fleet-sweeper"),
        ]

    async def _every(
        self, period_s: float, work: Callable[[], Awaitable[object]], what: str
    ) -> None:
        while True:
            await clocks.sleep(self.clock, period_s)
            try:
                await work()
                if self._failing[what]:
                    log.info("session_ledger_recovered", step=what)
                self._failing[what] = False
            except Exception as exc:  # the loop must outlive any one failure
                if not self._failing[what]:
                    log.warning("session_ledger_failed", step=what, error=repr(exc))
                self._failing[what] = True
            stop_if_cancelled()  # a cancellation the client dropped (see there)

    async def close(self) -> None:
        """Stop; the ledger goes (the pools are about to end their sessions themselves).
        Bounded, whatever state the client is in."""
        await stop_loops(self.client, self._tasks)

        async def leave() -> None:
            await self.client.delete(self.key(self.replica_id))
            await self.client.srem(self.index_key, self.replica_id)

        await last_word(self.client, leave, what="session-ledger-leave")
