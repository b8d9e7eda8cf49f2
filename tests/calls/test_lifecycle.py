"""Every transition of a call's life, as transcripts: the client's requests and the
scripted server's messages in, what the gateway answers and sends upstream out.

Time moves only by `clock.advance`; waits are on events."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.aio import spawn
from gateway.errors import (
    CallLost,
    GatewayFull,
    InvalidParams,
    InvalidRequestState,
    MissingClientCapability,
    PrincipalBusy,
    StoreError,
    TooManyRounds,
    UpstreamError,
    UpstreamTimeout,
)
from gateway.protocol.call import CallMachine, Phase
from gateway.store.memory import MemoryStore
from tests.fakes.clock import ManualClock
from tests.fakes.harness import ALICE, WINDOW, Replica, ask_username, call_tool, config
from tests.fakes.upstream import ScriptedServer


async def test_a_call_that_asks_nothing_completes_and_its_session_is_reused(
    replica: Replica, server: ScriptedServer
) -> None:
    pending = spawn(replica.call(call_tool()), name="call")
    session = await server.next_call()
    assert session.request is not None and session.request["method"] == "tools/call"
    session.respond({"content": [{"type": "text", "text": "hi"}]})
    result = await pending
    assert result["resultType"] == "complete" and result["content"][0]["text"] == "hi"
    assert replica.pool.released_reuse(session) is True
    assert len(replica.bridge.calls) == 0 and server.nothing_sent()


async def test_a_question_suspends_the_call_under_a_sealed_state(
    replica: Replica, server: ScriptedServer, clock: ManualClock
) -> None:
    result, session = await ask_username(replica, server, clock)
    assert result["resultType"] == "input_required"
    assert list(result["inputRequests"]) == ["elicit.username"]
    assert result["requestState"].startswith("gw1.")
    (call,) = replica.bridge.calls.values()
    assert call.phase is Phase.SUSPENDED and replica.bridge.parked == 1
    record = await replica.store.get(call.id)
    assert record is not None and record.owner == "r1" and record.round == 1
    assert record.session_id == session.id and record.last_event_id is not None
    assert server.nothing_sent()  # the server's question waits, unanswered


async def test_a_retry_delivers_the_answer_upstream_and_the_call_completes(
    replica: Replica, server: ScriptedServer, clock: ManualClock
) -> None:
    first, session = await ask_username(replica, server, clock)
    (call_id,) = replica.bridge.calls
    retry = spawn(
        replica.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="retry"
    )
    answer = await server.next_sent()
    assert answer == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {"action": "accept", "content": {"username": "alice"}},
    }
    session.respond({"content": [{"type": "text", "text": "Hello, alice!"}]})
    result = await retry
    assert result["resultType"] == "complete"
    assert replica.bridge.parked == 0 and len(replica.bridge.calls) == 0
    assert await replica.store.get(call_id) is None


class InterleavingStore(MemoryStore):
    """`get` answers only once two retries have both read the parked record, so both pass
    the status check and only the atomic claim can tell them apart."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.both_read = asyncio.Event()
        self.readers = 0

    async def get(self, call_id: str) -> Any:
        record = await super().get(call_id)
        self.readers += 1
        if self.readers >= 2:
            self.both_read.set()
        await self.both_read.wait()
        return record


async def test_a_round_resumes_once_and_the_second_use_of_its_state_is_refused(
    clock: ManualClock, server: ScriptedServer
) -> None:
    replica = Replica(clock, server, store=InterleavingStore(clock))
    first, session = await ask_username(replica, server, clock)
    request = call_tool(rid=2, state=first["requestState"], answers=ALICE)
    retries = [spawn(replica.call(request), name=f"retry-{n}") for n in range(2)]
    await server.next_sent()
    session.respond()
    outcomes = await asyncio.gather(*retries, return_exceptions=True)
    assert sum(isinstance(o, dict) for o in outcomes) == 1
    assert all(isinstance(o, InvalidRequestState) for o in outcomes if not isinstance(o, dict))
    with pytest.raises(InvalidRequestState):
        await replica.call(request)


