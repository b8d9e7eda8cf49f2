"""The call machine, read as scripts: server messages in, actions out."""

from __future__ import annotations

import pytest

from gateway.errors import InvalidParams
from gateway.protocol.call import (
    ENDINGS,
    FINAL_PHASES,
    TRANSITIONS,
    AnswerUpstream,
    Asked,
    CallMachine,
    Finished,
    IllegalTransition,
    Phase,
    Refused,
    RelayToClient,
    RoundContext,
    SessionFate,
    Trigger,
)
from gateway.protocol.capabilities import ClientCaps
from gateway.protocol.keys import KeyRule

EVERYTHING = ClientCaps(elicitation_form=True, elicitation_url=True, sampling=True, roots=True)
USERNAME = {
    "message": "Name?",
    "requestedSchema": {
        "type": "object",
        "properties": {"username": {"type": "string"}},
        "required": ["username"],
    },
}


def machine(caps: ClientCaps = EVERYTHING, **kwargs) -> CallMachine:
    m = CallMachine(
        call_id="c", method="tools/call", upstream_id=7, progress_token="gw-tok", **kwargs
    )
    m.serve(RoundContext(caps=caps, progress_token="client-tok", log_level=None))
    return m


def elicit(rid, params=USERNAME):
    return {"jsonrpc": "2.0", "id": rid, "method": "elicitation/create", "params": params}


def test_the_lifecycle_follows_the_transition_table() -> None:
    m = machine()
    for trigger, phase in [
        (Trigger.SUSPEND, Phase.SUSPENDED),
        (Trigger.RESUME, Phase.RUNNING),
        (Trigger.SUSPEND, Phase.SUSPENDED),
    ]:
        assert m.fire(trigger) is None and m.phase is phase
    ending = m.fire(Trigger.EXPIRE, "deadline")
    assert m.phase is Phase.EXPIRED and ending is not None and ending.phase is Phase.EXPIRED
    assert m.round == 2
    with pytest.raises(IllegalTransition):
        m.fire(Trigger.RESUME)


def test_no_trigger_leaves_a_final_phase() -> None:
    assert not [key for key in TRANSITIONS if key[0] in FINAL_PHASES]
    assert {after for after in TRANSITIONS.values()} - {Phase.RUNNING, Phase.SUSPENDED} == set(
        FINAL_PHASES
    )
    assert set(ENDINGS) == set(FINAL_PHASES)


def parked_with_question() -> CallMachine:
    m = machine()
    m.receive(elicit(7))
    m.receive({"jsonrpc": "2.0", "id": 8, "method": "sampling/createMessage", "params": {}})
    m.fire(Trigger.SUSPEND)
    return m


CANCELLED_7 = {"jsonrpc": "2.0", "id": 7, "result": {"action": "cancel"}}
ABANDONED_8 = {"jsonrpc": "2.0", "id": 8, "error": {"code": -1, "message": "Request abandoned"}}


@pytest.mark.parametrize("trigger", [Trigger.FAIL, Trigger.EXPIRE, Trigger.CANCEL])
def test_a_call_given_up_releases_its_questions_then_cancels_upstream(trigger: Trigger) -> None:
    m = parked_with_question()
    ending = m.fire(trigger, "why")
    assert ending is not None and ending.phase is TRANSITIONS[Phase.SUSPENDED, trigger]
    cancelled = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": 7, "reason": "why"},
    }
    assert list(ending.messages) == [CANCELLED_7, ABANDONED_8, cancelled]
    assert ending.session is SessionFate.CLOSE and ending.forget_record and ending.counted
    assert m.pending == {}


def test_a_completed_call_says_nothing_reuses_its_session_and_forgets_its_record() -> None:
    m = machine()
    ending = m.fire(Trigger.COMPLETE)
    assert ending is not None and ending.phase is Phase.DONE and ending.messages == ()
    assert ending.session is SessionFate.REUSE and ending.forget_record and ending.counted


def test_a_stopped_replay_run_leaves_its_questions_unanswered_and_is_not_a_calls_end() -> None:
    m = machine()
    m.receive(elicit(7))
    ending = m.fire(Trigger.STOP, "replay-mode round")
    assert ending is not None and m.round == 1  # the round it stopped in is minted
    assert [msg["method"] for msg in ending.messages] == ["notifications/cancelled"]
    assert ending.session is SessionFate.CLOSE and not ending.forget_record
    assert not ending.counted and list(m.pending) == ["elicit.username"]


@pytest.mark.parametrize("parked", [False, True])
def test_a_call_handed_over_says_nothing_and_leaves_session_and_record_alone(
    parked: bool,
) -> None:
    m = parked_with_question() if parked else machine()
    ending = m.fire(Trigger.HAND_OVER)
    assert ending is not None and ending.phase is Phase.HANDED_OVER and ending.messages == ()
    assert ending.session is SessionFate.DISCARD and not ending.forget_record
    assert ending.counted


@pytest.mark.parametrize(
    ("phase", "trigger"),
    [
        (phase, trigger)
        for phase in (Phase.RUNNING, Phase.SUSPENDED)
        for trigger in Trigger
        if (phase, trigger) not in TRANSITIONS
    ],
)
def test_every_trigger_without_a_transition_is_refused(phase: Phase, trigger: Trigger) -> None:
    m = machine()
    if phase is Phase.SUSPENDED:
        m.fire(Trigger.SUSPEND)
    with pytest.raises(IllegalTransition):
        m.fire(trigger)
    assert m.phase is phase


