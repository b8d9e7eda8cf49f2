"""Which lane a request takes, as a table: HTTP method x version header x body (its claim,
its kind) x session header. The five `server-stateless` rows of the conformance suite (a
2026 claim on a method 2026 removed) stay on the 2026 lane, which answers 404 -32601."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.protocol.era import Lane, lane_of

MODERN, LEGACY = Lane.MODERN, Lane.LEGACY
CLAIM = "io.modelcontextprotocol/protocolVersion"
V26, V25 = "2026-07-28", "2025-11-25"


def request(method: str, meta: Any = None, *, rid: Any = 1, **params: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
    if meta is not None:
        body["params"]["_meta"] = meta
    return body


def claiming(version: Any, method: str = "tools/list") -> dict[str, Any]:
    return request(method, {CLAIM: version, "io.modelcontextprotocol/clientCapabilities": {}})


def notification(method: str, meta: Any = None) -> dict[str, Any]:
    body = request(method, meta)
    del body["id"]
    return body


RESPONSE = {"jsonrpc": "2.0", "id": 0, "result": {"action": "accept", "content": {}}}
SESSION = {"mcp-session-id": "lg1.whatever"}

# (case, HTTP method, headers, body, lane)
TABLE: list[tuple[str, str, dict[str, str], Any, Lane]] = [
    ("initialize, no claim, no header", "POST", {}, request("initialize"), LEGACY),
    ("initialize claiming 2026", "POST", {}, claiming(V26, "initialize"), MODERN),
    ("ping claiming 2026", "POST", {}, claiming(V26, "ping"), MODERN),
    ("logging/setLevel claiming 2026", "POST", {}, claiming(V26, "logging/setLevel"), MODERN),
    ("subscribe claiming 2026", "POST", {}, claiming(V26, "resources/subscribe"), MODERN),
    ("unsubscribe claiming 2026", "POST", {}, claiming(V26, "resources/unsubscribe"), MODERN),
    ("initialize, no claim, 2026 header", "POST", {"mcp-protocol-version": V26},
     request("initialize"), MODERN),
    ("2026 claim and header", "POST", {"mcp-protocol-version": V26}, claiming(V26), MODERN),
    ("2026 claim, no header", "POST", {}, claiming(V26), MODERN),
    ("2026 claim, legacy header", "POST", {"mcp-protocol-version": V25}, claiming(V26), MODERN),
    ("2026 claim with a session id", "POST", SESSION, claiming(V26), MODERN),
    ("2025-11-25 claim", "POST", {}, claiming(V25), LEGACY),
    ("2024-11-05 claim", "POST", {}, claiming("2024-11-05"), LEGACY),
    ("claim of an unknown revision", "POST", {}, claiming("1900-01-01"), MODERN),
    ("claim that is not a string", "POST", {}, claiming(7), MODERN),
    ("claim that is null", "POST", {}, claiming(None), MODERN),
    ("no claim, 2026 header", "POST", {"mcp-protocol-version": V26}, request("tools/list"), MODERN),
    ("no claim, 2025-11-25 header", "POST", {"mcp-protocol-version": V25},
     request("tools/list"), LEGACY),
    ("no claim, 2025-06-18 header", "POST", {"mcp-protocol-version": "2025-06-18"},
     request("tools/list"), LEGACY),
    ("no claim, no header", "POST", {}, request("tools/list"), LEGACY),
    ("no claim, session id only", "POST", SESSION, request("tools/call", name="echo"), LEGACY),
    ("no claim, unknown header", "POST", {"mcp-protocol-version": "2099-01-01"},
     request("tools/list"), MODERN),
    ("a progress token but no claim", "POST", {"mcp-protocol-version": V25},
     request("tools/call", {"progressToken": 3}, name="slow"), LEGACY),
    ("_meta not an object, 2026 header", "POST", {"mcp-protocol-version": V26},
     request("tools/list", "x"), MODERN),
    ("_meta not an object, no header", "POST", {}, request("tools/list", "x"), LEGACY),
    ("notifications/initialized", "POST", SESSION, notification("notifications/initialized"),
     LEGACY),
    ("a notification claiming 2026", "POST", {}, notification("notifications/x", {CLAIM: V26}),
     MODERN),
    ("a notification with a 2026 header", "POST", {"mcp-protocol-version": V26},
     notification("notifications/x"), MODERN),
    ("a client's response", "POST", SESSION, RESPONSE, LEGACY),
    ("a response with a 2025 header", "POST", {"mcp-protocol-version": V25}, RESPONSE, LEGACY),
    ("a response with a 2026 header", "POST", {"mcp-protocol-version": V26}, RESPONSE, MODERN),
    ("a batch", "POST", {}, [request("ping"), request("ping", rid=2)], LEGACY),
    ("a batch with a 2026 header", "POST", {"mcp-protocol-version": V26}, [request("ping")],
     MODERN),
    ("a body that is a string", "POST", {}, "hello", LEGACY),
    ("params that are a list", "POST", {}, {"jsonrpc": "2.0", "id": 1, "method": "x",
                                            "params": [1]}, LEGACY),
    ("GET, no header", "GET", SESSION, None, LEGACY),
    ("GET, 2025-11-25 header", "GET", {**SESSION, "mcp-protocol-version": V25}, None, LEGACY),
    ("GET, 2026 header", "GET", {"mcp-protocol-version": V26}, None, MODERN),
    ("DELETE with a session id", "DELETE", SESSION, None, LEGACY),
    ("DELETE, 2026 header", "DELETE", {"mcp-protocol-version": V26}, None, MODERN),
    ("PUT, no header", "PUT", {}, None, LEGACY),
    ("PUT, 2026 header", "PUT", {"mcp-protocol-version": V26}, None, MODERN),
]  # fmt: skip


@pytest.mark.parametrize(
    ("method", "headers", "body", "lane"),
    [row[1:] for row in TABLE],
    ids=[row[0] for row in TABLE],
)
def test_each_request_takes_the_lane_of_its_era(
    method: str, headers: dict[str, str], body: Any, lane: Lane
) -> None:
    assert lane_of(method, headers, body) is lane


def test_a_body_claim_is_read_only_on_a_post() -> None:
    """A GET has no body: a stray claim-shaped value handed in does not move it."""
    assert lane_of("GET", {}, claiming(V26)) is LEGACY
