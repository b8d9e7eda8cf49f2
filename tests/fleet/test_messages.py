"""The catalogue of what replicas say to each other (`gateway.fleet.messages`), sans-IO:
every message is in the formats registry under its kind, goes through the one codec in
every version its kind has, and nothing else does; what an older release wrote reads."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.fleet import messages
from gateway.protocol import formats
from gateway.protocol.formats import LEVEL, PREVIOUS, Kind

#: One of each message, every field set (a default left out would not be checked).
SAMPLES: list[messages.Message] = [
    messages.Resume(
        "c", 2, 7, "tools/call", {"name": "t"}, "reply:1", {"traceparent": "00-1-2-01"}
    ),
    messages.Cancel("c", "reply:1"),
    messages.ForTask("t1", "alice", {"name": {"action": "accept"}}, cancel=True),
    messages.Notify({"jsonrpc": "2.0", "method": "notifications/progress"}),
    messages.Outcome({"resultType": "complete"}),
    messages.Failure({"code": -32603, "message": "lost"}, 502),
    messages.Exchange(
        verb="POST",
        route="local",
        session="h1",
        body='{"jsonrpc":"2.0","id":1,"method":"ping"}',
        headers={"MCP-Protocol-Version": "2025-11-25"},
        reply="reply:b:1",
        reader="b~1",
    ),
    messages.Stop("reply:b:1"),
    messages.ExchangeHead(200, {"Content-Type": "text/event-stream"}, body="", stream=True),
    messages.StreamEvent('{"jsonrpc":"2.0"}', event="message", id="e1", retry=500),
    messages.ExchangeEnd("the upstream went"),
    messages.ExchangeFailed({"code": -32600, "message": "in progress"}, 400),
    messages.ClientAnswer(
        "mrtr-ask/n0nce/a~1", "s_0123456789abcdef", {"jsonrpc": "2.0", "id": "x", "result": {}}
    ),
]


def test_the_samples_hold_one_of_every_message_in_the_catalogue() -> None:
    assert sorted(type(m).__name__ for m in SAMPLES) == sorted(
        cls.__name__ for cls, _ in messages.CATALOGUE.values()
    )


def test_every_message_is_versioned_in_the_formats_registry() -> None:
    assert {cls.__name__: kind for cls, kind in messages.CATALOGUE.values()} == {
        "Resume": Kind.MESSAGE,
        "Cancel": Kind.MESSAGE,
        "ForTask": Kind.MESSAGE,
        "Notify": Kind.MESSAGE,
        "Outcome": Kind.MESSAGE,
        "Failure": Kind.MESSAGE,
        "Exchange": Kind.LANE_MESSAGE,
        "Stop": Kind.LANE_MESSAGE,
        "ExchangeHead": Kind.LANE_MESSAGE,
        "StreamEvent": Kind.LANE_MESSAGE,
        "ExchangeEnd": Kind.LANE_MESSAGE,
        "ExchangeFailed": Kind.LANE_MESSAGE,
        "ClientAnswer": Kind.GATEWAY_QUESTION,
    }
    for cls, kind in messages.CATALOGUE.values():
        assert kind in formats.VERSIONS and kind in formats.MARKS, cls
    for message in SAMPLES:
        assert messages.CATALOGUE[json.loads(messages.encode(message))["op"]] == (
            type(message),
            messages.kind_of(message),
        )


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_every_message_reads_back_in_every_version_its_kind_is_read_in(
    message: messages.Message,
) -> None:
    kind = messages.kind_of(message)
    for version in formats.readable(kind):
        text = messages.encode(message, version)
        assert messages.decode(text) == message
        assert formats.unstamped(kind, json.loads(text))[0] == version
    assert messages.decode(messages.encode(message)) == message  # this release's own


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_a_message_is_written_in_the_version_the_fleets_level_says(
    message: messages.Message,
) -> None:
    kind = messages.kind_of(message)
    for level in (PREVIOUS, LEVEL):
        if not formats.known(kind, level):  # came with this release: written at none
            continue
        data = json.loads(messages.encode(message, formats.written(kind, level)))
        name, since = formats.MARKS[kind]
        written = formats.written(kind, level)
        assert data.get(name) == (written if written >= since else None), (level, data)


def test_the_lanes_messages_say_their_version_at_every_level() -> None:
    """They came with this release (level 2) and go to no replica of the previous one:
    written the same at both levels, with their version, so the next release can change
    one and tell it apart."""
    assert formats.VERSIONS[Kind.LANE_MESSAGE] == {PREVIOUS: 1, LEVEL: 1}
    stop = json.loads(messages.encode(messages.Stop("r"), formats.written(Kind.LANE_MESSAGE, 1)))
    assert stop == {"op": "legacy_stop", "reply": "r", "v": 1}
    with pytest.raises(ValueError):
        messages.decode('{"op":"legacy_stop","reply":"r"}')  # no version: none wrote that
    with pytest.raises(ValueError):
        messages.decode('{"op":"legacy_stop","reply":"r","v":2}')  # a newer release's


def test_an_answer_to_the_gateways_question_is_unknown_to_the_previous_level() -> None:
    """It came with this release, and nothing is asked while a replica of the previous
    one lives (it would pass the answer on to the server): never written at its level."""
    assert formats.VERSIONS[Kind.GATEWAY_QUESTION] == {PREVIOUS: None, LEVEL: 1}
    answer = messages.ClientAnswer("mrtr-ask/n/a~1", "s_1", {"id": "mrtr-ask/n/a~1"})
    text = messages.encode(answer, formats.written(Kind.GATEWAY_QUESTION, LEVEL))
    assert json.loads(text) == {
        "op": "legacy_answer",
        "question": "mrtr-ask/n/a~1",
        "session": "s_1",
        "answer": {"id": "mrtr-ask/n/a~1"},
        "v": 1,
    }
    assert messages.decode(text) == answer
    with pytest.raises(ValueError):
        formats.written(Kind.GATEWAY_QUESTION, PREVIOUS)
    with pytest.raises(ValueError):
        messages.decode('{"op":"legacy_answer","question":"q","session":"s","answer":{}}')


def test_a_message_of_the_previous_release_reads_as_it_was() -> None:
    """0.1.0 (tests/rollout/PREVIOUS_RELEASE) wrote a call's messages without a version."""
    assert messages.decode('{"op":"cancel","call":"c1","reply":"k"}') == messages.Cancel("c1", "k")
    notify = '{"op":"notify","notification":{"method":"notifications/progress"}}'
    assert messages.decode(notify) == messages.Notify({"method": "notifications/progress"})


