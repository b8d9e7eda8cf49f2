"""What the audit trail records of 2025 clients, as it records 2026 clients' calls: their
sessions (`session.opened`, `session.closed`), the session ids refused
(`request.refused`, `session`), and their calls (`call.started`, `round.asked`,
`round.answered`, `call.ended`, era `2025`).

A 2025 call is one POST (`tools/call`, `prompts/get`, `resources/read`) and its answer,
whole or streamed. Each question its server asks on the call's stream is a round of its
own, asked as it is relayed (`LegacyCall.asked`) and answered when the client's answer
comes, in a POST of its own that may reach any replica: the question is relayed with its
id tagged with the call (`gateway.protocol.legacy_questions`) once every live replica
reads tagged ids, and its answer is given back to the server with the server's own id
(`untag`, which the lane applies whatever the trail). A question asked outside any call
(on a session's GET stream) is relayed as it came and recorded nowhere; nor, yet, is a
question of the gateway's own (`gateway.legacy_clients.asking`: asked for a `calling`
seam before the call is started here), which only its log lines tell
(`legacy_question_asked`, `legacy_question_answered`, `legacy_question_expired`). A call whose
stream a client resumes elsewhere (`Last-Event-ID`) has its end recorded by none.

It never raises and never waits: without a trail (`Audit.on` false) it does nothing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gateway import logging as log_context
from gateway.audit.trail import OFF, Audit, who
from gateway.clock import Clock
from gateway.protocol import jsonrpc, legacy_questions, sse, state
from gateway.protocol.audit import (
    Answer,
    AuditOutcome,
    CallEnded,
    CallStarted,
    Era,
    Refusal,
    RequestRefused,
    RoundAnswered,
    RoundAsked,
    SessionClosed,
    SessionOpened,
    Who,
    answer_of,
    method_of,
    question_of,
)
from gateway.protocol.formats import FleetLevel, Kind
from gateway.protocol.methods import INTERRUPTIBLE
from gateway.seams import RequestServed

_LEGACY = Era.LEGACY


def untag(decoded: Any) -> tuple[Any, tuple[str, int, str, Any] | None]:
    """A client's answer (`decoded`, a JSON-RPC response) as its server must get it: its
    id the server's own again, with the call and question number the tag named (None,
    and `decoded` as it is, for an answer to an untagged question)."""
    if not isinstance(decoded, dict) or "method" in decoded:
        return decoded, None
    found = legacy_questions.untagged(decoded.get("id"))
    if found is None:
        return decoded, None
    return {**decoded, "id": found[3]}, found


class LaneTrail:
    """The trail of one route's legacy lane."""

    def __init__(
        self,
        audit: Audit = OFF,
        *,
        route: str = "",
        clock: Clock | None = None,
        level: FleetLevel | None = None,
    ) -> None:
        self.audit = audit
        self.on = audit.on
        self.route = route
        self.clock = clock
        # Which formats every live replica reads: questions are tagged once all do.
        self.level = level

    def who_of(self, served: RequestServed) -> Who:
        caller = served.caller
        return who(caller.principal, caller.log_id, caller.identity)

    def opened(self, served: RequestServed, params: dict[str, Any]) -> None:
        """A session began: `params` are its client's `initialize` params."""
        if not self.on or served.session is None:
            return
        info = params.get("clientInfo")
        name = info.get("name") if isinstance(info, dict) else None
        version = info.get("version") if isinstance(info, dict) else None
        self.audit.emit(
            SessionOpened(
                principal=self.who_of(served),
                request_id=log_context.bound("request_id"),
                session=served.session,
                upstream=self.route,
                protocol_version=str(params.get("protocolVersion", "")),
                client_name=name if isinstance(name, str) else None,
                client_version=version if isinstance(version, str) else None,
            )
        )

    def closed(self, served: RequestServed, how: str) -> None:
        if not self.on or served.session is None:
            return
        self.audit.emit(
            SessionClosed(
                principal=self.who_of(served),
                request_id=log_context.bound("request_id"),
                session=served.session,
                upstream=self.route,
                how=how,
            )
        )

    def refused(self, served: RequestServed, reason: str) -> None:
        """A session id did not open (another principal's, expired, ...): 404 for it."""
        if not self.on:
            return
        method = served.method if served.method not in ("GET", "DELETE") else None
        self.audit.emit(
            RequestRefused(
                principal=self.who_of(served),
                request_id=log_context.bound("request_id"),
                refusal=Refusal.SESSION,
                reason=reason,
                era=_LEGACY,
                upstream=self.route,
                method=method,
                session=served.session,
                status=404,
            )
        )

    def call(self, served: RequestServed, message: jsonrpc.Request) -> LegacyCall | None:
        """A call's POST goes upstream: recorded started, and followed (None: not a call,
        or no trail)."""
        if not self.on or message.method not in INTERRUPTIBLE:
            return None
        target = served.target.get("tool") or served.target.get("prompt")
        target = target or served.target.get("resource")
        followed = LegacyCall(
            self,
            served,
            call_id=state.new_call_id(),
            target=message.params.get("uri") if message.method == "resources/read" else target,
            tag=self.level is None or self.level.served(Kind.LEGACY_QUESTION),
        )
        self.audit.emit(CallStarted(**followed.of(), arguments=message.params.get("arguments")))
        return followed

    def answered(self, served: RequestServed, tag: tuple[str, int, str, Any], answer: Any) -> None:
        """A client's answer to a question of a call (its tag), on its way to the server."""
        if not self.on or not isinstance(answer, dict):
            return
        call_id, number, method, own = tag
        result = answer.get("result")
        given: Answer = answer_of(str(own), method_of(result), result, error="error" in answer)
        self.audit.emit(
            RoundAnswered(
                principal=self.who_of(served),
                request_id=log_context.bound("request_id"),
                call_id=call_id,
                era=_LEGACY,
                upstream=self.route,
                method=method,  # the answer names its call, not the call's target
                session=served.session,
                round=number,
                answers=(given,),
            )
        )


