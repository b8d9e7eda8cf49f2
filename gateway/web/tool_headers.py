"""What the front needs to know of an upstream's tools: which mirror arguments into
`Mcp-Param-*` headers, and which the server runs as legacy tasks (2025-11-25
`execution.taskSupport`, for `gateway.tasks`).

Learnt from the upstream's `tools/list` (fetched on first need and every
`refresh_s`, and from every listing that passes through). Validation fails open:
if the listing cannot be had, the request is served and the gap logged.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from gateway.clock import Clock
from gateway.errors import RpcError
from gateway.protocol.legacy_tasks import legacy_support
from gateway.protocol.params import declared_headers

log = structlog.get_logger("gateway.web")

Fetch = Callable[[str | None], Awaitable[dict[str, Any]]]
_MAX_PAGES = 100


class ToolHeaders:
    def __init__(self, fetch: Fetch, *, clock: Clock, refresh_s: float = 300.0) -> None:
        self._fetch = fetch
        self._clock = clock
        self._refresh_s = refresh_s
        self._declared: dict[str, dict[str, str]] = {}
        self._task_support: dict[str, str] = {}
        self._loaded_at: float | None = None

    def learn(self, listing: dict[str, Any]) -> None:
        """Take in one page of a `tools/list` result."""
        for tool in listing.get("tools") or []:
            if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                declared = declared_headers(tool.get("inputSchema"))
                if declared:
                    self._declared[tool["name"]] = declared
                else:
                    self._declared.pop(tool["name"], None)
                support = legacy_support(tool)
                if support is not None:
                    self._task_support[tool["name"]] = support
                else:
                    self._task_support.pop(tool["name"], None)

    def stale(self) -> bool:
        """Whether the listing is due to be fetched (`reload`) before it is read: never
        fetched yet, or not for `refresh_s`. (A test apart from the fetch: a fresh listing,
        nearly every call, is read with no coroutine made.)"""
        loaded_at = self._loaded_at
        return loaded_at is None or self._clock.monotonic() - loaded_at > self._refresh_s

    def for_tool(self, name: str | None) -> dict[str, str]:
        """The `Mcp-Param-*` headers the tool declares, as last learnt (after `reload`
        when `stale`)."""
        return self._declared.get(name or "", {})

    def task_support(self, name: str | None) -> str | None:
        """The tool's `execution.taskSupport` (`required`, `optional`) as last learnt, or
        None (after `reload` when `stale`, as `for_tool`)."""
        return self._task_support.get(name or "")

    async def reload(self) -> None:
        """Fetch the whole listing aside and swap it in: validation never sees a half map."""
        self._loaded_at = self._clock.monotonic()
        fresh = ToolHeaders(self._fetch, clock=self._clock, refresh_s=self._refresh_s)
        cursor: str | None = None
        try:
            for _ in range(_MAX_PAGES):
                page = await self._fetch(cursor)
                fresh.learn(page)
                cursor = page.get("nextCursor")
                if not isinstance(cursor, str):
                    break
        except RpcError as exc:
            log.warning("tool_headers_unknown", error=exc.message, detail="Mcp-Param-* unchecked")
            return
        self._declared = fresh._declared
        self._task_support = fresh._task_support
