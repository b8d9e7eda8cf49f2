"""Every row of the front-side status table (spec 2026-07-28 §6.5), on the real app.

Each case sends one request that is wrong in exactly one way and checks the exact
HTTP status and JSON-RPC code; no row may produce a traceback or a 500.
"""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest
from multidict import CIMultiDict

from tests.support.inprocess import Gateway
from tests.support.wire import PROTOCOL, default_headers, rpc

pytestmark = pytest.mark.peers  # the gateway under test fronts the real legacy server

TOOL = rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}})


def without_meta(key: str) -> dict[str, Any]:
    body = rpc("tools/list")
    del body["params"]["_meta"][key]
    return body


ROWS: list[tuple[str, Any, dict[str, str], tuple[str, ...], int, int | None]] = [
    # (case, body, header overrides, headers dropped, HTTP status, JSON-RPC code)
    ("ok", rpc("tools/list"), {}, (), 200, None),
    (
        "notification accepted",
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}},
        {},
        (),
        202,
        None,
    ),
    (
        "notification claiming 2026 without a version header",
        {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": PROTOCOL}},
        },
        {},
        ("MCP-Protocol-Version",),
        400,
        -32020,
    ),
    (
        # Neither a claim nor a version header: a 2025 client's, which needs its session
        # (the legacy lane's answer; a 2026 client always sends the header).
        "notification without a claim or a version header",
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}},
        {},
        ("MCP-Protocol-Version",),
        400,
        -32600,
    ),
    (
        "notification at a version not served",
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}},
        {"MCP-Protocol-Version": "2099-01-01"},
        (),
        400,
        -32022,
    ),
    (
        "missing protocolVersion in _meta",
        without_meta("io.modelcontextprotocol/protocolVersion"),
        {},
        (),
        400,
        -32602,
    ),
    (
        "missing clientCapabilities in _meta",
        without_meta("io.modelcontextprotocol/clientCapabilities"),
        {},
        (),
        400,
        -32602,
    ),
    (
        "no _meta at all",
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        {},
        (),
        400,
        -32602,
    ),
    ("capabilities not an object", rpc("tools/list", caps=["elicitation"]), {}, (), 400, -32602),
    ("version header missing", rpc("tools/list"), {}, ("MCP-Protocol-Version",), 400, -32020),
    (
        "version header differs",
        rpc("tools/list"),
        {"MCP-Protocol-Version": "2025-11-25"},
        (),
        400,
        -32020,
    ),
    ("method header missing", rpc("tools/list"), {}, ("Mcp-Method",), 400, -32020),
    ("method header differs", rpc("tools/list"), {"Mcp-Method": "prompts/list"}, (), 400, -32020),
    ("name header missing", TOOL, {}, ("Mcp-Name",), 400, -32020),
    ("name header differs", TOOL, {"Mcp-Name": "greet"}, (), 400, -32020),
    ("name header bad sentinel", TOOL, {"Mcp-Name": "=?base64?***?="}, (), 400, -32020),
    (
        "name header base64 sentinel decoded",
        TOOL,
        {"Mcp-Name": "=?base64?ZWNobw==?="},
        (),
        200,
        None,
    ),
    (
        "unsupported version",
        rpc("tools/list", **{"io.modelcontextprotocol/protocolVersion": "1900-01-01"}),
        {"MCP-Protocol-Version": "1900-01-01"},
        (),
        400,
        -32022,
    ),
    (
        "legacy initialize",
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-11-25"},
        },
        {},
        (),
        404,
        -32601,
    ),
    ("removed initialize", rpc("initialize"), {}, (), 404, -32601),
    ("removed logging/setLevel", rpc("logging/setLevel", {"level": "info"}), {}, (), 404, -32601),
    (
        "removed resources/subscribe",
        rpc("resources/subscribe", {"uri": "x://y"}),
        {},
        (),
        404,
        -32601,
    ),
    (
        "subscriptions/listen with a filter of the wrong shape",
        rpc("subscriptions/listen", {"notifications": {"toolsListChanged": "yes"}}),
        {},
        (),
        400,
        -32602,
    ),
    (
        "subscriptions/listen with a URI that is not a string",
        rpc("subscriptions/listen", {"notifications": {"resourceSubscriptions": [7]}}),
        {},
        (),
        400,
        -32602,
    ),
    ("unknown method", rpc("tools/frobnicate"), {}, (), 404, -32601),
    ("removed method ping", rpc("ping"), {}, (), 404, -32601),
    ("batch", [rpc("tools/list")], {"Mcp-Method": "tools/list"}, (), 400, -32600),
    ("posted response", {"jsonrpc": "2.0", "id": 1, "result": {}}, {}, (), 400, -32600),
    ("wrong jsonrpc version", {**rpc("tools/list"), "jsonrpc": "1.0"}, {}, (), 400, -32600),
    ("null id", {**rpc("tools/list"), "id": None}, {}, (), 400, -32600),
    ("tool name missing", rpc("tools/call", {"arguments": {}}), {"Mcp-Name": "x"}, (), 400, -32020),
    (
        "requestState not a string",
        rpc("tools/call", {"name": "echo", "requestState": 5}),
        {},
        (),
        400,
        -32602,
    ),
    (
        "bad log level",
        rpc("tools/list", **{"io.modelcontextprotocol/logLevel": "loud"}),
        {},
        (),
        400,
        -32602,
    ),
    ("parse error", b"{not json", {"Mcp-Method": "tools/list"}, (), 400, -32700),
    (
        "accept lacks event-stream",
        rpc("tools/list"),
        {"Accept": "application/json"},
        (),
        406,
        -32600,
    ),
    ("content type not json", rpc("tools/list"), {"Content-Type": "text/plain"}, (), 415, -32600),
    ("body said gzip", rpc("tools/list"), {"Content-Encoding": "gzip"}, (), 415, -32600),
    (
        "body gzipped",
        gzip.compress(json.dumps(rpc("tools/list")).encode()),
        {"Content-Encoding": "gzip", "Mcp-Method": "tools/list"},
        (),
        415,
        -32600,
    ),
    (
        "lone surrogate in the id",
        b'{"jsonrpc":"2.0","id":"\\ud800","method":"tools/list"}',
        {"Mcp-Method": "tools/list"},
        (),
        400,
        -32700,
    ),
    ("foreign origin", rpc("tools/list"), {"Origin": "https://evil.example"}, (), 403, -32600),
]