BAD: list[Any] = [
    "[]",
    "null",
    '"resume"',
    '{"op":"launch"}',
    '{"op":["cancel"],"call":"c","reply":"r"}',  # an op that is no string
    '{"call":"c","reply":"r"}',  # no op
    '{"op":"cancel","call":"c"}',  # a field missing
    '{"op":"cancel","call":"c","reply":"r","x":1}',  # a field too many
    '{"op":"cancel","call":"c","reply":7}',  # a field of the wrong type
    '{"op":"failure","error":{},"status":"502","v":2}',
    '{"op":"failure","error":{},"status":true,"v":2}',  # a bool is no status
    '{"op":"for_task","task":"t","principal":"p","cancel":1,"v":2}',
    '{"op":"cancel","call":"c","reply":"r","v":3}',  # a version not read here
    '{"op":"legacy_head","status":200,"headers":[],"v":1}',
    '{"op":"legacy_exchange","verb":"GET","route":"r","session":3,"body":"","headers":{},'
    '"reply":"k","reader":"b","v":1}',
    '{"op":"legacy_event","data":"x","retry":"soon","v":1}',
    '{"op":"legacy_end","error":{"message":"x"},"v":1}',
    '{"op":"legacy_stop","reply":"r","v":1,"t":"head"}',
    '{"op":"legacy_answer","question":"q","session":"s","answer":"accept","v":1}',
    '{"op":"legacy_answer","question":"q","answer":{},"v":1}',
    "not json at all",
]


@pytest.mark.parametrize("text", BAD)
def test_anything_else_is_refused_whole(text: str) -> None:
    with pytest.raises(ValueError):
        messages.decode(text)


def test_optional_fields_may_be_left_out_and_none_where_they_allow_it() -> None:
    assert messages.decode('{"op":"legacy_end","v":1}') == messages.ExchangeEnd()
    assert messages.decode('{"op":"legacy_end","error":null,"v":1}') == messages.ExchangeEnd()
    head = '{"op":"legacy_head","status":404,"headers":{},"v":1}'
    assert messages.decode(head) == messages.ExchangeHead(404, {})
    event = '{"op":"legacy_event","data":"x","id":null,"retry":null,"v":1}'
    assert messages.decode(event) == messages.StreamEvent("x")
    exchange = (
        '{"op":"legacy_exchange","verb":"POST","route":"r","session":null,"body":"{}",'
        '"headers":{},"reply":"k","reader":"b","v":1}'
    )
    assert messages.decode(exchange) == messages.Exchange("POST", "r", None, "{}", {}, "k", "b")
    resume = '{"op":"resume","call":"c","round":1,"request_id":"r-1","method":"m",'
    resume += '"params":{},"reply":"k"}'
    assert messages.decode(resume) == messages.Resume("c", 1, "r-1", "m", {}, "k")
