"""What the store's ride-out tries again, and what the fleet's loops outlive: Redis out of
reach, or its client failing inside (mid failover); never a failure of the gateway's own
code, which surfaces as it is."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from structlog.testing import capture_logs

from gateway.clock import SystemClock
from gateway.errors import StoreError
from gateway.fleet import messages
from gateway.fleet.redis_bus import RedisBus
from gateway.store.redis_client import connect, from_redis, raised_by_client, ride_out
from tests.fakes.lost_replies import LosingFirstReply
from tests.peers.tooling import RedisServer

# A function compiled as if it were part of redis-py: it fails the way the client has been
# seen to fail while a Cluster's slot table is rebuilt.
_inside: dict[str, object] = {}
exec(  # noqa: S102 - a fixed snippet, to get a frame inside the client's files
    compile(
        "def half_built(table):\n    return table[3]['node']\n",
        str(Path(redis.__file__).parent / "cluster.py"),
        "exec",
    ),
    _inside,
)


def client_fails() -> None:
    _inside["half_built"](None)  # type: ignore[operator]


async def test_a_client_failing_inside_is_tried_again_like_an_outage() -> None:
    attempts = 0

    async def flaky() -> str:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            client_fails()
        return "done"

    assert await ride_out(SystemClock(), flaky, budget_s=2) == "done"
    assert attempts == 3


async def test_a_failure_of_the_gateways_own_code_is_not_hidden() -> None:
    async def ours() -> None:
        raise TypeError("a bug of ours")

    with pytest.raises(TypeError, match="a bug of ours"):
        await ride_out(SystemClock(), ours, budget_s=2)


async def test_an_outage_past_the_budget_and_a_refusal_are_store_errors() -> None:
    async def unreachable() -> None:
        raise RedisConnectionError("connection refused")

    async def refused() -> None:
        raise ResponseError("WRONGTYPE")

    with pytest.raises(StoreError, match="unreachable"):
        await ride_out(SystemClock(), unreachable, budget_s=0.1)
    with pytest.raises(StoreError, match="WRONGTYPE"):
        await ride_out(SystemClock(), refused, budget_s=2)


def test_where_a_failure_came_from() -> None:
    try:
        client_fails()
    except TypeError as exc:
        assert raised_by_client(exc)
    try:
        raise KeyError("ours")
    except KeyError as exc:
        assert not raised_by_client(exc)


def test_what_counts_as_redis_failing() -> None:
    assert from_redis(RedisConnectionError("refused")) and from_redis(ConnectionResetError())
    try:
        client_fails()
    except TypeError as exc:
        assert from_redis(exc)
    assert not from_redis(KeyError("ours"))


async def test_the_heartbeat_outlives_its_client_failing_inside(redis_server: RedisServer) -> None:
    # Seen in a Cluster failover under uvloop: redis-py's writer raised RuntimeError on a
    # closed transport, and the heartbeat task died of it (the replica then looks dead).
    bus = RedisBus(
        connect(redis_server.url),
        prefix="beat-survives:",
        replica_id="r1",
        heartbeat_s=0.05,
        clock=SystemClock(),
    )
    real, beats, again = bus.client.pipeline, 0, asyncio.Event()

    def pipeline(*args: Any, **kwargs: Any) -> Any:
        nonlocal beats
        beats += 1
        if beats == 1:
            client_fails()
        if beats == 3:
            again.set()  # a beat after the one that failed has gone through
        return real(*args, **kwargs)

    bus.client.pipeline = pipeline  # type: ignore[method-assign]

    async def ignore(_message: messages.Message) -> None:
        return None

    bus.start(ignore)
    try:
        await asyncio.wait_for(again.wait(), timeout=5)
        assert bus.healthy and all(not task.done() for task in bus._tasks)
    finally:
        await bus.close()
        await bus.client.aclose()


async def test_a_lease_regained_after_a_lapse_is_a_new_term(redis_server: RedisServer) -> None:
    """A call parked in one term of the lease cannot have been taken over while the term
    lasts; once the lease lapses, the term it comes back in is another."""
    from tests.fakes.clock import ManualClock

    clock = ManualClock()
    bus = RedisBus(
        connect(redis_server.url), prefix="terms:", replica_id="r1", heartbeat_s=1.0, clock=clock
    )

    async def ignore(_message: messages.Message) -> None:
        return None

    bus.start(ignore)
    try:
        await clock.armed(clock.now + 1.0)  # the first beat is in: the next one waits
        first = bus.lease_term()
        assert first is not None
        clock.advance(1.0)  # a beat within the lease: the same term
        await clock.armed(clock.now + 1.0)
        assert bus.lease_term() == first
        clock.advance(5.0)  # past the lease (two beats) before the next beat
        assert bus.lease_term() is None
        await clock.armed(clock.now + 1.0)
        assert bus.lease_term() == first + 1
    finally:
        await bus.close()
        await bus.client.aclose()


async def test_a_beat_that_comes_back_after_the_lease_ran_out_starts_a_new_term(
    redis_server: RedisServer,
) -> None:
    """A beat slower than what was left of the lease may have renewed a key that had
    expired already, when another replica could have judged this one dead: the term the
    lease goes on in is another, and the replica hands over what was taken meanwhile."""
    from tests.fakes.clock import ManualClock

    clock = ManualClock()
    regained: asyncio.Queue[int | None] = asyncio.Queue()  # the term each hand-over saw

    class SlowBeat(RedisBus):
        slow = False

        async def _beat(self, ttl_ms: int) -> bool:
            if self.slow:
                # Sent 1 s before the lease ran out, back 0.5 s after: within its own TTL
                # (2 s), so the lease is held again, but it did run out in between.
                clock.advance(1.5)
                self.slow = False
            return await super()._beat(ttl_ms)

    async def hand_over() -> None:
        regained.put_nowait(bus.lease_term())

    bus = SlowBeat(
        connect(redis_server.url), prefix="slow:", replica_id="r1", heartbeat_s=1.0, clock=clock
    )

    async def ignore(_message: messages.Message) -> None:
        return None

    bus.start(ignore, on_lease_regained=hand_over)
    try:
        await clock.armed(clock.now + 1.0)
        first = bus.lease_term()
        assert first is not None
        bus.slow = True
        clock.advance(1.0)
        await clock.armed(clock.now + 1.5 + 1.0)  # the slow beat is back, the next one waits
        assert bus.lease_term() == first + 1
        async with asyncio.timeout(5):
            # One hand-over, for the lease regained: the first beat regains nothing.
            assert await regained.get() == first + 1
        assert regained.empty()
    finally:
        await bus.close()
        await bus.client.aclose()


def reader(
    redis_server: RedisServer, prefix: str, *, replica_id: str = "a", heartbeat_s: float = 1.0
) -> tuple[
    RedisBus, asyncio.Queue[messages.Message], Callable[[messages.Message], Awaitable[None]]
]:
    """A replica's bus on a real Redis, and a handler that queues what its inbox hands over."""
    bus = RedisBus(
        connect(redis_server.url),
        prefix=prefix,
        replica_id=replica_id,
        heartbeat_s=heartbeat_s,
        clock=SystemClock(),
    )
    handled: asyncio.Queue[messages.Message] = asyncio.Queue()

    async def handler(message: messages.Message) -> None:
        handled.put_nowait(message)

    return bus, handled, handler


