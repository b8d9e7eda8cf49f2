"""What the audit trail records of a 2026 client's calls, as transcripts on the fakes: one
`call.started` and one `call.ended` per call, each round asked once and answered once, a
call's id kept across replicas, takeover and replay, the answers' actions without their
content, and a refused `requestState` with the reason its client is not told."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest

from gateway import logging as log_context
from gateway.aio import cancel_and_wait, spawn
from gateway.audit.trail import act_as
from gateway.errors import CallLost, InvalidRequestState
from gateway.protocol.audit import ContentPolicy, Who
from tests.fakes.audit import KeptSink, kept_trail
from tests.fakes.clock import ManualClock
from tests.fakes.fleet import Network
from tests.fakes.harness import (
    ALICE,
    WINDOW,
    Replica,
    ask_username,
    call_tool,
    config,
    two_replicas,
)
from tests.fakes.upstream import ScriptedServer, ScriptedSession
from tests.support import trail as joined

BOB = Who(kind="jwt", log_id="p_b0b", issuer="https://id.example", subject="bob", client="cli")
COLOR = {"elicit.color": {"action": "accept", "content": {"color": "ultramarine"}}}
SECRET_ARGUMENT = "argument-4711"
SECRET_RESULT = "result-0815"


@pytest.fixture(autouse=True)
def as_bob() -> Iterator[None]:
    """The requests of these transcripts are Bob's, as the front door would say."""
    act_as(BOB)
    log_context.bind(request_id="req-1")
    yield
    act_as(None)
    log_context.clear()


def traced(clock: ManualClock, server: ScriptedServer, **settings: Any) -> tuple[Replica, KeptSink]:
    audit, sink = kept_trail("r1", clock)
    return Replica(clock, server, settings=config(**settings), audit=audit), sink


async def second_round(
    replica: Replica,
    server: ScriptedServer,
    clock: ManualClock,
    first: dict[str, Any],
    session: ScriptedSession,
) -> dict[str, Any]:
    """Answer round 1 (at `replica`); the server asks a colour: round 2."""
    retry = spawn(
        replica.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r2"
    )
    await server.next_sent()
    session.elicit(8, "color")
    await clock.armed(clock.now + WINDOW)
    clock.advance(WINDOW)
    return await retry


async def test_a_call_of_two_rounds_is_recorded_once_each_step(
    clock: ManualClock, server: ScriptedServer
) -> None:
    replica, sink = traced(clock, server)
    first, session = await ask_username(replica, server, clock)
    second = await second_round(replica, server, clock, first, session)
    last = spawn(
        replica.call(call_tool(rid=3, state=second["requestState"], answers=COLOR)), name="r3"
    )
    await server.next_sent()
    session.respond({"content": [{"type": "text", "text": "Hello, alice!"}]})
    assert (await last)["resultType"] == "complete"
    assert sink.kinds() == [
        "call.started",
        "round.asked",
        "round.answered",
        "round.asked",
        "round.answered",
        "call.ended",
    ]
    (call_id,) = {e["call_id"] for e in sink.events}
    assert all(e["principal"] == BOB.to_json() and e["request_id"] == "req-1" for e in sink.events)
    assert all(e["era"] == "2026" and e["tool"] == "greet" for e in sink.events)
    asked = sink.of("round.asked")
    assert [(e["round"], e["questions"]) for e in asked] == [
        (1, [{"key": "elicit.username", "method": "elicitation/create", "mode": "form"}]),
        (2, [{"key": "elicit.color", "method": "elicitation/create", "mode": "form"}]),
    ]
    answered = sink.of("round.answered")
    assert [(e["round"], [a["action"] for a in e["answers"]]) for e in answered] == [
        (1, ["accept"]),
        (2, ["accept"]),
    ]
    (ended,) = sink.of("call.ended")
    assert (ended["outcome"], ended["rounds"], ended["is_error"]) == ("complete", 2, False)
    assert joined.problems({"kept": sink.events}) == []


