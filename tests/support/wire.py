"""2026-07-28 on the wire: requests and headers as a correct client sends them, SSE bodies."""

from __future__ import annotations

import json
from typing import Any

from gateway.errors import InvalidRequestState
from gateway.protocol.sse import Parser

PROTOCOL = "2026-07-28"
ALL_CAPS = {"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}}
# The one answer to any requestState that is not good for this request (never says why).
FROZEN = {"code": -32602, "message": InvalidRequestState.WIRE_MESSAGE}


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


def default_headers(body: Any) -> dict[str, str]:
    """The HTTP headers a correct 2026-07-28 client sends with `body`."""
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
        if body["method"].startswith("tasks/"):
            name = params.get("taskId")  # the tasks extension's routing name
        if isinstance(name, str) and name.isascii():
            headers["Mcp-Name"] = name
    return headers


def parse_sse_messages(raw: bytes) -> list[Any]:
    """The JSON-RPC messages of an SSE body, in order."""
    return [json.loads(e.data) for e in Parser().feed(raw) if e.data]
