"""One multi-round call across two replicas is one trace: an OTLP/HTTP collector started
by the test receives every hop (the request at each replica, its rounds, the forward
and the owner's serving of it, the store calls), all in the client's trace, the owner's
span a child of the forwarding replica's."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from gateway.protocol.state import generate_key
from tests.peers.tooling import GatewayProcess, LegacyServer, RedisServer
from tests.support.wire import default_headers, parse_sse_messages, rpc

pytestmark = pytest.mark.peers

TRACE_ID = uuid.uuid4().hex
TRACEPARENT = f"00-{TRACE_ID}-{uuid.uuid4().hex[:16]}-01"


class Collector:
    """What an OTLP/HTTP collector receives: (replica, span) pairs."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, Any]] = []

    async def receive(self, request: web.Request) -> web.Response:
        export = ExportTraceServiceRequest()
        export.ParseFromString(await request.read())
        for resource_spans in export.resource_spans:
            attributes = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            replica = attributes.get("service.instance.id", "?")
            for scope in resource_spans.scope_spans:
                self.spans.extend((replica, span) for span in scope.spans)
        return web.Response(status=200)


@pytest.fixture
async def collector() -> AsyncIterator[tuple[Collector, str]]:
    collector = Collector()
    app = web.Application()
    app.router.add_post("/v1/traces", collector.receive)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield collector, str(server.make_url(""))
    await server.close()


async def post(url: str, body: dict[str, Any]) -> Any:
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=body, headers=default_headers(body)) as resp:
            raw = await resp.read()
            if resp.headers.get("Content-Type", "").startswith("text/event-stream"):
                return parse_sse_messages(raw)[-1]
            return json.loads(raw)


async def test_a_call_across_two_replicas_is_one_trace_with_every_hop(
    tmp_path: Path,
    redis_server: RedisServer,
    legacy: LegacyServer,
    collector: tuple[Collector, str],
) -> None:
    spans, endpoint = collector
    config = tmp_path / "gateway.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "store": {"url": redis_server.url, "key_prefix": f"tr{uuid.uuid4().hex[:6]}:"},
                "upstreams": [{"name": "legacy", "url": legacy.url, "path": "/mcp"}],
            }
        )
    )
    env = {
        "MRTR_GATEWAY_SEALING_KEYS": generate_key(),
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    owner, other = await asyncio.gather(
        asyncio.to_thread(GatewayProcess, config, env, "trace-a"),
        asyncio.to_thread(GatewayProcess, config, env, "trace-b"),
    )
    try:
        register = {"name": "register", "arguments": {}}
        first = await post(owner.url(), rpc("tools/call", register, traceparent=TRACEPARENT))
        state = first["result"]["requestState"]
        answers: list[dict[str, Any]] = [
            {"elicit.username": {"action": "accept", "content": {"username": "alice"}}},
            {"elicit.age+color": {"action": "accept", "content": {"age": 30, "color": "green"}}},
        ]
        for rid, answer in enumerate(answers, start=2):
            params = {**register, "requestState": state, "inputResponses": answer}
            reply = await post(
                other.url(), rpc("tools/call", params, rid=rid, traceparent=TRACEPARENT)
            )
            state = reply["result"].get("requestState", "")
        assert reply["result"]["content"][0]["text"].startswith("Registered alice")
    finally:  # a replica's shutdown exports what it still holds
        await asyncio.gather(*(asyncio.to_thread(r.stop) for r in (owner, other)))
    ours = [(replica, span) for replica, span in spans.spans if span.trace_id.hex() == TRACE_ID]
    names = {(replica.split("~")[0], span.name) for replica, span in ours}
    assert {
        ("trace-a", "mcp tools/call"),
        ("trace-a", "mcp round"),
        ("trace-a", "store park"),
        ("trace-a", "mcp serve forwarded"),
        ("trace-b", "mcp tools/call"),
        ("trace-b", "store claim"),
        ("trace-b", "mcp forward"),
    } <= names, names
    forwards = {span.span_id for replica, span in ours if span.name == "mcp forward"}
    served = [span for replica, span in ours if span.name == "mcp serve forwarded"]
    assert len(forwards) == 2 and {span.parent_span_id for span in served} == forwards