async def test_state_of_another_principal_or_request_is_refused_and_the_round_survives(
    replica: Replica, server: ScriptedServer, clock: ManualClock
) -> None:
    first, session = await ask_username(replica, server, clock)
    token = first["requestState"]
    with pytest.raises(InvalidRequestState):
        await replica.call(call_tool(rid=2, state=token, answers=ALICE), principal="mallory")
    with pytest.raises(InvalidRequestState):
        await replica.call(call_tool("other", rid=2, state=token, answers=ALICE))
    with pytest.raises(InvalidParams):  # malformed answer: refused before the claim
        await replica.call(call_tool(rid=2, state=token, answers={"elicit.username": 3}))
    retry = spawn(replica.call(call_tool(rid=3, state=token, answers=ALICE)), name="retry")
    await server.next_sent()
    session.respond()
    assert (await retry)["resultType"] == "complete"


async def test_questions_in_one_window_share_a_round_and_a_later_one_gets_its_own(
    replica: Replica, server: ScriptedServer, clock: ManualClock
) -> None:
    pending = spawn(replica.call(call_tool()), name="first")
    session = await server.next_call()
    session.elicit(1, "username")
    await clock.armed(clock.now + WINDOW)
    clock.advance(WINDOW / 2)
    session.ask(2, "sampling/createMessage", {"messages": [], "maxTokens": 5})
    session.on_standalone({"jsonrpc": "2.0", "id": 3, "method": "roots/list"})
    await clock.armed(clock.now + WINDOW)  # each question opens the window again
    clock.advance(WINDOW)
    first = await pending
    assert sorted(first["inputRequests"]) == ["elicit.username", "roots", "sampling"]


async def test_an_answer_left_out_is_asked_again_after_the_window(
    replica: Replica, server: ScriptedServer, clock: ManualClock
) -> None:
    pending = spawn(replica.call(call_tool()), name="first")
    session = await server.next_call()
    session.elicit(1, "username")
    session.elicit(2, "color")
    await clock.armed(clock.now + WINDOW)
    clock.advance(WINDOW)
    first = await pending
    assert sorted(first["inputRequests"]) == ["elicit.color", "elicit.username"]
    retry = spawn(
        replica.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="retry"
    )
    assert (await server.next_sent())["id"] == 1
    await clock.armed(clock.now + WINDOW)
    clock.advance(WINDOW)
    second = await retry
    assert list(second["inputRequests"]) == ["elicit.color"]
    assert second["requestState"] != first["requestState"]


async def test_an_unanswered_call_expires_its_questions_released_and_cancelled_upstream(
    replica: Replica, server: ScriptedServer, clock: ManualClock
) -> None:
    first, session = await ask_username(replica, server, clock)
    (call,) = replica.bridge.calls.values()
    ttl = replica.config.limits.suspension_ttl_s
    await clock.armed(clock.now + ttl)
    clock.advance(ttl)
    assert await server.next_sent() == {"jsonrpc": "2.0", "id": 7, "result": {"action": "cancel"}}
    cancelled = await server.next_sent()
    assert cancelled["method"] == "notifications/cancelled"
    assert cancelled["params"]["requestId"] == session.call_id
    await call.ended.wait()
    assert call.phase is Phase.EXPIRED and replica.bridge.parked == 0
    assert replica.pool.released_reuse(session) is False
    assert await replica.store.get(call.id) is None
    with pytest.raises(InvalidRequestState):  # expired in the seal too
        await replica.call(call_tool(rid=2, state=first["requestState"], answers=ALICE))


async def test_a_round_claimed_by_a_retry_that_never_resumes_still_ends(
    replica: Replica, server: ScriptedServer, clock: ManualClock
) -> None:
    await ask_username(replica, server, clock)
    (call,) = replica.bridge.calls.values()
    assert await replica.store.claim(call.id, 1) is not None  # a claimer that then vanished
    ttl = replica.config.limits.suspension_ttl_s
    await clock.armed(clock.now + ttl)
    clock.advance(ttl)
    await clock.armed(clock.now + 30.0)  # the claim's grace period
    assert call.phase is Phase.SUSPENDED
    clock.advance(30.0)
    await call.ended.wait()
    assert call.phase is Phase.EXPIRED


async def test_a_client_that_goes_away_cancels_its_call_upstream(
    replica: Replica, server: ScriptedServer
) -> None:
    pending = spawn(replica.call(call_tool()), name="call")
    session = await server.next_call()
    (call,) = replica.bridge.calls.values()
    pending.cancel()
    cancelled = await server.next_sent()
    assert cancelled["method"] == "notifications/cancelled"
    assert cancelled["params"] == {"requestId": session.call_id, "reason": "client disconnected"}
    await call.ended.wait()
    assert call.phase is Phase.CANCELLED and replica.pool.released_reuse(session) is False


