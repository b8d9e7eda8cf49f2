"""Mcp-Param-* headers are checked against the arguments they mirror."""

from __future__ import annotations

import pytest

from gateway.errors import HeaderMismatch
from gateway.protocol.params import check_param_headers, declared_headers

SCHEMA = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "count": {"type": "integer", "x-mcp-header": "Count"},
        "dry": {"type": "boolean", "x-mcp-header": "Dry"},
        "ratio": {"type": "number", "x-mcp-header": "Ratio"},  # numbers are not mirrorable
        "bad": {"type": "string", "x-mcp-header": "Bad Name"},  # not a token
        "plain": {"type": "string"},
    },
}
DECLARED = {"region": "Region", "count": "Count", "dry": "Dry"}


def test_only_mirrorable_well_named_properties_are_declared() -> None:
    assert declared_headers(SCHEMA) == DECLARED
    assert declared_headers(None) == {} and declared_headers({"properties": []}) == {}


@pytest.mark.parametrize(
    ("arguments", "headers"),
    [
        (
            {"region": "eu", "count": 3, "dry": True},
            {"mcp-param-region": "eu", "mcp-param-count": "3", "mcp-param-dry": "true"},
        ),
        ({"region": "Hello"}, {"mcp-param-region": "=?base64?SGVsbG8=?="}),
        ({"region": "SGVsbG8="}, {"mcp-param-region": "SGVsbG8="}),
        ({"region": "=?base64?SGVsbG8="}, {"mcp-param-region": "=?base64?SGVsbG8="}),
        ({"count": 7}, {"mcp-param-count": "07"}),
        ({}, {}),
        ({"region": None}, {}),
    ],
)
def test_matching_headers_pass(arguments: dict, headers: dict) -> None:
    check_param_headers(DECLARED, arguments, headers)


@pytest.mark.parametrize(
    ("arguments", "headers"),
    [
        ({"region": "eu"}, {}),
        ({"region": "eu"}, {"mcp-param-region": "us"}),
        ({"region": "Hello"}, {"mcp-param-region": "=?base64?SGVsbG8?="}),
        ({"region": "Hello"}, {"mcp-param-region": "=?base64?SGVs!!!bG8=?="}),
        ({"region": "é"}, {"mcp-param-region": "é"}),
        ({}, {"mcp-param-region": "eu"}),
        ({"dry": False}, {"mcp-param-dry": "False"}),
    ],
)
def test_missing_malformed_or_different_headers_are_refused(arguments: dict, headers: dict) -> None:
    with pytest.raises(HeaderMismatch):
        check_param_headers(DECLARED, arguments, headers)


@pytest.mark.parametrize("header", ["+7", "1_000", " 7", "7.0", "0x7"])
def test_integers_must_be_written_plainly(header: str) -> None:
    with pytest.raises(HeaderMismatch):
        check_param_headers(
            {"count": "Count"},
            {"count": 7 if header != "1_000" else 1000},
            {"mcp-param-count": header},
        )
