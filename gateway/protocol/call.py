"""One bridged call's protocol state, sans-IO: phases, pending questions, decisions.

`CallMachine` is fed the legacy server's messages for one upstream call and the
client's answers, and returns the actions the I/O layer must take (relay a
notification, answer the server, park, finish). It never awaits.

Lifecycle as a transition table (h11 style): a call runs while a client request
is being served, is suspended between an `input_required` answer and its retry,
and ends done, failed, expired or cancelled; a replay-mode run is stopped where it
asks (its retry runs the call again), and a call another replica took over is handed
over. Each final phase says what its ending requires (`ENDINGS`): `fire` returns it as
an `Ending`, which `gateway.calls.lifecycle` carries out.

    phase       trigger    next          the ending it requires
    running     suspend    suspended
    running     stop       stopped       cancel upstream, close the session
    running     complete   done          reuse the session, forget the record
    running     fail       failed        release questions, cancel upstream, close, forget
    running     cancel     cancelled     as failed
    running     hand over  handed over   discard the session; say and forget nothing
    suspended   resume     running
    suspended   expire     expired       as failed
    suspended   fail       failed        as failed
    suspended   cancel     cancelled     as failed
    suspended   hand over  handed over   as from running
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gateway.errors import InvalidParams
from gateway.immutable import immutable
from gateway.protocol import inputs, keys, listen, methods, translate
from gateway.protocol.capabilities import NO_CAPABILITIES, ClientCaps
from gateway.protocol.inbound import LOG_LEVELS
from gateway.protocol.jsonrpc import RequestId


# String enums: hashed as their strings in C (a plain Enum's hash is a Python call, and
# the transition table is read at every step of every call), and their own label values.
class Phase(StrEnum):
    RUNNING = "running"
    SUSPENDED = "suspended"
    DONE = "done"
    FAILED = "failed"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    STOPPED = "stopped"  # a replay-mode run, stopped where it asks
    HANDED_OVER = "handed_over"  # another replica took the call over


class Trigger(StrEnum):
    SUSPEND = "suspend"
    RESUME = "resume"
    COMPLETE = "complete"
    FAIL = "fail"
    EXPIRE = "expire"
    CANCEL = "cancel"
    STOP = "stop"
    HAND_OVER = "hand_over"


TRANSITIONS: dict[tuple[Phase, Trigger], Phase] = {
    (Phase.RUNNING, Trigger.SUSPEND): Phase.SUSPENDED,
    (Phase.RUNNING, Trigger.STOP): Phase.STOPPED,
    (Phase.RUNNING, Trigger.COMPLETE): Phase.DONE,
    (Phase.RUNNING, Trigger.FAIL): Phase.FAILED,
    (Phase.RUNNING, Trigger.CANCEL): Phase.CANCELLED,
    (Phase.RUNNING, Trigger.HAND_OVER): Phase.HANDED_OVER,
    (Phase.SUSPENDED, Trigger.RESUME): Phase.RUNNING,
    (Phase.SUSPENDED, Trigger.EXPIRE): Phase.EXPIRED,
    (Phase.SUSPENDED, Trigger.FAIL): Phase.FAILED,
    (Phase.SUSPENDED, Trigger.CANCEL): Phase.CANCELLED,
    (Phase.SUSPENDED, Trigger.HAND_OVER): Phase.HANDED_OVER,
}

FINAL_PHASES = frozenset(
    {
        Phase.DONE,
        Phase.FAILED,
        Phase.EXPIRED,
        Phase.CANCELLED,
        Phase.STOPPED,
        Phase.HANDED_OVER,
    }
)
#: The rounds that advance with a transition: a round is minted when the call asks.
_ASKS = frozenset({Trigger.SUSPEND, Trigger.STOP})


class SessionFate(StrEnum):
    """What becomes of the call's upstream session when the call ends."""

    REUSE = "reuse"  # back to its pool for the next call (once its stream has run out)
    CLOSE = "close"  # closed (the call was cancelled upstream on it)
    DISCARD = "discard"  # dropped without a word: another replica holds the call now


