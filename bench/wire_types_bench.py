"""Should the hot path use the official wire types (`mcp-types`)? Measure, don't guess.

Runs in the modern peer venv (where `mcp-types` lives) with the gateway's own sans-IO
core on the path, and times, per message:

- inbound: `json.loads` + the gateway's `inbound.classify` vs. `json.loads` +
  `mcp_types.methods.parse_client_request` (2026-07-28) for a `tools/call`;
- outbound: the gateway's `translate.decorate_result` vs. `mcp_types.methods.
  serialize_server_result` (2026-07-28) for a `tools/call` result and a
  60-tool `tools/list` result.

    $(python -c 'from tests.peers.tooling import ensure_venv; print(ensure_venv("modern"))') bench/wire_types_bench.py
"""

from __future__ import annotations

import json
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mcp_types import methods  # noqa: E402

from gateway.protocol import inbound, translate  # noqa: E402

VERSION = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": {
        "elicitation": {"form": {}, "url": {}},
        "sampling": {},
    },
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
    "progressToken": "p1",
}
CALL = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "tools/call",
    "params": {
        "name": "create_ticket",
        "arguments": {"title": "Printer on fire", "tags": ["a", "b"]},
        "_meta": META,
    },
}
HEADERS = {"mcp-protocol-version": VERSION, "mcp-method": "tools/call", "mcp-name": "create_ticket"}
RAW_HEADERS = [(k, v) for k, v in HEADERS.items()]
BODY = json.dumps(CALL).encode()

CALL_RESULT = {
    "content": [{"type": "text", "text": "Created ticket #4711 with priority high"}],
    "structuredContent": {"result": "Created ticket #4711 with priority high"},
    "isError": False,
}
TOOL = {
    "name": "tool",
    "description": "A tool of a typical size.",
    "inputSchema": {
        "type": "object",
        "properties": {"text": {"type": "string", "title": "Text"}, "n": {"type": "integer"}},
        "required": ["text"],
    },
}
LIST_RESULT = {"tools": [{**TOOL, "name": f"tool_{i}"} for i in range(60)]}
INFO = {"name": "legacy", "version": "1"}
CACHE = translate.CachePolicy()


def gateway_in() -> None:
    inbound.classify(json.loads(BODY), HEADERS, RAW_HEADERS)


def types_in() -> None:
    obj = json.loads(BODY)
    methods.parse_client_request(obj["method"], VERSION, obj["params"])


def gateway_out(method: str, result: dict) -> None:
    translate.decorate_result(method, result, server_info=INFO, cache=CACHE)


def types_out(method: str, result: dict) -> None:
    decorated = translate.decorate_result(method, result, server_info=INFO, cache=CACHE)
    methods.serialize_server_result(method, VERSION, decorated)


def per_call_us(fn, *args) -> float:
    number = 2000
    best = min(timeit.repeat(lambda: fn(*args), number=number, repeat=5))
    return best / number * 1e6


def main() -> None:
    rows = [
        ("inbound tools/call", per_call_us(gateway_in), per_call_us(types_in)),
        (
            "outbound tools/call result",
            per_call_us(gateway_out, "tools/call", CALL_RESULT),
            per_call_us(types_out, "tools/call", CALL_RESULT),
        ),
        (
            "outbound tools/list (60 tools)",
            per_call_us(gateway_out, "tools/list", LIST_RESULT),
            per_call_us(types_out, "tools/list", LIST_RESULT),
        ),
    ]
    print(f"{'message':<34}{'gateway core':>14}{'mcp-types':>12}{'ratio':>8}")
    for name, ours, theirs in rows:
        print(f"{name:<34}{ours:>11.1f} us{theirs:>9.1f} us{theirs / ours:>7.1f}x")


if __name__ == "__main__":
    main()