CANCEL_1, CANCEL_2 = messages.Cancel("c1", "r1"), messages.Cancel("c2", "r2")


async def test_a_message_no_replica_reads_is_dropped_from_the_inbox_and_the_inbox_goes_on(
    redis_server: RedisServer,
) -> None:
    """Each message of the inbox is decoded once, by the bus: one that does not decode
    (a newer release's version, garbage) is handed to nobody, logged, and cleared from the
    taken list like any other; the handler gets the next one, decoded."""
    bus, handled, handler = reader(redis_server, "undecoded:")
    clear, cleared = bus.client.lrem, asyncio.Queue[int]()

    async def counted_clear(*args: Any) -> Any:
        removed = await clear(*args)
        cleared.put_nowait(removed)
        return removed

    bus.client.lrem = counted_clear  # type: ignore[method-assign]
    bus.start(handler)
    try:
        with capture_logs() as logs:
            await bus.send("a", '{"op":"cancel","call":"c0","reply":"r0","v":3}')
            await bus.send("a", messages.encode(CANCEL_1))
            async with asyncio.timeout(10):
                assert await handled.get() == CANCEL_1
                assert [await cleared.get(), await cleared.get()] == [1, 1]  # both cleared
        assert [e for e in logs if e["event"] == "fleet_bad_message"] != []
        assert await bus.client.llen(bus.taken_key()) == 0
        assert handled.empty()  # the undecoded one was handed to nobody
    finally:
        await bus.close()
        await bus.client.aclose()


