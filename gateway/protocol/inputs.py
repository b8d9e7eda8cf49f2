"""Checking a client's `inputResponses` before any of them goes upstream.

Two verdicts, deliberately different:

- `check_shape` - an answer that is not an ElicitResult / CreateMessageResult /
  ListRootsResult at all is a protocol error: -32602, nothing is delivered.
- `fits_form` - a well-formed form answer whose content does not fit the schema
  the server asked with is not an error: the question is asked again.
"""

from __future__ import annotations

import re
from typing import Any

from gateway.errors import InvalidParams

_ACTIONS = ("accept", "decline", "cancel")
_FORMATS = {
    "email": re.compile(r"^[^@\s]+@[^@\s]+$"),
    "uri": re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:\S*$"),
    "date": re.compile(r"^\d{4}-\d{2}-\d{2}$"),
    "date-time": re.compile(
        r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$"
    ),
}


def _primitive(value: Any) -> bool:
    if isinstance(value, str | bool | int | float):
        return True
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def check_shape(key: str, method: str, answer: Any) -> None:
    """Raises: InvalidParams when `answer` is not a result of `method`'s kind."""
    where = f"inputResponses[{key!r}]"
    if not isinstance(answer, dict):
        raise InvalidParams(f"{where} must be an object")
    if method == "elicitation/create":
        if answer.get("action") not in _ACTIONS:
            raise InvalidParams(f"{where}.action must be one of accept, decline, cancel")
        content = answer.get("content")
        if content is not None:
            if not isinstance(content, dict) or not all(_primitive(v) for v in content.values()):
                raise InvalidParams(
                    f"{where}.content must be an object of strings, numbers, booleans "
                    "or string arrays"
                )
    elif method == "sampling/createMessage":
        if not isinstance(answer.get("role"), str):
            raise InvalidParams(f"{where}.role must be a string")
        if not isinstance(answer.get("model"), str):
            raise InvalidParams(f"{where}.model must be a string")
        content = answer.get("content")
        blocks = content if isinstance(content, list) else [content]
        if not blocks or not all(
            isinstance(b, dict) and isinstance(b.get("type"), str) for b in blocks
        ):
            raise InvalidParams(f"{where}.content must be a content block or a list of them")
    elif method == "roots/list":
        roots = answer.get("roots")
        if not isinstance(roots, list) or not all(
            isinstance(r, dict) and isinstance(r.get("uri"), str) for r in roots
        ):
            raise InvalidParams(f"{where}.roots must be a list of objects with a uri")
        for root in roots:
            if not root["uri"].startswith("file://"):
                raise InvalidParams(f"{where}: root URIs must be file:// URIs")


def fits_form(schema: Any, answer: dict[str, Any]) -> bool:
    """Whether an accepted form answer satisfies the requested schema.

    Only `accept` carries content to check; decline and cancel always fit.
    """
    if answer.get("action") != "accept" or not isinstance(schema, dict):
        return True
    content = answer.get("content") or {}
    properties = schema.get("properties") or {}
    required = schema.get("required") or []
    if not isinstance(properties, dict):
        return True
    if any(name not in content for name in required if isinstance(name, str)):
        return False
    return all(
        _fits_property(properties[name], value)
        for name, value in content.items()
        if isinstance(properties.get(name), dict)
    )


def _allowed_values(prop: dict[str, Any]) -> list[Any] | None:
    if isinstance(prop.get("enum"), list):
        return list(prop["enum"])
    options = prop.get("oneOf") or prop.get("anyOf")
    if isinstance(options, list):
        return [o.get("const") for o in options if isinstance(o, dict) and "const" in o]
    return None


def _fits_property(prop: dict[str, Any], value: Any) -> bool:
    kind = prop.get("type")
    if kind == "string" or (kind is None and isinstance(value, str)):
        return isinstance(value, str) and _fits_string(prop, value)
    if kind in ("number", "integer"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if kind == "integer" and not float(value).is_integer():
            return False
        low, high = prop.get("minimum"), prop.get("maximum")
        return not (
            (isinstance(low, int | float) and value < low)
            or (isinstance(high, int | float) and value > high)
        )
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "array":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return False
        items = prop.get("items")
        allowed = _allowed_values(items) if isinstance(items, dict) else None
        if allowed is not None and any(v not in allowed for v in value):
            return False
        low, high = prop.get("minItems"), prop.get("maxItems")
        return not (
            (isinstance(low, int) and len(value) < low)
            or (isinstance(high, int) and len(value) > high)
        )
    return True


def _fits_string(prop: dict[str, Any], value: str) -> bool:
    allowed = _allowed_values(prop)
    if allowed is not None and value not in allowed:
        return False
    low, high = prop.get("minLength"), prop.get("maxLength")
    if isinstance(low, int) and len(value) < low:
        return False
    if isinstance(high, int) and len(value) > high:
        return False
    pattern = _FORMATS.get(prop.get("format", ""))
    return pattern is None or bool(pattern.match(value))
