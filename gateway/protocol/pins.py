"""Pins: what each tool of a legacy server was when it was first seen or last approved,
and what a definition that differs from its pin changed, sans-IO.

A tool's definition (its name, title, description, input and output schema, and
annotations, with each hint's absence read as the spec's default) is fingerprinted as
canonical JSON. A definition that differs from its pin is *drift*. A safety hint that
weakens (`readOnlyHint` true to false or absent; `destructiveHint` false to true or
absent; `idempotentHint` or `openWorldHint` likewise) makes it drift of high severity: a
tool that was read-only now says it may write, which is how a trusted tool is turned.
Pins are keyed by the server's own tool name, never the name clients see.

Pure: the store of pins is `gateway.store`'s; the catalog compares.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

#: What a tool's definition is made of, for its fingerprint.
PINNED_FIELDS = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")

#: The spec's defaults for the hints (an absent hint means this).
HINT_DEFAULTS = {
    "readOnlyHint": False,
    "destructiveHint": True,
    "idempotentHint": False,
    "openWorldHint": True,
}
#: Which value of each hint is the safer: a change away from it weakens the tool's promise.
SAFER = {
    "readOnlyHint": True,
    "destructiveHint": False,
    "idempotentHint": True,
    "openWorldHint": False,
}

HIGH = "high"
LOW = "low"


def definition(tool: dict[str, Any]) -> dict[str, Any]:
    """What of a tool's entry is pinned, with each annotation hint as the spec reads it."""
    pinned = {name: tool[name] for name in PINNED_FIELDS if name in tool}
    annotations = tool.get("annotations")
    annotations = dict(annotations) if isinstance(annotations, dict) else {}
    for hint, default in HINT_DEFAULTS.items():
        value = annotations.get(hint)
        annotations[hint] = value if isinstance(value, bool) else default
    pinned["annotations"] = annotations
    return pinned


def fingerprint(tool: dict[str, Any]) -> str:
    """`sha256:` of the canonical JSON of the tool's `definition`."""
    text = json.dumps(definition(tool), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Drift:
    """How a tool's definition differs from its pin."""

    tool: str  # the server's own name
    changed: tuple[str, ...]  # the fields that differ (`annotations.readOnlyHint`, ...)
    weakened: tuple[str, ...]  # the safety hints that weakened
    pinned: str  # the pin's fingerprint
    seen: str  # the definition's now

    @property
    def severity(self) -> str:
        return HIGH if self.weakened else LOW


def drift(tool: str, pinned: dict[str, Any], now: dict[str, Any]) -> Drift | None:
    """How `now` (a tool entry, or its `definition`) differs from `pinned` (the
    `definition` pinned); None when it does not."""
    before, after = definition(pinned), definition(now)
    if before == after:
        return None
    changed = [f for f in PINNED_FIELDS if f != "annotations" and before.get(f) != after.get(f)]
    a, b = before["annotations"], after["annotations"]
    changed += [f"annotations.{k}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    weakened = tuple(
        hint for hint, safer in SAFER.items() if a.get(hint) == safer and b.get(hint) != safer
    )
    return Drift(tool, tuple(changed), weakened, fingerprint(pinned), fingerprint(now))
