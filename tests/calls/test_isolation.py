"""A session serves one caller, in the call core: the sessions a call takes, takes over or
runs a task on are its caller's; a question the server asked the session before the call
is asked of the caller first, the call's own request sent once it is answered; a question
asked as a call ends is held by its session for the caller's next call, never dropped.
Transcripts on a manual clock and a scripted upstream."""

from __future__ import annotations

from gateway.aio import spawn
from tests.fakes.clock import ManualClock
from tests.fakes.fleet import Network
from tests.fakes.harness import ALICE, WINDOW, Replica, ask_username, call_tool, two_replicas
from tests.fakes.upstream import ScriptedServer

ROOTS_ASKED = {"jsonrpc": "2.0", "id": "at-start", "method": "roots/list", "params": {}}
ROOTS = {"roots": [{"uri": "file:///home/alice", "name": "home"}]}


async def test_a_question_held_for_the_caller_is_asked_before_the_call_goes_upstream(
    clock: ManualClock, server: ScriptedServer, replica: Replica
) -> None:
    server.asks_at_start = [ROOTS_ASKED]
    pending = spawn(replica.call(call_tool("greet")), name="first")
    await clock.armed(clock.now + WINDOW)
    clock.advance(WINDOW)
    first = await pending
    assert first["resultType"] == "input_required"
    [(key, question)] = first["inputRequests"].items()
    assert question["method"] == "roots/list"
    (session,) = server.sessions
    assert session.request is None and server.calls.empty()  # nothing sent upstream yet
    retry = spawn(
        replica.call(call_tool("greet", rid=2, state=first["requestState"], answers={key: ROOTS})),
        name="retry",
    )
    answer = await server.next_sent()
    assert answer == {"jsonrpc": "2.0", "id": "at-start", "result": ROOTS}
    assert await server.next_call() is session  # the call's own request, only now
    assert session.request is not None and session.request["params"]["name"] == "greet"
    session.respond({"content": [{"type": "text", "text": "in /home/alice"}]})
    assert (await retry)["content"][0]["text"] == "in /home/alice"


async def test_a_question_asked_as_the_call_ends_is_held_for_the_callers_next_call(
    clock: ManualClock, server: ScriptedServer, replica: Replica
) -> None:
    pending = spawn(replica.call(call_tool("greet")), name="call")
    session = await server.next_call()
    session.ask(9, "roots/list", {})  # just before the result
    session.respond({"content": [{"type": "text", "text": "done"}]})
    assert (await pending)["content"][0]["text"] == "done"
    assert replica.pool.released_reuse(session) is True
    assert session.held.take() == [
        {"jsonrpc": "2.0", "id": 9, "method": "roots/list", "params": {}}
    ]
    assert server.sent.empty()  # not answered on the caller's behalf


async def test_calls_tasks_and_takeovers_run_on_sessions_of_their_own_caller(
    clock: ManualClock, server: ScriptedServer, network: Network
) -> None:
    a, b = two_replicas(clock, server, network)
    first, session = await ask_username(a, server, clock, principal="carol")
    assert session.principal == "carol"
    network.kill("a")
    request = call_tool(rid=2, state=first["requestState"], answers=ALICE)
    retry = spawn(b.call(request, principal="carol"), name="retry")
    adopted = await server.next_call()
    assert adopted.id == session.id and adopted.principal == "carol"  # the same caller's
    await server.next_sent()
    adopted.respond({"content": [{"type": "text", "text": "taken over"}]})
    assert (await retry)["content"][0]["text"] == "taken over"
