"""A large response read in steps: the same value `jsonrpc.loads` reads (or `Unstepped`,
and the caller reads it whole), what the gateway looks into as plain values, the bulk as
the bytes it came in, and never more than a few windows' work between two steps."""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.protocol import jsonrpc, large

STEP = 256  # a small step: the tests' documents span many of them


def read(body: bytes, step: int = STEP) -> tuple[Any, int]:
    """The value `reading` gives and the number of steps it took."""
    steps = large.reading(body, step_bytes=step)
    count = 0
    try:
        while True:
            next(steps)
            count += 1
    except StopIteration as done:
        return done.value, count


def written(value: Any) -> Any:
    """What a client reads of `value` once the gateway writes it (fragments verbatim)."""
    return json.loads(orjson.dumps(value))


def response(result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "result": result}


TEXT = 'lorem "ipsum" dolor\tsit amet, é ü 日本 \\ 😀\n' * 400
TABLE = [{"id": i, "name": f"item-{i}", "ok": i % 2 == 0, "score": i / 3} for i in range(600)]
SHAPES = {
    "one text block": response({"content": [{"type": "text", "text": TEXT}], "isError": False}),
    "a table in structuredContent": response(
        {"content": [{"type": "text", "text": "600 rows"}], "structuredContent": {"rows": TABLE}}
    ),
    "contents with a blob and a text": response(
        {
            "contents": [
                {"uri": "file:///a.png", "mimeType": "image/png", "blob": "QUJD" * 3000},
                {"uri": "file:///b.txt", "text": TEXT},
            ]
        }
    ),
    "numbers kept at the result's level": response({"vector": [i * 0.25 for i in range(3000)]}),
    "a matrix": response({"structuredContent": {"m": [[i, i + 1, -i] for i in range(1000)]}}),
    "an error with large data": {
        "jsonrpc": "2.0",
        "id": "r-1",
        "error": {"code": -32000, "message": "failed", "data": {"log": TEXT}},
    },
    "a large _meta and a resultType of the server's": response(
        {"_meta": {"vendor/trace": TABLE}, "resultType": "mine", "content": []}
    ),
}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("indent", [False, True])
def test_a_large_response_reads_as_jsonrpc_loads_reads_it_in_many_steps(
    shape: str, indent: bool
) -> None:
    message = SHAPES[shape]
    body = json.dumps(message, indent=2 if indent else None, ensure_ascii=indent).encode()
    value, steps = read(body)
    assert written(value) == jsonrpc.loads(body) == message
    assert steps >= len(body) // (4 * STEP)
    assert b"\n" not in orjson.dumps(value)  # whitespace of the server's: one SSE line


def test_what_the_gateway_looks_into_is_values_and_the_bulk_is_bytes() -> None:
    value, _ = read(orjson.dumps(SHAPES["contents with a blob and a text"]))
    contents = value["result"]["contents"]
    assert [entry["uri"] for entry in contents] == ["file:///a.png", "file:///b.txt"]
    assert contents[0]["mimeType"] == "image/png"
    assert isinstance(contents[0]["blob"], orjson.Fragment)
    assert isinstance(contents[1]["text"], orjson.Fragment)
    table, _ = read(orjson.dumps(SHAPES["a table in structuredContent"]))
    assert table["result"]["content"] == [{"type": "text", "text": "600 rows"}]
    assert isinstance(table["result"]["structuredContent"]["rows"], orjson.Fragment)


def test_the_gateways_members_replace_the_servers_with_no_key_twice() -> None:
    value, _ = read(orjson.dumps(SHAPES["a large _meta and a resultType of the server's"]))
    result = dict(value["result"])
    result["resultType"] = "complete"
    result["_meta"] = {**result["_meta"], "io.modelcontextprotocol/serverInfo": {"name": "s"}}
    out = orjson.dumps(result)
    assert out.count(b'"resultType"') == 1 and out.count(b'"_meta"') == 1
    assert json.loads(out)["_meta"]["vendor/trace"] == TABLE


class CountingOrjson:
    """orjson, counting the bytes each step hands it to parse."""

    JSONDecodeError = orjson.JSONDecodeError
    JSONEncodeError = orjson.JSONEncodeError
    Fragment = orjson.Fragment
    dumps = staticmethod(orjson.dumps)

    def __init__(self) -> None:
        self.parsed = 0

    def loads(self, data: bytes) -> Any:
        self.parsed += len(data)
        return orjson.loads(data)


