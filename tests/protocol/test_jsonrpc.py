"""JSON on the hot path: orjson, with the standard library behind it for what orjson
refuses, so every body reads and writes as it did before."""

from __future__ import annotations

import json

import pytest

from gateway.errors import ParseError
from gateway.protocol import jsonrpc

SAMPLES = [
    {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "é", "x": [1.5, None]}},
    {"big": 2**70, "neg": -(2**65)},  # past 64 bits: the standard path
    {"text": 'line\nbreak \u2028 "quoted" \\ tab\t'},
]


@pytest.mark.parametrize("obj", SAMPLES)
def test_dumps_writes_what_the_standard_library_writes(obj) -> None:
    expected = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    assert json.loads(jsonrpc.dumps(obj)) == obj
    assert jsonrpc.loads(expected) == obj
    if "big" not in obj:
        assert jsonrpc.dumps(obj) == expected


def test_what_orjson_refuses_and_json_reads_is_still_read() -> None:
    assert jsonrpc.loads(b'{"n": 123456789012345678901234567890}') == {
        "n": 123456789012345678901234567890
    }
    assert jsonrpc.loads(b"[NaN]")[0] != jsonrpc.loads(b"[NaN]")[0]  # NaN, as before


def test_deep_nesting_still_encodes_and_absurd_nesting_is_a_parse_error() -> None:
    deep: list = []
    for _ in range(300):  # past orjson's limit of 254, well within Python's
        deep = [deep]
    assert jsonrpc.loads(jsonrpc.dumps(deep)) == deep
    with pytest.raises(ParseError):
        jsonrpc.decode(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(ParseError):
        jsonrpc.decode(b"\xff not utf-8")


def test_text_and_bytes_read_the_same() -> None:
    text = '{"n": 123456789012345678901234567890, "s": "é"}'
    assert jsonrpc.loads(text) == jsonrpc.loads(text.encode()) == json.loads(text)
