"""Properties of the JSON-RPC envelope over hostile bodies (hypothesis, sans-IO).

`decode` reads any bytes as a value or refuses them with -32700, and what it reads can be
written back (into an answer, an upstream request, a requestState) as standard JSON that
reads back the same; `parse_message` classifies any JSON value or refuses it with -32600;
`id_of` finds exactly the ids a reply may echo. The examples are the same on every run
(tests/conftest.py loads a derandomized profile); the counts are each test's own.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway.errors import InvalidRequest, ParseError
from gateway.protocol import jsonrpc
from tests.support.fuzz import (
    NOT_JSON,
    Raw,
    bodies,
    json_values,
    read_as_client,
    render,
    request_id,
    valid_id,
)


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def read_strictly(data: bytes) -> Any:
    """JSON as RFC 8259 defines it: UTF-8, no NaN or Infinity (the test's own reader)."""
    return json.loads(data.decode(), parse_constant=_not_json)


@settings(max_examples=600)
@given(st.one_of(bodies().map(lambda body: body.data), st.binary(max_size=100)))
@example(b'{"a":' + b"[" * 1000 + b"]" * 1000 + b"}")  # orjson reads it, no writer can
@example(b'{"method":"\xed\xa0\x80"}')  # a surrogate in (invalid) UTF-8, no escape
@example(b'{"a":NaN,"b":100000000000000000000}')  # NaN where the standard writer is used
@example(b'{"a":1e999}')
def test_a_body_decodes_to_what_is_written_back_the_same_or_to_a_parse_error(
    data: bytes,
) -> None:
    try:
        value = jsonrpc.decode(data)
    except ParseError:
        return
    # Wrapped as the gateway wraps a client's values (arguments in an upstream request,
    # an id in an answer): a few levels deeper than they came.
    written = jsonrpc.dumps({"jsonrpc": "2.0", "id": 1, "params": {"arguments": [value]}})
    assert read_strictly(written)["params"]["arguments"] == [value]


@pytest.mark.parametrize(
    "data",
    [
        b'{"a":' + b"[" * 1000 + b"]" * 1000 + b"}",
        b'{"a":' + b'{"b":' * 300 + b"1" + b"}" * 301,
        b'{"a":' + b"[" * 300 + b"100000000000000000000" + b"]" * 300 + b"}",
        b'{"method":"\xed\xa0\x80"}',
        b'{"a":NaN}',
        b'{"a":-Infinity,"b":100000000000000000000}',
        b'{"a":1e999}',
    ],
    ids=[
        "arrays-1000-deep",
        "objects-300-deep",
        "300-deep-long-number",
        "utf8-surrogate",
        "nan",
        "infinity",
        "1e999",
    ],
)
def test_json_the_gateway_could_not_write_back_is_a_parse_error(data: bytes) -> None:
    """What a strict reader refuses, or what no writer gives back the same, is -32700 at
    the door, not a failure (a traceback, an invalid answer) when it is written out."""
    with pytest.raises(ParseError):
        jsonrpc.decode(data)


@pytest.mark.parametrize("number", [b"1", b"100000000000000000000"])
def test_nesting_up_to_the_bound_is_read_and_written_back(number: bytes) -> None:
    inner = jsonrpc.MAX_DEPTH - 1  # inside `{"a": ...}`: MAX_DEPTH levels in all
    data = b'{"a":' + b"[" * inner + number + b"]" * inner + b"}"
    assert jsonrpc.dumps(jsonrpc.decode(data)) == data
    with pytest.raises(ParseError):
        jsonrpc.decode(b"[" + data + b"]")


def test_orjson_writes_max_depth_levels_and_no_more() -> None:
    """`decode` takes what orjson writes as nested within the bound: were orjson to write
    deeper, bodies past the bound would pass."""
    value: list[Any] = []
    for _ in range(jsonrpc.MAX_DEPTH - 1):
        value = [value]
    orjson.dumps(value)
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps([value])


@settings(max_examples=400)
@given(st.one_of(json_values, bodies().map(lambda body: read_as_client(body.data))))
def test_any_json_value_is_classified_or_refused_as_an_invalid_request(value: Any) -> None:
    if value is NOT_JSON:
        return
    try:
        message = jsonrpc.parse_message(value)
    except InvalidRequest:
        return
    assert isinstance(value, dict) and value["jsonrpc"] == "2.0"
    if isinstance(message, jsonrpc.Request):
        assert valid_id(message.id) and message.id == value["id"]
    if isinstance(message, jsonrpc.Request | jsonrpc.Notification):
        assert message.method == value["method"] and message.method
        assert isinstance(message.params, dict)
    else:
        assert "method" not in value and "id" in value


@settings(max_examples=300)
@given(bodies())
def test_the_id_of_a_reply_is_the_requests_when_it_has_a_valid_one(body: Any) -> None:
    value = read_as_client(body.data)
    expected = request_id(body.data)
    assert jsonrpc.id_of(value) == expected
    if expected is not None:
        written = jsonrpc.dumps(jsonrpc.error(jsonrpc.id_of(value), {"code": -32600}))
        assert read_strictly(written)["id"] == expected


def test_the_strategies_write_a_raw_fragment_as_it_is() -> None:
    """Else the bodies would carry placeholders, and the properties would prove little."""
    assert render({"a": [Raw("NaN"), "x"]}) == b'{"a": [NaN, "x"]}'
