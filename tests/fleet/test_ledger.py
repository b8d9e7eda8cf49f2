"""The session ledger on a real Redis: what a replica lists, what a parked call takes off,
and how survivors end a dead replica's sessions (once, and only after two passes).

The pools are fakes that record what they are asked to end; the real-peer proof, a
replica killed with SIGKILL and its sessions ended on the mcp 1.x server while a parked
call's session lives on, is in tests/fleet/test_fleet.py.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from gateway.aio import spawn
from gateway.clock import SystemClock
from gateway.errors import StoreError, UpstreamError
from gateway.fleet import ledger as ledger_module
from gateway.fleet.ledger import SessionLedger, read_entry
from gateway.protocol.versions import Version
from gateway.store.redis_client import RedisClient, connect
from tests.peers.tooling import RedisServer, free_port


class FakePool:
    def __init__(self, idle: dict[str, str] | None = None) -> None:
        self.idle = dict(idle or {})
        self.ended: list[tuple[str, Version]] = []
        self.status = 200
        self.failing: set[str] = set()
        self.on_end: Callable[[str], Awaitable[None]] | None = None
        self.listed = asyncio.Event()  # a ledger write has taken its snapshot

    def idle_ids(self) -> dict[str, str]:
        self.listed.set()
        return dict(self.idle)

    async def end_other(self, session_id: str, version: Version) -> int:
        if self.on_end is not None:
            await self.on_end(session_id)
        if session_id in self.failing:
            raise UpstreamError("upstream unreachable")
        self.ended.append((session_id, version))
        return self.status


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[RedisClient]:
    redis = connect(redis_server.url)
    yield redis
    await redis.aclose()


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:8]}:"


def ledger(
    client: RedisClient,
    prefix: str,
    owner: str,
    pools: dict[str, FakePool],
    counted: Callable[[str, str], None] | None = None,
) -> SessionLedger:
    return SessionLedger(
        client,
        prefix=prefix,
        replica_id=owner,
        heartbeat_key=lambda o: f"{prefix}{{replica:{o}}}:beat",
        pools=pools,
        clock=SystemClock(),
        interval_s=1.0,
        sweep_s=10.0,
        counted=counted,
    )


async def listed(client: RedisClient, prefix: str, owner: str) -> dict[tuple[str, str], str]:
    raw = await client.hgetall(f"{prefix}{{replica:{owner}}}:sessions")
    return {read_entry(k.decode()): v.decode() for k, v in raw.items()}


async def beat(client: RedisClient, prefix: str, owner: str) -> None:
    await client.set(f"{prefix}{{replica:{owner}}}:beat", "1", px=60_000)


async def test_a_replica_lists_the_sessions_no_call_holds_and_a_parking_call_takes_its_off(
    client: RedisClient, prefix: str
) -> None:
    pool = FakePool({"s1": "2025-11-25", "s2": "2025-06-18"})
    mine = ledger(client, prefix, "a", {"legacy": pool})
    await mine.publish()
    assert await listed(client, prefix, "a") == {
        ("legacy", "s1"): "2025-11-25",
        ("legacy", "s2"): "2025-06-18",
    }
    assert await client.pttl(mine.key("a")) > 0  # a ledger nobody sweeps expires
    assert await client.smembers(mine.index_key) == {b"a"}

    del pool.idle["s1"]  # a call took it, and parks
    await mine.withdraw("legacy", "s1")
    assert await listed(client, prefix, "a") == {("legacy", "s2"): "2025-06-18"}

    pool.idle["s1"] = "2025-11-25"  # the call ended: idle again, listed at the next beat
    await mine.publish()
    assert ("legacy", "s1") in await listed(client, prefix, "a")


class Recording:
    """A Redis client that notes when a ledger write has been applied and when a
    withdrawal is sent (over one connection or two, Redis applies them in that order)."""

    def __init__(self, client: RedisClient) -> None:
        self._client = client
        self.order: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def pipeline(self, **options: Any) -> RecordingPipe:
        return RecordingPipe(self._client.pipeline(**options), self.order)

    async def hdel(self, *args: Any) -> Any:
        self.order.append("withdrawal sent")
        return await self._client.hdel(*args)


class RecordingPipe:
    def __init__(self, pipe: Any, order: list[str]) -> None:
        self._pipe, self._order = pipe, order

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pipe, name)

    async def __aenter__(self) -> RecordingPipe:
        await self._pipe.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._pipe.__aexit__(*exc)

    async def execute(self) -> Any:
        result = await self._pipe.execute()
        self._order.append("write applied")
        return result


async def test_a_withdrawal_during_a_write_is_not_undone_by_it(
    client: RedisClient, prefix: str
) -> None:
    """The write took its snapshot while the session was idle; the call that took the
    session parks while the write is on its way. The withdrawal must follow the write
    (sent before it, it would be undone by it: the session listed while parked)."""
    pool = FakePool({"s1": "2025-11-25"})
    recording = Recording(client)
    mine = ledger(recording, prefix, "a", {"legacy": pool})  # type: ignore[arg-type]
    writing = spawn(mine.publish(), name="ledger-write")
    await pool.listed.wait()  # the write has its snapshot (s1) and waits for Redis
    del pool.idle["s1"]
    await asyncio.gather(writing, mine.withdraw("legacy", "s1"))
    assert recording.order == ["write applied", "withdrawal sent"]
    assert await listed(client, prefix, "a") == {}


async def test_a_withdrawal_reaches_redis_whatever_this_replica_thinks_it_wrote(
    client: RedisClient, prefix: str
) -> None:
    """A write whose reply was lost (or a failover) leaves Redis listing what this replica
    does not know it listed: the withdrawal is sent anyway."""
    mine = ledger(client, prefix, "a", {"legacy": FakePool()})
    await client.hset(mine.key("a"), json.dumps(["legacy", "s1"]), "2025-11-25")
    await mine.withdraw("legacy", "s1")
    assert await listed(client, prefix, "a") == {}


async def test_a_call_cannot_park_when_the_withdrawal_does_not_reach_redis(prefix: str) -> None:
    unreachable = connect(f"redis://127.0.0.1:{free_port()}")
    mine = ledger(unreachable, prefix, "a", {"legacy": FakePool()})
    await mine.withdraw("legacy", None)  # a transport nobody else can reach: nothing to do
    with pytest.raises(StoreError):
        await mine.withdraw("legacy", "s1")
    await unreachable.aclose()


async def test_a_sweep_leaves_what_its_owner_withdrew_meanwhile_and_stops_when_it_is_back(
    client: RedisClient, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ledger_module, "PARALLEL", 1)  # one entry after the other
    entries = {"s1": "2025-11-25", "s2": "2025-11-25", "s3": "2025-11-25"}
    owner = ledger(client, prefix, "a", {"legacy": FakePool(entries)})
    await owner.publish()
    pool = FakePool()

    async def meanwhile(session_id: str) -> None:
        if session_id == "s1":  # the owner, judged dead, parks a call on s2, then beats
            await owner.withdraw("legacy", "s2")
            await beat(client, prefix, "a")

    pool.on_end = meanwhile
    survivor = ledger(client, prefix, "b", {"legacy": pool})
    await survivor.sweep()
    assert await survivor.sweep() == 1
    assert [sid for sid, _ in pool.ended] == ["s1"]
    assert await listed(client, prefix, "a") == {("legacy", "s3"): "2025-11-25"}


async def test_a_sweep_releases_only_its_own_lock(client: RedisClient, prefix: str) -> None:
    await ledger(client, prefix, "dead", {"legacy": FakePool({"s1": "2025-11-25"})}).publish()
    lock = f"{prefix}{{replica:dead}}:sweeping"
    pool = FakePool()

    async def meanwhile(session_id: str) -> None:  # its lock lapsed; another survivor's now
        await client.set(lock, "other", px=60_000)

    pool.on_end = meanwhile
    survivor = ledger(client, prefix, "b", {"legacy": pool})
    await survivor.sweep()
    assert await survivor.sweep() == 1
    assert await client.get(lock) == b"other"


async def test_survivors_end_a_dead_replicas_sessions_after_two_passes_and_once(
    client: RedisClient, prefix: str
) -> None:
    dead_pool = FakePool({"s1": "2025-11-25", "s2": "2025-03-26"})
    await ledger(client, prefix, "dead", {"legacy": dead_pool}).publish()
    await beat(client, prefix, "alive")
    await ledger(client, prefix, "alive", {"legacy": FakePool({"s3": "2025-11-25"})}).publish()
    pools = [FakePool(), FakePool()]
    survivors = [ledger(client, prefix, f"b{i}", {"legacy": p}) for i, p in enumerate(pools)]

    assert [await s.sweep() for s in survivors] == [0, 0]  # gone once: maybe a Redis restart
    assert not pools[0].ended and not pools[1].ended
    assert await asyncio.gather(*(s.sweep() for s in survivors)) in ([2, 0], [0, 2])
    ended = sorted(pools[0].ended + pools[1].ended)
    assert ended == [("s1", Version("2025-11-25")), ("s2", Version("2025-03-26"))]
    assert await listed(client, prefix, "dead") == {}
    assert await client.smembers(f"{prefix}ledgers") == {b"alive"}  # the living are kept
    assert ("legacy", "s3") in await listed(client, prefix, "alive")
    assert [await s.sweep() for s in survivors] == [0, 0]  # nothing twice


async def test_a_session_that_could_not_be_ended_is_tried_again_on_the_next_pass(
    client: RedisClient, prefix: str
) -> None:
    await ledger(client, prefix, "dead", {"legacy": FakePool({"s1": "2025-11-25"})}).publish()
    pool = FakePool()
    pool.failing.add("s1")
    survivor = ledger(client, prefix, "b", {"legacy": pool})
    await survivor.sweep()
    assert await survivor.sweep() == 0
    assert ("legacy", "s1") in await listed(client, prefix, "dead")
    pool.failing.clear()
    assert await survivor.sweep() == 1
    assert await listed(client, prefix, "dead") == {}


async def test_what_the_server_no_longer_knew_and_unknown_upstreams_are_dropped(
    client: RedisClient, prefix: str
) -> None:
    await ledger(
        client,
        prefix,
        "dead",
        {"legacy": FakePool({"s1": "2025-11-25"}), "retired": FakePool({"s2": "2025-11-25"})},
    ).publish()
    key = f"{prefix}{{replica:dead}}:sessions"
    await client.hset(key, "not json", "2025-11-25")
    await client.hset(key, json.dumps(["legacy", "s\r\nX-Injected: 1"]), "2025-11-25")
    pool = FakePool()
    pool.status = 404
    counted: list[tuple[str, str]] = []
    survivor = ledger(client, prefix, "b", {"legacy": pool}, lambda *c: counted.append(c))
    await survivor.sweep()
    assert await survivor.sweep() == 0  # none ended: the one it knew was gone already
    assert counted == [("legacy", "gone")]
    assert await client.exists(f"{prefix}{{replica:dead}}:sessions") == 0


async def test_a_replica_stopped_in_order_takes_its_ledger_away(
    client: RedisClient, prefix: str
) -> None:
    mine = ledger(client, prefix, "a", {"legacy": FakePool({"s1": "2025-11-25"})})
    await mine.publish()
    await mine.close()
    assert await client.exists(mine.key("a")) == 0
    assert await client.smembers(mine.index_key) == set()
