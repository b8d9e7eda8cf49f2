"""Shared fixtures: real peers (legacy mcp 1.x server, modern mcp 2.x client) and the gateway.

The gateway runs in the test's event loop on a real loopback port (aiohttp's
TestServer, which cancels handlers on client disconnect as `serve` does), so
subprocess peers can reach it and tests can look inside it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.app import BRIDGE, build_app
from gateway.calls.bridge import Bridge
from gateway.config import GatewayConfig, parse_config
from gateway.protocol.state import generate_key
from tests.peers.tooling import LegacyServer, ModernClient

PROTOCOL = "2026-07-28"
TEST_KEY = generate_key()
ALL_CAPS = {"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}}


@pytest.fixture(scope="session")
def legacy() -> Iterator[LegacyServer]:
    server = LegacyServer()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def modern() -> Iterator[ModernClient]:
    client = ModernClient()
    yield client
    client.stop()


def gateway_config(upstream_url: str, **overrides: Any) -> GatewayConfig:
    """A config for one upstream at /mcp; `overrides` are top-level YAML sections."""
    data: dict[str, Any] = {
        "upstreams": [{"name": "legacy", "url": upstream_url, "path": "/mcp"}],
        "sealing": {"audience": "test-gateway"},
    }
    for key, value in overrides.items():
        if key == "upstream":
            data["upstreams"][0].update(value)
        elif key == "upstreams_extra":
            data["upstreams"].extend(value)
        else:
            data[key] = value
    return parse_config(data, env={"MRTR_GATEWAY_SEALING_KEYS": TEST_KEY})


class Gateway:
    """A running in-process gateway: its URL, its app (to look inside), an HTTP client."""

    def __init__(self, server: TestServer, http: aiohttp.ClientSession) -> None:
        self.server = server
        self.http = http
        self.url = str(server.make_url("/mcp"))

    @property
    def app(self) -> web.Application:
        return self.server.app  # type: ignore[return-value]

    @property
    def bridge(self) -> Bridge:
        return self.app[BRIDGE]

    async def post(
        self,
        body: Any,
        *,
        headers: dict[str, str] | None = None,
        drop: tuple[str, ...] = (),
        url: str | None = None,
    ) -> tuple[int, Any, aiohttp.ClientResponse]:
        """POST a raw body with the headers a correct 2026 client would send (unless replaced)."""
        send = default_headers(body)
        send.update(headers or {})
        for name in drop:
            send.pop(name, None)
        data = body if isinstance(body, bytes) else aiohttp.payload.JsonPayload(body)
        async with self.http.post(url or self.url, data=data, headers=send) as resp:
            raw = await resp.read()
            ctype = resp.headers.get("Content-Type", "")
            if ctype.startswith("text/event-stream"):
                return resp.status, parse_sse_messages(raw), resp
            if ctype.startswith("application/json") and raw:
                import json

                return resp.status, json.loads(raw), resp
            return resp.status, raw, resp


def parse_sse_messages(raw: bytes) -> list[Any]:
    import json

    from gateway.protocol.sse import Parser

    return [json.loads(e.data) for e in Parser().feed(raw) if e.data]


def default_headers(body: Any) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": PROTOCOL,
    }
    if isinstance(body, dict) and isinstance(body.get("method"), str):
        headers["Mcp-Method"] = body["method"]
        params = body.get("params") or {}
        name = (
            params.get("name")
            if body["method"] in ("tools/call", "prompts/get")
            else params.get("uri")
        )
        if isinstance(name, str) and name.isascii():
            headers["Mcp-Name"] = name
    return headers


def rpc(
    method: str,
    params: dict[str, Any] | None = None,
    *,
    rid: Any = 1,
    caps: Any = None,
    **meta: Any,
) -> dict[str, Any]:
    """A well-formed 2026-07-28 request."""
    params = dict(params or {})
    envelope = {
        "io.modelcontextprotocol/protocolVersion": PROTOCOL,
        "io.modelcontextprotocol/clientCapabilities": ALL_CAPS if caps is None else caps,
        "io.modelcontextprotocol/clientInfo": {"name": "pytest", "version": "0"},
    }
    envelope.update(meta)
    params["_meta"] = envelope
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


@pytest.fixture
async def make_gateway(legacy: LegacyServer) -> AsyncIterator[Callable[..., Any]]:
    started: list[tuple[TestServer, aiohttp.ClientSession]] = []

    async def start(upstream_url: str | None = None, **overrides: Any) -> Gateway:
        config = gateway_config(upstream_url or legacy.url, **overrides)
        server = TestServer(build_app(config), host="127.0.0.1")
        await server.start_server()
        http = aiohttp.ClientSession()
        started.append((server, http))
        return Gateway(server, http)

    yield start
    for server, http in started:
        await http.close()
        await server.close()


@pytest.fixture
async def gateway(make_gateway: Callable[..., Any]) -> Gateway:
    gw: Gateway = await make_gateway()
    return gw


async def drive(modern: ModernClient, command: dict[str, Any]) -> dict[str, Any]:
    """Run one command in the modern client without blocking the gateway's loop."""
    return await asyncio.to_thread(modern.run, command)