@dataclass(frozen=True, slots=True)
class EndingRule:
    """What ending in a phase requires of the I/O layer."""

    release_questions: bool  # answer every open server request (elicitation: cancel)
    cancel_upstream: bool  # `notifications/cancelled` for the call's request
    session: SessionFate
    forget_record: bool  # delete its record (and its principal's hold) if it parked
    counted: bool  # a call's ending (`mrtr_call_endings_total`), not a round's


_GIVEN_UP = EndingRule(True, True, SessionFate.CLOSE, True, True)
ENDINGS: dict[Phase, EndingRule] = {
    Phase.DONE: EndingRule(False, False, SessionFate.REUSE, True, True),
    Phase.FAILED: _GIVEN_UP,
    Phase.EXPIRED: _GIVEN_UP,
    Phase.CANCELLED: _GIVEN_UP,
    # The questions stay unanswered: cancelling stops the server's handler where it
    # waits, before anything after the question runs. Nothing was parked.
    Phase.STOPPED: EndingRule(False, True, SessionFate.CLOSE, False, False),
    # Nothing is said upstream and the record is the new owner's: the call goes on there.
    Phase.HANDED_OVER: EndingRule(False, False, SessionFate.DISCARD, False, True),
}


@immutable
class Ending:
    """A call's ending, as `ENDINGS` has it for its phase: the messages to send upstream
    (in order), what becomes of its session and its record."""

    phase: Phase
    messages: tuple[dict[str, Any], ...]
    session: SessionFate
    forget_record: bool
    counted: bool


class IllegalTransition(RuntimeError):
    """A trigger fired in a phase that has no such transition (a gateway bug)."""


@dataclass(slots=True)
class Pending:
    """A legacy server request waiting for the client's answer."""

    key: str
    upstream_id: RequestId
    method: str
    params: dict[str, Any]

    # Why the last answer to this question was not accepted: said when it is asked again.
    problem: str | None = None

    def input_request(self) -> dict[str, Any]:
        request = translate.input_request(self.method, self.params)
        if self.problem is not None:
            asked = request["params"].get("message") or ""
            request["params"]["message"] = (
                f"{asked}\n\n(The previous answer was not accepted: {self.problem}.)".lstrip()
            )
        return request

    def message(self) -> dict[str, Any]:
        """The server's request, as it came (to hold it for another call of its caller)."""
        return {
            "jsonrpc": "2.0",
            "id": self.upstream_id,
            "method": self.method,
            "params": self.params,
        }

    def to_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {"key": self.key, "id": self.upstream_id}
        record.update(method=self.method, params=self.params)
        if self.problem is not None:
            record["problem"] = self.problem
        return record

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> Pending:
        return cls(
            key=data["key"],
            upstream_id=data["id"],
            method=data["method"],
            params=data["params"],
            problem=data.get("problem"),
        )


@immutable
class RoundContext:
    """What the client request currently being served asked for."""

    caps: ClientCaps
    progress_token: str | int | None = None
    log_level: str | None = None


#: The context of a machine no request has served yet (one for all: it is frozen).
NO_ROUND_CONTEXT = RoundContext(NO_CAPABILITIES)


@immutable
class RelayToClient:
    """Send this notification on the client's response stream."""

    notification: dict[str, Any]


@immutable
class AnswerUpstream:
    """Send this JSON-RPC response to the legacy server."""

    upstream_id: RequestId
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None

    def message(self) -> dict[str, Any]:
        if self.error is not None:
            return {"jsonrpc": "2.0", "id": self.upstream_id, "error": self.error}
        return {"jsonrpc": "2.0", "id": self.upstream_id, "result": self.result or {}}


@immutable
class Asked:
    """A new question is pending under `key`."""

    key: str


@immutable
class Refused:
    """The server asked for a capability this request did not declare."""

    required: dict[str, Any]


@immutable
class Finished:
    """The upstream call ended with this result or error."""

    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


@immutable
class ListChanged:
    """The server says a list of its changed (`notifications/tools/list_changed`, ...):
    news for the listens of its upstream, not for this call's client."""

    notification: dict[str, Any]


