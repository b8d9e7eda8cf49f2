"""What a caller may see of a list: the entries it lacks the per-target scopes for are
left out, for a 2026 client (`gateway.web.front_door`) and a 2025 one
(`gateway.legacy_clients`) alike, by the one table of what each list holds
(`gateway.protocol.methods.LISTS`).

Pure: whether the caller may see one entry is asked of a `MaySee` it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.protocol.methods import LISTS

#: Whether a caller may see one entry: (the method using it, its name or URI) -> bool.
MaySee = Callable[[str, str | None], bool]


def field_of(entry: Any, field: str) -> str | None:
    """An entry's `field` when it is a string; None otherwise (a malformed entry)."""
    value = entry.get(field) if isinstance(entry, dict) else None
    return value if isinstance(value, str) else None


def list_method_of(result: Any) -> str | None:
    """The list method a result is the answer to, read from its shape: for a response
    whose request is not known (one replayed on a resumed stream)."""
    if not isinstance(result, dict):
        return None
    for method, listed in LISTS.items():
        if isinstance(result.get(listed.member), list):
            return method
    return None


def filtered_result(result: Any, method: str, may_see: MaySee) -> dict[str, Any] | None:
    """The result of a `method` list with the entries the caller may not see left out;
    None when `method` is no list, the result holds no entries, or all are seen."""
    listed = LISTS.get(method)
    if listed is None or not isinstance(result, dict):
        return None
    entries = result.get(listed.member)
    if not isinstance(entries, list):
        return None
    kept = [e for e in entries if may_see(listed.used_by, field_of(e, listed.field))]
    if len(kept) == len(entries):
        return None
    return {**result, listed.member: kept}


def filtered_message(message: Any, method: str | None, may_see: MaySee) -> dict[str, Any] | None:
    """`message` with the list entries the caller may not see left out, when it is the
    response to a list request (`method`, or read from its shape when None) and something
    was left out; None when it passes as it is."""
    if not isinstance(message, dict) or "method" in message:
        return None
    result = message.get("result")
    kept = filtered_result(result, method or list_method_of(result) or "", may_see)
    return None if kept is None else {**message, "result": kept}
