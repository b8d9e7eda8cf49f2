"""JSON-RPC 2.0 envelopes: parse one inbound message, build outbound ones.

Pure functions over dicts and bytes. `parse_message` classifies a decoded body
into a request, notification or response and rejects everything else with the
precise JSON-RPC error.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

from gateway.errors import InvalidRequest, ParseError
from gateway.immutable import immutable

RequestId = str | int


@immutable
class Request:
    id: RequestId
    method: str
    params: dict[str, Any]


@immutable
class Notification:
    method: str
    params: dict[str, Any]


@immutable
class Response:
    id: RequestId | None
    result: dict[str, Any] | None
    error: dict[str, Any] | None


Message = Request | Notification | Response


#: How deep a request body may nest: as deep as orjson writes. What the gateway reads it
#: writes out again (the upstream request, the answer, a requestState), a few levels
#: deeper, where the standard library's writer takes what orjson does not; a body nested
#: far deeper (orjson reads 1,024 levels) would fail there, out of stack, not here.
MAX_DEPTH = 254


def decode(body: bytes) -> Any:
    """Decode a request body: JSON text (RFC 8259) in UTF-8 that the gateway can write back
    as it read it.

    Raises:
        ParseError: not UTF-8, not JSON, or JSON no writer gives back the same: `NaN`,
            `Infinity`, a number past a float's range, a lone UTF-16 surrogate, nesting
            past `MAX_DEPTH`.
    """
    try:
        value = _read_standard(body)
    except (ValueError, RecursionError) as exc:
        raise ParseError() from exc
    if _nests_past_max_depth(body, value):
        raise ParseError(f"Parse error: the body nests more than {MAX_DEPTH} levels deep")
    # A \uD800-\uDFFF escape without its pair reads (in the standard path) as a lone
    # surrogate, which no UTF-8 text can carry: refused here, before anything is done with
    # it, rather than failing when the answer or the upstream request is written.
    if (b"\\ud" in body or b"\\uD" in body) and _has_lone_surrogate(value):
        raise ParseError("Parse error: the body has a \\u escape of a lone UTF-16 surrogate")
    return value


def _read_standard(body: bytes) -> Any:
    """The value of `body` as `loads` reads it, but for what the standard library reads
    beyond RFC 8259, which is refused: `NaN` and `Infinity` (orjson writes them as null,
    the standard writer as no JSON at all), a number that overflows to infinity, text
    that is not UTF-8 (a surrogate encoded in it, UTF-16 or UTF-32). A UTF-8 byte order
    mark is ignored, as RFC 8259 allows.

    Raises:
        ValueError, RecursionError: not such JSON.
    """
    if not has_long_number(body):
        try:
            return orjson.loads(body)  # refuses all of the above itself
        except orjson.JSONDecodeError:
            pass
    return json.loads(body.decode("utf-8-sig"), parse_constant=_refuse, parse_float=_finite)


def _refuse(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _finite(literal: str) -> float:
    number = float(literal)
    if not math.isfinite(number):
        raise ValueError(f"{literal[:20]} is beyond a float's range")
    return number


def _nests_past_max_depth(body: bytes, value: Any) -> bool:
    """Whether `value` (read from `body`) nests past `MAX_DEPTH`, told in C nearly always:
    a body with no more brackets than that cannot, and a value orjson writes does not
    (it refuses past `MAX_DEPTH` levels). Only a value it refuses (too deep, or holding an
    integer past 64 bits) is walked."""
    if body.count(b"[") + body.count(b"{") <= MAX_DEPTH:
        return False
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError:
        return _deeper_than(value, MAX_DEPTH)
    return False


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether `value` nests more than `limit` levels (a level at a time, no recursion)."""
    level = [value] if type(value) is dict or type(value) is list else []
    for _ in range(limit):
        children: list[Any] = []
        for item in level:
            children.extend(item.values() if type(item) is dict else item)
        level = [child for child in children if type(child) is dict or type(child) is list]
        if not level:
            return False
    return True


