"""What the legacy lane looks at in an upstream's answer to a request, and nothing else.

The answer passes on as it came but for two things policy needs: a list result
(`tools/list`, `prompts/list`, `resources/list`, `resources/templates/list`) leaves out
the entries the caller may not see, and a resource read whose contents the caller may
not see is refused (a 403 while nothing was sent; inside a stream already begun, an
error in place of the result). On the way it notes the request's outcome for the logs
and metrics. A JSON body is looked at whole (`checked_body`), a stream event by event
(`StreamView`), where it also notes whether the response came and whether the client
could resume the stream (an event id came).

It must not change anything else of an answer, nor parse more than it looks at.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import structlog

from gateway.auth.errors import AuthError
from gateway.protocol import jsonrpc, lists, sse
from gateway.protocol.lists import MaySee

log = structlog.get_logger("gateway.legacy")

#: Refuses a result the caller may not see (raises `InsufficientScope`).
Check = Callable[[dict[str, Any]], None]

#: What a streamed result the caller may not see is replaced with: on a stream already
#: begun (200) there is no 403 to send any more.
INSUFFICIENT_SCOPE_RESULT = {
    "code": -32603,
    "message": "Insufficient scope for this result",
    "data": {"reason": "insufficient_scope"},
}


def outcome_of(status: int) -> str:
    """The outcome of an answer that is not looked into, by its status."""
    if status == 202:
        return "accepted"
    if status < 300:
        return "complete"
    return "refused"  # the upstream's own refusal, passed on


def checked_body(
    body: bytes, *, method: str, may_see: MaySee | None, check: Check
) -> tuple[bytes, str]:
    """A JSON answer to a `method` request, as the caller may see it, and its outcome.

    Raises:
        InsufficientScope: from `check`, for a result the caller may not see.
    """
    try:
        message = jsonrpc.loads(body)
    except (ValueError, RecursionError):
        return body, "complete"  # not JSON: the client's to judge, as it would directly
    if not isinstance(message, dict):
        return body, "complete"
    if "error" in message:
        return body, "error"
    result = message.get("result")
    if isinstance(result, dict):
        check(result)
    if may_see is not None:
        kept = lists.filtered_message(message, method, may_see)
        if kept is not None:
            return jsonrpc.dumps(kept), "complete"
    return body, "complete"


class StreamView:
    """What the lane looks at in a stream it relays: the response to its request (its
    outcome; a list filtered; a read checked) and whether the client could resume it."""

    __slots__ = ("rid", "method", "may_see", "check", "answered", "resumable", "outcome")

    def __init__(
        self,
        *,
        rid: jsonrpc.RequestId | None,
        method: str | None,
        may_see: MaySee | None,
        check: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.rid = rid  # None: a GET stream, whose responses are replays of other streams'
        self.method = method
        self.may_see = may_see
        self.check = check
        self.answered = False
        self.resumable = False  # an event id came: the client can resume with it
        self.outcome = "cut_short"

    def has_answer(self) -> bool:
        """Whether the client has the response it waits for (a POST's stream only)."""
        return self.answered and self.rid is not None

    def see(self, event: sse.Event) -> sse.Event:
        if event.id is not None:
            self.resumable = True
        if not event.data or (self.rid is not None and self.answered):
            return event
        if self.rid is None and self.may_see is None:
            return event  # nothing to look for on a GET stream
        try:
            message = jsonrpc.loads(event.data)
        except (ValueError, RecursionError):
            return event
        if not isinstance(message, dict) or "method" in message:
            return event
        if self.rid is not None:
            if message.get("id") != self.rid:
                return event
            self.answered = True
            self.outcome = "error" if "error" in message else "complete"
        result = message.get("result")
        if self.check is not None and isinstance(result, dict):
            try:
                self.check(result)
            except AuthError as refused:
                log.info("result_refused", reason=refused.reason)
                self.outcome = "error"
                reply = jsonrpc.error(message.get("id"), INSUFFICIENT_SCOPE_RESULT)
                return replace(event, data=jsonrpc.dumps(reply).decode())
        if self.may_see is not None:
            kept = lists.filtered_message(message, self.method, self.may_see)
            if kept is not None:
                return replace(event, data=jsonrpc.dumps(kept).decode())
        return event