async def test_a_retraction_run_again_after_its_reply_was_lost_still_took_the_forward_back(
    redis_server: RedisServer,
) -> None:
    """The forward is taken out of the owner's inbox but the reply is lost with the
    connection: run again, the retraction must still say "taken back" (the round is then
    given back for the client's next retry), not "the owner read it"."""
    bus, _, _ = reader(redis_server, "retract:", replica_id="b")
    try:
        await bus.send("a", '{"op":"resume","reply":"r1"}')
        bus._retract = lost = LosingFirstReply(bus._retract)
        assert await bus.retract("a", '{"op":"resume","reply":"r1"}')
        assert lost.runs == 2 and await bus.client.llen(bus.inbox_key("a")) == 0
        await bus.send("a", '{"op":"resume","reply":"r2"}')
        assert await bus.client.lpop(bus.inbox_key("a")) is not None  # the owner read it
        assert not await bus.retract("a", '{"op":"resume","reply":"r2"}')
    finally:
        await bus.client.aclose()


async def test_a_forward_whose_move_out_of_the_inbox_lost_its_reply_is_still_handled(
    redis_server: RedisServer,
) -> None:
    """Redis moved the message out of the owner's inbox, but the reply was lost with the
    connection: the owner still finds it in its taken list and handles it, once, instead
    of leaving the retry that sent it waiting for an owner that never saw it."""
    bus, handled, handler = reader(redis_server, "taken:")
    real, lost = bus.client.blmove, asyncio.Event()

    async def losing_first_reply(*args: Any, **kwargs: Any) -> Any:
        moved = await real(*args, **kwargs)
        if moved is not None and not lost.is_set():
            lost.set()
            raise RedisConnectionError("the reply was lost with the connection")
        return moved

    clear, cleared = bus.client.lrem, asyncio.Queue[int]()

    async def counted_clear(*args: Any) -> Any:
        removed = await clear(*args)
        cleared.put_nowait(removed)
        return removed

    bus.client.blmove = losing_first_reply  # type: ignore[method-assign]
    bus.client.lrem = counted_clear  # type: ignore[method-assign]
    bus.start(handler)
    try:
        await bus.send("a", messages.encode(CANCEL_1))
        async with asyncio.timeout(10):
            assert await handled.get() == CANCEL_1
        assert lost.is_set()
        await bus.send("a", messages.encode(CANCEL_2))  # and the inbox goes on
        async with asyncio.timeout(10):
            assert await handled.get() == CANCEL_2
        async with asyncio.timeout(10):
            for _ in range(2):  # each cleared from the taken list once handled
                await cleared.get()
        assert await bus.client.llen(bus.taken_key()) == 0
        assert handled.empty()  # nothing handled twice
    finally:
        await bus.close()
        await bus.client.aclose()


async def test_a_move_the_client_sent_again_itself_leaves_nothing_stranded(
    redis_server: RedisServer,
) -> None:
    """redis-py sends a command again by itself after a dropped connection: the first
    move's message sits in the taken list and no error says so. The inbox loop looks
    there now and then, and handles it."""
    bus, handled, handler = reader(redis_server, "resent:", heartbeat_s=0.1)
    real, resent = bus.client.blmove, asyncio.Event()

    async def sent_again_after_its_reply_was_lost(*args: Any, **kwargs: Any) -> Any:
        moved = await real(*args, **kwargs)
        if moved is not None and not resent.is_set():
            resent.set()
            return await real(*args, **kwargs)  # the first move's reply never arrived
        return moved

    bus.client.blmove = sent_again_after_its_reply_was_lost  # type: ignore[method-assign]
    bus.start(handler)
    try:
        await bus.send("a", messages.encode(CANCEL_1))
        async with asyncio.timeout(10):
            assert await handled.get() == CANCEL_1
        assert resent.is_set()
    finally:
        await bus.close()
        await bus.client.aclose()
