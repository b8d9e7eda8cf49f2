"""The file sink: JSON lines appended as the loop's step ends; a file that cannot be written
holds its events (bounded, drops counted and said) until it can; reopened after logrotate."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import orjson
import pytest
from structlog.testing import capture_logs

from gateway.audit.metrics import AuditMetrics
from gateway.audit.sinks import RETRY, FileSink
from gateway.audit.trail import Audit
from gateway.protocol.audit import CallStarted, Era
from tests.fakes.clock import ManualClock


def started(n: int) -> CallStarted:
    return CallStarted(call_id=f"c-{n}", era=Era.MODERN, upstream="tickets", target="book")


def calls(path: Path) -> list[str]:
    return [orjson.loads(line)["call_id"] for line in path.read_bytes().splitlines()]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


async def test_the_events_of_a_step_are_appended_in_one_write_when_it_ends(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_bytes(b'{"earlier":"line"}\n')
    metrics = AuditMetrics()
    sink = FileSink(str(path), bound=100, metrics=metrics, clock=clock)
    writes: list[int] = []
    real_write = os.write

    def counted(fd: int, data: bytes | memoryview) -> int:
        writes.append(fd)
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", counted)
    trail = Audit(replica="r", sinks=[sink])
    trail.start()
    for n in range(3):
        trail.emit(started(n))
    assert writes == []  # nothing written within the step: the caller goes on at once
    await asyncio.sleep(0)
    assert len(writes) == 1
    lines = path.read_bytes().splitlines()
    assert lines[0] == b'{"earlier":"line"}'  # appended, never truncated
    assert [orjson.loads(line)["call_id"] for line in lines[1:]] == ["c-0", "c-1", "c-2"]
    assert metrics.written.labels("file").value == 3
    await trail.close()


async def test_a_file_that_cannot_be_written_holds_its_events_until_it_can(
    tmp_path: Path, clock: ManualClock
) -> None:
    folder = tmp_path / "gone"
    path = folder / "audit.jsonl"
    metrics = AuditMetrics()
    sink = FileSink(str(path), bound=100, metrics=metrics, clock=clock)
    trail = Audit(replica="r", sinks=[sink])
    with capture_logs() as logs:
        trail.start()  # the folder is not there: down from the start
        trail.emit(started(1))
        await asyncio.sleep(0)
        assert len(sink.backlog) == 1
        clock.advance(RETRY.delay(1))  # tried again: still not there
        trail.emit(started(2))
        await asyncio.sleep(0)
        assert clock.pending() == [clock.now + RETRY.delay(2)]  # waiting longer each time
        folder.mkdir()
        clock.advance(RETRY.delay(2))
    assert calls(path) == ["c-1", "c-2"]
    assert [log["event"] for log in logs] == ["audit_sink_down", "audit_sink_recovered"]
    assert logs[1]["dropped"] == 0
    assert metrics.written.labels("file").value == 2
    await trail.close()


async def test_past_its_bound_the_oldest_events_are_dropped_counted_and_said(
    tmp_path: Path, clock: ManualClock
) -> None:
    folder = tmp_path / "gone"
    metrics = AuditMetrics()
    sink = FileSink(str(folder / "audit.jsonl"), bound=3, metrics=metrics, clock=clock)
    trail = Audit(replica="r", sinks=[sink])
    with capture_logs() as logs:
        trail.start()
        for n in range(7):
            trail.emit(started(n))
        await asyncio.sleep(0)
        folder.mkdir()
        clock.advance(RETRY.delay(1))
    assert calls(folder / "audit.jsonl") == ["c-4", "c-5", "c-6"]
    assert metrics.dropped.labels("file").value == 4
    said = [(log["event"], log.get("count"), log.get("dropped")) for log in logs]
    assert said == [
        ("audit_sink_down", None, None),
        ("audit_events_dropped", 1, None),  # the first drop of the outage, once
        ("audit_sink_recovered", None, 4),  # and what the outage cost, at its end
    ]
    await trail.close()


async def test_a_reopen_writes_what_is_held_to_the_old_file_and_goes_on_in_a_new_one(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "audit.jsonl"
    sink = FileSink(str(path), bound=100, metrics=AuditMetrics(), clock=clock)
    trail = Audit(replica="r", sinks=[sink])
    trail.start()
    trail.emit(started(1))
    path.rename(tmp_path / "audit.jsonl.1")
    trail.emit(started(2))  # still in the step: goes to the file open now
    trail.reopen()
    assert path.exists()  # opened at once, as logrotate's `create` would
    trail.emit(started(3))
    await asyncio.sleep(0)
    await trail.close()
    assert calls(tmp_path / "audit.jsonl.1") == ["c-1", "c-2"]
    assert calls(path) == ["c-3"]


async def test_a_stop_writes_what_is_held_and_counts_what_cannot_be(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "audit.jsonl"
    metrics = AuditMetrics()
    written = Audit(
        replica="r", sinks=[FileSink(str(path), bound=10, metrics=metrics, clock=clock)]
    )
    written.start()
    written.emit(started(1))
    await written.close()  # before the step ended
    assert calls(path) == ["c-1"]
    lost = FileSink(str(tmp_path / "gone" / "audit.jsonl"), bound=10, metrics=metrics, clock=clock)
    trail = Audit(replica="r", sinks=[lost])
    with capture_logs() as logs:
        trail.start()
        trail.emit(started(2))
        await trail.close()
    assert metrics.dropped.labels("file").value == 1
    assert ("audit_events_dropped", "stopped before it could be written") in [
        (log["event"], log.get("why")) for log in logs
    ]
    assert clock.pending() == []  # no retry left behind
