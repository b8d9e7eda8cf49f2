"""`Mcp-Param-*` headers: tool arguments a client mirrors into HTTP headers (SEP-2243).

A tool's `inputSchema` may mark a top-level string, integer or boolean property with
`"x-mcp-header": "<Name>"`; a 2026-07-28 client then sends `Mcp-Param-<Name>` with
that argument's value (base64-sentinel-encoded when not plain ASCII). The gateway,
which processes the body, must reject a request whose header is missing, malformed
or different from the body: 400 + -32020.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gateway.errors import HeaderMismatch
from gateway.protocol.inbound import decode_header_value

PREFIX = "mcp-param-"
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_VISIBLE_ASCII = re.compile(r"^[\x20-\x7e]*$")
_MIRRORABLE = ("string", "integer", "boolean")


def declared_headers(input_schema: Any) -> dict[str, str]:
    """Property name -> header token, for the properties a tool mirrors into headers."""
    properties = input_schema.get("properties") if isinstance(input_schema, dict) else None
    if not isinstance(properties, dict):
        return {}
    declared = {}
    for name, schema in properties.items():
        token = schema.get("x-mcp-header") if isinstance(schema, dict) else None
        if isinstance(token, str) and _TOKEN.fullmatch(token) and schema.get("type") in _MIRRORABLE:
            declared[name] = token
    return declared


def _rendered(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    return None


def check_param_headers(
    declared: Mapping[str, str], arguments: Any, headers: Mapping[str, str]
) -> None:
    """Check every declared `Mcp-Param-*` header against the body's arguments.

    `headers` maps lower-case names to values.

    Raises:
        HeaderMismatch: a header is missing, malformed, or differs from its argument.
    """
    arguments = arguments if isinstance(arguments, dict) else {}
    for prop, token in declared.items():
        name = f"Mcp-Param-{token}"
        raw = headers.get(PREFIX + token.lower())
        expected = _rendered(arguments.get(prop))
        if expected is None:
            if raw is not None:
                raise HeaderMismatch(f"The {name} header is sent but arguments.{prop} is absent")
            continue
        if raw is None:
            raise HeaderMismatch(f"The {name} header is required: arguments.{prop} is present")
        if not _VISIBLE_ASCII.fullmatch(raw):
            raise HeaderMismatch(f"The {name} header has invalid characters")
        value = decode_header_value(raw)
        if value is None:
            raise HeaderMismatch(f"The {name} header is not valid base64")
        if value != expected and not _same_number(value, arguments.get(prop)):
            raise HeaderMismatch(f"The {name} header does not match arguments.{prop}")


_INTEGER = re.compile(r"^-?[0-9]+$")


def _same_number(header: str, value: Any) -> bool:
    """Integers compare as numbers (`07` is 7), written plainly: no sign, space or `_`."""
    if isinstance(value, bool) or not isinstance(value, int) or not _INTEGER.fullmatch(header):
        return False
    return int(header) == value
