"""The gateway's own questions to a 2025 client (`gateway.legacy_clients.asking`), as
transcripts: the gateway in process on a manual clock, a `calling` seam that asks an
approval of every call of `echo` (`tests.support.asking`), in front of a Streamable HTTP
server the test plays. Nothing sleeps.

- The question comes first on the call's stream, with the gateway's own id; nothing has
  gone upstream yet. The client's answer (a POST of its own) gets 202 and never reaches
  the server; the call then goes upstream and its answer follows on the same stream.
- Declined, the call is refused on that stream and never reaches the server.
- Unanswered for `limits.suspension_ttl_s`, the call ends with `QuestionExpired`.
- An answer to a gateway question nobody waits for (an unknown one, another replica's
  that is gone, another session's) gets 202, is logged, and never reaches the server.
- A client that declared no elicitation is not asked.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import structlog

from gateway.app import COMPONENTS, build_app
from gateway.protocol.legacy_asking import PREFIX, question_of
from gateway.protocol.sse import Parser
from gateway.seams import Seams
from gateway.web.serving import serve
from tests.fakes.clock import ManualClock
from tests.support.asking import APPROVAL, NotApproved, approving
from tests.support.inprocess import Gateway, gateway_config
from tests.support.legacy_wire import HEADERS, VERSION, call, open_session, send
from tests.support.streamable import StreamableServer

TTL_S = 60.0
ECHOED = {"content": [{"type": "text", "text": "hi"}]}
ELICITING = {"elicitation": {}}


@pytest.fixture
async def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def server() -> AsyncIterator[StreamableServer]:
    played = await StreamableServer({"tools/call": ECHOED}).start()
    yield played
    await played.stop()


@pytest.fixture
async def gateway(clock: ManualClock, server: StreamableServer) -> AsyncIterator[Gateway]:
    config = gateway_config(server.url, limits={"suspension_ttl_s": TTL_S, "keepalive_s": 15})
    app = build_app(config, clock=clock, seams=Seams(calling=(approving,)))
    served = await serve(app, "127.0.0.1", 0, idle_timeout_s=75)
    http = aiohttp.ClientSession()
    try:
        yield Gateway(served, http, server.url)
    finally:
        await http.close()
        await served.close()


class Events:
    """A POST's SSE answer read message by message as it comes (keepalives skipped)."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp
        self.parser = Parser()

    async def next(self) -> Any:
        async with asyncio.timeout(5):
            while True:
                frame = await self.resp.content.readuntil(b"\n\n")
                messages = [json.loads(e.data) for e in self.parser.feed(frame) if e.data]
                if messages:
                    (message,) = messages
                    return message


async def calling_echo(gateway: Gateway, session: str) -> tuple[aiohttp.ClientResponse, Events]:
    headers = {**HEADERS, "Mcp-Session-Id": session, "MCP-Protocol-Version": VERSION}
    body = json.dumps(call("echo", rid=7, text="hi")).encode()
    resp = await gateway.http.post(gateway.url, data=body, headers=headers)
    assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
    assert resp.headers["Mcp-Session-Id"] == session
    return resp, Events(resp)


