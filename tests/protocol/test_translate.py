"""Conversions between the 2026 front and the legacy upstream."""

from __future__ import annotations

import pytest

from gateway.protocol import translate
from gateway.protocol.capabilities import ClientCaps
from gateway.protocol.inbound import Envelope, FrontRequest, trace_context
from gateway.protocol.versions import Version


def front(params: dict) -> FrontRequest:
    envelope = Envelope(Version.V2026_07_28, ClientCaps(), None, None)
    trace = trace_context(params.get("_meta", {}), {})
    return FrontRequest(id=1, method="tools/call", params=params, envelope=envelope, trace=trace)


TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_the_upstream_request_drops_the_envelope_and_mrtr_members_and_keeps_trace_context() -> None:
    params = {
        "name": "t",
        "arguments": {"a": 1},
        "inputResponses": {"k": {}},
        "requestState": "s",
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "dev.mcp/x": 1,
            "progressToken": "client",
            "traceparent": TRACE,
            "tracestate": "bad\nvalue",
            "com.example/tenant": "t1",
        },
    }
    assert translate.upstream_params(front(params), "gw-1") == {
        "name": "t",
        "arguments": {"a": 1},
        "_meta": {
            "traceparent": TRACE,
            "com.example/tenant": "t1",
            "progressToken": "gw-1",
        },
    }
    assert translate.upstream_params(front({"name": "t"}), None) == {"name": "t"}


def test_the_removed_task_augmentation_is_never_sent_upstream() -> None:
    """The tasks extension ignores a 2026 request's 2025-11-25 `task` member: sent on, a
    task-capable legacy server would start a legacy task nobody polls."""
    params = {"name": "t", "arguments": {}, "task": {"ttl": 60000, "pollInterval": 100}}
    assert translate.upstream_params(front(params), None) == {"name": "t", "arguments": {}}


@pytest.mark.parametrize(
    ("legacy", "code", "data"),
    [
        ({"code": -32002, "message": "nope", "data": {"uri": "x"}}, -32602, {"uri": "x"}),
        (
            {"code": -32042, "message": "url needed"},
            -32603,
            {"upstreamCode": -32042, "upstream": None},
        ),
        ({"code": -32021, "message": "needs"}, -32021, None),
        ({"code": -32601, "message": "no"}, -32601, None),
        ({"code": 7, "message": "app"}, 7, None),
        ({"code": "x"}, -32603, None),
    ],
)
def test_legacy_error_codes_are_translated(legacy: dict, code: int, data) -> None:
    error = translate.translate_error(legacy).error_object()
    assert error["code"] == code
    assert error.get("data") == data


def test_results_gain_result_type_cache_hints_and_server_info() -> None:
    info = {"name": "legacy", "version": "1"}
    cache = translate.CachePolicy(ttl_ms=5000, scope="public")
    listed = translate.decorate_result("tools/list", {"tools": []}, server_info=info, cache=cache)
    assert listed == {
        "tools": [],
        "resultType": "complete",
        "ttlMs": 5000,
        "cacheScope": "public",
        "_meta": {"io.modelcontextprotocol/serverInfo": info},
    }
    called = translate.decorate_result("tools/call", {"content": []}, server_info=None, cache=cache)
    assert called == {"content": [], "resultType": "complete"}
    retried = translate.decorate_result(
        "resources/read", {"contents": []}, server_info=None, cache=cache, cacheable=False
    )
    assert (retried["ttlMs"], retried["cacheScope"]) == (0, "private")


def test_server_requests_become_input_requests() -> None:
    url = {
        "mode": "url",
        "url": "https://x",
        "message": "m",
        "elicitationId": "e1",
        "_meta": {"a": 1},
    }
    assert translate.input_request("elicitation/create", url) == {
        "method": "elicitation/create",
        "params": {"mode": "url", "url": "https://x", "message": "m"},
    }
    sampling = {"messages": [], "maxTokens": 5, "task": {"ttl": 1}, "_meta": {"progressToken": 1}}
    assert translate.input_request("sampling/createMessage", sampling) == {
        "method": "sampling/createMessage",
        "params": {"messages": [], "maxTokens": 5},
    }
    assert translate.input_request("roots/list", {"_meta": {}}) == {"method": "roots/list"}


def test_discover_advertises_only_what_is_bridged() -> None:
    info = translate.UpstreamInfo(
        protocol_version="2025-11-25",
        capabilities={
            "tools": {"listChanged": True},
            "resources": {"subscribe": True},
            "tasks": {},
            "logging": {},
        },
        server_info={"name": "s", "version": "1"},
        instructions="be nice",
    )
    result = translate.discover_result(info, translate.CachePolicy())
    assert result["capabilities"] == {"tools": {}, "resources": {}, "logging": {}}
    # While subscriptions/listen is served, what the server declares of it is said.
    served = translate.discover_result(info, translate.CachePolicy(), listens=True)
    assert served["capabilities"] == {
        "tools": {"listChanged": True},
        "resources": {"subscribe": True},
        "logging": {},
    }
    assert result["supportedVersions"] == ["2026-07-28"]
    assert result["instructions"] == "be nice"
    assert result["resultType"] == "complete" and result["ttlMs"] == 0


def test_a_url_elicitation_required_error_yields_its_urls_without_ids() -> None:
    error = {
        "code": -32042,
        "message": "URL elicitation required",
        "data": {
            "elicitations": [
                {"mode": "url", "elicitationId": "e1", "url": "https://x/y", "message": "Go"}
            ]
        },
    }
    assert translate.url_elicitations(error) == [
        {"mode": "url", "message": "Go", "url": "https://x/y"}
    ]
    assert translate.url_elicitations({"code": -32042, "message": "x"}) is None
    assert (
        translate.url_elicitations({"code": -32042, "data": {"elicitations": [{"url": 5}]}}) is None
    )
    assert translate.url_elicitations({"code": -32602, "data": {"elicitations": []}}) is None
