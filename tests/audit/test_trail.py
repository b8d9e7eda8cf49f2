"""The trail: one event, stamped once, to every sink; never a failure for its caller; the
log sink at every level; who a caller is, never its credential."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import signal
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest
import structlog
from structlog.testing import capture_logs

from gateway.audit.metrics import AuditMetrics
from gateway.audit.sinks import FileSink, LogSink
from gateway.audit.trail import OFF, Audit, act_as, acting, reopen_on_sighup, who
from gateway.auth.principal import Identity, Principal
from gateway.protocol.audit import (
    AuditOutcome,
    CallEnded,
    CallStarted,
    ContentPolicy,
    Era,
    Refusal,
    RequestRefused,
    RoundAnswered,
    RoundAsked,
    TaskChanged,
    Who,
)
from gateway.protocol.state import log_id_of
from tests.fakes.clock import START_WALL_MS, ManualClock

CALL = {"call_id": "c-1", "era": Era.MODERN, "upstream": "tickets", "target": "book"}


class Kept:
    """A sink that keeps what it is given."""

    name = "kept"

    def __init__(self) -> None:
        self.events: list[tuple[Mapping[str, Any], bytes]] = []
        self.reopened = 0

    def write(self, event: Mapping[str, Any], line: bytes) -> None:
        self.events.append((event, line))

    def start(self) -> None:
        pass

    def reopen(self) -> None:
        self.reopened += 1

    async def close(self) -> None:
        pass


class Broken(Kept):
    name = "broken"

    def write(self, event: Mapping[str, Any], line: bytes) -> None:
        raise RuntimeError("a defect of the sink")


def test_an_event_is_stamped_once_and_given_to_every_sink_alike() -> None:
    first, second = Kept(), Kept()
    clock = ManualClock()
    trail = Audit(replica="gw-0~1a2b", sinks=[first, second], clock=clock)
    event_id = trail.emit(CallStarted(principal=Who(kind="anonymous"), **CALL))
    assert event_id is not None and len(event_id) == 32
    assert first.events == second.events
    (event, line), *_ = first.events
    assert orjson.loads(line) == event
    assert event["id"] == event_id and event["replica"] == "gw-0~1a2b"
    assert event["kind"] == "call.started"


def test_a_fact_is_one_id_whoever_records_it_and_any_other_event_an_id_of_its_own() -> None:
    """A replica that recorded a call's end and died before the fleet knew, and the one
    that went on with the call and ran its end again, write one id: kept once."""
    clock = ManualClock()
    a = Audit(replica="gw-0~1", sinks=[Kept()], clock=clock)
    b = Audit(replica="gw-1~2", sinks=[Kept()], clock=clock)
    ended = {"outcome": AuditOutcome.COMPLETE, "duration_ms": 1, "rounds": 1, **CALL}
    assert a.emit(CallEnded(**ended)) == b.emit(CallEnded(**ended))
    facts = {
        a.emit(CallStarted(**CALL)),
        a.emit(CallEnded(**ended)),
        a.emit(RoundAsked(round=1, questions=(), **CALL)),
        a.emit(RoundAsked(round=2, questions=(), **CALL)),
        a.emit(RoundAnswered(round=1, answers=(), **CALL)),
        a.emit(CallStarted(**{**CALL, "call_id": "c-2"})),
    }
    assert len(facts) == 6
    refused = RequestRefused(refusal=Refusal.RATE, reason="over its rate")
    others = [a.emit(refused), a.emit(refused), b.emit(refused)]
    assert len(set(others)) == 3
    assert all(i is not None and i.startswith(f"{START_WALL_MS:012x}") for i in others)


def test_content_is_kept_as_the_policy_says() -> None:
    sink = Kept()
    Audit(replica="r", sinks=[sink], policy=ContentPolicy(arguments=True)).emit(
        CallStarted(arguments={"city": "Paris"}, **CALL)
    )
    Audit(replica="r", sinks=[sink]).emit(CallStarted(arguments={"city": "Paris"}, **CALL))
    kept, default = (event for event, _ in sink.events)
    assert kept["arguments"]["text"] == '{"city":"Paris"}'
    assert "arguments" not in default


def test_without_sinks_nothing_is_recorded() -> None:
    assert not OFF.on
    assert OFF.emit(CallStarted(**CALL)) is None


def test_a_failing_sink_fails_neither_the_caller_nor_the_other_sinks() -> None:
    kept = Kept()
    trail = Audit(replica="r", sinks=[Broken(), kept])
    with capture_logs() as logs:
        assert trail.emit(CallStarted(**CALL)) is not None
    assert len(kept.events) == 1
    assert [(log["event"], log["sink"]) for log in logs] == [("audit_sink_failed", "broken")]


class Unmade(TaskChanged):
    def members(self, policy: ContentPolicy) -> dict[str, Any]:
        raise RuntimeError("a defect of the event")


def test_an_event_that_cannot_be_made_is_counted_and_said_never_raised() -> None:
    kept, metrics = Kept(), AuditMetrics()
    trail = Audit(replica="r", sinks=[kept], metrics=metrics)
    with capture_logs() as logs:
        assert trail.emit(Unmade(task_id="t", change="created", **CALL)) is None
    assert kept.events == []
    assert [log["event"] for log in logs] == ["audit_event_unmade"]
    assert metrics.dropped.labels("trail").value == 1


@pytest.fixture
def quiet_logging() -> Iterator[None]:
    """The log stream configured at `error`, as an operator who wants few lines would."""
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    yield
    structlog.configure(**saved)


async def test_the_log_sink_writes_an_audit_line_whatever_the_level(quiet_logging: None) -> None:
    metrics = AuditMetrics()
    sink = LogSink(metrics)
    with capture_logs() as logs:
        sink.start()
        structlog.get_logger("gateway.test").info("filtered_out")  # the level holds
        Audit(replica="r", sinks=[sink]).emit(CallStarted(**CALL))
    assert [log["event"] for log in logs] == ["audit"]
    assert logs[0]["audit"]["kind"] == "call.started"
    assert metrics.written.labels("log").value == 1


def test_a_caller_is_recorded_by_who_it_is_never_by_its_credential() -> None:
    token = Identity(Principal.for_token("https://id.example", "alice", "app"))
    assert who("jwt:...", "p_1", token) == Who(
        kind="jwt", log_id="p_1", issuer="https://id.example", subject="alice", client="app"
    )
    key = Identity(Principal.for_api_key("ci-bot"))
    assert who("key:ci-bot", "p_2", key) == Who(kind="key", log_id="p_2", subject="ci-bot")
    # Without `auth`: a hash of the Authorization header is all the gateway has; the
    # keyed log id stands for it.
    assert who("sha256:0123", "p_3", None) == Who(kind="unauthenticated", log_id="p_3")
    assert who("anonymous", "anonymous", None) == Who(kind="anonymous")


def test_a_request_is_named_by_its_principal_unless_the_front_door_said_who() -> None:
    """The call core knows a caller by its principal's key: the trail names it from that,
    its log id keyed as log lines key it; the front door's word, given, stands."""
    trail = Audit(replica="r", sinks=[Kept()], log_salt=b"s" * 32)
    jwt = Principal.for_token("https://id.example", "alice", "app").key
    cases = {
        jwt: Who(kind="jwt", issuer="https://id.example", subject="alice", client="app"),
        "key:ci-bot": Who(kind="key", subject="ci-bot"),
        "sha256:0123abcd": Who(kind="unauthenticated"),
        "anonymous": Who(kind="anonymous"),
    }
    for key, expected in cases.items():
        context = contextvars.copy_context()
        context.run(trail.act_for, key)
        named = context.run(acting)
        assert named is not None and named.kind == expected.kind
        assert (named.issuer, named.subject, named.client) == (
            expected.issuer,
            expected.subject,
            expected.client,
        )
        if key != "anonymous":
            assert named.log_id == log_id_of(key, b"s" * 32)
        assert "0123abcd" not in str(named.to_json())  # never the credential's hash
    context = contextvars.copy_context()
    said = Who(kind="key", subject="from-the-front-door")
    context.run(act_as, said)
    context.run(trail.act_for, jwt)
    assert context.run(acting) is said


async def test_sighup_reopens_the_sinks(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = FileSink(str(path), bound=10, metrics=AuditMetrics(), clock=ManualClock())
    trail = Audit(replica="r", sinks=[sink])
    trail.start()
    undo = reopen_on_sighup(trail)
    try:
        trail.emit(CallStarted(**CALL))
        await asyncio.sleep(0)  # the step ends: its lines are written
        path.rename(tmp_path / "audit.jsonl.1")  # logrotate moves it, then signals
        reopened = asyncio.get_running_loop().create_future()
        original = sink.reopen

        def reopen() -> None:
            original()
            reopened.set_result(None)

        sink.reopen = reopen  # type: ignore[method-assign]
        os.kill(os.getpid(), signal.SIGHUP)
        async with asyncio.timeout(5):
            await reopened
        trail.emit(CallStarted(**{**CALL, "call_id": "c-2"}))
        await asyncio.sleep(0)
    finally:
        undo()
        await trail.close()
    assert [orjson.loads(line)["call_id"] for line in path.read_bytes().splitlines()] == ["c-2"]
    rotated = (tmp_path / "audit.jsonl.1").read_bytes().splitlines()
    assert [orjson.loads(line)["call_id"] for line in rotated] == ["c-1"]
