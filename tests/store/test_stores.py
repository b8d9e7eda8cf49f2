"""Both store backends behave the same: a round is claimed at most once, records lapse."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
import redis.asyncio as aioredis

from gateway.aio import spawn
from gateway.errors import ConfigError, StoreError
from gateway.store.base import GRACE_MS, PARKED, RESUMING, Delivery, Kept, Reply, SuspendedCall
from gateway.store.memory import MemoryStore
from gateway.store.redis import RedisStore
from gateway.store.redis_client import connect
from tests.fakes.clock import START_WALL_MS, ManualClock
from tests.fakes.lost_replies import LosingFirstReply
from tests.peers.tooling import RedisServer


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["memory", "redis"])
async def store(
    request, redis_server: RedisServer, clock: ManualClock
) -> AsyncIterator[MemoryStore | RedisStore]:
    if request.param == "memory":
        yield MemoryStore(clock)
        return
    prefix = f"t{uuid.uuid4().hex[:6]}:"
    backend = RedisStore(connect(redis_server.url), prefix=prefix, clock=clock)
    yield backend
    await backend.close()


def record(call_id: str = "c1", round_: int = 1, deadline_in_ms: int = 60_000) -> SuspendedCall:
    now = START_WALL_MS  # where the tests' manual clocks start
    return SuspendedCall(
        call_id=call_id,
        round=round_,
        status=PARKED,
        owner="replica-a",
        upstream="legacy",
        method="tools/call",
        target="greet",
        principal="anonymous",
        digest="d",
        upstream_request_id=3,
        session_id="s1",
        protocol_version="2025-11-25",
        caps="ef",
        last_event_id="e1",
        pending=[{"key": "elicit.username", "id": 0, "method": "elicitation/create", "params": {}}],
        journal=[],
        deadline_ms=now + deadline_in_ms,
        created_ms=now,
    )


async def test_a_parked_round_is_claimed_once(store) -> None:
    await store.park(record())
    got = await store.get("c1")
    assert got is not None and got.status == PARKED and got.pending[0]["key"] == "elicit.username"
    assert got.journal == [] and got.last_event_id == "e1"
    claimed = await store.claim("c1", 1)
    assert claimed is not None and claimed.status == RESUMING
    assert await store.claim("c1", 1) is None
    assert (await store.get("c1")).status == RESUMING


async def test_a_claim_for_another_round_or_call_gets_nothing(store) -> None:
    await store.park(record(round_=2))
    assert await store.claim("c1", 1) is None
    assert await store.claim("nope", 2) is None
    assert await store.claim("c1", 2) is not None


async def test_simultaneous_claims_have_one_winner(store) -> None:
    await store.park(record())
    results = await asyncio.gather(*(store.claim("c1", 1) for _ in range(10)))
    assert sum(r is not None for r in results) == 1


async def test_parking_again_replaces_the_record_for_the_next_round(store) -> None:
    await store.park(record())
    await store.claim("c1", 1)
    await store.park(record(round_=2))
    assert (await store.get("c1")).status == PARKED
    assert await store.claim("c1", 2) is not None


async def test_delete_forgets_and_records_lapse_after_their_grace(store) -> None:
    await store.park(record())
    await store.delete("c1")
    assert await store.get("c1") is None
    await store.park(record("gone", deadline_in_ms=-GRACE_MS - 1))
    assert await store.get("gone") is None
    assert await store.ping()


async def test_redis_records_carry_a_ttl_past_the_deadline(redis_server: RedisServer) -> None:
    backend = RedisStore(connect(redis_server.url), prefix="ttl:", clock=ManualClock())
    try:
        await backend.park(record(deadline_in_ms=10_000))
        client = aioredis.from_url(redis_server.url)
        ttl = await client.pttl(backend.key("c1"))
        await client.aclose()
        assert 10_000 + GRACE_MS - 2_000 < ttl <= 10_000 + GRACE_MS
        assert backend.key("c1") == "ttl:{c1}:rec"  # hash-tagged: one slot per call
    finally:
        await backend.close()


async def test_an_unknown_record_version_is_a_store_error_not_a_guess(
    redis_server: RedisServer,
) -> None:
    backend = RedisStore(connect(redis_server.url), prefix="v:")
    client = aioredis.from_url(redis_server.url)
    try:
        await client.hset(
            backend.key("c9"), mapping={"json": '{"version": 99}', "round": 1, "status": PARKED}
        )
        with pytest.raises(StoreError, match="version 99"):
            await backend.get("c9")
    finally:
        await client.aclose()
        await backend.close()


async def test_an_unreachable_redis_is_a_store_error_once_the_ride_out_is_over() -> None:
    backend = RedisStore(connect("redis://127.0.0.1:1/0", timeout_s=0.5), ride_out_s=0.2)
    with pytest.raises(StoreError, match="unreachable for 0.2 s"):
        await backend.get("c1")
    assert not await backend.ping()
    await backend.close()


async def test_a_principals_parked_calls_are_capped_and_counted_once_each(store) -> None:
    until = START_WALL_MS + 60_000
    assert await store.hold("alice", "c1", until, 2)
    assert await store.hold("alice", "c1", until + 1000, 2)  # the same call: moved, not added
    assert await store.hold("alice", "c2", until, 2)
    assert not await store.hold("alice", "c3", until, 2)  # at the cap
    assert await store.hold("bob", "c3", until, 2)  # another principal
    await store.unhold("alice", "c1")
    assert await store.hold("alice", "c3", until, 2)


async def test_a_principals_set_of_held_calls_lives_as_long_as_its_longest_held_call(
    redis_server: RedisServer,
) -> None:
    """A call held for less time must not cut the set's life short, taking the places of
    the calls held longer with it (the cap would then let more calls in)."""
    store = RedisStore(
        connect(redis_server.url), prefix=f"h{uuid.uuid4().hex[:6]}:", clock=ManualClock()
    )
    try:
        now, hour = START_WALL_MS, 3_600_000
        assert await store.hold("alice", "long", now + hour, 5)
        assert await store.hold("alice", "short", now + 1_000, 5)
        restored = replace(record("c9", deadline_in_ms=2_000), principal="alice")
        assert await store.restore(restored, now + 2_000)  # written back: held less time too
        assert await store.client.pttl(store.held_key("alice")) > hour
        assert await store.restore(record("c8", deadline_in_ms=2_000), now + 2_000)
        assert await store.client.pttl(store.held_key("anonymous")) > 1_000  # set at first
    finally:
        await store.close()


async def test_a_held_call_past_its_time_no_longer_counts(store) -> None:
    now = START_WALL_MS
    assert await store.hold("alice", "gone", now - 1, 1)  # its time is already over
    assert await store.hold("alice", "c1", now + 60_000, 1)


async def test_a_memory_record_lapses_on_its_clock_after_the_grace(clock: ManualClock) -> None:
    memory = MemoryStore(clock)
    start = clock.wall_ms()
    await memory.park(replace(record(), deadline_ms=start + 1000))
    clock.advance(1 + GRACE_MS / 1000 - 0.001)
    assert await memory.get("c1") is not None
    clock.advance(0.001)
    assert await memory.get("c1") is None


def test_store_urls_name_their_forms() -> None:
    assert connect("redis+sentinel://h1:26379,h2:26380/mymaster/2") is not None
    assert connect("unix:///tmp/redis.sock?db=1") is not None
    with pytest.raises(ConfigError, match="service name"):
        connect("redis+sentinel://h1:26379")
    with pytest.raises(ConfigError, match="unsupported scheme"):
        connect("memcached://h")


async def test_parking_and_holding_are_one_step_that_parks_nothing_at_the_cap(store) -> None:
    until = START_WALL_MS + 60_000
    first, second = record("c1"), record("c2")
    assert await store.park_held(first, until, 1)
    assert (await store.get("c1")) == first
    assert not await store.park_held(second, until, 1)  # the principal is at its cap
    assert await store.get("c2") is None
    assert await store.park_held(replace(first, round=2), until, 1)  # the same call again
    assert (await store.claim("c1", 2)) is not None
    await store.unhold(first.principal, "c1")
    assert await store.park_held(second, until, 1)


async def test_a_redis_restart_of_a_moment_is_ridden_out_without_an_error() -> None:
    own = RedisServer()
    backend = RedisStore(connect(own.url))
    try:
        await backend.park(record())
        own.kill()
        parking = spawn(backend.park(record("c2")), name="park-while-down")
        reading = spawn(backend.get("c1"), name="read-while-down")
        await asyncio.to_thread(own.start)  # back, empty: it persists nothing
        await parking
        assert await reading is None  # the data is gone, but no error reached the caller
        assert await backend.get("c2") is not None
    finally:
        await backend.close()
        own.stop()


async def test_a_takeover_names_the_new_owner_and_keeps_the_claim(store) -> None:
    await store.park(record())
    claimed = await store.claim("c1", 1)
    assert claimed is not None and await store.take(claimed, "replica-b")
    now = await store.get("c1")
    assert now is not None and now.owner == "replica-b" and now.status == RESUMING
    await store.delete("c1")
    assert not await store.take(claimed, "replica-c")  # gone: nothing to take


async def test_a_restore_writes_back_only_a_missing_record(store) -> None:
    until = START_WALL_MS + 60_000
    assert await store.restore(record(), until)
    claimed = await store.claim("c1", 1)
    assert claimed is not None
    assert not await store.restore(record(), until)  # it exists: left as it is
    now = await store.get("c1")
    assert now is not None and now.status == RESUMING


async def test_a_round_claimed_by_a_replica_that_died_can_be_handed_to_another(store) -> None:
    await store.park(record())
    assert (await store.claim("c1", 1, "a~1")).claimer == "a~1"
    assert (await store.get("c1")).claimer == "a~1"
    assert await store.steal("c1", 1, "someone-else", "b~1") is None  # not its claimer
    stolen = await store.steal("c1", 1, "a~1", "b~1")
    assert stolen is not None and stolen.claimer == "b~1" and stolen.status == RESUMING
    assert await store.steal("c1", 1, "a~1", "c~1") is None  # handed once only


async def test_a_round_its_claimer_could_not_resume_is_parked_again(store) -> None:
    await store.park(record())
    claimed = await store.claim("c1", 1, "b~1")
    assert claimed is not None
    assert not await store.give_back(replace(claimed, claimer="c~1"))  # not its claim
    assert await store.give_back(claimed)
    again = await store.get("c1")
    assert again is not None and again.status == PARKED and again.claimer == ""
    assert await store.claim("c1", 1, "c~1") is not None  # the next retry takes it


async def test_a_give_back_gives_back_only_its_own_claim(store) -> None:
    """A give-back run again (its reply lost with a connection) after the same replica's
    next retry claimed the round must not park that later claim: two retries could then
    resume one round."""
    await store.park(record())
    first = await store.claim("c1", 1, "b~1")
    assert first is not None and first.attempt
    assert await store.give_back(first)
    second = await store.claim("c1", 1, "b~1")
    assert second is not None and second.attempt != first.attempt
    assert not await store.give_back(first)  # the first claim's give-back, run again
    now = await store.get("c1")
    assert now is not None and (now.status, now.claimer) == (RESUMING, "b~1")
    assert await store.claim("c1", 1, "c~1") is None  # still held by the second claim
    assert await store.give_back(second)


async def test_a_stolen_round_is_given_back_by_its_new_claim_only(store) -> None:
    await store.park(record())
    dead = await store.claim("c1", 1, "a~1")
    assert dead is not None
    stolen = await store.steal("c1", 1, "a~1", "b~1")
    assert stolen is not None and stolen.attempt not in ("", dead.attempt)
    assert not await store.give_back(dead)  # the dead claimer's claim is no longer
    assert await store.give_back(stolen)
    assert (await store.get("c1")).status == PARKED  # type: ignore[union-attr]


async def test_a_claims_token_is_not_written_into_the_record(store) -> None:
    await store.park(record())
    claimed = await store.claim("c1", 1, "b~1")
    assert claimed is not None and claimed.attempt
    assert "attempt" not in json.loads(claimed.to_json())
    seen = await store.get("c1")
    assert seen is not None and seen.attempt == ""  # the token is its claimer's alone


async def test_a_round_given_back_after_a_takeover_names_its_owner_before_it(store) -> None:
    """A takeover whose `take` reached the store but failed on the way back gives the
    round back naming the owner it had, in the same write as the round is parked."""
    await store.park(record())
    claimed = await store.claim("c1", 1, "b~1")
    assert claimed is not None and claimed.owner == "replica-a"
    assert await store.take(claimed, "replica-b")
    assert not await store.give_back(replace(claimed, claimer="c~1"), untake=True)  # not its
    assert (await store.get("c1")).owner == "replica-b"  # type: ignore[union-attr]
    assert await store.give_back(claimed, untake=True)
    again = await store.get("c1")
    assert again is not None and (again.owner, again.status, again.claimer) == (
        "replica-a",
        PARKED,
        "",
    )
    assert await store.claim("c1", 1, "c~1") is not None  # the next retry takes it


async def test_a_resumed_rounds_outcome_is_kept_with_the_write_that_ends_the_round(store) -> None:
    await store.park(record(round_=1))
    assert await store.claim("c1", 1, "replica-a") is not None
    asked_again = Kept(1, b'{"resultType":"input_required"}', 60_000)
    assert await store.park_held(record(round_=2), START_WALL_MS + 60_000, 5, asked_again)
    assert (await store.get("c1")).round == 2  # type: ignore[union-attr]
    assert await store.recall("c1", 1) == asked_again.outcome
    assert await store.claim("c1", 2, "replica-a") is not None
    done = Kept(2, b'{"content":[]}', 60_000)
    await store.delete("c1", done)
    assert await store.get("c1") is None
    assert await store.recall("c1", 2) == done.outcome
    assert await store.recall("c1", 1) == asked_again.outcome


async def test_a_round_refused_for_the_principals_cap_keeps_nothing(store) -> None:
    until = START_WALL_MS + 60_000
    assert await store.park_held(record("other"), until, 1)
    outcome = Kept(1, b"{}", 60_000)
    assert not await store.park_held(record("c1", round_=2), until, 1, outcome)
    assert await store.get("c1") is None and await store.recall("c1", 1) is None


async def test_forgetting_a_call_drops_its_record_and_hold_and_keeps_its_outcome(store) -> None:
    until = START_WALL_MS + 60_000
    assert await store.park_held(record("c1"), until, 1)
    assert not await store.hold("anonymous", "c2", until, 1)  # c1 holds the only place
    assert await store.claim("c1", 1, "replica-a") is not None
    done = Kept(1, b'{"content":[]}', 60_000)
    await store.forget("c1", "anonymous", done)
    assert await store.get("c1") is None
    assert await store.recall("c1", 1) == done.outcome
    assert await store.hold("anonymous", "c2", until, 1)  # the place is free again
    await store.forget("c2", "anonymous")  # nothing kept: nothing recalled
    assert await store.recall("c2", 1) is None


async def test_a_forwarded_retrys_reply_goes_with_the_write_that_forgets_the_call(store) -> None:
    await store.park(record("c1"))
    reply = Reply("reply:b:1", '{"op":"outcome"}', 60_000)
    pushed = await store.forget("c1", "anonymous", Kept(1, b"{}", 60_000), reply)
    assert await store.get("c1") is None
    if isinstance(store, MemoryStore):
        assert pushed is False  # one replica: nobody reads replies; the caller would send it
        return
    assert pushed is True
    assert await store.client.lrange("reply:b:1", 0, -1) == [b'{"op":"outcome"}']
    assert 0 < await store.client.pttl("reply:b:1") <= 60_000
    await store.client.delete("reply:b:1")


async def test_a_forward_is_pushed_with_the_claim_only_while_its_owner_beats(store) -> None:
    prefix = f"t{uuid.uuid4().hex[:6]}:"
    beat, inbox = f"{prefix}{{replica:a}}:beat", f"{prefix}{{replica:a}}:inbox"
    delivery = Delivery(beat, inbox, '{"op":"resume"}', 60_000)
    await store.park(record("c1"))
    await store.park(record("c2"))
    if isinstance(store, MemoryStore):  # one replica: no inboxes; the caller delivers
        claimed, pushed = await store.claim_delivering("c1", 1, "b", delivery)
        assert claimed is not None and claimed.claimer == "b" and pushed is None
        return
    # The owner has no heartbeat: the round is claimed, nothing is pushed.
    claimed, pushed = await store.claim_delivering("c1", 1, "b", delivery)
    assert claimed is not None and claimed.status == RESUMING and claimed.claimer == "b"
    assert pushed is False and await store.client.exists(inbox) == 0
    await store.client.set(beat, "1", px=60_000)
    # A round claimed already pushes nothing, though the owner beats.
    assert await store.claim_delivering("c1", 1, "b", delivery) == (None, None)
    assert await store.client.exists(inbox) == 0
    claimed, pushed = await store.claim_delivering("c2", 1, "b", delivery)
    assert claimed is not None and claimed.call_id == "c2" and pushed is True
    assert await store.client.lrange(inbox, 0, -1) == [b'{"op":"resume"}']
    assert 0 < await store.client.pttl(inbox) <= 60_000
    assert (await store.get("c2")).status == RESUMING
    await store.client.delete(beat, inbox)


async def test_a_claim_run_again_after_its_reply_was_lost_finds_its_own_claim(
    redis_server: RedisServer,
) -> None:
    """Each claim, steal and forwarded claim is one attempt: run again by the ride-out, it
    is not refused as if another retry had taken the round, and pushes nothing twice."""
    store = RedisStore(connect(redis_server.url), prefix=f"t{uuid.uuid4().hex[:6]}:")
    live = {"deadline_ms": int(time.time() * 1000) + 60_000, "created_ms": int(time.time() * 1000)}
    try:
        for call_id in ("c1", "c2", "c3"):
            await store.park(replace(record(call_id), **live))
        store._claim = LosingFirstReply(store._claim)
        claimed = await store.claim("c1", 1, "b")
        assert claimed is not None and claimed.claimer == "b"
        assert await store.claim("c1", 1, "b") is None  # another attempt is still refused

        beat, inbox = f"{store.prefix}{{replica:a}}:beat", f"{store.prefix}{{replica:a}}:inbox"
        await store.client.set(beat, "1", px=60_000)
        store._claim_delivering = LosingFirstReply(store._claim_delivering)
        delivery = Delivery(beat, inbox, '{"op":"resume"}', 60_000)
        claimed, pushed = await store.claim_delivering("c2", 1, "b", delivery)
        assert claimed is not None and pushed is True
        assert await store.client.lrange(inbox, 0, -1) == [b'{"op":"resume"}']  # once

        assert await store.claim("c3", 1, "dead") is not None
        store._steal = LosingFirstReply(store._steal)
        stolen = await store.steal("c3", 1, "dead", "b")
        assert stolen is not None and stolen.claimer == "b"
    finally:
        await store.close()


async def test_a_give_back_run_again_after_its_reply_was_lost_leaves_a_later_claim(
    redis_server: RedisServer,
) -> None:
    """The give-back's first run parks the round and its reply is lost; before the ride-out
    runs it again, the same replica's next retry claims the round. The second run must
    leave that claim alone, or a third retry could resume the round beside it."""
    store = RedisStore(connect(redis_server.url), prefix=f"t{uuid.uuid4().hex[:6]}:")
    live = {"deadline_ms": int(time.time() * 1000) + 60_000, "created_ms": int(time.time() * 1000)}
    try:
        await store.park(replace(record("c1"), **live))
        first = await store.claim("c1", 1, "b")
        assert first is not None
        later: list[SuspendedCall | None] = []

        async def next_retry() -> None:
            later.append(await store.claim("c1", 1, "b"))

        store._give_back = lost = LosingFirstReply(store._give_back, meanwhile=next_retry)
        assert not await store.give_back(first)  # its second run finds another claim
        assert lost.runs == 2 and later[0] is not None
        now = await store.get("c1")
        assert now is not None and (now.status, now.claimer) == (RESUMING, "b")
        assert await store.claim("c1", 1, "c") is None  # nobody else resumes it meanwhile
    finally:
        await store.close()
