"""The gateway in the test's event loop: a config for tests and a handle on a running one."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
from aiohttp import web

from gateway.app import BRIDGE
from gateway.calls.bridge import Bridge
from gateway.config import GatewayConfig, parse_config
from gateway.protocol.state import generate_key
from gateway.web.serving import Served
from tests.support.wire import default_headers, parse_sse_messages

TEST_KEY = generate_key()


def gateway_config(upstream_url: str, **overrides: Any) -> GatewayConfig:
    """A config for one upstream at /mcp; `overrides` are top-level YAML sections
    (`upstream` updates the first upstream, `upstreams_extra` adds upstreams)."""
    data: dict[str, Any] = {
        "upstreams": [{"name": "legacy", "url": upstream_url, "path": "/mcp"}],
        "sealing": {"audience": "test-gateway"},
    }
    for key, value in overrides.items():
        if key == "upstream":
            data["upstreams"][0].update(value)
            if "command" in value:  # a stdio upstream: a command, no URL
                del data["upstreams"][0]["url"]
        elif key == "upstreams_extra":
            data["upstreams"].extend(value)
        else:
            data[key] = value
    return parse_config(data, env={"MRTR_GATEWAY_SEALING_KEYS": TEST_KEY})


class Gateway:
    """A running in-process gateway: its URL, its app (to look inside), an HTTP client,
    and the URL of its (first) upstream."""

    def __init__(self, server: Served, http: aiohttp.ClientSession, upstream_url: str) -> None:
        self.server = server
        self.http = http
        self.url = str(server.make_url("/mcp"))
        self.upstream_url = upstream_url

    @property
    def app(self) -> web.Application:
        return self.server.app

    @property
    def bridge(self) -> Bridge:
        return self.app[BRIDGE]

    async def until_calls_ended(self, timeout: float = 10.0) -> None:
        """Wait until every call the bridge holds now has ended (`call.ended`), bounded.

        A call that already ended is gone from `bridge.calls`: there is nothing to miss.
        """
        async with asyncio.timeout(timeout):
            for call in list(self.bridge.calls.values()):
                await call.ended.wait()

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
                return resp.status, json.loads(raw), resp
            return resp.status, raw, resp

    async def final(self, body: Any) -> Any:
        """The final JSON-RPC message answering `body`, whichever way the gateway framed
        it: one JSON object, or an SSE stream (it commits to one when the answer takes
        `keepalive_s`, as a slow start of many stdio servers at once may)."""
        _, reply, _ = await self.post(body)
        return reply[-1] if isinstance(reply, list) else reply
