"""The front door's pure parts: Host/Origin policy, header values, notifications."""

from __future__ import annotations

import pytest

from gateway.errors import ForbiddenOrigin, HeaderMismatch, NotAcceptable, UnsupportedMediaType
from gateway.protocol import inbound

OK = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
LOOPBACK = inbound.OriginPolicy(loopback_only=True, origins=frozenset({"https://app.example"}))


@pytest.mark.parametrize(
    "headers",
    [
        {"host": "127.0.0.1:8080"},
        {"host": "localhost:8080", "origin": "http://localhost:8080"},
        {"host": "[::1]:9000", "origin": "http://[::1]:9000"},
        {"host": "localhost", "origin": "https://app.example"},
        {},
    ],
)
def test_a_loopback_gateway_serves_loopback_hosts_and_origins(headers: dict) -> None:
    inbound.check_http("POST", {**OK, **headers}, policy=LOOPBACK)


@pytest.mark.parametrize(
    "headers",
    [
        {"host": "evil.example.com", "origin": "http://evil.example.com"},
        {"host": "evil.example.com"},
        {"host": "localhost:8080", "origin": "http://evil.example.com"},
        {"host": "127.0.0.1.evil.example"},
    ],
)
def test_a_loopback_gateway_refuses_rebinding(headers: dict) -> None:
    with pytest.raises(ForbiddenOrigin):
        inbound.check_http("POST", {**OK, **headers}, policy=LOOPBACK)


def test_a_public_gateway_checks_listed_hosts_and_origins() -> None:
    public = inbound.OriginPolicy(hosts=frozenset({"mcp.example.com"}))
    inbound.check_http("POST", {**OK, "host": "mcp.example.com:443"}, policy=public)
    with pytest.raises(ForbiddenOrigin):
        inbound.check_http("POST", {**OK, "host": "other.example.com"}, policy=public)
    with pytest.raises(ForbiddenOrigin):
        inbound.check_http(
            "POST", {**OK, "host": "mcp.example.com", "origin": "https://x"}, policy=public
        )
    anyhost = inbound.OriginPolicy()
    inbound.check_http("POST", {**OK, "host": "whatever"}, policy=anyhost)


@pytest.mark.parametrize(
    ("accept", "json", "sse"),
    [
        ("application/json, text/event-stream", True, True),
        ("Application/JSON;q=0.9 , text/event-stream;charset=utf-8", True, True),
        ("*/*", True, True),
        ("application/*, text/*", True, True),
        ("text/event-stream", False, True),
        ("application/json", True, False),
        ("text/html, application/xml", False, False),
        ("", False, False),
    ],
)
def test_accept_lists_a_media_type_itself_or_under_a_wildcard(
    accept: str, json: bool, sse: bool
) -> None:
    assert inbound.accepts(accept, "application/json") is json
    assert inbound.accepts(accept, "text/event-stream") is sse
    assert inbound.accepts(accept, "application/json", "text/event-stream") is (json and sse)


def test_accept_and_content_type_are_checked() -> None:
    with pytest.raises(NotAcceptable):
        inbound.check_http("POST", {**OK, "accept": "text/event-stream"})
    with pytest.raises(UnsupportedMediaType):
        inbound.check_http("POST", {**OK, "content-type": "text/json"})
    inbound.check_http(
        "POST", {**OK, "accept": "*/*", "content-type": "application/json; charset=utf-8"}
    )


def test_header_values_decode_the_base64_sentinel_strictly() -> None:
    assert inbound.decode_header_value("=?base64?w6liYw==?=") == "ébc"
    assert inbound.decode_header_value("plain") == "plain"
    assert inbound.decode_header_value("=?base64?***?=") is None
    assert inbound.decode_header_value("=?base64?/w==?=") is None  # not UTF-8
    assert (
        inbound.duplicated_routing_header([("Mcp-Method", "a"), ("mcp-method", "a")])
        == "mcp-method"
    )


def test_headers_are_read_in_one_pass_by_lower_case_name_the_last_copy_winning() -> None:
    headers, duplicate = inbound.read_headers(
        [("Accept", "a"), ("X-Other", "1"), ("x-other", "2"), ("Mcp-Param-Region", "eu")]
    )
    assert headers == {"accept": "a", "x-other": "2", "mcp-param-region": "eu"}
    assert duplicate is None  # only routing and Mcp-Param-* headers must come once
    _, duplicate = inbound.read_headers([("Mcp-Param-Region", "eu"), ("mcp-param-region", "us")])
    assert duplicate == "mcp-param-region"


def test_a_non_ascii_name_header_is_a_mismatch() -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "é",
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    headers = {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "é"}
    with pytest.raises(HeaderMismatch):
        inbound.classify(body, headers)
    headers["mcp-name"] = "=?base64?w6k=?="
    assert inbound.classify(body, headers).target == "é"


@pytest.mark.parametrize(
    "accept",
    [
        None,  # missing: it lists neither
        "",
        "application/json",
        "text/event-stream",
        "application/json;q=1",
        "text/html, application/xml",
    ],
)
def test_an_accept_missing_or_partial_is_refused_alike(accept: str | None) -> None:
    """The transport section: `Accept` MUST list both types; a header that is not there
    lists neither, so it is refused as one listing only one is (406)."""
    headers = {k: v for k, v in OK.items() if k != "accept"}
    if accept is not None:
        headers["accept"] = accept
    with pytest.raises(NotAcceptable):
        inbound.check_http("POST", headers)


@pytest.mark.parametrize(
    "accept",
    [
        "application/json, text/event-stream",
        "text/event-stream;q=0.9, application/json",
        "*/*",  # what curl sends when told nothing: it lists both, by wildcard
        "application/*, text/*",
    ],
)
def test_an_accept_listing_both_types_by_name_or_wildcard_passes(accept: str) -> None:
    inbound.check_http("POST", {**OK, "accept": accept})