async def test_a_declined_elicitation_is_recorded_decline_and_no_content_is_written(
    clock: ManualClock, server: ScriptedServer
) -> None:
    replica, sink = traced(clock, server)
    pending = spawn(replica.call(call_tool(arguments={"card": SECRET_ARGUMENT})), name="first")
    session = await server.next_call()
    session.elicit(7)
    await clock.armed(clock.now + WINDOW)
    clock.advance(WINDOW)
    first = await pending
    declined = {"elicit.username": {"action": "decline"}}
    retry = spawn(
        replica.call(
            call_tool(
                rid=2,
                arguments={"card": SECRET_ARGUMENT},
                state=first["requestState"],
                answers=declined,
            )
        ),
        name="r",
    )
    assert (await server.next_sent())["result"] == {"action": "decline"}
    session.respond({"content": [{"type": "text", "text": SECRET_RESULT}], "isError": True})
    await retry
    (answered,) = sink.of("round.answered")
    assert answered["answers"] == [
        {"key": "elicit.username", "method": "elicitation/create", "action": "decline"}
    ]
    (ended,) = sink.of("call.ended")
    assert ended["is_error"] is True
    written = b"\n".join(sink.lines)
    for secret in (SECRET_ARGUMENT, SECRET_RESULT, "Name?"):
        assert secret.encode() not in written  # no argument, result or question text


async def test_content_is_written_only_as_the_policy_says(
    clock: ManualClock, server: ScriptedServer
) -> None:
    audit, sink = kept_trail("r1", clock, ContentPolicy(arguments=True, results=True, answers=True))
    replica = Replica(clock, server, audit=audit)
    pending = spawn(replica.call(call_tool(arguments={"card": SECRET_ARGUMENT})), name="first")
    session = await server.next_call()
    session.elicit(7)
    await clock.armed(clock.now + WINDOW)
    clock.advance(WINDOW)
    first = await pending
    retry = spawn(
        replica.call(
            call_tool(
                rid=2,
                arguments={"card": SECRET_ARGUMENT},
                state=first["requestState"],
                answers=ALICE,
            )
        ),
        name="r",
    )
    await server.next_sent()
    session.respond({"content": [{"type": "text", "text": SECRET_RESULT}]})
    await retry
    (started,) = sink.of("call.started")
    assert SECRET_ARGUMENT in started["arguments"]["text"]
    (answered,) = sink.of("round.answered")
    assert "alice" in answered["answers"][0]["content"]["text"]
    (ended,) = sink.of("call.ended")
    assert SECRET_RESULT in ended["result"]["text"]
    assert "Name?" not in str(sink.of("round.asked"))  # questions were not asked for


async def test_an_unanswered_call_is_recorded_expired(
    clock: ManualClock, server: ScriptedServer
) -> None:
    replica, sink = traced(clock, server)
    await ask_username(replica, server, clock)
    (call,) = replica.bridge.calls.values()
    ttl = replica.config.limits.suspension_ttl_s
    act_as(None)  # the deadline comes with no request: the call remembers who it is for
    await clock.armed(clock.now + ttl)
    clock.advance(ttl)
    await call.ended.wait()
    (ended,) = sink.of("call.ended")
    assert (ended["outcome"], ended["rounds"]) == ("expired", 1)
    assert ended["principal"] == BOB.to_json()


async def test_a_client_that_leaves_mid_round_is_recorded_cancelled(
    clock: ManualClock, server: ScriptedServer
) -> None:
    replica, sink = traced(clock, server)
    pending = spawn(replica.call(call_tool()), name="first")
    await server.next_call()
    (call,) = replica.bridge.calls.values()
    await cancel_and_wait(pending)
    await call.ended.wait()
    assert sink.kinds() == ["call.started", "call.ended"]
    assert sink.of("call.ended")[0]["outcome"] == "cancelled"