def test_a_server_question_is_parked_under_a_deterministic_key() -> None:
    m = machine()
    assert m.receive(elicit(0)) == [Asked("elicit.username")]
    assert m.input_required() == {
        "elicit.username": {"method": "elicitation/create", "params": USERNAME}
    }
    again = machine()
    again.receive(elicit(99))
    assert list(again.pending) == ["elicit.username"]


def test_concurrent_questions_share_a_round_with_distinct_keys() -> None:
    m = machine()
    m.receive(elicit(0))
    m.receive(elicit(1))
    m.receive({"jsonrpc": "2.0", "id": 2, "method": "roots/list"})
    assert list(m.pending) == ["elicit.username", "elicit.username#2", "roots"]


def test_operator_rules_name_keys() -> None:
    m = machine(
        rules=(
            KeyRule(key="user_name", method="elicitation/create", fields=frozenset({"username"})),
        )
    )
    assert m.receive(elicit(0)) == [Asked("user_name")]


def test_answers_become_upstream_responses_and_unknown_keys_are_ignored() -> None:
    m = machine()
    m.receive(elicit(4))
    answers = m.deliver(
        {
            "elicit.username": {
                "action": "accept",
                "content": {"username": "ann"},
                "_meta": {"x": 1},
            },
            "other": {},
        }
    )
    assert answers == [
        AnswerUpstream(4, result={"action": "accept", "content": {"username": "ann"}})
    ]
    assert m.pending == {}
    assert m.journal == [
        {
            "key": "elicit.username",
            "method": "elicitation/create",
            "answer": {"action": "accept", "content": {"username": "ann"}, "_meta": {"x": 1}},
        }
    ]


def test_a_malformed_answer_delivers_nothing() -> None:
    m = machine()
    m.receive(elicit(4))
    m.receive({"jsonrpc": "2.0", "id": 5, "method": "roots/list"})
    with pytest.raises(InvalidParams):
        m.deliver(
            {
                "elicit.username": {"action": "accept", "content": {"username": "a"}},
                "roots": {"roots": "x"},
            }
        )
    assert set(m.pending) == {"elicit.username", "roots"}


def test_an_answer_that_misses_the_schema_stays_pending() -> None:
    m = machine()
    m.receive(elicit(4))
    assert m.deliver({"elicit.username": {"action": "accept", "content": {}}}) == []
    assert list(m.pending) == ["elicit.username"]
    assert m.deliver({"elicit.username": {"action": "decline"}}) == [
        AnswerUpstream(4, result={"action": "decline"})
    ]


def test_a_pre_supplied_answer_is_used_without_parking() -> None:
    m = machine(
        presupplied={"elicit.username": [{"action": "accept", "content": {"username": "zed"}}]}
    )
    assert m.receive(elicit(3)) == [
        AnswerUpstream(3, result={"action": "accept", "content": {"username": "zed"}})
    ]
    assert m.pending == {}
    assert m.receive(elicit(4)) == [Asked("elicit.username")]  # used once only


def test_a_question_the_client_cannot_answer_is_refused() -> None:
    m = machine(caps=ClientCaps(sampling=True))
    actions = m.receive(elicit(3))
    assert isinstance(actions[0], AnswerUpstream) and actions[0].error is not None
    assert actions[1] == Refused({"elicitation": {"form": {}}})
    url = machine(caps=ClientCaps(elicitation_form=True))
    assert url.receive(
        elicit(1, {"mode": "url", "url": "https://x", "message": "m", "elicitationId": "e"})
    )[1] == (Refused({"elicitation": {"url": {}}}))


def test_progress_is_retokenised_for_the_current_round_or_dropped() -> None:
    m = machine()
    note = {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": "gw-tok", "progress": 1},
    }
    assert m.receive(note) == [
        RelayToClient(
            {
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": "client-tok", "progress": 1},
            }
        )
    ]
    m.serve(RoundContext(caps=EVERYTHING, progress_token=None))
    assert m.receive(note) == []
    stranger = {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": "other", "progress": 1},
    }
    assert machine().receive(stranger) == []


def test_log_messages_follow_the_rounds_level() -> None:
    m = machine()
    msg = {
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {"level": "info", "data": "x"},
    }
    assert m.receive(msg) == []
    m.serve(RoundContext(caps=EVERYTHING, log_level="info"))
    assert m.receive(msg) == [RelayToClient(msg)]
    m.serve(RoundContext(caps=EVERYTHING, log_level="error"))
    assert m.receive(msg) == []


def test_the_server_may_withdraw_its_own_question() -> None:
    m = machine()
    m.receive(elicit(4))
    m.receive({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 4}})
    assert m.pending == {}


def test_the_response_to_the_call_finishes_it_and_pings_are_answered() -> None:
    m = machine()
    assert m.receive({"jsonrpc": "2.0", "id": 1, "method": "ping"}) == [
        AnswerUpstream(1, result={})
    ]
    assert m.receive({"jsonrpc": "2.0", "id": 3, "result": {}}) == []  # not ours
    assert m.receive({"jsonrpc": "2.0", "id": 7, "result": {"content": []}}) == [
        Finished(result={"content": []})
    ]
    err = {"code": -1, "message": "x"}
    assert machine().receive({"jsonrpc": "2.0", "id": 7, "error": err}) == [Finished(error=err)]


def test_giving_up_releases_every_pending_question() -> None:
    m = machine()
    m.receive(elicit(1))
    m.receive(
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "sampling/createMessage",
            "params": {"messages": [], "maxTokens": 1},
        }
    )
    answers = m.abandon_answers()
    assert answers[0] == AnswerUpstream(1, result={"action": "cancel"})
    assert answers[1].error is not None and answers[1].error["code"] == -1
    assert m.pending == {}