class LegacyCall:
    """One 2025 call as the trail follows it: its questions, relayed, and its response."""

    __slots__ = ("trail", "served", "call_id", "target", "tag", "asked", "began", "done")

    def __init__(
        self,
        trail: LaneTrail,
        served: RequestServed,
        *,
        call_id: str,
        target: str | None,
        tag: bool,
    ) -> None:
        self.trail = trail
        self.served = served
        self.call_id = call_id
        self.target = target
        self.tag = tag  # questions relayed with their ids tagged (every replica reads them)
        self.asked = 0
        self.began = trail.clock.monotonic() if trail.clock is not None else 0.0
        self.done = False

    def of(self) -> dict[str, Any]:
        served = self.served
        return {
            "principal": self.trail.who_of(served),
            "request_id": log_context.bound("request_id"),
            "call_id": self.call_id,
            "era": _LEGACY,
            "upstream": self.trail.route,
            "method": served.method,
            "target": self.target,
            "session": served.session,
        }

    def asked_on(self, event: sse.SseEvent, message: dict[str, Any]) -> sse.SseEvent:
        """A question of the server's on the call's stream: recorded asked (a round of its
        own), and relayed with its id tagged where every replica reads tagged ids."""
        self.asked += 1
        number, method = self.asked, str(message.get("method"))
        question = question_of(str(message.get("id")), method, message.get("params"))
        self.trail.audit.emit(RoundAsked(**self.of(), round=number, questions=(question,)))
        if not self.tag:
            return event
        own = message.get("id")
        tag = legacy_questions.tagged(self.call_id, number, self.served.method, own)
        relayed = {**message, "id": tag}
        return replace(event, data=jsonrpc.dumps(relayed).decode())

    def ended(self, message: Any) -> None:
        """The call's response came (`message`, decoded; anything else: a body not JSON)."""
        if self.done:
            return
        self.done = True
        error = message.get("error") if isinstance(message, dict) else None
        result = message.get("result") if isinstance(message, dict) else None
        code = error.get("code") if isinstance(error, dict) else None
        is_error = None
        if isinstance(result, dict) and self.served.method == "tools/call":
            is_error = bool(result.get("isError"))
        clock = self.trail.clock
        duration = 0.0 if clock is None else clock.monotonic() - self.began
        self.trail.audit.emit(
            CallEnded(
                **self.of(),
                outcome=AuditOutcome.ERROR if error is not None else AuditOutcome.COMPLETE,
                duration_ms=round(duration * 1000),
                rounds=self.asked,
                error_code=code if isinstance(code, int) else (None if error is None else -32603),
                is_error=is_error,
                error_message=error.get("message") if isinstance(error, dict) else None,
                result=result,
            )
        )