async def test_a_round_the_upstream_never_finishes_fails_at_the_hold_timeout(
    replica: Replica, server: ScriptedServer, clock: ManualClock
) -> None:
    pending = spawn(replica.call(call_tool()), name="call")
    session = await server.next_call()
    hold = replica.config.limits.hold_timeout_s
    await clock.armed(hold)
    clock.advance(hold)
    with pytest.raises(UpstreamTimeout):
        await pending
    assert (await server.next_sent())["params"]["requestId"] == session.call_id
    assert len(replica.bridge.calls) == 0


async def test_a_broken_stream_fails_a_new_call_and_loses_a_resumed_one(
    replica: Replica, server: ScriptedServer, clock: ManualClock
) -> None:
    pending = spawn(replica.call(call_tool()), name="call")
    (await server.next_call()).break_stream()
    with pytest.raises(UpstreamError) as failed:
        await pending
    assert failed.value.status == 502 and not isinstance(failed.value, CallLost)
    first, session = await ask_username(replica, server, clock)
    retry = spawn(
        replica.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="retry"
    )
    await server.next_sent()
    session.break_stream()
    with pytest.raises(CallLost):  # it had asked the client already: say it is gone
        await retry


async def test_a_question_for_an_undeclared_capability_is_refused_both_ways(
    replica: Replica, server: ScriptedServer
) -> None:
    pending = spawn(replica.call(call_tool(caps={"elicitation": {"form": {}}})), name="call")
    session = await server.next_call()
    session.ask(5, "sampling/createMessage", {"messages": [], "maxTokens": 5})
    with pytest.raises(MissingClientCapability) as refused:
        await pending
    assert refused.value.data == {"requiredCapabilities": {"sampling": {}}}
    assert (await server.next_sent())["error"]["code"] == -32601  # the server is not left hanging
    assert (await server.next_sent())["method"] == "notifications/cancelled"


async def test_pings_progress_and_logs_during_a_call(
    replica: Replica, server: ScriptedServer
) -> None:
    request = call_tool(progress="client-token", log_level="warning")
    pending = spawn(replica.call(request), name="call")
    session = await server.next_call()
    assert session.request is not None
    token = session.request["params"]["_meta"]["progressToken"]
    session.ask(9, "ping", {})
    session.notify("notifications/progress", {"progressToken": token, "progress": 1})
    session.notify("notifications/progress", {"progressToken": "someone-else", "progress": 2})
    session.notify("notifications/message", {"level": "info", "data": "quiet"})
    session.notify("notifications/message", {"level": "error", "data": "loud"})
    session.respond()
    await pending
    assert await server.next_sent() == {"jsonrpc": "2.0", "id": 9, "result": {}}
    assert [n["params"].get("progressToken") for n in replica.notified] == ["client-token", None]
    assert replica.notified[1]["params"]["data"] == "loud"


async def test_a_call_needing_too_many_rounds_fails_with_its_bound(
    clock: ManualClock, server: ScriptedServer
) -> None:
    replica = Replica(clock, server, settings=config(max_rounds=1))
    first, session = await ask_username(replica, server, clock)
    retry = spawn(
        replica.call(call_tool(rid=2, state=first["requestState"], answers=ALICE)), name="retry"
    )
    await server.next_sent()
    session.elicit(8, "color")
    await clock.armed(clock.now + WINDOW)
    clock.advance(WINDOW)
    with pytest.raises(TooManyRounds) as refused:
        await retry
    assert refused.value.status == 502 and refused.value.data == {"reason": "max_rounds"}
    assert await server.next_sent() == {"jsonrpc": "2.0", "id": 8, "result": {"action": "cancel"}}


async def test_parked_call_caps_per_principal_and_per_replica(
    clock: ManualClock, server: ScriptedServer
) -> None:
    replica = Replica(
        clock, server, settings=config(max_parked_per_principal=1, max_parked_calls=2)
    )
    await ask_username(replica, server, clock, principal="alice")
    with pytest.raises(PrincipalBusy) as busy:
        await ask_username(replica, server, clock, principal="alice")
    assert busy.value.status == 429
    assert await server.next_sent() == {"jsonrpc": "2.0", "id": 7, "result": {"action": "cancel"}}
    assert (await server.next_sent())["params"]["reason"] == "max_parked_per_principal"
    await ask_username(replica, server, clock, principal="bob")
    with pytest.raises(GatewayFull) as full:
        await ask_username(replica, server, clock, principal="carol")
    assert full.value.status == 503 and replica.bridge.parked == 2
    assert (await server.next_sent())["result"] == {"action": "cancel"}
    assert (await server.next_sent())["params"]["reason"] == "max_parked_calls"
    assert replica.bridge.calls.principals_parked == {"alice": 1, "bob": 1}


