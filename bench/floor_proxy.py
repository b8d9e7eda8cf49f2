"""The floor under any aiohttp proxy here: the least a pass-through `tools/call` can cost.

    .venv/bin/python bench/floor_proxy.py UPSTREAM_URL PORT

A deliberately minimal proxy on the gateway's own stack (aiohttp's server as the gateway
serves it, `gateway.web.serving`, the gateway's own upstream client `gateway.http1`,
uvloop, orjson): it
opens a few legacy sessions at start, then forwards each POST's tool call on one of
them and answers the last SSE `data:` line as JSON. No checks,
no logging, no metrics, no call bookkeeping: it is not correct, only cheap. The report
measures it beside the gateway, so a figure can say how much of the gateway's cost is
the HTTP stack every request crosses twice, and how much is the gateway's own work.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import orjson
import uvloop
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.config import LimitsConfig  # noqa: E402
from gateway.http1 import Http1Client  # noqa: E402
from gateway.web.serving import serve as serve_app  # noqa: E402

SESSIONS = 32
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def post(http: Http1Client, url: str, body: bytes, headers: dict[str, str]) -> bytes:
    async with await http.request("POST", url, headers, body, connect_timeout_s=5) as resp:
        if resp.status >= 400:
            raise RuntimeError(f"upstream answered HTTP {resp.status}")
        session = resp.headers.get("mcp-session-id")
        if session is not None:
            headers["Mcp-Session-Id"] = session
        return await resp.read()


async def open_session(http: Http1Client, url: str) -> dict[str, str]:
    """A legacy session's request headers, after its handshake."""
    hello = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "floor", "version": "0"},
        },
    }
    headers = dict(HEADERS)
    await post(http, url, orjson.dumps(hello), headers)
    headers["MCP-Protocol-Version"] = "2025-11-25"
    ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    await post(http, url, orjson.dumps(ready), headers)
    return headers


def last_data(body: bytes) -> bytes:
    """The last message of an SSE body (or the body itself when it is JSON)."""
    found = body
    for line in body.splitlines():
        if line.startswith(b"data:") and line[5:].strip():
            found = line[5:]
    return found


async def serve(url: str, port: int) -> None:
    http = Http1Client()
    free = asyncio.Queue[dict[str, str]]()
    for headers in await asyncio.gather(*(open_session(http, url) for _ in range(SESSIONS))):
        free.put_nowait(headers)

    async def forward(request: web.Request) -> web.Response:
        message = orjson.loads(await request.content.readexactly(request.content_length or 0))
        params = message["params"]
        call = {
            "jsonrpc": "2.0",
            "id": message["id"],
            "method": "tools/call",
            "params": {"name": params["name"], "arguments": params.get("arguments", {})},
        }
        headers = await free.get()
        try:
            body = await post(http, url, orjson.dumps(call), headers)
        finally:
            free.put_nowait(headers)
        return web.Response(body=last_data(body), content_type="application/json")

    app = web.Application()
    app.router.add_post("/mcp", forward)
    await serve_app(app, "127.0.0.1", port, idle_timeout_s=LimitsConfig().idle_timeout_s)
    await asyncio.Event().wait()


if __name__ == "__main__":
    uvloop.run(serve(sys.argv[1], int(sys.argv[2])))