async def test_an_upstream_error_is_recorded_with_its_code(
    clock: ManualClock, server: ScriptedServer
) -> None:
    replica, sink = traced(clock, server)
    pending = spawn(replica.call(call_tool()), name="first")
    session = await server.next_call()
    session.respond(error={"code": -32602, "message": f"bad card {SECRET_ARGUMENT}"})
    with pytest.raises(Exception):  # noqa: B017 - the upstream's error, translated
        await pending
    (ended,) = sink.of("call.ended")
    assert (ended["outcome"], ended["error"]) == ("error", {"code": -32602})
    assert SECRET_ARGUMENT.encode() not in b"".join(sink.lines)


async def test_a_call_whose_stream_breaks_after_it_asked_is_recorded_lost(
    clock: ManualClock, server: ScriptedServer
) -> None:
    replica, sink = traced(clock, server)
    first, session = await ask_username(replica, server, clock)
    retry = spawn(
        replica.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r"
    )
    await server.next_sent()
    session.break_stream()
    with pytest.raises(CallLost):
        await retry
    (ended,) = sink.of("call.ended")
    assert (ended["outcome"], ended["rounds"]) == ("lost", 1)


def flipped(token: str) -> str:
    raw = bytearray(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    raw[-1] ^= 1
    return base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")


async def test_tampered_and_replayed_states_are_recorded_with_their_reasons(
    clock: ManualClock, server: ScriptedServer
) -> None:
    replica, sink = traced(clock, server)
    first, session = await ask_username(replica, server, clock)
    token = first["requestState"]
    prefix, _, body = token.partition(".")
    tampered = f"{prefix}.{flipped(body)}" if body else flipped(token)
    with pytest.raises(InvalidRequestState) as refused:
        await replica.call(call_tool(rid=2, state=tampered, answers=ALICE))
    assert refused.value.error_object()["message"] == "Invalid or expired requestState"
    retry = spawn(replica.call(call_tool(rid=3, state=token, answers=ALICE)), name="r")
    await server.next_sent()
    with pytest.raises(InvalidRequestState) as replayed:  # the same state, again
        await replica.call(call_tool(rid=4, state=token, answers=ALICE))
    assert replayed.value.error_object() == refused.value.error_object()  # one generic error
    session.respond()
    await retry
    refusals = sink.of("request.refused")
    assert [(e["refusal"], e["reason"]) for e in refusals] == [
        ("request_state", "authentication failed"),
        ("request_state", "round already resumed (replay)"),
    ]
    (call_id,) = {e["call_id"] for e in sink.of("call.started")}
    assert "call_id" not in refusals[0]  # a state that does not open names no call
    assert refusals[1]["call_id"] == call_id and refusals[1]["tool"] == "greet"
    assert refusals[1]["principal"] == BOB.to_json() and refusals[1]["status"] == 400


async def test_a_call_taken_over_keeps_its_id_and_is_recorded_once_across_replicas(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    a_trail, a_sink = kept_trail("a", clock)
    b_trail, b_sink = kept_trail("b", clock)
    a, b = two_replicas(clock, server, network, audits={"a": a_trail, "b": b_trail})
    first, session = await ask_username(a, server, clock)
    network.kill("a")
    retry = spawn(b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r")
    adopted = await server.next_call()
    await server.next_sent()
    adopted.respond({"content": [{"type": "text", "text": "taken over"}]})
    await retry
    assert a_sink.kinds() == ["call.started", "round.asked"]
    assert b_sink.kinds() == ["round.answered", "call.ended"]
    assert {e["call_id"] for e in a_sink.events + b_sink.events} == {a_sink.events[0]["call_id"]}
    assert {e["replica"] for e in b_sink.events} == {"b"}
    assert joined.problems({"a": a_sink.events, "b": b_sink.events}) == []


async def test_a_retry_forwarded_to_the_owner_is_answered_there_once(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    a_trail, a_sink = kept_trail("a", clock)
    b_trail, b_sink = kept_trail("b", clock)
    a, b = two_replicas(clock, server, network, audits={"a": a_trail, "b": b_trail})
    first, session = await ask_username(a, server, clock)
    retry = spawn(b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r")
    await server.next_sent()
    session.respond()
    await retry
    assert a_sink.kinds() == ["call.started", "round.asked", "round.answered", "call.ended"]
    assert b_sink.events == []
    assert a_sink.of("round.answered")[0]["principal"] == BOB.to_json()


async def test_a_replayed_call_keeps_its_id_and_starts_once(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    a_trail, a_sink = kept_trail("a", clock)
    b_trail, b_sink = kept_trail("b", clock)
    a, b = two_replicas(
        clock,
        server,
        network,
        tools={"greet": {"replay_safe": True}},
        audits={"a": a_trail, "b": b_trail},
    )
    first, session = await ask_username(a, server, clock)
    second = await second_round(a, server, clock, first, session)
    network.kill("a")
    assert session.id is not None
    server.forgotten.add(session.id)  # no takeover: the upstream lost the session too
    replay = spawn(
        b.call(call_tool(rid=3, state=second["requestState"], answers=COLOR)), name="replay"
    )
    again = await server.next_call()
    again.elicit(1)
    again.elicit(2, "color")
    await server.next_sent()
    await server.next_sent()
    again.respond()
    assert (await replay)["resultType"] == "complete"
    assert b_sink.kinds() == ["round.answered", "call.ended"]
    assert b_sink.of("round.answered")[0]["round"] == 2
    everything = {"a": a_sink.events, "b": b_sink.events}
    assert {e["call_id"] for e in a_sink.events + b_sink.events} == {a_sink.events[0]["call_id"]}
    assert joined.problems(everything) == []
    assert list(joined.completed(everything)) == [a_sink.events[0]["call_id"]]


async def test_a_call_lost_with_its_owner_is_recorded_lost_by_the_replica_that_says_so(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    server.resumable = False  # no takeover, and greet is not replay-safe
    a_trail, a_sink = kept_trail("a", clock)
    b_trail, b_sink = kept_trail("b", clock)
    a, b = two_replicas(clock, server, network, audits={"a": a_trail, "b": b_trail})
    first, session = await ask_username(a, server, clock)
    network.kill("a")
    with pytest.raises(CallLost):
        await b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE))
    (ended,) = b_sink.of("call.ended")
    assert (ended["outcome"], ended["call_id"], ended["rounds"]) == (
        "lost",
        a_sink.events[0]["call_id"],
        1,
    )
    assert b_sink.kinds() == ["call.ended"]


async def test_a_replay_mode_call_keeps_its_id_over_its_runs(
    clock: ManualClock, server: ScriptedServer
) -> None:
    replica, sink = traced(clock, server, tools={"greet": {"mode": "replay"}})
    first, session = await ask_username(replica, server, clock)
    await server.next_sent()  # the run stopped where it asked
    retry = spawn(
        replica.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r"
    )
    again = await server.next_call()
    again.elicit(1)
    await server.next_sent()
    again.respond()
    assert (await retry)["resultType"] == "complete"
    assert sink.kinds() == ["call.started", "round.asked", "round.answered", "call.ended"]
    assert len({e["call_id"] for e in sink.events}) == 1
    assert joined.problems({"kept": sink.events}) == []


async def test_a_round_claimed_by_a_replica_that_died_is_not_recorded_answered_twice(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    """The replica that claimed the round may have recorded its answers before it died:
    the one that claims it again and goes on records the call's end, not the answers."""
    a_trail, a_sink = kept_trail("a", clock)
    b_trail, b_sink = kept_trail("b", clock)
    a, b = two_replicas(clock, server, network, audits={"a": a_trail, "b": b_trail})
    first, session = await ask_username(a, server, clock)
    (call_id,) = a.bridge.calls
    assert await a.store.claim(call_id, 1, "a") is not None  # a claimed it, then died
    network.kill("a")
    retry = spawn(b.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="r")
    beat = b.config.fleet.heartbeat_s
    taken = spawn(server.next_call(), name="taken")
    await clock.run_until_done(taken, step=beat / 8, limit=10 * beat)
    assert (await server.next_sent())["result"]["content"] == {"username": "alice"}
    (await taken).respond()
    await retry
    assert b_sink.kinds() == ["call.ended"]
    assert joined.problems({"a": a_sink.events, "b": b_sink.events}) == []