@pytest.mark.parametrize(
    ("body", "headers", "drop", "status", "code"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS]
)
async def test_front_answers_each_row_with_its_status_and_code(
    gateway: Gateway,
    body: Any,
    headers: dict[str, str],
    drop: tuple[str, ...],
    status: int,
    code: int | None,
) -> None:
    got_status, reply, _ = await gateway.post(body, headers=headers, drop=drop)
    assert got_status == status, reply
    if code is None:
        assert status == 202 or reply["result"]["resultType"] == "complete"
    else:
        assert reply["error"]["code"] == code
        assert "Traceback" not in reply["error"]["message"]


async def test_unsupported_version_names_what_is_supported(gateway: Gateway) -> None:
    body = rpc("tools/list", **{"io.modelcontextprotocol/protocolVersion": "2099-01-01"})
    _, reply, _ = await gateway.post(body, headers={"MCP-Protocol-Version": "2099-01-01"})
    assert reply["error"]["data"] == {"supported": [PROTOCOL], "requested": "2099-01-01"}


async def test_errors_about_a_request_carry_its_id(gateway: Gateway) -> None:
    _, reply, _ = await gateway.post(rpc("tools/frobnicate", rid="abc"))
    assert reply["id"] == "abc"


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT"])
async def test_other_http_methods_get_405_with_allow_post(gateway: Gateway, method: str) -> None:
    async with gateway.http.request(method, gateway.url, headers=default_headers(None)) as resp:
        assert resp.status == 405
        assert resp.headers["Allow"] == "POST"


