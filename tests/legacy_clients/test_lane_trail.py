"""What the audit trail records of a 2025 client, as it records a 2026 client's calls: its
session opened and closed, its call started and ended, each question pushed to it a round
asked and its answer a round answered (the question relayed with its id tagged with the
call, the server getting its own id back), and a session id another principal presents
refused with its reason. The gateway in process, in front of a Streamable HTTP server the
test plays."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.aio import spawn
from gateway.app import build_app
from gateway.web.serving import serve
from tests.support import trail as joined
from tests.support.inprocess import Gateway, gateway_config
from tests.support.legacy_wire import HEADERS, VERSION, call, open_session, send
from tests.support.streamable import StreamableServer

SECRET = "launch-code-4711"


@pytest.fixture
async def server() -> AsyncIterator[StreamableServer]:
    played = await StreamableServer(streamed={"tools/call"}).start()
    yield played
    await played.stop()


@pytest.fixture
async def gateway(server: StreamableServer, tmp_path: Path) -> AsyncIterator[Gateway]:
    config = gateway_config(server.url, audit={"file": {"path": str(tmp_path / "audit.jsonl")}})
    served = await serve(build_app(config), "127.0.0.1", 0, idle_timeout_s=75)
    http = aiohttp.ClientSession()
    try:
        yield Gateway(served, http, server.url)
    finally:
        await http.close()
        await served.close()


def events(tmp_path: Path) -> list[dict[str, Any]]:
    return joined.from_lines((tmp_path / "audit.jsonl").read_bytes().splitlines())


async def post(
    http: aiohttp.ClientSession, url: str, body: Any, headers: dict[str, str]
) -> aiohttp.ClientResponse:
    """A POST whose answer is read as it comes (`ClientStream`): its head, once sent."""
    return await http.post(url, json=body, headers=headers)


class ClientStream:
    """A POST's answer as the client reads it: message by message, as they come."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response

    async def next_message(self) -> dict[str, Any]:
        async with asyncio.timeout(5):
            while True:
                line = await self.response.content.readline()
                assert line, "the stream ended"
                if line.startswith(b"data:"):
                    return json.loads(line[5:])


async def test_a_2025_call_is_recorded_as_a_2026_one_its_questions_as_rounds(
    gateway: Gateway, server: StreamableServer, tmp_path: Path
) -> None:
    http, url = gateway.http, gateway.url
    session = await open_session(http, url)
    headers = {**HEADERS, "Mcp-Session-Id": session, "MCP-Protocol-Version": VERSION}
    # The answer's head waits for what the server says first: the question, said at once.
    posting = spawn(post(http, url, call("deploy", rid=2, code=SECRET), headers), name="post")
    stream = await server.next_stream("tools/call")
    ask = {"message": f"Really use {SECRET}?", "requestedSchema": {"type": "object"}}
    question = {"jsonrpc": "2.0", "id": 7, "method": "elicitation/create", "params": ask}
    await stream.send(question)
    async with await posting as resp:
        client = ClientStream(resp)
        pushed = await client.next_message()
        assert pushed["method"] == "elicitation/create" and pushed["params"] == ask
        assert isinstance(pushed["id"], str) and pushed["id"] != 7  # tagged with its call
        answer = {"jsonrpc": "2.0", "id": pushed["id"], "result": {"action": "decline"}}
        accepted = await send(http, url, answer, session=session)
        assert accepted.status == 202
        assert server.received[-1] == {**answer, "id": 7}  # the server's own id, back
        await stream.respond({"content": [{"type": "text", "text": SECRET}]})
        response = await client.next_message()
        assert response["id"] == 2 and "result" in response
    deleted = await send(http, url, None, session=session, method="DELETE")
    assert deleted.status == 200
    recorded = events(tmp_path)
    assert [e["kind"] for e in recorded] == [
        "session.opened",
        "call.started",
        "round.asked",
        "round.answered",
        "call.ended",
        "session.closed",
    ]
    assert {e["era"] for e in recorded} == {"2025"}
    assert len({e["session"] for e in recorded}) == 1
    assert len({e["call_id"] for e in recorded if "call_id" in e}) == 1
    opened = recorded[0]
    assert opened["protocol_version"] == VERSION
    assert opened["client"] == {"name": "pytest-legacy", "version": "0"}
    asked, answered, ended = recorded[2:5]
    assert asked["questions"] == [{"key": "7", "method": "elicitation/create", "mode": "form"}]
    assert (asked["round"], answered["round"]) == (1, 1)
    assert answered["answers"] == [
        {"key": "7", "method": "elicitation/create", "action": "decline"}
    ]
    assert (ended["outcome"], ended["rounds"], ended["tool"]) == ("complete", 1, "deploy")
    assert recorded[-1]["how"] == "deleted"
    assert SECRET.encode() not in (tmp_path / "audit.jsonl").read_bytes()  # the defaults
    assert joined.problems({"file": recorded}) == []


async def test_a_session_id_presented_by_another_principal_is_recorded_refused(
    gateway: Gateway, tmp_path: Path
) -> None:
    http, url = gateway.http, gateway.url
    session = await open_session(http, url, headers={"Authorization": "Bearer alice"})
    refused = await send(
        http, url, call("deploy", rid=2), session=session, headers={"Authorization": "Bearer bob"}
    )
    assert refused.status == 404
    (event,) = [e for e in events(tmp_path) if e["kind"] == "request.refused"]
    assert (event["refusal"], event["reason"], event["era"]) == (
        "session",
        "principal mismatch",
        "2025",
    )
    assert event["status"] == 404 and event["method"] == "tools/call"
    assert event["principal"]["kind"] == "unauthenticated"  # bob's keyed log id, no token
    assert "bob" not in json.dumps(event) and "alice" not in json.dumps(event)


async def test_an_answer_to_a_question_relayed_untagged_goes_on_as_it_came(
    gateway: Gateway, server: StreamableServer
) -> None:
    """A question outside any call (or from a fleet that did not tag it) keeps its id, and
    an answer that names no tagged id is passed on untouched."""
    session = await open_session(gateway.http, gateway.url)
    answer = {"jsonrpc": "2.0", "id": "mrtr-q/not-a-tag", "result": {"action": "cancel"}}
    reply = await send(gateway.http, gateway.url, answer, session=session)
    assert reply.status == 202 and server.received[-1] == answer


async def test_without_a_trail_questions_keep_their_ids(
    server: StreamableServer,
) -> None:
    served = await serve(build_app(gateway_config(server.url)), "127.0.0.1", 0, idle_timeout_s=75)
    http = aiohttp.ClientSession()
    try:
        url = str(served.make_url("/mcp"))
        session = await open_session(http, url)
        headers = {**HEADERS, "Mcp-Session-Id": session, "MCP-Protocol-Version": VERSION}
        posting = spawn(post(http, url, call("deploy", rid=2), headers), name="post")
        stream = await server.next_stream("tools/call")
        question = {"jsonrpc": "2.0", "id": 7, "method": "roots/list", "params": {}}
        await stream.send(question)
        async with await posting as resp:
            assert await ClientStream(resp).next_message() == question
            stream.end()
    finally:
        await http.close()
        await served.close()
