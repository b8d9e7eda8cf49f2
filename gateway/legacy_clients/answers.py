"""What the legacy lane looks at in an upstream's answer to a request, and nothing else.

The answer passes on as it came but for what policy and the seams need: a list result
(`tools/list`, `prompts/list`, `resources/list`, `resources/templates/list`) leaves out
the entries the caller may not see, then goes through the `listing` seam
(`gateway.seams`); a resource read whose contents the caller may not see is refused (a
403 while nothing was sent; inside a stream already begun, an error in place of the
result, `ResultRefused`). On the way it notes the request's outcome for the logs and
metrics. A JSON body is looked at whole (`AnswerView.whole`), a stream event by event
(`AnswerView.see`), where it also notes whether the response came and whether the
client could resume the stream (an event id came). On an endpoint of several upstreams
(`marks`: the upstream's name) a request the server sends the client, and an event id,
are marked with their upstream (`gateway.protocol.endpoint_session`).

It must not change anything else of an answer, nor parse more than it looks at.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import structlog

from gateway.auth.errors import AuthError
from gateway.errors import RpcError
from gateway.legacy_clients.trail import LegacyCall
from gateway.protocol import endpoint_session, jsonrpc, lists, sse
from gateway.protocol.lists import MaySee
from gateway.protocol.methods import LISTS
from gateway.protocol.rendering import rendered

log = structlog.get_logger("gateway.legacy")

#: Refuses a result the caller may not see (raises `InsufficientScope`).
Check = Callable[[dict[str, Any]], None]
#: A list result as the `listing` seam shows it, given its list method.
Listed = Callable[[str, dict[str, Any]], dict[str, Any]]


class ResultRefused(RpcError):
    """A result the caller may not see, inside a stream already begun (200): there is no
    403 to send any more, so an error takes the result's place."""

    default_message = "Insufficient scope for this result"

    def __init__(self) -> None:
        super().__init__(data={"reason": "insufficient_scope"})


def outcome_of(status: int) -> str:
    """The outcome of an answer that is not looked into, by its status."""
    if status == 202:
        return "accepted"
    if status < 300:
        return "complete"
    return "refused"  # the upstream's own refusal, passed on


class AnswerView:
    """What the lane looks at in an answer to its request, whole or as the stream it
    relays: the response to the request (its outcome; a list filtered; a read checked)
    and whether the client could resume the stream."""

    __slots__ = (
        "rid",
        "method",
        "may_see",
        "check",
        "listed",
        "call",
        "answered",
        "resumable",
        "outcome",
        "marks",
        "see",
    )

    def __init__(
        self,
        *,
        rid: jsonrpc.RequestId | None,
        method: str | None,
        may_see: MaySee | None,
        check: Check | None = None,
        listed: Listed | None = None,
        call: LegacyCall | None = None,
        marks: str | None = None,
    ) -> None:
        self.rid = rid  # None: a GET stream, whose responses are replays of other streams'
        self.method = method
        self.may_see = may_see
        self.check = check
        self.listed = listed  # None: no `listing` seam is plugged in
        # The call the audit trail follows (its questions and its response), if any.
        self.call = call
        self.answered = False
        self.resumable = False  # an event id came: the client can resume with it
        self.outcome = "cut_short"
        self.marks = marks  # the upstream, on an endpoint of several: what it sends is marked
        #: An event as the client gets it (`looked_at`, then marked on such an endpoint).
        self.see = self.looked_at if marks is None else self._marked

    def whole(self, body: bytes) -> tuple[bytes, str]:
        """A JSON answer to the request, as the caller may see it, and its outcome.

        Raises:
            InsufficientScope: from `check`, for a result the caller may not see.
        """
        try:
            message = jsonrpc.loads(body)
        except (ValueError, RecursionError):
            message = None  # not JSON: the client's to judge, as it would directly
        if self.call is not None:
            self.call.ended(message)
        if not isinstance(message, dict):
            return body, "complete"
        if "error" in message:
            return body, "error"
        result = message.get("result")
        if self.check is not None and isinstance(result, dict):
            self.check(result)
        shown = self._shown(message)
        return (body if shown is None else jsonrpc.dumps(shown)), "complete"

    def has_answer(self) -> bool:
        """Whether the client has the response it waits for (a POST's stream only)."""
        return self.answered and self.rid is not None

    def looked_at(self, event: sse.SseEvent) -> sse.SseEvent:
        if event.id is not None:
            self.resumable = True
        if not event.data or (self.rid is not None and self.answered):
            return event
        if self.rid is None and self.may_see is None and self.listed is None:
            return event  # nothing to look for on a GET stream
        try:
            message = jsonrpc.loads(event.data)
        except (ValueError, RecursionError):
            return event
        if not isinstance(message, dict):
            return event
        if "method" in message:
            if self.call is not None and "id" in message:  # the server asks the client
                return self.call.asked_on(event, message)
            return event
        if self.rid is not None:
            if message.get("id") != self.rid:
                return event
            self.answered = True
            self.outcome = "error" if "error" in message else "complete"
            if self.call is not None:
                self.call.ended(message)
        result = message.get("result")
        if self.check is not None and isinstance(result, dict):
            try:
                self.check(result)
            except AuthError as refused:
                log.info("result_refused", reason=refused.reason)
                self.outcome = "error"
                reply = rendered(ResultRefused(), message.get("id")).message
                return replace(event, data=jsonrpc.dumps(reply).decode())
        shown = self._shown(message)
        if shown is not None:
            return replace(event, data=jsonrpc.dumps(shown).decode())
        return event

    def _marked(self, event: sse.SseEvent) -> sse.SseEvent:
        """`event` looked at, with its id and a server's request's id marked with the
        upstream (the client's answer and resumption then find it)."""
        event = self.looked_at(event)
        upstream = self.marks
        assert upstream is not None
        if event.id is not None:
            event = replace(event, id=endpoint_session.marked_event(upstream, event.id))
        if '"method"' not in event.data:
            return event
        try:
            message = jsonrpc.loads(event.data)
        except (ValueError, RecursionError):
            return event
        if isinstance(message, dict) and "method" in message and "id" in message:
            message = {**message, "id": endpoint_session.marked(upstream, message["id"])}
            return replace(event, data=jsonrpc.dumps(message).decode())
        return event

    def _shown(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """`message` as the caller may see it, or None when it passes as it is: a list
        result without the entries its scopes hide, then as the `listing` seam shows it."""
        kept = None
        if self.may_see is not None:
            kept = lists.filtered_message(message, self.method, self.may_see)
        if self.listed is not None:
            current = message if kept is None else kept
            result = current.get("result")
            # A response on a GET stream (a replay) is known by its shape.
            method = self.method or lists.list_method_of(result)
            if method in LISTS and isinstance(result, dict):
                shown = self.listed(method, result)
                if shown is not result:
                    kept = {**current, "result": shown}
        return kept