def _has_lone_surrogate(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return True
    return False


#: Integers orjson reads as floats: past 64 bits, or below -2**63. Every such literal is
#: a run of 20 digits or a minus sign and 19: looked for with every digit turned into `0`,
#: two passes in C, about a tenth of what a regular expression costs per body.
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_DIGITS_TO_ZERO_TEXT = str.maketrans("123456789", "000000000")
_LONG, _LONG_NEGATIVE = "0" * 20, "-" + "0" * 19
_LONG_BYTES, _LONG_NEGATIVE_BYTES = _LONG.encode(), _LONG_NEGATIVE.encode()


def has_long_number(data: bytes | str) -> bool:
    """Whether `data` may hold an integer orjson would not read exactly: a run of 20
    ASCII digits or more, or a minus sign and 19 (some of which fit in 64 bits)."""
    if isinstance(data, str):
        text = data.translate(_DIGITS_TO_ZERO_TEXT)
        return _LONG in text or _LONG_NEGATIVE in text
    raw = data.translate(_DIGITS_TO_ZERO)
    return _LONG_BYTES in raw or _LONG_NEGATIVE_BYTES in raw


def loads(data: bytes | str) -> Any:
    """JSON text to Python, by orjson; what orjson refuses or would read differently from
    the standard library (NaN, integers past 64 bits) takes the standard path. A value
    nested past `MAX_DEPTH` (an upstream's, say) is refused: the gateway could not write
    it on.

    Raises:
        ValueError, RecursionError: not JSON, or nested too deep.
    """
    if has_long_number(data):
        value = json.loads(data)
    else:
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError:
            value = json.loads(data)
    # The count is `_nests_past_max_depth`'s own first test, made here: every message an
    # upstream sends comes this way, nearly all far too shallow to need the call.
    if isinstance(data, str):
        brackets = data.count("[") + data.count("{")
    else:
        brackets = data.count(b"[") + data.count(b"{")
    if brackets > MAX_DEPTH:
        raw = data.encode() if isinstance(data, str) else data
        if _nests_past_max_depth(raw, value):
            raise ValueError(f"JSON nested more than {MAX_DEPTH} levels deep")
    return value


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON, by orjson; the standard path for what it refuses (integers
    past 64 bits, nesting past its limit), with the same output."""
    try:
        return orjson.dumps(obj)
    except orjson.JSONEncodeError:
        text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, default=plain)
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate (from upstream): written as its escape
        return json.dumps(obj, separators=(",", ":"), default=plain).encode()


def plain(value: Any) -> Any:
    """`default` for the standard library's writer: JSON kept as the bytes it came in
    (an `orjson.Fragment` of a large result, `gateway.protocol.large`) read to a value.

    Raises:
        TypeError: anything else, as the writer would.
    """
    if isinstance(value, orjson.Fragment):
        return loads(orjson.dumps(value))
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def id_of(obj: Any) -> RequestId | None:
    """The id of a decoded request if it has a valid one (for error replies), else None."""
    if isinstance(obj, dict) and _valid_id(obj.get("id")):
        rid: RequestId = obj["id"]
        return rid
    return None


def parse_message(obj: Any) -> Message:
    """Classify one decoded JSON-RPC message.

    Raises:
        InvalidRequest: a batch, a non-object, a wrong `jsonrpc`, a bad id or method,
            or params that are not an object.
    """
    if isinstance(obj, list):
        raise InvalidRequest("Batches are not supported: send one JSON-RPC message per POST")
    if not isinstance(obj, dict):
        raise InvalidRequest("The body must be a JSON-RPC object")
    if obj.get("jsonrpc") != "2.0":
        raise InvalidRequest('"jsonrpc" must be "2.0"')
    if "method" not in obj:
        if "id" in obj and ("result" in obj or "error" in obj):
            result, error = obj.get("result"), obj.get("error")
            rid = obj["id"]
            return Response(
                id=rid if _valid_id(rid) else None,
                result=result if isinstance(result, dict) else None,
                error=error if isinstance(error, dict) else None,
            )
        raise InvalidRequest("Not a JSON-RPC request, notification or response")
    method = obj["method"]
    if not isinstance(method, str) or not method:
        raise InvalidRequest('"method" must be a non-empty string')
    params = obj.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise InvalidRequest('"params" must be an object')
    if "id" not in obj:
        return Notification(method=method, params=params)
    if not _valid_id(obj["id"]):
        raise InvalidRequest('"id" must be a string or an integer')
    return Request(id=obj["id"], method=method, params=params)


def request(rid: RequestId, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def result(rid: RequestId | None, value: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": value}


def error(rid: RequestId | None, error_object: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": error_object}
