"""The Redis stream sink, against a real redis-server: each event once, in order, the
stream's length bounded; an outage held (bounded, drops counted) and written when Redis is
back; a batch sent again after a lost reply adds nothing twice."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import orjson
import pytest
from structlog.testing import capture_logs

from gateway.audit import stream as stream_module
from gateway.audit.metrics import AuditMetrics
from gateway.audit.stream import StreamSink
from gateway.audit.trail import Audit
from gateway.clock import SystemClock
from gateway.protocol.audit import CallStarted, Era
from gateway.store.redis_client import RedisClient, connect
from tests.fakes.lost_replies import LosingFirstReply
from tests.peers.tooling import RedisServer


def started(n: int) -> CallStarted:
    return CallStarted(call_id=f"c-{n}", era=Era.MODERN, upstream="tickets", target="book")


@pytest.fixture
async def reader(redis_server: RedisServer) -> AsyncIterator[RedisClient]:
    client = connect(redis_server.url)
    yield client
    await client.aclose()


def key() -> str:
    return f"t{uuid.uuid4().hex[:6]}:{{audit}}:events"


async def calls_in(client: RedisClient, at: str) -> list[str]:
    entries = await client.xrange(at, "-", "+")
    out = []
    for _, fields in entries:
        event = orjson.loads(fields[b"event"])
        assert fields[b"id"].decode() == event["id"]  # the id beside it, for readers
        out.append(event["call_id"])
    return out


@pytest.fixture
async def trails() -> AsyncIterator[list[Audit]]:
    """The trails a test starts, each closed (its client with it) however the test ends."""
    started: list[Audit] = []
    yield started
    for trail in started:
        await trail.close()


async def trail_of(sink: StreamSink, trails: list[Audit]) -> Audit:
    trail = Audit(replica="r", sinks=[sink])
    trails.append(trail)
    trail.start()
    return trail


def sink_at(url: str, at: str, *, bound: int = 10_000, max_len: int = 10_000) -> StreamSink:
    return StreamSink(
        connect(url), at, max_len=max_len, bound=bound, metrics=AuditMetrics(), clock=SystemClock()
    )


async def test_events_are_added_to_the_stream_once_each_in_order(
    redis_server: RedisServer, reader: RedisClient, trails: list[Audit]
) -> None:
    at = key()
    sink = sink_at(redis_server.url, at)
    trail = await trail_of(sink, trails)
    for n in range(1200):  # more than one batch
        trail.emit(started(n))
    async with asyncio.timeout(10):
        await sink.drained()
    assert await calls_in(reader, at) == [f"c-{n}" for n in range(1200)]


async def test_the_stream_keeps_about_max_len_events(
    redis_server: RedisServer, reader: RedisClient, trails: list[Audit]
) -> None:
    at = key()
    sink = sink_at(redis_server.url, at, max_len=100)
    trail = await trail_of(sink, trails)
    for n in range(2000):
        trail.emit(started(n))
    async with asyncio.timeout(10):
        await sink.drained()
    length = await reader.xlen(at)
    # `MAXLEN ~` trims whole nodes of the stream (100 entries each by default).
    assert 100 <= length <= 300
    assert (await calls_in(reader, at))[-1] == "c-1999"


async def test_a_batch_sent_again_after_its_reply_was_lost_adds_nothing_twice(
    redis_server: RedisServer, reader: RedisClient, trails: list[Audit]
) -> None:
    at = key()
    sink = sink_at(redis_server.url, at)
    lossy = LosingFirstReply(sink._add)
    sink._add = lossy  # type: ignore[assignment]
    trail = await trail_of(sink, trails)
    for n in range(5):
        trail.emit(started(n))
    async with asyncio.timeout(10):
        await sink.drained()
    assert lossy.runs == 2  # it landed the first time, and was sent again
    assert await calls_in(reader, at) == [f"c-{n}" for n in range(5)]


async def test_an_outage_is_held_and_written_when_redis_is_back() -> None:
    own = RedisServer()
    at = key()
    metrics = AuditMetrics()
    sink = StreamSink(
        connect(own.url), at, max_len=10_000, bound=50, metrics=metrics, clock=SystemClock()
    )
    trail = Audit(replica="r", sinks=[sink])
    check = connect(own.url)
    try:
        with capture_logs() as logs:
            trail.start()
            trail.emit(started(0))
            async with asyncio.timeout(10):
                await sink.drained()
            own.kill()
            for n in range(1, 81):  # 80 events while Redis is gone: 30 past the bound
                trail.emit(started(n))
            async with asyncio.timeout(10):
                await sink.failing()  # its writer has found Redis gone
            await asyncio.to_thread(own.start)  # back, and empty: it persists nothing
            async with asyncio.timeout(15):
                await sink.drained()
        # The oldest events of the outage were dropped; the others are there, in order
        # and once each (the event written before the restart went with Redis's data).
        written = await calls_in(check, at)
        assert written == [f"c-{n}" for n in range(31, 81)]
        assert metrics.dropped.labels("stream").value == 30
        events = [log["event"] for log in logs]
        assert events.count("audit_sink_down") == 1
        assert events.count("audit_events_dropped") == 1
        assert [log["dropped"] for log in logs if log["event"] == "audit_sink_recovered"] == [30]
    finally:
        await trail.close()
        await check.aclose()
        own.stop()


async def test_a_stop_with_redis_gone_counts_what_it_held_as_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    own = RedisServer()
    monkeypatch.setattr(stream_module, "CLOSE_S", 0.2)
    metrics = AuditMetrics()
    sink = StreamSink(
        connect(own.url), key(), max_len=100, bound=50, metrics=metrics, clock=SystemClock()
    )
    trail = Audit(replica="r", sinks=[sink])
    try:
        trail.start()
        own.kill()
        for n in range(3):
            trail.emit(started(n))
        with capture_logs() as logs:
            await trail.close()
        assert metrics.dropped.labels("stream").value == 3
        assert "stopped before it could be written" in [log.get("why") for log in logs]
    finally:
        own.stop()
