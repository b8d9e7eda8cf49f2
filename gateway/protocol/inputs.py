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
        if answer.get("role") not in _ROLES:
            raise InvalidParams(f"{where}.role must be 'user' or 'assistant'")
        if not isinstance(answer.get("model"), str):
            raise InvalidParams(f"{where}.model must be a string")
        _optional(answer, "stopReason", str, where)
        _optional(answer, "_meta", dict, where)
        content = answer.get("content")
        blocks = content if isinstance(content, list) else [content]
        if not blocks:
            raise InvalidParams(f"{where}.content must be a content block or a list of them")
        for block in blocks:
            _check_block(block, f"{where}.content")
    elif method == "roots/list":
        roots = answer.get("roots")
        if not isinstance(roots, list) or not all(
            isinstance(r, dict) and isinstance(r.get("uri"), str) for r in roots
        ):
            raise InvalidParams(f"{where}.roots must be a list of objects with a uri")
        for root in roots:
            if not root["uri"].startswith("file://"):
                raise InvalidParams(f"{where}: root URIs must be file:// URIs")
            _optional(root, "name", str, f"{where}.roots[]")
            _optional(root, "_meta", dict, f"{where}.roots[]")


_ROLES = frozenset({"user", "assistant"})

#: The fields each kind of content block in a sampling answer must carry, and their
#: types: what a legacy server's SDK reads, so that an answer it would refuse is refused
#: here, before it spends the call's round.
_BLOCK_FIELDS: dict[str, tuple[tuple[str, type], ...]] = {
    "text": (("text", str),),
    "image": (("data", str), ("mimeType", str)),
    "audio": (("data", str), ("mimeType", str)),
    "tool_use": (("id", str), ("name", str), ("input", dict)),
    "tool_result": (("toolUseId", str), ("content", list)),
}


def _check_block(block: Any, where: str) -> None:
    if not isinstance(block, dict) or block.get("type") not in _BLOCK_FIELDS:
        kinds = ", ".join(_BLOCK_FIELDS)
        raise InvalidParams(f"{where} must be content blocks of a type among {kinds}")
    for name, kind in _BLOCK_FIELDS[block["type"]]:
        if not isinstance(block.get(name), kind):
            raise InvalidParams(
                f"{where}: a {block['type']} block needs {name!r} ({kind.__name__})"
            )
    _optional(block, "_meta", dict, where)


def _optional(obj: dict[str, Any], name: str, kind: type, where: str) -> None:
    if name in obj and obj[name] is not None and not isinstance(obj[name], kind):
        raise InvalidParams(f"{where}.{name} must be a {_KIND_NAMES[kind]}")


_KIND_NAMES: dict[type, str] = {str: "string", dict: "object", list: "list"}


def fits_form(schema: Any, answer: dict[str, Any]) -> bool:
    """Whether an accepted form answer satisfies the requested schema."""
    return not form_problems(schema, answer)


def form_problems(schema: Any, answer: dict[str, Any]) -> list[str]:
    """Why an accepted form answer does not satisfy the requested schema (empty: it does).

    Only `accept` carries content to check; decline and cancel always fit. Each
    reason names the field and the rule, never the value given (it may be private).
    """
    if answer.get("action") != "accept" or not isinstance(schema, dict):
        return []
    content = answer.get("content") or {}
    properties = schema.get("properties") or {}
    required = schema.get("required") or []
    if not isinstance(properties, dict):
        return []
    problems = [
        f"'{name}' is required"
        for name in required
        if isinstance(name, str) and name not in content
    ]
    for name, value in content.items():
        prop = properties.get(name)
        if isinstance(prop, dict):
            problem = _property_problem(prop, value)
            if problem is not None:
                problems.append(f"'{name}' {problem}")
    return problems


def _allowed_values(prop: dict[str, Any]) -> list[Any] | None:
    if isinstance(prop.get("enum"), list):
        return list(prop["enum"])
    options = prop.get("oneOf") or prop.get("anyOf")
    if isinstance(options, list):
        return [o.get("const") for o in options if isinstance(o, dict) and "const" in o]
    return None


def _one_of(allowed: list[Any]) -> str:
    return "must be one of " + ", ".join(str(v) for v in allowed)


def _property_problem(prop: dict[str, Any], value: Any) -> str | None:
    kind = prop.get("type")
    if kind == "string" or (kind is None and isinstance(value, str)):
        return _string_problem(prop, value) if isinstance(value, str) else "must be text"
    if kind in ("number", "integer"):
        return _number_problem(prop, kind, value)
    if kind == "boolean":
        return None if isinstance(value, bool) else "must be true or false"
    if kind == "array":
        return _array_problem(prop, value)
    return None


def _number_problem(prop: dict[str, Any], kind: str, value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"must be {'an integer' if kind == 'integer' else 'a number'}"
    if kind == "integer" and isinstance(value, float) and not value.is_integer():
        return "must be an integer"
    low, high = prop.get("minimum"), prop.get("maximum")
    if isinstance(low, int | float) and value < low:
        return f"must be at least {low}"
    if isinstance(high, int | float) and value > high:
        return f"must be at most {high}"
    return None


def _array_problem(prop: dict[str, Any], value: Any) -> str | None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return "must be a list of choices"
    items = prop.get("items")
    allowed = _allowed_values(items) if isinstance(items, dict) else None
    if allowed is not None and any(v not in allowed for v in value):
        return "may hold only " + ", ".join(str(v) for v in allowed)
    low, high = prop.get("minItems"), prop.get("maxItems")
    if isinstance(low, int) and len(value) < low:
        return f"needs at least {low} choice(s)"
    if isinstance(high, int) and len(value) > high:
        return f"allows at most {high} choice(s)"
    return None


def _string_problem(prop: dict[str, Any], value: str) -> str | None:
    allowed = _allowed_values(prop)
    if allowed is not None and value not in allowed:
        return _one_of(allowed)
    low, high = prop.get("minLength"), prop.get("maxLength")
    if isinstance(low, int) and len(value) < low:
        return f"must be at least {low} character(s) long"
    if isinstance(high, int) and len(value) > high:
        return f"must be at most {high} character(s) long"
    fmt = prop.get("format", "")
    pattern = _FORMATS.get(fmt)
    if pattern is not None and not pattern.match(value):
        return f"must be a valid {fmt}"
    return None
