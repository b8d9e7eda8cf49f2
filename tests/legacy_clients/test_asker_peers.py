"""The gateway's own questions to 2025 clients with real peers: a `calling` seam asks an
approval of every call of `echo` (`tests.support.asking`).

- The official mcp 1.x client (its elicitation callback) gets the gateway's question,
  answers it, and then gets the tool's real result from the real mcp 1.x server; the
  same client declining gets the refusal, and the call never reaches the server.
- On a fleet of two replicas (sharing a real Redis) behind the round-robin balancer, the
  client's answer lands on the replica that did not ask, and still reaches the question
  waiting on the other: the call goes upstream and its answer follows on the stream.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from gateway.app import COMPONENTS, build_app
from gateway.fleet.redis_bus import RedisBus
from gateway.protocol.legacy_asking import question_of
from gateway.protocol.sse import Parser
from gateway.seams import Seams
from gateway.web.serving import Served, serve
from tests.peers.balancer import RoundRobin
from tests.peers.tooling import LegacyClient, LegacyServer, RedisServer
from tests.support.asking import APPROVAL, NotApproved, approving
from tests.support.inprocess import gateway_config
from tests.support.legacy_wire import HEADERS, VERSION, call, initialize, send
from tests.support.streamable import StreamableServer

pytestmark = pytest.mark.peers

SEAMS = Seams(calling=(approving,))


@pytest.fixture
async def asking_gateway(legacy: LegacyServer) -> AsyncIterator[str]:
    served = await serve(
        build_app(gateway_config(legacy.url), seams=SEAMS), "127.0.0.1", 0, idle_timeout_s=75
    )
    try:
        yield str(served.make_url("/mcp"))
    finally:
        await served.close()


async def run(client: LegacyClient, command: dict[str, Any]) -> dict[str, Any]:
    return await asyncio.to_thread(client.run, command, 60.0)


async def test_the_mcp_1_client_answers_the_gateways_question_then_gets_the_tools_result(
    asking_gateway: str, legacy_client: LegacyClient
) -> None:
    name = f"asked-{uuid.uuid4().hex[:8]}"
    opened = await run(legacy_client, {"op": "open", "session": name, "url": asking_gateway})
    assert opened["session_id"].startswith("lg1.")
    try:
        echoed = await run(
            legacy_client,
            {"op": "call", "session": name, "name": "echo", "arguments": {"text": "hi"}},
        )
        assert [e["message"] for e in echoed["seen"]["elicitations"]] == [APPROVAL]
        assert echoed["result"]["content"][0]["text"] == "hi"  # the real server's answer
        assert not echoed["result"].get("isError")
    finally:
        await run(legacy_client, {"op": "close", "session": name})


async def test_the_mcp_1_client_that_declines_gets_the_refusal(
    asking_gateway: str, legacy_client: LegacyClient
) -> None:
    name = f"declining-{uuid.uuid4().hex[:8]}"
    answers = {APPROVAL: {"action": "decline"}}
    command = {"op": "open", "session": name, "url": asking_gateway, "answers": answers}
    await run(legacy_client, command)
    try:
        refused = await run(
            legacy_client,
            {"op": "call", "session": name, "name": "echo", "arguments": {"text": "hi"}},
        )
        assert refused["error"]["code"] == NotApproved.code
        # The session goes on: a call the seam does not ask about is served as before.
        other = await run(legacy_client, {"op": "call", "session": name, "name": "pinger"})
        assert "result" in other
    finally:
        await run(legacy_client, {"op": "close", "session": name})


# -- a fleet of two ----------------------------------------------------------------------

ECHOED = {"content": [{"type": "text", "text": "hi"}]}


class TwoReplicas:
    def __init__(self, replicas: list[Served], balancer: RoundRobin, lb: TestServer) -> None:
        self.replicas = replicas
        self.balancer = balancer
        self.lb = lb
        self.url = str(lb.make_url("/mcp"))

    def owner(self, index: int) -> str:
        return self.replicas[index].app[COMPONENTS].owner


@pytest.fixture
async def two(redis_server: RedisServer) -> AsyncIterator[tuple[TwoReplicas, StreamableServer]]:
    upstream = await StreamableServer({"tools/call": ECHOED}).start()
    config = gateway_config(
        upstream.url,
        store={"url": redis_server.url, "key_prefix": f"t{uuid.uuid4().hex[:8]}:"},
        fleet={"heartbeat_s": 1.0, "format_settle_s": 0},
    )
    replicas: list[Served] = []
    try:
        for _ in range(2):
            app = build_app(config, seams=SEAMS)
            replicas.append(await serve(app, "127.0.0.1", 0, idle_timeout_s=75))
        for replica in replicas:  # each looks at the fleet now: both of this release
            questions = replica.app[COMPONENTS].lanes["legacy"].questions
            assert questions is not None and isinstance(questions.bus, RedisBus)
            await questions.bus.look_at_fleet()
            assert questions.open()
        balancer = RoundRobin([str(r.make_url("")).rstrip("/") for r in replicas])
        lb = TestServer(balancer.app(), host="127.0.0.1")
        await lb.start_server()
        try:
            yield TwoReplicas(replicas, balancer, lb), upstream
        finally:
            await lb.close()
    finally:
        for replica in replicas:
            await replica.close()
        await upstream.stop()


async def test_an_answer_landing_on_the_other_replica_reaches_the_one_that_asked(
    two: tuple[TwoReplicas, StreamableServer],
) -> None:
    fleet, upstream = two
    async with aiohttp.ClientSession() as http:
        opened = await send(http, fleet.url, initialize(capabilities={"elicitation": {}}))
        session = opened.headers["Mcp-Session-Id"]
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await send(http, fleet.url, initialized, session=session)).status == 202

        headers = {**HEADERS, "Mcp-Session-Id": session, "MCP-Protocol-Version": VERSION}
        body = json.dumps(call("echo", rid=9, text="hi")).encode()
        async with http.post(fleet.url, data=body, headers=headers) as resp:
            asked_by = fleet.balancer.served[-1].backend
            parser = Parser()

            async def next_message() -> Any:
                async with asyncio.timeout(10):
                    while True:
                        frame = await resp.content.readuntil(b"\n\n")
                        found = [json.loads(e.data) for e in parser.feed(frame) if e.data]
                        if found:
                            return found[0]

            question = await next_message()
            assert question["method"] == "elicitation/create"
            named = question_of(question["id"])
            assert named is not None and named.replica == fleet.owner(asked_by)
            assert not [m for m in upstream.received if m.get("method") == "tools/call"]

            accepted = {"action": "accept", "content": {"approve": True}}
            reply = {"jsonrpc": "2.0", "id": question["id"], "result": accepted}
            answered = await send(http, fleet.url, reply, session=session)
            assert answered.status == 202
            assert fleet.balancer.served[-1].backend != asked_by  # the other replica

            assert await next_message() == {"jsonrpc": "2.0", "id": 9, "result": ECHOED}
    called = [m for m in upstream.received if m.get("method") == "tools/call"]
    assert [c["params"]["name"] for c in called] == ["echo"]
    assert not [m for m in upstream.received if "method" not in m]  # no answer went upstream
