"""Deterministic `inputRequests` keys for legacy server requests.

The same legacy request at the same point of the same call always gets the same
key, so a client may pre-supply answers and a replayed call finds its journal.
A key is taken from the first operator rule that matches (YAML, per tool,
prompt or resource), else derived from the request itself:

    elicitation/create form   elicit.<sorted property names joined by +>
    elicitation/create url    elicit.url
    sampling/createMessage    sampling
    roots/list                roots

Keys already pending in the same round get a `#2`, `#3`... suffix.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyRule:
    """Name the server requests that match every given condition `key`."""

    key: str
    """The `inputRequests` key the questions it matches get."""
    method: str | None = None
    """Only questions of this method: `elicitation/create`, `sampling/createMessage` or
    `roots/list`; none: any."""
    fields: frozenset[str] | None = None
    """Only an elicitation whose schema requests all of these properties; none: any."""
    message: re.Pattern[str] | None = None
    """Only a question whose text this regular expression is found in; none: any."""

    def matches(self, method: str, params: dict[str, Any]) -> bool:
        if self.method is not None and self.method != method:
            return False
        if self.fields is not None and not self.fields <= set(_schema_fields(params)):
            return False
        return self.message is None or bool(self.message.search(_message_text(method, params)))


def _schema_fields(params: dict[str, Any]) -> list[str]:
    schema = params.get("requestedSchema")
    properties = schema.get("properties") if isinstance(schema, dict) else None
    return sorted(properties) if isinstance(properties, dict) else []


def _message_text(method: str, params: dict[str, Any]) -> str:
    if method == "sampling/createMessage":
        texts = []
        for message in params.get("messages") or []:
            content = message.get("content") if isinstance(message, dict) else None
            for block in content if isinstance(content, list) else [content]:
                if isinstance(block, dict) and isinstance(block.get("text"), str):
                    texts.append(block["text"])
        return "\n".join(texts)
    message = params.get("message")
    return message if isinstance(message, str) else ""


def default_key(method: str, params: dict[str, Any]) -> str:
    if method == "elicitation/create":
        if params.get("mode") == "url":
            return "elicit.url"
        fields = _schema_fields(params)
        return "elicit." + "+".join(fields) if fields else "elicit"
    if method == "sampling/createMessage":
        return "sampling"
    if method == "roots/list":
        return "roots"
    return method


def assign_key(
    method: str, params: dict[str, Any], rules: Sequence[KeyRule], taken: Iterable[str]
) -> str:
    """The key for one server request, unique among `taken` (the round's pending keys)."""
    busy = set(taken)
    base = next((r.key for r in rules if r.matches(method, params)), None)
    if base is None:
        base = default_key(method, params)
    key, n = base, 1
    while key in busy:
        n += 1
        key = f"{base}#{n}"
    return key