async def test_a_body_over_the_limit_gets_413(make_gateway) -> None:
    gateway = await make_gateway(limits={"max_body_bytes": 1024})
    big = rpc("tools/call", {"name": "echo", "arguments": {"text": "x" * 2048}})
    status, reply, _ = await gateway.post(big)
    assert status == 413

    # and without a Content-Length (chunked), the limit still holds
    async def chunks():
        for _ in range(4):
            yield b" " * 512

    send = default_headers(big)
    async with gateway.http.post(gateway.url, data=chunks(), headers=send) as resp:
        assert resp.status == 413


async def test_a_gateway_at_capacity_answers_503_and_when_to_retry(make_gateway) -> None:
    gateway = await make_gateway(limits={"max_parked_calls": 1})
    greet = rpc("tools/call", {"name": "greet", "arguments": {}})
    status, reply, _ = await gateway.post(greet)
    assert status == 200 and reply["result"]["resultType"] == "input_required"
    status, reply, response = await gateway.post(greet)
    assert (status, reply["error"]["data"]) == (503, {"reason": "max_parked_calls"})
    assert response.headers["Retry-After"] == "1"
    status, reply, response = await gateway.post(rpc("tools/list"))  # a 200 says no such thing
    assert status == 200 and "Retry-After" not in response.headers


async def test_an_allowed_origin_is_served(make_gateway) -> None:
    gateway = await make_gateway(allowed_origins=["https://app.example"])
    status, _, _ = await gateway.post(rpc("tools/list"), headers={"Origin": "https://app.example"})
    assert status == 200


async def test_a_duplicated_routing_header_is_a_mismatch(gateway: Gateway) -> None:
    body = rpc("tools/list")
    headers = [(k, v) for k, v in default_headers(body).items()] + [("Mcp-Method", "tools/list")]
    async with gateway.http.post(gateway.url, json=body, headers=CIMultiDict(headers)) as resp:
        assert resp.status == 400
        assert (await resp.json())["error"]["code"] == -32020


async def test_cacheable_results_carry_hints_and_every_result_a_result_type(
    gateway: Gateway,
) -> None:
    for method in ("tools/list", "prompts/list", "resources/list", "resources/templates/list"):
        status, reply, _ = await gateway.post(rpc(method))
        assert status == 200, (method, reply)
        result = reply["result"]
        assert result["resultType"] == "complete"
        # From the catalog: what is left of its time (catalog.ttl_s, 60 s by default).
        assert 0 < result["ttlMs"] <= 60_000 and result["cacheScope"] == "private"
        assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "peers-legacy-py"
    status, reply, _ = await gateway.post(rpc("resources/read", {"uri": "static://hello"}))
    assert reply["result"]["contents"][0]["text"] == "hello resource"
    assert reply["result"]["cacheScope"] == "private"


async def test_an_upstream_application_error_passes_through_as_a_json_rpc_error(
    gateway: Gateway,
) -> None:
    # mcp 1.x FastMCP answers an unknown resource with code 0;
    # codes outside the spec's table keep HTTP 200.
    status, reply, _ = await gateway.post(rpc("resources/read", {"uri": "static://nope"}))
    assert status == 200
    assert reply["error"] == {"code": 0, "message": "Unknown resource: static://nope"}


@pytest.mark.parametrize(
    ("region", "header", "status"),
    [
        ("eu-west", "eu-west", 200),
        ("Hello", "=?base64?SGVsbG8=?=", 200),
        ("eu-west", "us-east", 400),
        ("Hello", "=?base64?SGVsbG8?=", 400),
        ("eu-west", None, 400),
    ],
)
async def test_mcp_param_headers_are_checked_against_the_tools_schema(
    gateway: Gateway, region: str, header: str | None, status: int
) -> None:
    body = rpc("tools/call", {"name": "regional", "arguments": {"region": region, "count": 2}})
    headers = {} if header is None else {"Mcp-Param-Region": header}
    got, reply, _ = await gateway.post(body, headers=headers)
    assert got == status, reply
    if status == 200:
        assert reply["result"]["content"][0]["text"] == f"{region} x2"
    else:
        assert reply["error"]["code"] == -32020 and reply["id"] == 1
