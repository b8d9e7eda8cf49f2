"""The audit trail's events, sans-IO: what each kind writes, that content is kept only when
asked for (redacted, capped), and the version every event carries."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gateway.protocol import audit, audit_record, formats
from gateway.protocol.audit import (
    NO_CONTENT,
    REDACTED,
    Answer,
    ApprovalAnswered,
    ApprovalAsked,
    AuditOutcome,
    CallEnded,
    CallStarted,
    ContentPolicy,
    Era,
    EventKind,
    Refusal,
    RequestRefused,
    RoundAnswered,
    RoundAsked,
    SessionClosed,
    SessionOpened,
    TaskChanged,
    Who,
    answer_of,
    question_of,
)
from gateway.protocol.formats import Kind

ALICE = Who(kind="jwt", log_id="p_0123", issuer="https://id.example", subject="alice", client="app")
WALL_MS = 1_800_000_000_123
SECRET = "hunter2-s3cret"
CALL = {"call_id": "c-1", "era": Era.MODERN, "upstream": "tickets", "target": "book"}
EVERYTHING = ContentPolicy(arguments=True, answers=True, results=True, questions=True)


def written(event: audit.AuditEvent, policy: ContentPolicy = NO_CONTENT) -> dict[str, Any]:
    return audit_record.record(
        event, event_id="e-1", wall_ms=WALL_MS, replica="gw-0~1a2b", policy=policy
    )


def test_every_event_starts_with_its_version_id_kind_time_replica_and_principal() -> None:
    event = written(CallStarted(principal=ALICE, request_id="r-9", **CALL))
    assert list(event)[:6] == ["v", "id", "kind", "time", "replica", "principal"]
    assert event["v"] == audit.SCHEMA == formats.written(Kind.AUDIT_EVENT, formats.LEVEL)
    assert event["kind"] == "call.started" and event["id"] == "e-1"
    assert event["time"] == "2027-01-15T08:00:00.123Z" and event["replica"] == "gw-0~1a2b"
    assert event["principal"] == {
        "kind": "jwt",
        "issuer": "https://id.example",
        "subject": "alice",
        "client_id": "app",
        "log_id": "p_0123",
    }
    assert event["request_id"] == "r-9"
    assert event["call_id"] == "c-1" and event["era"] == "2026" and event["upstream"] == "tickets"
    assert event["method"] == "tools/call" and event["tool"] == "book"


@pytest.mark.parametrize(
    ("who", "expected"),
    [
        (
            Who(kind="key", subject="ci-bot", log_id="p_9"),
            {"kind": "key", "key_id": "ci-bot", "log_id": "p_9"},
        ),
        (Who(kind="unauthenticated", log_id="p_7"), {"kind": "unauthenticated", "log_id": "p_7"}),
        (Who(kind="anonymous"), {"kind": "anonymous"}),
    ],
)
def test_a_principal_is_written_by_its_kind_never_with_a_credential(
    who: Who, expected: dict[str, str]
) -> None:
    assert who.to_json() == expected


def test_a_request_without_a_caller_has_a_null_principal() -> None:
    refused = RequestRefused(refusal=Refusal.AUTHENTICATION, reason="token expired")
    assert written(refused)["principal"] is None


def test_what_a_call_names_is_written_as_log_lines_name_it() -> None:
    prompt = written(CallStarted(**{**CALL, "method": "prompts/get", "target": "greet"}))
    resource = written(CallStarted(**{**CALL, "method": "resources/read", "target": "file:///a"}))
    assert prompt["prompt"] == "greet" and "tool" not in prompt
    assert resource["resource"] == "file:///a"


def test_a_call_ended_says_how_how_long_and_how_many_rounds() -> None:
    ended = written(
        CallEnded(outcome=AuditOutcome.ERROR, duration_ms=1234, rounds=2, error_code=-32603, **CALL)
    )
    assert ended["kind"] == "call.ended" and ended["outcome"] == "error"
    assert ended["duration_ms"] == 1234 and ended["rounds"] == 2
    assert ended["error"] == {"code": -32603}
    complete = written(
        CallEnded(outcome=AuditOutcome.COMPLETE, duration_ms=5, rounds=0, is_error=True, **CALL)
    )
    assert complete["is_error"] is True and "error" not in complete


CONTENT_EVENTS = [
    CallStarted(arguments={"card": SECRET}, **CALL),
    CallEnded(
        outcome=AuditOutcome.ERROR,
        duration_ms=1,
        rounds=1,
        error_code=-32603,
        error_message=f"card {SECRET} refused",
        result={"content": [{"type": "text", "text": SECRET}]},
        **CALL,
    ),
    RoundAsked(
        round=1,
        questions=(question_of("pin", "elicitation/create", {"message": f"PIN for {SECRET}?"}),),
        **CALL,
    ),
    RoundAnswered(
        round=1,
        answers=(
            answer_of(
                "pin", "elicitation/create", {"action": "accept", "content": {"pin": SECRET}}
            ),
        ),
        **CALL,
    ),
    ApprovalAsked(
        approval_id="a-1",
        era=Era.MODERN,
        upstream="tickets",
        tool="pay",
        question=question_of("gateway.approval", "elicitation/create", {"message": SECRET}),
    ),
    ApprovalAnswered(
        approval_id="a-1",
        era=Era.MODERN,
        upstream="tickets",
        tool="pay",
        answer=answer_of(
            "gateway.approval", "elicitation/create", {"action": "accept", "content": {"x": SECRET}}
        ),
        approved=False,
    ),
]


@pytest.mark.parametrize("event", CONTENT_EVENTS, ids=lambda e: e.kind.value)
def test_by_default_no_content_is_written(event: audit.AuditEvent) -> None:
    assert SECRET not in str(written(event))
    assert SECRET in str(written(event, EVERYTHING))


@pytest.mark.parametrize(
    ("policy", "kept"),
    [
        (ContentPolicy(arguments=True), {"call.started"}),
        (ContentPolicy(results=True), {"call.ended"}),
        (ContentPolicy(questions=True), {"round.asked", "approval.asked"}),
        (ContentPolicy(answers=True), {"round.answered", "approval.answered"}),
    ],
)
def test_each_switch_keeps_its_own_content_only(policy: ContentPolicy, kept: set[str]) -> None:
    assert {e.kind.value for e in CONTENT_EVENTS if SECRET in str(written(e, policy))} == kept


def test_content_is_redacted_before_it_is_cut() -> None:
    policy = ContentPolicy(
        arguments=True, redact=(re.compile(r'"card":"[^"]*"'), re.compile("hunter2")), max_bytes=40
    )
    kept = written(
        CallStarted(arguments={"who": "bob", "card": SECRET, "note": "x" * 100}, **CALL), policy
    )
    arguments = kept["arguments"]
    assert arguments["text"].startswith('{"who":"bob",' + REDACTED)
    assert SECRET not in arguments["text"] and len(arguments["text"].encode()) <= 40
    assert arguments["truncated"] is True and arguments["redacted"] == 1
    assert arguments["bytes"] == len(f'{{"who":"bob","card":"{SECRET}","note":"{"x" * 100}"}}')


def test_a_value_under_the_cap_is_kept_whole_and_says_so() -> None:
    kept = ContentPolicy(max_bytes=64).kept({"a": 1})
    assert kept == {"text": '{"a":1}', "bytes": 7, "truncated": False}
    assert ContentPolicy().kept(None) is None
    assert ContentPolicy().kept("plain")["text"] == "plain"  # a string is kept as it is


def test_a_cut_never_splits_a_character() -> None:
    kept = ContentPolicy(max_bytes=16).kept("é" * 20)
    assert kept["text"] == "é" * 8 and kept["truncated"] is True and kept["bytes"] == 40


def test_the_patterns_see_a_bounded_part_of_a_huge_value() -> None:
    kept = ContentPolicy(max_bytes=16).kept("a" * 1_000_000 + SECRET)
    assert SECRET not in kept["text"] and kept["bytes"] == 1_000_000 + len(SECRET)


ELICIT = "elicitation/create"


@pytest.mark.parametrize(
    ("method", "result", "action", "content"),
    [
        (ELICIT, {"action": "accept", "content": {"name": "Ada"}}, "accept", {"name": "Ada"}),
        (ELICIT, {"action": "decline"}, "decline", None),
        (ELICIT, {"action": "cancel", "content": {"stray": 1}}, "cancel", None),
        (ELICIT, {"action": "maybe"}, "invalid", None),
        (
            "sampling/createMessage",
            {"role": "assistant", "model": "m"},
            "answered",
            {"role": "assistant", "model": "m"},
        ),
        ("roots/list", {"roots": []}, "answered", {"roots": []}),
        ("roots/list", "nonsense", "invalid", None),
    ],
)
def test_an_answer_is_recorded_by_what_it_did(
    method: str, result: Any, action: str, content: Any
) -> None:
    assert answer_of("k", method, result) == Answer("k", method, action, content)


def test_an_answer_given_as_an_error_is_recorded_so() -> None:
    assert answer_of("k", "roots/list", error=True) == Answer("k", "roots/list", "error")


def test_a_declined_elicitation_is_recorded_decline_without_content_even_if_kept() -> None:
    answered = RoundAnswered(
        round=2, answers=(answer_of("ok", ELICIT, {"action": "decline"}),), **CALL
    )
    assert written(answered, EVERYTHING)["answers"] == [
        {"key": "ok", "method": ELICIT, "action": "decline"}
    ]


def test_a_round_names_its_questions_keys_methods_and_modes_without_their_text() -> None:
    asked = RoundAsked(
        round=1,
        questions=(
            question_of("name", ELICIT, {"message": "Your name?", "requestedSchema": {}}),
            question_of("pay", ELICIT, {"mode": "url", "url": "https://pay.example/x"}),
            question_of("llm", "sampling/createMessage", {"messages": []}),
        ),
        **CALL,
    )
    assert written(asked)["questions"] == [
        {"key": "name", "method": ELICIT, "mode": "form"},
        {"key": "pay", "method": ELICIT, "mode": "url"},
        {"key": "llm", "method": "sampling/createMessage"},
    ]
    assert "pay.example" in str(written(asked, ContentPolicy(questions=True)))


@pytest.mark.parametrize("change", sorted(audit.TASK_CHANGES))
def test_a_task_change_is_its_own_kind(change: str) -> None:
    event = written(TaskChanged(task_id="task-1", change=change, **CALL))
    assert event["kind"] == f"task.{change}" and event["task_id"] == "task-1"
    assert event["call_id"] == "c-1"


def test_a_task_change_that_is_none_is_refused() -> None:
    with pytest.raises(ValueError):
        TaskChanged(task_id="t", change="paused", **CALL)


def test_a_refusal_keeps_its_reason_and_what_it_refused() -> None:
    event = written(
        RequestRefused(
            principal=ALICE,
            refusal=Refusal.REQUEST_STATE,
            reason="round already resumed (replay)",
            era=Era.MODERN,
            upstream="tickets",
            method="tools/call",
            target="book",
            call_id="c-1",
            status=400,
        )
    )
    assert event["kind"] == "request.refused" and event["refusal"] == "request_state"
    assert event["reason"] == "round already resumed (replay)"
    assert (event["call_id"], event["tool"], event["status"]) == ("c-1", "book", 400)


def test_a_legacy_session_opens_and_closes_in_the_2025_era() -> None:
    opened = written(
        SessionOpened(
            principal=ALICE,
            session="s_9f",
            upstream="tickets",
            protocol_version="2025-06-18",
            client_name="claude-ai",
            client_version="0.1",
        )
    )
    assert opened["era"] == "2025" and opened["client"] == {"name": "claude-ai", "version": "0.1"}
    closed = written(SessionClosed(session="s_9f", upstream="tickets", how="deleted"))
    assert (closed["kind"], closed["how"]) == ("session.closed", "deleted")


def test_every_kind_has_an_event() -> None:
    made = {e.kind for e in CONTENT_EVENTS}
    made |= {TaskChanged(task_id="t", change=c, **CALL).kind for c in audit.TASK_CHANGES}
    made |= {
        RequestRefused(refusal=Refusal.RATE, reason="r").kind,
        SessionOpened(session="s", upstream="u", protocol_version="p").kind,
        SessionClosed(session="s", upstream="u", how="deleted").kind,
    }
    assert made == set(EventKind)


def test_event_ids_are_unique_and_sorted_by_time() -> None:
    ids = audit_record.EventIds()
    made = [ids.next(WALL_MS + i // 100) for i in range(1000)]
    assert len(set(made)) == 1000 and all(len(i) == 32 for i in made)
    assert made == sorted(made)
    assert ids.next(WALL_MS + 10) > made[-1]
    # Another process draws another tag: the same millisecond and count, another id.
    assert audit_record.EventIds("aaaaaaaaaa").next(WALL_MS) != audit_record.EventIds(
        "bbbbbbbbbb"
    ).next(WALL_MS)
    assert (
        audit_record.EventIds().next(WALL_MS)[12:22] != audit_record.EventIds().next(WALL_MS)[12:22]
    )


@pytest.mark.parametrize(
    ("wall_ms", "text"),
    [
        (WALL_MS, "2027-01-15T08:00:00.123Z"),
        (WALL_MS + 877, "2027-01-15T08:00:01.000Z"),
        (0, "1970-01-01T00:00:00.000Z"),
        (1_790_000_000_005, "2026-09-21T14:13:20.005Z"),
    ],
)
def test_times_are_iso_8601_in_utc_to_the_millisecond(wall_ms: int, text: str) -> None:
    times = audit_record.IsoTimes()
    assert times.of(wall_ms) == text == audit_record.iso_time(wall_ms)
    assert times.of(wall_ms + 1000)[:19] != text[:19]  # the next second is written anew


def test_a_reader_takes_an_event_of_a_version_it_reads_and_refuses_others() -> None:
    event = written(CallStarted(**CALL))
    assert audit_record.read(event) == {k: v for k, v in event.items() if k != "v"}
    with pytest.raises(ValueError):
        audit_record.read({**event, "v": audit.SCHEMA + 1})
    with pytest.raises(ValueError):
        audit_record.read({"something": "else"})


def test_a_principal_is_found_by_any_of_its_names() -> None:
    assert ALICE.names() == {
        "https://id.example",
        "alice",
        "app",
        "p_0123",
        "https://id.example|alice",
    }


def test_an_audit_event_is_written_in_its_one_version_at_every_level() -> None:
    """No replica reads one (the previous release never wrote one): a change of a field's
    meaning raises `SCHEMA` at the next level."""
    assert formats.VERSIONS[Kind.AUDIT_EVENT] == {formats.PREVIOUS: 1, formats.LEVEL: 1}
    assert formats.readable(Kind.AUDIT_EVENT) == {1}
