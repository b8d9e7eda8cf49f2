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
    assert jsonrpc.dumps(deep) == b"[" * 301 + b"]" * 301
    # What the gateway reads it must be able to write on: an upstream's too (loads).
    for far in (300, 1_000, 1_020):
        with pytest.raises(ValueError):
            jsonrpc.loads(b"[" * far + b"]" * far)
    assert jsonrpc.loads(b"[" * 254 + b"]" * 254) is not None
    with pytest.raises(ParseError):
        jsonrpc.decode(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(ParseError):
        jsonrpc.decode(b"\xff not utf-8")


@pytest.mark.parametrize(
    "body",
    [
        b'{"jsonrpc":"2.0","id":"\\ud800","method":"tools/list"}',
        b'{"params":{"arguments":{"t":"a\\uDC00b"}}}',
        b'{"k\\udbff":1}',  # in a key
        b'{"n":123456789012345678901234567890,"s":"\\ud83d"}',  # on the long-number path
    ],
)
def test_a_lone_surrogate_in_a_client_body_is_a_parse_error(body: bytes) -> None:
    with pytest.raises(ParseError, match="lone UTF-16 surrogate"):
        jsonrpc.decode(body)


def test_a_surrogate_pair_and_text_about_escapes_still_read() -> None:
    assert jsonrpc.decode(b'{"s":"\\ud83d\\ude00"}') == {"s": "\U0001f600"}
    assert jsonrpc.decode(b'{"s":"\\\\ud800"}') == {"s": "\\ud800"}  # an escaped backslash


def test_dumps_writes_a_lone_surrogate_from_upstream_as_its_escape() -> None:
    assert jsonrpc.dumps({"s": "a\ud800"}) == b'{"s":"a\\ud800"}'
    assert json.loads(jsonrpc.dumps({"n": 2**70, "s": "\udc00"})) == {"n": 2**70, "s": "\udc00"}


def test_text_and_bytes_read_the_same() -> None:
    text = '{"n": 123456789012345678901234567890, "s": "é"}'
    assert jsonrpc.loads(text) == jsonrpc.loads(text.encode()) == json.loads(text)


@pytest.mark.parametrize(
    ("text", "long"),
    [
        ("9" * 19, False),
        ("9" * 20, True),
        ("1" + "0" * 19, True),  # zeros are digits too
        ("x" + "0" * 19 + "x", False),
        ("12345678901-2345678901", False),
        ("\u0661" * 25, False),  # Arabic-Indic digits: not what orjson reads as a number
        ("18446744073709551616", True),  # 2**64, which orjson would read as a float
        ("-9223372036854775809", True),  # below -2**63: a float to orjson, with 19 digits
        ("9223372036854775809", False),
    ],
)
def test_a_long_number_is_a_run_of_twenty_ascii_digits(text, long) -> None:
    assert jsonrpc.has_long_number(text) is long
    assert jsonrpc.has_long_number(text.encode()) is long


def test_integers_either_side_of_64_bits_read_exactly() -> None:
    for n in (
        2**63 - 1,
        -(2**63),
        -(2**63) - 1,
        -(10**19) + 1,
        2**64 - 1,
        2**64,
        10**19,
        10**19 - 1,
    ):
        body = f'{{"n": {n}}}'
        assert jsonrpc.loads(body.encode())["n"] == n and type(jsonrpc.loads(body)["n"]) is int
