"""Helpers every network transport toward legacy servers shares.

`mapped_errors` is the one boundary where foreign exceptions (sockets, timeouts,
bad bytes: what `gateway.http1` and the SSE parser raise) become `UpstreamError`;
`message_of` reads the message an event carries, `parse_message` a JSON body that
must be one message. Nothing here decides what a message means.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.errors import ErrorWatch, UpstreamError
from gateway.protocol import jsonrpc, sse

_DRAIN_S = 1.0


class mapped_errors(ErrorWatch):  # noqa: N801 - used as a function: `with mapped_errors(...)`
    """Turn a foreign failure while `doing` something into `UpstreamError`.

    `UpstreamError`s raised inside pass through unchanged.
    """

    __slots__ = ("doing",)

    def __init__(self, doing: str) -> None:
        self.doing = doing

    def seen(self, error: BaseException) -> None:
        if isinstance(error, UpstreamError):
            return
        if isinstance(error, (TimeoutError, OSError, ValueError)):
            raise failure(self.doing, error) from error


def failure(doing: str, exc: BaseException) -> UpstreamError:
    """The `UpstreamError` a foreign failure while `doing` something becomes (also for
    a failure reported to a callback rather than raised)."""
    if isinstance(exc, TimeoutError):
        error = UpstreamError(f"upstream timed out while {doing}")
    elif isinstance(exc, ValueError):  # its bytes: not HTTP, too large, not SSE
        error = UpstreamError(f"upstream's answer failed while {doing}: {exc}")
    else:
        error = UpstreamError(f"upstream unreachable while {doing}: {exc}")
    error.__cause__ = exc
    return error


def message_of(event: sse.SseEvent) -> dict[str, Any] | None:
    """The JSON-RPC message an SSE event carries, or None (priming, foreign, bad JSON)."""
    if event.event != "message" or not event.data:
        return None
    try:
        item = jsonrpc.loads(event.data)
    except (ValueError, RecursionError):
        return None
    return item if isinstance(item, dict) else None


def parse_message(body: bytes) -> dict[str, Any]:
    """Raises: UpstreamError when the body is not one JSON-RPC message."""
    try:
        item = jsonrpc.loads(body)
    except (ValueError, RecursionError) as exc:
        raise UpstreamError("upstream sent a body that is not JSON") from exc
    if not isinstance(item, dict):
        raise UpstreamError("upstream sent a JSON body that is not one message")
    return item


def error_text(body: bytes) -> str:
    """The message of a JSON-RPC error body, or the start of any other body."""
    try:
        item = jsonrpc.loads(body)
        return str(item["error"]["message"])
    except (ValueError, RecursionError, KeyError, TypeError):
        return body[:200].decode("utf-8", "replace") or "no body"


async def drain(next_chunk: Callable[[], Awaitable[bytes | None]]) -> None:
    """Read what follows the response (normally just the end of the stream), briefly.

    A stream left unread closes its keep-alive connection; the server SHOULD end the
    stream after the response, so this usually returns at once.
    """
    try:
        async with asyncio.timeout(_DRAIN_S):
            while await next_chunk() is not None:
                pass
    except (TimeoutError, OSError, ValueError):
        pass


def is_response_to(item: dict[str, Any], rid: Any) -> bool:
    return "method" not in item and item.get("id") == rid and ("result" in item or "error" in item)
