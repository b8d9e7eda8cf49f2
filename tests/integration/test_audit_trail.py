"""The audit trail of a gateway in front of a real legacy server, written to every sink at
once (the log stream, a file, a Redis stream): with the defaults no value of a call
reaches any of them, a declined question is recorded `decline`, and a tampered or replayed
`requestState` is recorded with its reason while the client gets the one generic error."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from structlog.testing import capture_logs

from gateway.audit.stream import StreamSink
from gateway.config.audit import stream_key
from gateway.store.redis_client import connect
from tests.peers.tooling import RedisServer
from tests.support import trail as joined
from tests.support.inprocess import Gateway
from tests.support.legacy import greet
from tests.support.wire import FROZEN, rpc

pytestmark = pytest.mark.peers


class Trail:
    """A gateway writing its trail to every sink, and what each sink holds."""

    def __init__(self, gateway: Gateway, file: Path, redis_url: str, key: str, logs: list) -> None:
        self.gateway = gateway
        self.file = file
        self.redis_url = redis_url
        self.key = key
        self.logs = logs

    async def sinks(self) -> dict[str, list[dict[str, Any]]]:
        """Every sink's events, once each sink has written what it holds."""
        audit = self.gateway.bridge.lifecycle.trail.audit
        await asyncio.sleep(0)  # the file's lines of the step are written as it ends
        for sink in audit.sinks:
            if isinstance(sink, StreamSink):
                async with asyncio.timeout(10):
                    await sink.drained()
        client = connect(self.redis_url)
        try:
            entries = await client.xrange(self.key, "-", "+")
        finally:
            await client.aclose()
        return {
            "log": [line["audit"] for line in self.logs if line.get("event") == "audit"],
            "file": joined.from_lines(self.file.read_bytes().splitlines()),
            "stream": joined.from_stream(entries),
        }

    async def written(self) -> bytes:
        """Everything the sinks hold, as bytes to look for a value in."""
        sinks = await self.sinks()
        return b"\n".join(orjson.dumps(e) for events in sinks.values() for e in events)


@pytest.fixture
async def trail(make_gateway: Callable[..., Any], redis_server: RedisServer, tmp_path: Path) -> Any:
    name = f"t{uuid.uuid4().hex[:8]}"
    file = tmp_path / "audit.jsonl"
    audit = {
        "log": True,
        "file": {"path": str(file)},
        "stream": {"url": redis_server.url, "name": name},
    }
    with capture_logs() as logs:  # the log sink's lines (it is built as the gateway starts)
        gateway = await make_gateway(audit=audit)
        yield Trail(gateway, file, redis_server.url, stream_key("mrtr:", name), logs)


def confirm(
    run_id: str, action: str, *, rid: int = 1, state: str | None = None, answers: Any = None
) -> dict[str, Any]:
    params: dict[str, Any] = {
        "name": "confirm_action",
        "arguments": {"action": action, "run_id": run_id},
    }
    if state is not None:
        params["requestState"] = state
    if answers is not None:
        params["inputResponses"] = answers
    return rpc("tools/call", params, rid=rid)


async def test_with_the_defaults_no_value_of_a_call_reaches_any_sink(trail: Trail) -> None:
    gateway = trail.gateway
    run_id, action = uuid.uuid4().hex, f"launch-{uuid.uuid4().hex[:8]}"
    status, reply, _ = await gateway.post(confirm(run_id, action))
    first = reply["result"]
    (key,) = first["inputRequests"]
    declined = {key: {"action": "decline"}}
    status, reply, _ = await gateway.post(
        confirm(run_id, action, rid=2, state=first["requestState"], answers=declined)
    )
    assert reply["result"]["content"][0]["text"] == f"{action}: decline"
    name = f"zelda-{uuid.uuid4().hex[:8]}"
    other = uuid.uuid4().hex
    _, reply, _ = await gateway.post(greet(other))
    answers = {"elicit.username": {"action": "accept", "content": {"username": name}}}
    _, reply, _ = await gateway.post(
        greet(other, rid=3, state=reply["result"]["requestState"], answers=answers)
    )
    assert reply["result"]["content"][0]["text"] == f"Hello, {name}!"
    await gateway.until_calls_ended()
    sinks = await trail.sinks()
    # Every sink holds every event, once, and the trail keeps its promises.
    assert len(sinks["log"]) == len(sinks["file"]) == len(sinks["stream"]) == 8
    assert {e["id"] for e in sinks["log"]} == {e["id"] for e in sinks["file"]}
    assert {e["id"] for e in sinks["file"]} == {e["id"] for e in sinks["stream"]}
    assert joined.problems(sinks) == []
    assert {str(e["principal"]) for e in sinks["file"]} == {str({"kind": "anonymous"})}
    (declined_round, accepted_round) = [e for e in sinks["file"] if e["kind"] == "round.answered"]
    assert declined_round["answers"] == [
        {"key": key, "method": "elicitation/create", "action": "decline"}
    ]
    assert accepted_round["answers"][0]["action"] == "accept"
    # No argument, question, answer or result text, in any sink.
    written = await trail.written()
    for value in (action, run_id, other, name, "Really", "Hello"):
        assert value.encode() not in written, value


def register(
    run_id: str, *, rid: int = 1, state: str | None = None, answers: Any = None
) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "register", "arguments": {"run_id": run_id}}
    if state is not None:
        params["requestState"] = state
    if answers is not None:
        params["inputResponses"] = answers
    return rpc("tools/call", params, rid=rid)


async def test_tampered_and_replayed_states_are_recorded_with_their_reasons(trail: Trail) -> None:
    gateway = trail.gateway
    run_id = uuid.uuid4().hex
    _, reply, _ = await gateway.post(register(run_id))
    first = reply["result"]["requestState"]
    tampered = first[:-2] + ("AA" if not first.endswith("AA") else "BB")
    name = {"elicit.username": {"action": "accept", "content": {"username": "alice"}}}
    status, reply, _ = await gateway.post(register(run_id, rid=2, state=tampered, answers=name))
    assert (status, reply["error"]) == (400, FROZEN)
    status, reply, _ = await gateway.post(register(run_id, rid=3, state=first, answers=name))
    second = reply["result"]
    assert second["resultType"] == "input_required"  # round 2 parked
    status, reply, _ = await gateway.post(register(run_id, rid=4, state=first, answers=name))
    assert (status, reply["error"]) == (400, FROZEN)  # round 1's state again: the same error
    (key,) = second["inputRequests"]
    more = {key: {"action": "accept", "content": {"age": 30, "color": "green"}}}
    _, reply, _ = await gateway.post(
        register(run_id, rid=5, state=second["requestState"], answers=more)
    )
    assert reply["result"]["resultType"] == "complete"
    status, reply, _ = await gateway.post(
        register(run_id, rid=6, state=second["requestState"], answers=more)
    )
    assert (status, reply["error"]) == (400, FROZEN)  # the call is over: the same error
    await gateway.until_calls_ended()
    sinks = await trail.sinks()
    refusals = [e for e in sinks["file"] if e["kind"] == "request.refused"]
    assert [(e["refusal"], e["reason"]) for e in refusals] == [
        ("request_state", "authentication failed"),
        ("request_state", "round already resumed (replay)"),
        ("request_state", "no live call (finished, expired or never parked)"),
    ]
    (started,) = [e for e in sinks["file"] if e["kind"] == "call.started"]
    assert "call_id" not in refusals[0]  # a state that does not open names no call
    assert {e["call_id"] for e in refusals[1:]} == {started["call_id"]}
    assert all(e["request_id"] and e["tool"] == "register" for e in refusals)
    assert joined.problems(sinks) == []