def answer(question: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": question["id"], "result": result}


def calls_upstream(server: StreamableServer) -> list[Any]:
    return [m for m in server.received if m.get("method") == "tools/call"]


def answers_upstream(server: StreamableServer) -> list[Any]:
    return [m for m in server.received if "method" not in m]


async def test_the_call_is_asked_first_and_goes_upstream_once_approved_on_the_same_stream(
    gateway: Gateway, server: StreamableServer
) -> None:
    session = await open_session(gateway.http, gateway.url, capabilities=ELICITING)
    resp, events = await calling_echo(gateway, session)
    async with resp:
        question = await events.next()
        assert question["method"] == "elicitation/create"
        assert question["params"]["message"] == APPROVAL
        assert question["id"].startswith(PREFIX) and question_of(question["id"]) is not None
        assert calls_upstream(server) == []  # nothing went upstream before the answer

        accepted = {"action": "accept", "content": {"approve": True}}
        reply = await send(gateway.http, gateway.url, answer(question, accepted), session=session)
        assert (reply.status, reply.raw) == (202, b"")

        assert await events.next() == {"jsonrpc": "2.0", "id": 7, "result": ECHOED}
        assert await resp.content.read() == b""  # the stream's end
    assert [c["params"]["name"] for c in calls_upstream(server)] == ["echo"]
    assert answers_upstream(server) == []  # the gateway's answer stayed the gateway's


async def test_a_declined_call_is_refused_on_its_stream_and_never_goes_upstream(
    gateway: Gateway, server: StreamableServer
) -> None:
    session = await open_session(gateway.http, gateway.url, capabilities=ELICITING)
    resp, events = await calling_echo(gateway, session)
    async with resp:
        question = await events.next()
        reply = await send(
            gateway.http, gateway.url, answer(question, {"action": "decline"}), session=session
        )
        assert reply.status == 202
        refused = await events.next()
        assert refused["id"] == 7 and refused["error"]["code"] == NotApproved.code
        assert await resp.content.read() == b""
    assert calls_upstream(server) == [] and answers_upstream(server) == []


async def test_a_question_unanswered_for_the_suspension_ttl_ends_the_call_with_an_error(
    gateway: Gateway, server: StreamableServer, clock: ManualClock
) -> None:
    session = await open_session(gateway.http, gateway.url, capabilities=ELICITING)
    resp, events = await calling_echo(gateway, session)
    async with resp:
        await events.next()  # the question, never answered
        await clock.armed(clock.now + TTL_S)
        clock.advance(TTL_S)
        expired = await events.next()
        assert expired["id"] == 7
        assert expired["error"]["code"] == -32603
        assert expired["error"]["data"] == {"reason": "suspension_ttl_s"}
        assert await resp.content.read() == b""
    assert calls_upstream(server) == []


async def test_an_answer_nobody_waits_for_is_accepted_and_never_reaches_the_server(
    gateway: Gateway, server: StreamableServer
) -> None:
    session = await open_session(gateway.http, gateway.url, capabilities=ELICITING)
    stray = [
        f"{PREFIX}unknown/{question_replica(gateway)}",  # this replica's, never asked
        f"{PREFIX}unknown/gone~0000",  # another replica's, not in the fleet
        f"{PREFIX}malformed",  # the gateway's prefix, nothing after it
    ]
    with structlog.testing.capture_logs() as logs:
        for rid in stray:
            message = {"jsonrpc": "2.0", "id": rid, "result": {"action": "accept"}}
            reply = await send(gateway.http, gateway.url, message, session=session)
            assert (reply.status, reply.raw) == (202, b""), rid
    assert answers_upstream(server) == []
    unclaimed = [line for line in logs if line["event"] == "legacy_answer_unclaimed"]
    assert len(unclaimed) == len(stray)


async def test_an_answer_on_another_session_does_not_answer_the_question(
    gateway: Gateway, server: StreamableServer, clock: ManualClock
) -> None:
    session = await open_session(gateway.http, gateway.url, capabilities=ELICITING)
    other = await open_session(gateway.http, gateway.url, capabilities=ELICITING)
    resp, events = await calling_echo(gateway, session)
    async with resp:
        question = await events.next()
        accepted = {"action": "accept", "content": {"approve": True}}
        reply = await send(gateway.http, gateway.url, answer(question, accepted), session=other)
        assert reply.status == 202  # taken by nobody
        await clock.armed(clock.now + TTL_S)
        clock.advance(TTL_S)
        assert (await events.next())["error"]["data"] == {"reason": "suspension_ttl_s"}
    assert calls_upstream(server) == []


async def test_a_client_that_declared_no_elicitation_is_not_asked(
    gateway: Gateway, server: StreamableServer
) -> None:
    session = await open_session(gateway.http, gateway.url)  # no capabilities
    reply = await send(gateway.http, gateway.url, call("echo", rid=3, text="hi"), session=session)
    assert reply.headers["Content-Type"].startswith("application/json")  # no stream opened
    assert reply.last["error"]["code"] == NotApproved.code
    assert calls_upstream(server) == []


async def test_a_client_that_declared_url_elicitation_only_is_not_asked_a_form(
    gateway: Gateway, server: StreamableServer
) -> None:
    url_only = {"elicitation": {"url": {}}}
    session = await open_session(gateway.http, gateway.url, capabilities=url_only)
    reply = await send(gateway.http, gateway.url, call("echo", rid=3, text="hi"), session=session)
    assert reply.last["error"]["code"] == NotApproved.code
    assert calls_upstream(server) == []


async def test_a_call_the_seam_does_not_ask_about_goes_upstream_as_it_did(
    gateway: Gateway, server: StreamableServer
) -> None:
    session = await open_session(gateway.http, gateway.url, capabilities=ELICITING)
    reply = await send(gateway.http, gateway.url, call("other", rid=4), session=session)
    assert reply.headers["Content-Type"].startswith("application/json")
    assert reply.last == {"jsonrpc": "2.0", "id": 4, "result": ECHOED}


def question_replica(gateway: Gateway) -> str:
    """The replica this gateway's questions name (its owner, with its incarnation)."""
    return gateway.app[COMPONENTS].owner