async def test_a_store_that_fails_while_parking_fails_the_call_and_releases_the_server(
    clock: ManualClock, server: ScriptedServer
) -> None:
    class BrokenStore(MemoryStore):
        async def park(self, record: Any) -> None:
            raise StoreError("store down")

    replica = Replica(clock, server, store=BrokenStore(clock))
    with pytest.raises(StoreError) as failed:
        await ask_username(replica, server, clock)
    assert failed.value.status == 503
    assert await server.next_sent() == {"jsonrpc": "2.0", "id": 7, "result": {"action": "cancel"}}
    (call,) = [s for s in server.sessions]
    assert replica.pool.released_reuse(call) is False and replica.bridge.parked == 0


async def test_a_form_answer_that_misses_the_schema_is_asked_again_saying_why(
    replica: Replica, server: ScriptedServer, clock: ManualClock
) -> None:
    pending = spawn(replica.call(call_tool()), name="first")
    session = await server.next_call()
    session.ask(
        4,
        "elicitation/create",
        {
            "message": "How old?",
            "requestedSchema": {
                "type": "object",
                "properties": {"age": {"type": "integer", "minimum": 0}},
                "required": ["age"],
            },
        },
    )
    await clock.armed(clock.now + WINDOW)
    clock.advance(WINDOW)
    first = await pending
    wrong = {"elicit.age": {"action": "accept", "content": {"age": -3}}}
    retry = spawn(
        replica.call(call_tool(rid=2, state=first["requestState"], answers=wrong)), name="retry"
    )
    await clock.armed(clock.now + WINDOW)
    clock.advance(WINDOW)
    second = await retry
    asked = second["inputRequests"]["elicit.age"]["params"]
    assert asked["message"] == (
        "How old?\n\n(The previous answer was not accepted: 'age' must be at least 0.)"
    )
    assert asked["requestedSchema"]["required"] == ["age"]
    assert server.nothing_sent()  # the server still waits for a fitting answer
    right = {"elicit.age": {"action": "accept", "content": {"age": 30}}}
    last = spawn(
        replica.call(call_tool(rid=3, state=second["requestState"], answers=right)), name="last"
    )
    assert (await server.next_sent())["result"]["content"] == {"age": 30}
    session.respond()
    assert (await last)["resultType"] == "complete"


async def test_a_defect_delivering_answers_ends_the_call_instead_of_stranding_it(
    replica: Replica, server: ScriptedServer, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a retry has resumed a call its deadline is gone: an unexpected error before
    the answers go upstream must end the call (upstream too), not leave it running for
    nobody with its round claimed."""
    first, session = await ask_username(replica, server, clock)

    def broken(self: CallMachine, responses: Any) -> Any:
        raise RuntimeError("a defect")

    monkeypatch.setattr(CallMachine, "deliver", broken)
    with pytest.raises(RuntimeError):
        await replica.call(call_tool(rid=2, state=first["requestState"], answers=ALICE))
    assert replica.bridge.calls == {}
    assert await server.next_sent() == {"jsonrpc": "2.0", "id": 7, "result": {"action": "cancel"}}
    cancelled = await server.next_sent()
    assert cancelled["method"] == "notifications/cancelled"
    assert cancelled["params"]["requestId"] == session.call_id


async def test_a_call_whose_round_fails_of_a_gateway_defect_ends_and_frees_its_session(
    replica: Replica, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Something unexpected raised while a round ran (a defect, not an upstream's or a
    client's error): the call ends, upstream too, rather than stay held for nobody."""
    from tests.fakes.upstream import ScriptedSession

    real_start = ScriptedSession.start

    async def broken(self: ScriptedSession, *args: Any, **kwargs: Any) -> Any:
        await real_start(self, *args, **kwargs)
        raise RuntimeError("a defect")

    monkeypatch.setattr(ScriptedSession, "start", broken)
    with pytest.raises(RuntimeError):
        await replica.call(call_tool())
    session = await server.next_call()
    assert not replica.bridge.calls and replica.pool.released_reuse(session) is False
    assert (await server.next_sent())["method"] == "notifications/cancelled"
