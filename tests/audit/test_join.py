"""The join of every sink's events (tests/support/trail.py) names each broken promise: a
checker that let one through would let the chaos run pass whatever the trail holds."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.protocol import audit, audit_record
from gateway.protocol.audit import (
    AuditOutcome,
    CallEnded,
    CallStarted,
    Era,
    RoundAnswered,
    RoundAsked,
    answer_of,
    question_of,
)
from tests.support import trail

CALL = {"call_id": "c-1", "era": Era.MODERN, "upstream": "u", "target": "greet"}
_ids = audit_record.EventIds("0123456789")


def written(event: audit.AuditEvent, replica: str = "gw-0~1") -> dict[str, Any]:
    return audit_record.record(event, event_id=_ids.next(1), wall_ms=1, replica=replica)


def two_round_call(call_id: str = "c-1") -> list[dict[str, Any]]:
    call = {**CALL, "call_id": call_id}
    ask = (question_of("k", "elicitation/create", {}),)
    answer = (answer_of("k", "elicitation/create", {"action": "accept", "content": {}}),)
    return [
        written(CallStarted(**call)),
        written(RoundAsked(round=1, questions=ask, **call)),
        # taken over: the rest on another replica, under the same call id
        written(RoundAnswered(round=1, answers=answer, **call), "gw-1~2"),
        written(RoundAsked(round=2, questions=ask, **call), "gw-1~2"),
        written(RoundAnswered(round=2, answers=answer, **call), "gw-1~2"),
        written(
            CallEnded(outcome=AuditOutcome.COMPLETE, duration_ms=9, rounds=2, **call), "gw-1~2"
        ),
    ]


def test_a_whole_trail_written_to_two_sinks_keeps_every_promise() -> None:
    events = two_round_call("c-1") + two_round_call("c-2")
    assert trail.problems({"file": events, "redis": events[3:]}) == []
    assert set(trail.completed({"file": events})) == {"c-1", "c-2"}


def test_each_broken_promise_is_named() -> None:
    events = two_round_call()
    started, asked1, answered1, asked2, answered2, ended = events
    cases = {
        "an event written twice in a sink": ([*events, started], "event ids written twice"),
        "a call started twice": (
            [*events, {**started, "id": "other"}],
            "started 2 times, ended 1 times",
        ),
        "a call ended twice": ([*events, {**ended, "id": "x"}], "started 1 times, ended 2 times"),
        "an end without a start": ([asked1, answered1, asked2, answered2, ended], "never started"),
        "a round asked twice": ([*events, {**asked1, "id": "y"}], "round 1 asked 2 times"),
        "a round answered twice": ([*events, {**answered2, "id": "z"}], "round 2 answered 2"),
        "an answer never asked": (
            [started, answered1, asked2, answered2, ended],
            "round 1 answered, never asked",
        ),
        "a round missing": ([started, asked2, answered2, ended], "asked rounds [2]"),
        # a replay that went on under a new call id: its end is no call's that started
        "a call split in two": (
            [
                started,
                asked1,
                *({**e, "call_id": "c-new"} for e in (answered1, asked2, answered2, ended)),
            ],
            "call c-new: ended, never started",
        ),
    }
    for name, (held, expected) in cases.items():
        found = trail.problems({"file": held})
        assert any(expected in problem for problem in found), (name, found)


def test_one_fact_recorded_by_two_replicas_around_a_crash_is_kept_once() -> None:
    """A replica recorded the call's end and died before the fleet knew: the one that went
    on records it again, under the same id."""
    events = two_round_call()
    again = {**events[-1], "replica": "gw-2~3", "time": "later"}
    held = {"gw-1 log": events, "gw-2 log": [again], "stream": [*events, again]}
    assert trail.problems(held) == []
    assert trail.around_a_crash(held) == 1
    other_fact = {**again, "outcome": "error"}  # one id, another fact: not one event
    assert trail.problems({"a": events, "b": [other_fact]}) != []


def test_an_end_recorded_again_as_lost_by_another_replica_is_one_event() -> None:
    """A failover lost the write that told the fleet the call had ended; the replica that
    found its record gone told the client it was lost, and recorded that end again."""
    events = two_round_call()
    lost = {**events[-1], "replica": "gw-2~3", "outcome": "lost", "time": "later"}
    assert trail.problems({"gw-1 log": events, "stream": [*events, lost]}) == []
    # Not so from the same replica (two ends neither `lost`: the test above), nor for
    # another kind of event.
    same = {**lost, "replica": events[-1]["replica"]}
    assert trail.problems({"stream": [*events, same]}) != []
    answered = events[-2]
    other = {**answered, "replica": "gw-2~3", "outcome": "lost"}
    assert trail.problems({"stream": [*events, other]}) != []


def test_one_id_is_one_event_in_every_sink() -> None:
    events = two_round_call()
    changed = [{**events[0], "principal": {"kind": "anonymous"}}, *events[1:]]
    assert "not the same in every sink" in " ".join(trail.problems({"a": events, "b": changed}))


def test_events_are_read_back_from_each_sink_form() -> None:
    events = two_round_call()
    lines = [orjson.dumps(e) for e in events] + [b'{"cut short']
    log = [orjson.dumps({"event": "audit", "audit": e, "level": "info"}) for e in events]
    log.append(orjson.dumps({"event": "request_served"}))
    entries = [(b"1-0", {b"id": e["id"].encode(), b"event": orjson.dumps(e)}) for e in events]
    assert trail.from_lines(lines) == trail.from_log(log) == trail.from_stream(entries) == events