Action = RelayToClient | AnswerUpstream | Asked | Refused | Finished | ListChanged


@dataclass(slots=True)
class CallMachine:
    call_id: str
    method: str
    upstream_id: RequestId
    progress_token: str
    rules: tuple[keys.KeyRule, ...] = ()
    # Answers known before the question is asked: the client's pre-supplied ones, or a
    # replayed call's journal. Per key, first in first out.
    presupplied: dict[str, list[Any]] = field(default_factory=dict)
    phase: Phase = Phase.RUNNING
    round: int = 0  # suspensions so far; state minted at suspension n resumes round n
    pending: dict[str, Pending] = field(default_factory=dict)
    journal: list[dict[str, Any]] = field(default_factory=list)
    ctx: RoundContext = NO_ROUND_CONTEXT

    def fire(self, trigger: Trigger, reason: str = "") -> Ending | None:
        """Move to the next phase; in a final one, what its ending requires (`reason` is
        what the upstream's cancellation says).

        Raises:
            IllegalTransition: no such transition from this phase (a gateway bug).
        """
        try:
            self.phase = TRANSITIONS[(self.phase, trigger)]
        except KeyError:
            raise IllegalTransition(f"{trigger} while {self.phase}") from None
        if trigger in _ASKS:
            self.round += 1
        rule = ENDINGS.get(self.phase)
        if rule is None:
            return None
        messages = [a.message() for a in self.abandon_answers()] if rule.release_questions else []
        if rule.cancel_upstream:
            params = {"requestId": self.upstream_id, "reason": reason}
            messages.append(
                {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}
            )
        return Ending(self.phase, tuple(messages), rule.session, rule.forget_record, rule.counted)

    def serve(self, ctx: RoundContext) -> None:
        """The client request now being served (first request or a retry)."""
        self.ctx = ctx

    def receive(self, message: dict[str, Any]) -> list[Action]:
        """Decide what one message from the legacy server means for this call.

        Raises:
            InvalidParams: a pre-supplied answer for this question is malformed.
        """
        method = message.get("method")
        if isinstance(method, str):
            if "id" in message:
                return self._server_request(message["id"], method, message.get("params") or {})
            return self._notification(method, message.get("params") or {})
        if message.get("id") == self.upstream_id:
            error = message.get("error")
            if isinstance(error, dict):
                return [Finished(error=error)]
            result = message.get("result")
            return [Finished(result=result if isinstance(result, dict) else {})]
        return []

    def _server_request(self, rid: RequestId, method: str, params: dict[str, Any]) -> list[Action]:
        if method == "ping":
            return [AnswerUpstream(rid, result={})]
        if method not in methods.INPUT:
            return [
                AnswerUpstream(
                    rid, error={"code": -32601, "message": f"Method not found: {method}"}
                )
            ]
        required = self.ctx.caps.missing_for(method, params)
        if required is not None:
            refusal = {
                "code": -32601,
                "message": f"The client did not declare the capability {method} needs",
            }
            return [AnswerUpstream(rid, error=refusal), Refused(required)]
        key = keys.assign_key(method, params, self.rules, self.pending)
        pending = Pending(key=key, upstream_id=rid, method=method, params=params)
        if self.presupplied.get(key):
            answer = self.presupplied[key].pop(0)
            inputs.check_shape(key, method, answer)
            pending.problem = self._problem(pending, answer)
            if pending.problem is None:
                return [self._answer(pending, answer)]
        self.pending[key] = pending
        return [Asked(key)]

    def _notification(self, method: str, params: dict[str, Any]) -> list[Action]:
        if method == "notifications/progress":
            if (
                params.get("progressToken") != self.progress_token
                or self.ctx.progress_token is None
            ):
                return []
            relayed = {k: v for k, v in params.items() if k != "_meta"}
            relayed["progressToken"] = self.ctx.progress_token
            return [RelayToClient({"jsonrpc": "2.0", "method": method, "params": relayed})]
        if method == "notifications/message":
            wanted = self.ctx.log_level
            level = params.get("level")
            if wanted is None or level not in LOG_LEVELS:
                return []
            if LOG_LEVELS.index(level) < LOG_LEVELS.index(wanted):
                return []
            return [RelayToClient({"jsonrpc": "2.0", "method": method, "params": params})]
        if method in listen.LIST_CHANGED:
            return [ListChanged({"jsonrpc": "2.0", "method": method})]
        if method == "notifications/cancelled":
            # The server withdrew one of its own questions.
            withdrawn = params.get("requestId")
            for key, pending in list(self.pending.items()):
                if pending.upstream_id == withdrawn:
                    del self.pending[key]
        return []

    def check(self, responses: Any) -> None:
        """Raises: InvalidParams when an answer to a pending question is malformed."""
        check_answers(self.pending.values(), responses)

    def deliver(self, responses: dict[str, Any]) -> list[AnswerUpstream]:
        """Turn the client's `inputResponses` into answers for the pending questions.

        Every answer is checked before any is delivered. Unknown keys are ignored;
        a form answer that does not fit its schema stays pending (asked again).

        Raises:
            InvalidParams: an answer is malformed; nothing was delivered.
        """
        self.check(responses)
        answers = []
        for key, pending in list(self.pending.items()):
            if key not in responses:
                continue
            pending.problem = self._problem(pending, responses[key])
            if pending.problem is None:
                del self.pending[key]
                answers.append(self._answer(pending, responses[key]))
        return answers

    def refusals(self) -> dict[str, str]:
        """Questions asked again because their answer missed the schema, and why."""
        return {key: p.problem for key, p in self.pending.items() if p.problem is not None}

    @staticmethod
    def _problem(pending: Pending, answer: dict[str, Any]) -> str | None:
        if pending.method != "elicitation/create" or pending.params.get("mode") == "url":
            return None
        problems = inputs.form_problems(pending.params.get("requestedSchema"), answer)
        return "; ".join(problems) or None

    def _answer(self, pending: Pending, answer: dict[str, Any]) -> AnswerUpstream:
        self.journal.append({"key": pending.key, "method": pending.method, "answer": answer})
        if pending.method == "elicitation/create":
            result = {"action": answer["action"]}
            if answer["action"] == "accept" and "content" in answer:
                result["content"] = answer["content"]
            return AnswerUpstream(pending.upstream_id, result=result)
        return AnswerUpstream(
            pending.upstream_id, result={k: v for k, v in answer.items() if k != "_meta"}
        )

    @staticmethod
    def known_answers(
        journal: list[dict[str, Any]], responses: dict[str, Any]
    ) -> dict[str, list[Any]]:
        """Answers in the order they were given: a journal, then this request's responses."""
        known: dict[str, list[Any]] = {}
        for entry in journal:
            known.setdefault(entry["key"], []).append(entry["answer"])
        for key, answer in responses.items():
            known.setdefault(key, []).append(answer)
        return known

    def input_required(self) -> dict[str, Any]:
        """The `inputRequests` of the `input_required` result for what is pending now."""
        return {key: p.input_request() for key, p in self.pending.items()}

    def abandon_answers(self) -> list[AnswerUpstream]:
        """Answers that release every pending question when the call is given up."""
        answers = []
        for pending in self.pending.values():
            if pending.method == "elicitation/create":
                answers.append(AnswerUpstream(pending.upstream_id, result={"action": "cancel"}))
            else:
                answers.append(
                    AnswerUpstream(
                        pending.upstream_id, error={"code": -1, "message": "Request abandoned"}
                    )
                )
        self.pending.clear()
        return answers


def check_answers(pending: Iterable[Pending], responses: Any) -> None:
    """Check the answers to `pending` questions without using any of them.

    Raises:
        InvalidParams: `inputResponses` or one of its answers is malformed.
    """
    if not isinstance(responses, dict):
        raise InvalidParams("params.inputResponses must be an object")
    for question in pending:
        if question.key in responses:
            inputs.check_shape(question.key, question.method, responses[question.key])
