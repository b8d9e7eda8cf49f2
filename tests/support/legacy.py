"""The legacy test server's tools (tests/peers/legacy_server.py): through a gateway as a
2026-07-28 client asks them, or directly as a legacy client does.

What the server did (its journal) is asked of the server directly: the observation must
not depend on the gateway under test, whose limits a test may have made tiny.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from tests.support.inprocess import Gateway
from tests.support.wire import parse_sse_messages, rpc

ALICE = {"elicit.username": {"action": "accept", "content": {"username": "alice"}}}


def greet(
    run_id: str, *, rid: int = 1, state: str | None = None, answers: Any = None, **meta: Any
) -> dict[str, Any]:
    """A 2026-07-28 `tools/call greet` (a retry when `state` is given)."""
    params: dict[str, Any] = {"name": "greet", "arguments": {"run_id": run_id}}
    if state is not None:
        params["requestState"] = state
    if answers is not None:
        params["inputResponses"] = answers
    return rpc("tools/call", params, rid=rid, **meta)


async def body_runs(gateway: Gateway, tool: str, run_id: str) -> int:
    """How many times the body of `tool` ran for `run_id` (asked through the gateway)."""
    status, reply, _ = await gateway.post(
        rpc("tools/call", {"name": "runs", "arguments": {"tool": tool, "run_id": run_id}})
    )
    assert status == 200, reply
    return int(reply["result"]["content"][0]["text"])


class LegacyClient:
    """A minimal legacy (2025-11-25) client of an mcp 1.x server: one session, then plain
    POSTs, each answered by the message carrying its id (JSON or the last of an SSE body)."""

    VERSION = "2025-11-25"

    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.http = http
        self.url = url
        self.headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        self.rid = 0

    async def open(self, capabilities: dict[str, Any] | None = None) -> None:
        init = {
            "protocolVersion": self.VERSION,
            "capabilities": capabilities or {},
            "clientInfo": {"name": "pytest-legacy", "version": "0"},
        }
        async with self.http.post(
            self.url, json=self._request("initialize", init), headers=self.headers
        ) as resp:
            await self._reply(resp)
            self.headers["Mcp-Session-Id"] = resp.headers["Mcp-Session-Id"]
            self.headers["MCP-Protocol-Version"] = self.VERSION
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        async with self.http.post(self.url, json=initialized, headers=self.headers) as resp:
            await resp.read()

    async def close(self) -> None:
        """End the session on the server (the server keeps it otherwise)."""
        if "Mcp-Session-Id" in self.headers:
            async with self.http.delete(self.url, headers=self.headers) as resp:
                await resp.read()
            del self.headers["Mcp-Session-Id"]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The result of `tools/call` (raises on a JSON-RPC error)."""
        body = self._request("tools/call", {"name": name, "arguments": arguments})
        async with self.http.post(self.url, json=body, headers=self.headers) as resp:
            reply = await self._reply(resp)
        if "result" not in reply:
            raise RuntimeError(f"{name} failed on the legacy server: {reply}")
        result: dict[str, Any] = reply["result"]
        return result

    def _request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.rid += 1
        return {"jsonrpc": "2.0", "id": self.rid, "method": method, "params": params}

    async def _reply(self, resp: aiohttp.ClientResponse) -> dict[str, Any]:
        raw = await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"legacy server answered HTTP {resp.status}: {raw[:500]!r}")
        if resp.headers.get("Content-Type", "").startswith("text/event-stream"):
            messages = parse_sse_messages(raw)
        else:
            messages = [json.loads(raw)]
        (reply,) = (m for m in messages if m.get("id") == self.rid)
        return reply  # type: ignore[no-any-return]


async def legacy_tool(url: str, name: str, arguments: dict[str, Any]) -> str:
    """The text a tool of the legacy server at `url` returns, called in a session of its own."""
    async with aiohttp.ClientSession() as http:
        client = LegacyClient(http, url)
        await client.open()
        try:
            result = await client.call_tool(name, arguments)
        finally:
            await client.close()
    return str(result["content"][0]["text"])


async def await_journal(url: str, run_id: str, entry: str, timeout_s: float = 30.0) -> list[str]:
    """The journal of `run_id` on the legacy server at `url` once it holds `entry`, or as it
    is after `timeout_s` (the server waits on its journal changing, nobody polls): a
    bound on a loaded machine's lag, not on how fast it should be."""
    async with asyncio.timeout(timeout_s + 10):
        text = await legacy_tool(
            url, "await_journal", {"run_id": run_id, "entry": entry, "timeout_s": timeout_s}
        )
    return text.split(",") if text else []


async def write_journal(url: str, run_id: str, entry: str) -> None:
    """Add `entry` to the journal of `run_id` (wakes the `await_journal` calls waiting for it)."""
    await legacy_tool(url, "write_journal", {"run_id": run_id, "entry": entry})
