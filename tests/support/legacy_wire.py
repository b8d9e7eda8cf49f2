"""2025 clients on the wire, by hand: what an mcp 1.x client sends on the legacy lane, and
its answers read whichever way they came (JSON, or an SSE stream's messages)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tests.support.wire import parse_sse_messages

VERSION = "2025-11-25"
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def initialize(rid: int = 0, capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
    params = {
        "protocolVersion": VERSION,
        "capabilities": capabilities or {},
        "clientInfo": {"name": "pytest-legacy", "version": "0"},
    }
    return {"jsonrpc": "2.0", "id": rid, "method": "initialize", "params": params}


def request(method: str, params: dict[str, Any] | None = None, rid: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}}


def call(name: str, rid: int = 1, **arguments: Any) -> dict[str, Any]:
    return request("tools/call", {"name": name, "arguments": arguments}, rid)


@dataclass
class Reply:
    status: int
    headers: Any
    raw: bytes
    messages: list[Any] = field(default_factory=list)

    @property
    def last(self) -> Any:
        return self.messages[-1] if self.messages else None


async def send(
    http: aiohttp.ClientSession,
    url: str,
    body: Any,
    *,
    session: str | None = None,
    method: str = "POST",
    headers: dict[str, str] | None = None,
) -> Reply:
    """One legacy request: `body` JSON (or raw bytes), the session's headers, read whole."""
    sent = dict(HEADERS)
    if session is not None:
        sent["Mcp-Session-Id"] = session
        sent["MCP-Protocol-Version"] = VERSION
    sent.update(headers or {})
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    async with http.request(method, url, data=data, headers=sent) as resp:
        raw = await resp.read()
        ctype = resp.headers.get("Content-Type", "")
        messages: list[Any] = []
        if ctype.startswith("text/event-stream"):
            messages = parse_sse_messages(raw)
        elif ctype.startswith("application/json") and raw:
            messages = [json.loads(raw)]
        return Reply(resp.status, resp.headers, raw, messages)


async def open_session(
    http: aiohttp.ClientSession,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    capabilities: dict[str, Any] | None = None,
) -> str:
    """A session's id, its `initialize` answered and `notifications/initialized` sent."""
    reply = await send(http, url, initialize(capabilities=capabilities), headers=headers)
    assert reply.status == 200, reply
    session: str = reply.headers["Mcp-Session-Id"]
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    done = await send(http, url, initialized, session=session, headers=headers)
    assert done.status == 202, done
    return session