@pytest.mark.parametrize("shape", ["one text block", "a table in structuredContent", "a matrix"])
def test_no_step_parses_more_than_a_few_windows(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guarantee behind 'no client waits behind a large result': what one step parses
    is bounded by the step, not by the message (the message here is 40 to 90 steps)."""
    counting = CountingOrjson()
    monkeypatch.setattr(large, "orjson", counting)
    body = orjson.dumps(SHAPES[shape])
    steps = large.reading(body, step_bytes=STEP)
    most = 0
    with pytest.raises(StopIteration):
        while True:
            counting.parsed = 0
            next(steps)
            most = max(most, counting.parsed)
    assert len(body) > 40 * STEP and most <= 6 * STEP


@pytest.mark.parametrize(
    "body",
    [
        b"[" + orjson.dumps(SHAPES["one text block"]) + b"]",  # a batch: not one message
        orjson.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage", "params": {"t": TEXT}}
        ),
        orjson.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"t": TEXT}}),
        b"\xef\xbb\xbf" + orjson.dumps(SHAPES["one text block"]),  # a byte order mark
        orjson.dumps(response({"rows": TABLE}))[:-40] + b"NaN" + orjson.dumps(response(1))[-40:],
        orjson.dumps(response({"t": TEXT})).replace(b"lorem", b"lor\\ud800em", 1),  # lone surrogate
        orjson.dumps(response({"t": TEXT})).replace(b"lorem", b"lor\xffem", 1),  # not UTF-8
        orjson.dumps(response({"t": TEXT})) + b"{}",
        orjson.dumps(response({"t": TEXT}))[:-3],  # cut short
    ],
)
def test_what_it_does_not_read_plainly_is_left_to_the_whole_read(body: bytes) -> None:
    with pytest.raises(large.Unstepped):
        read(body)


def test_nesting_past_the_gateways_bound_is_refused_as_a_whole_read_refuses_it() -> None:
    deep = "[" * 253 + "1" + "]" * 253  # 255 levels with the message and its result
    text = "x" * 20000
    body = f'{{"jsonrpc":"2.0","id":1,"result":{{"t":"{text}","deep":{deep}}}}}'.encode()
    with pytest.raises(ValueError):
        jsonrpc.loads(body)
    with pytest.raises(large.Unstepped):
        read(body, 2048)
    allowed = body.replace(b"[" * 253, b"[" * 252, 1).replace(b"]" * 253, b"]" * 252, 1)
    assert written(read(allowed, 2048)[0]) == jsonrpc.loads(allowed)


def test_integers_past_64_bits_pass_exactly_in_the_bulk_and_are_left_to_a_whole_read_else() -> None:
    big = 2**70 + 1
    rows = [{"id": big + i, "t": "x" * 50} for i in range(200)]
    in_bulk = json.dumps(response({"structuredContent": {"rows": rows}})).encode()
    value, _ = read(in_bulk)
    assert (
        written(value) == jsonrpc.loads(in_bulk)
        and written(value)["result"]["structuredContent"]["rows"] == rows
    )
    kept = json.dumps(response({"count": big, "structuredContent": {"rows": rows}})).encode()
    with pytest.raises(large.Unstepped):  # orjson could not write it beside the bulk
        read(kept)
    floats = json.dumps(response({"x": [0.00012345678901234567] * 300})).encode()  # 20 digits
    assert written(read(floats)[0]) == jsonrpc.loads(floats)


def test_a_result_with_its_bulk_as_bytes_is_copied_pickled_and_written_by_the_standard_path() -> (
    None
):
    value, _ = read(orjson.dumps(SHAPES["one text block"]))
    assert written(copy.deepcopy(value)) == SHAPES["one text block"]
    assert written(pickle.loads(pickle.dumps(value))) == SHAPES["one text block"]
    assert json.loads(json.dumps(value, default=jsonrpc.plain)) == SHAPES["one text block"]
    with_long = {**value, "extra": 2**70}  # orjson refuses it: the standard path writes it
    assert json.loads(jsonrpc.dumps(with_long))["result"] == SHAPES["one text block"]["result"]


# -- the same value as a whole read, or a whole read ------------------------------------------

# Strings long enough to span steps, made by repeating a short one (cheap to draw).
_STRINGS = st.text(max_size=12) | st.builds(
    lambda t, n: t * n, st.text(max_size=8), st.integers(1, 40)
)
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _STRINGS
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=8) | st.dictionaries(st.text(max_size=6), inner, max_size=6)
    ),
    max_leaves=16,
)


def _bodies(message: dict[str, Any], indent: int | None, ascii_only: bool) -> Iterator[bytes]:
    yield json.dumps(message, indent=indent, ensure_ascii=ascii_only).encode()


@settings(max_examples=80, deadline=None)
@given(
    result=st.dictionaries(st.text(max_size=10), _VALUES, min_size=1, max_size=6),
    indent=st.none() | st.just(1),
    ascii_only=st.booleans(),
    step=st.integers(min_value=64, max_value=256),
)
def test_any_response_reads_as_a_whole_read_reads_it_or_is_left_to_one(
    result: dict[str, Any], indent: int | None, ascii_only: bool, step: int
) -> None:
    for body in _bodies(response(result), indent, ascii_only):
        try:
            value, _ = read(body, step)
        except large.Unstepped:
            continue
        assert written(value) == jsonrpc.loads(body)


@settings(max_examples=80, deadline=None)
@given(
    result=st.dictionaries(st.text(max_size=10), _VALUES, min_size=1, max_size=6),
    at=st.floats(min_value=0, max_value=1, exclude_max=True),
    change=st.sampled_from([b"", b'"', b"\\", b",", b"]", b"}", b"{", b"[", b"\xc3", b"x", b" "]),
    replace=st.booleans(),
    step=st.integers(min_value=64, max_value=256),
)
def test_a_damaged_response_is_never_read_otherwise_than_a_whole_read_reads_it(
    result: dict[str, Any], at: float, change: bytes, replace: bool, step: int
) -> None:
    body = jsonrpc.dumps(response(result))
    cut = int(at * len(body))
    body = body[:cut] + change + body[cut + (1 if replace else 0) :]
    try:
        value, _ = read(body, step)
    except large.Unstepped:
        return
    assert written(value) == jsonrpc.loads(body)  # a whole read reads it, to the same value
