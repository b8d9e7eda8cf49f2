"""The audit trail's events, sans-IO: what is recorded of every call, round, task,
refusal and legacy session, and the JSON object each is written as (schema `SCHEMA`,
versioned in `gateway.protocol.formats` as `Kind.AUDIT_EVENT`).

Each event is a dataclass of its kind (`CallStarted`, `RoundAsked`, ...), made
where the thing happens. The trail (`gateway.audit.Audit`) stamps it as it is emitted,
with its id, the time and the replica, and `record` writes it as the object every sink
carries:

    {"v": 1, "id": "5f0c...", "kind": "call.started", "time": "2026-10-01T12:00:00.123Z",
     "replica": "gw-0~1a2b3c4d", "principal": {"kind": "jwt", ...}, "call_id": "...",
     "era": "2026", "upstream": "tickets", "tool": "book", ...}

A call's `call_id` is the same in all its events, whatever replica writes them: across its
rounds, its retries, a takeover and a replay. A consumer joins on it. An event's id is
unique to what it records: the facts of a call (its start, each round asked and
answered, its end) and of a task (each change) are named by the fact (`fact_id`), any
other event by its time, its process and a count (`EventIds`). So a fact recorded by a
replica that died before the fleet knew it had, and again by the replica that went on
with the call (a takeover that runs the call's end a second time), is one id, and a
consumer drops an event whose `id` it has seen.

What a call, a question or an answer holds (arguments, question text, answers' content,
results, an error's message, which may quote the arguments) is content: events carry it
as given, and `ContentPolicy` decides as the event is written whether any of it is kept
(none by default), passed through the operator's `redact` patterns and cut to
`max_bytes`. Nothing else in an event is content: names, keys, methods, actions, codes,
counts, times. Never a token, an API key or a `requestState`: the principal is who the
caller is (issuer, subject, client id, API key id) and its log id, never its credential.

Pure: no I/O, no clock (the time is handed in).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gateway.protocol import formats
from gateway.protocol.audit_content import NO_CONTENT, REDACTED, ContentPolicy
from gateway.protocol.formats import Kind

__all__ = ["NO_CONTENT", "REDACTED", "ContentPolicy"]  # with the events, for their users

#: The version of the events this release writes (what `"v"` says).
SCHEMA = formats.written(Kind.AUDIT_EVENT, formats.LEVEL)


class EventKind(StrEnum):
    CALL_STARTED = "call.started"
    CALL_ENDED = "call.ended"
    ROUND_ASKED = "round.asked"
    ROUND_ANSWERED = "round.answered"
    TASK_CREATED = "task.created"
    TASK_WORKING = "task.working"
    TASK_INPUT_REQUIRED = "task.input_required"
    TASK_COMPLETED = "task.completed"
    TASK_FAILED = "task.failed"
    TASK_CANCELLED = "task.cancelled"
    TASK_EXPIRED = "task.expired"
    REQUEST_REFUSED = "request.refused"
    SESSION_OPENED = "session.opened"
    SESSION_CLOSED = "session.closed"
    APPROVAL_ASKED = "approval.asked"
    APPROVAL_ANSWERED = "approval.answered"


class Era(StrEnum):
    """Which revision's client made the request."""

    MODERN = "2026"  # 2026-07-28: stateless, its questions as MRTR rounds
    LEGACY = "2025"  # 2025-03-26 .. 2025-11-25 (the legacy lane): questions pushed to it


class AuditOutcome(StrEnum):
    """How a call ended (`call.ended`)."""

    COMPLETE = "complete"  # the upstream's result reached the client (`is_error` says more)
    ERROR = "error"  # a JSON-RPC error, with its code
    CANCELLED = "cancelled"  # the client left or cancelled, or the gateway stopped
    EXPIRED = "expired"  # nobody answered its question within the suspension's lifetime
    LOST = "lost"  # its upstream stream, or the replica holding it, is gone for good


class Refusal(StrEnum):
    """What refused a request (`request.refused`); `reason` says why in words."""

    AUTHENTICATION = "authentication"  # no credential, or one that does not verify
    SCOPE = "scope"  # authenticated, without a scope the route or target needs
    RATE = "rate"  # the caller's rate limit
    TOOL_HIDDEN = "tool_hidden"  # the catalog hides it: answered as an unknown tool
    TOOL_BLOCKED = "tool_blocked"  # its definition drifted from its pin, not approved
    REQUEST_STATE = "request_state"  # tampered, expired, foreign, replayed ...
    SESSION = "session"  # a legacy session id refused: another principal's, expired ...


#: An elicitation's answers; a sampling or roots answer is `ANSWERED` (or `ERROR`).
ACCEPT, DECLINE, CANCEL = "accept", "decline", "cancel"
ANSWERED = "answered"  # a sampling or roots answer came (its content is content)
ERROR = "error"  # the client answered the question with an error
INVALID = "invalid"  # an answer of no known shape (refused, never delivered)
_ELICIT_ACTIONS = frozenset({ACCEPT, DECLINE, CANCEL})

#: The member naming what a request is about, by its method (as log lines name it).
TARGET_MEMBER = {"tools/call": "tool", "prompts/get": "prompt", "resources/read": "resource"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Who:
    """The principal of an event: who the caller is, never its credential."""

    kind: str  # "jwt", "key", "unauthenticated" (no `auth`: the gateway knows a hash), "anonymous"
    log_id: str = ""  # the caller's id in log lines (`state.log_id_of`), to join the two
    issuer: str = ""  # jwt: the token's `iss`
    subject: str = ""  # jwt: the token's `sub`; key: the API key's id
    client: str = ""  # jwt: the token's `azp` or `client_id`, when it has one

    def to_json(self) -> dict[str, str]:
        out = {"kind": self.kind}
        if self.kind == "jwt":
            out["issuer"] = self.issuer
            out["subject"] = self.subject
            if self.client:
                out["client_id"] = self.client
        elif self.kind == "key":
            out["key_id"] = self.subject
        if self.log_id:
            out["log_id"] = self.log_id
        return out

    def names(self) -> frozenset[str]:
        """Every name a reader may look this principal up by (`audit tail --principal`)."""
        found = {self.issuer, self.subject, self.client, self.log_id}
        if self.kind == "jwt":
            found.add(f"{self.issuer}|{self.subject}")
        return frozenset(n for n in found if n)


# -- the events --------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class AuditEvent:
    """What every event may carry beside its own members.

    Events are not frozen: each is made, written at once and let go, and a frozen
    dataclass's `__init__` costs about three times a plain one's (2.3 µs more per event
    measured here, twice per call)."""

    principal: Who | None = None  # None: no caller was established (its credential failed)
    request_id: str | None = None  # the request's id in log lines (`X-Request-Id`)

    @property
    def kind(self) -> EventKind:
        raise NotImplementedError

    def fact(self) -> str | None:
        """What a replica that goes on with a call another one recorded and died with
        would record again, named (its id is named by it, `fact_id`); None for an event
        no other replica can write."""
        return None

    def members(self, policy: ContentPolicy) -> dict[str, Any]:
        """The event's own members (None ones left out), content as `policy` keeps it."""
        raise NotImplementedError


@dataclass(slots=True, kw_only=True)
class CallEvent(AuditEvent):
    """An event of one call (a `tools/call`, `prompts/get` or `resources/read`)."""

    call_id: str
    era: Era
    upstream: str
    method: str = "tools/call"
    target: str | None = None  # the tool's or prompt's name, the resource's URI
    session: str | None = None  # a 2025 client's session, as log lines name it

    def call_members(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "call_id": self.call_id,
            "era": self.era.value,
            "upstream": self.upstream,
            "method": self.method,
        }
        if self.target is not None:
            out[TARGET_MEMBER.get(self.method, "target")] = self.target
        if self.session is not None:
            out["session"] = self.session
        return out


@dataclass(slots=True, kw_only=True)
class CallStarted(CallEvent):
    """A call's first request came in (once per call, whatever follows)."""

    arguments: Any = None  # content: its `arguments` (a resource's URI is its target)

    @property
    def kind(self) -> EventKind:
        return EventKind.CALL_STARTED

    def fact(self) -> str:
        return f"{self.call_id} started"

    def members(self, policy: ContentPolicy) -> dict[str, Any]:
        out = self.call_members()
        if policy.arguments and (kept := policy.kept(self.arguments)) is not None:
            out["arguments"] = kept
        return out


@dataclass(slots=True, kw_only=True)
class CallEnded(CallEvent):
    """A call ended (once per call): how, after how long and how many rounds."""

    outcome: AuditOutcome
    duration_ms: int  # from its first request's arrival
    rounds: int  # questions asked of its client (0: it asked none)
    error_code: int | None = None  # outcome `error`: the JSON-RPC code answered
    is_error: bool | None = None  # outcome `complete` of a tool: the result's `isError`
    error_message: Any = None  # content (a result's): the error's message
    result: Any = None  # content: the result

    @property
    def kind(self) -> EventKind:
        return EventKind.CALL_ENDED

    def fact(self) -> str:
        return f"{self.call_id} ended"

    def members(self, policy: ContentPolicy) -> dict[str, Any]:
        out = self.call_members()
        out["outcome"] = self.outcome.value
        out["duration_ms"] = self.duration_ms
        out["rounds"] = self.rounds
        if self.error_code is not None:
            out["error"] = {"code": self.error_code}
            if policy.results and (kept := policy.kept(self.error_message)) is not None:
                out["error"]["message"] = kept
        if self.is_error is not None:
            out["is_error"] = self.is_error
        if policy.results and (kept := policy.kept(self.result)) is not None:
            out["result"] = kept
        return out


@dataclass(frozen=True, slots=True)
class Question:
    """One question of a round: its key, its method (`elicitation/create`,
    `sampling/createMessage`, `roots/list`), an elicitation's mode (`form`, `url`), and
    its params as content (the message, the schema, the URL)."""

    key: str
    method: str
    mode: str | None = None
    content: Any = None

    def to_json(self, policy: ContentPolicy) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "method": self.method}
        if self.mode is not None:
            out["mode"] = self.mode
        if policy.questions and (kept := policy.kept(self.content)) is not None:
            out["content"] = kept
        return out


def question_of(key: str, method: str, params: Any) -> Question:
    """A question as its server asked it: an elicitation's mode read from its params."""
    mode = None
    if method == "elicitation/create":
        found = params.get("mode") if isinstance(params, Mapping) else None
        mode = found if found in ("form", "url") else "form"
    return Question(key, method, mode, params)


@dataclass(frozen=True, slots=True)
class Answer:
    """One answer of a round: its key and method, what was answered (`accept`,
    `decline`, `cancel` for an elicitation; `answered` for sampling and roots; `error`;
    `invalid`), and what it held, as content."""

    key: str
    method: str
    action: str
    content: Any = None

    def to_json(self, policy: ContentPolicy) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "method": self.method, "action": self.action}
        if policy.answers and (kept := policy.kept(self.content)) is not None:
            out["content"] = kept
        return out


def method_of(answer: Any) -> str:
    """The method a question was asked by, told from its answer's shape (where the
    question is not at hand: a replay's state carries answers only)."""
    if isinstance(answer, Mapping):
        if "action" in answer:
            return "elicitation/create"
        if "roots" in answer:
            return "roots/list"
        if "role" in answer or "model" in answer:
            return "sampling/createMessage"
    return "unknown"


def answer_of(key: str, method: str, result: Any = None, *, error: bool = False) -> Answer:
    """An answer as its client gave it: `result` (an ElicitResult, CreateMessageResult or
    ListRootsResult), or `error` when the client answered with a JSON-RPC error. An
    elicitation's content is its `content`, no other answer of it carries any (a
    declined or cancelled one records nothing more)."""
    if error:
        return Answer(key, method, ERROR)
    if method == "elicitation/create":
        action = result.get("action") if isinstance(result, Mapping) else None
        if action not in _ELICIT_ACTIONS:
            return Answer(key, method, INVALID)
        content = result.get("content") if action == ACCEPT else None
        return Answer(key, method, str(action), content)
    if not isinstance(result, Mapping):
        return Answer(key, method, INVALID)
    return Answer(key, method, ANSWERED, result)


@dataclass(slots=True, kw_only=True)
class RoundAsked(CallEvent):
    """A call asked its client (once per round): for a 2026 client an `input_required`
    answer, for a 2025 client the questions pushed on its stream."""

    round: int
    questions: tuple[Question, ...]

    @property
    def kind(self) -> EventKind:
        return EventKind.ROUND_ASKED

    def fact(self) -> str:
        return f"{self.call_id} asked {self.round}"

    def members(self, policy: ContentPolicy) -> dict[str, Any]:
        out = self.call_members()
        out["round"] = self.round
        out["questions"] = [q.to_json(policy) for q in self.questions]
        return out


@dataclass(slots=True, kw_only=True)
class RoundAnswered(CallEvent):
    """A round's answers reached the call (at most once per round: the retry that
    claimed it, or the 2025 client's responses)."""

    round: int
    answers: tuple[Answer, ...]

    @property
    def kind(self) -> EventKind:
        return EventKind.ROUND_ANSWERED

    def fact(self) -> str:
        return f"{self.call_id} answered {self.round}"

    def members(self, policy: ContentPolicy) -> dict[str, Any]:
        out = self.call_members()
        out["round"] = self.round
        out["answers"] = [a.to_json(policy) for a in self.answers]
        return out


@dataclass(slots=True, kw_only=True)
class ApprovalEvent(AuditEvent):
    """An event of a person's approval of a tool call, asked by the gateway before the
    call reaches the server (`gateway.approvals`). `approval_id` joins its question and
    its answer; the call it lets through is recorded as any call, after it."""

    approval_id: str
    era: Era
    upstream: str
    tool: str  # the server's own name
    session: str | None = None  # a 2025 client's session, as log lines name it

    def approval_members(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "approval_id": self.approval_id,
            "era": self.era.value,
            "upstream": self.upstream,
            "tool": self.tool,
        }
        if self.session is not None:
            out["session"] = self.session
        return out


@dataclass(slots=True, kw_only=True)
class ApprovalAsked(ApprovalEvent):
    """The gateway asked a person to approve a call (its question, with the arguments
    shown, is content)."""

    question: Question

    @property
    def kind(self) -> EventKind:
        return EventKind.APPROVAL_ASKED

    def fact(self) -> str:
        return f"approval {self.approval_id} asked"

    def members(self, policy: ContentPolicy) -> dict[str, Any]:
        out = self.approval_members()
        out["question"] = self.question.to_json(policy)
        return out


@dataclass(slots=True, kw_only=True)
class ApprovalAnswered(ApprovalEvent):
    """A person answered an approval (once per approval): `approved` says whether the
    call goes on to the server."""

    answer: Answer
    approved: bool

    @property
    def kind(self) -> EventKind:
        return EventKind.APPROVAL_ANSWERED

    def fact(self) -> str:
        return f"approval {self.approval_id} answered"

    def members(self, policy: ContentPolicy) -> dict[str, Any]:
        out = self.approval_members()
        out["answer"] = self.answer.to_json(policy)
        out["approved"] = self.approved
        return out


_TASK_KINDS = {
    "created": EventKind.TASK_CREATED,
    "working": EventKind.TASK_WORKING,
    "input_required": EventKind.TASK_INPUT_REQUIRED,
    "completed": EventKind.TASK_COMPLETED,
    "failed": EventKind.TASK_FAILED,
    "cancelled": EventKind.TASK_CANCELLED,
    "expired": EventKind.TASK_EXPIRED,
}
TASK_CHANGES = frozenset(_TASK_KINDS)


@dataclass(slots=True, kw_only=True)
class TaskChanged(AuditEvent):
    """A task's transition (the tasks extension): `change` is `created`, a status it
    moved to (`working`, `input_required`, `completed`, `failed`, `cancelled`), or
    `expired` (its time to live passed). The call a task runs is recorded as any call;
    `call_id` names it where the task's writer knows it."""

    task_id: str
    change: str
    upstream: str
    era: Era = Era.MODERN
    method: str = "tools/call"
    target: str | None = None
    call_id: str | None = None

    def __post_init__(self) -> None:
        if self.change not in _TASK_KINDS:
            raise ValueError(f"no task change {self.change!r}")

    @property
    def kind(self) -> EventKind:
        return _TASK_KINDS[self.change]

    def fact(self) -> str:
        return f"task {self.task_id} {self.change}"

    def members(self, policy: ContentPolicy) -> dict[str, Any]:
        out: dict[str, Any] = {"task_id": self.task_id, "era": self.era.value}
        if self.call_id is not None:
            out["call_id"] = self.call_id
        out["upstream"] = self.upstream
        out["method"] = self.method
        if self.target is not None:
            out[TARGET_MEMBER.get(self.method, "target")] = self.target
        return out


@dataclass(slots=True, kw_only=True)
class RequestRefused(AuditEvent):
    """A request refused before it did anything, with the reason its client is not
    always told (a `requestState` refusal is one generic error on the wire)."""

    refusal: Refusal
    reason: str
    era: Era | None = None
    upstream: str | None = None
    method: str | None = None
    target: str | None = None
    call_id: str | None = None  # when the refused request names one (a retry's state)
    status: int | None = None  # the HTTP status answered
    session: str | None = None  # a 2025 client's session, as log lines name it

    @property
    def kind(self) -> EventKind:
        return EventKind.REQUEST_REFUSED

    def members(self, policy: ContentPolicy) -> dict[str, Any]:
        out: dict[str, Any] = {"refusal": self.refusal.value, "reason": self.reason}
        for name in ("call_id", "upstream", "method", "status", "session"):
            if (value := getattr(self, name)) is not None:
                out[name] = value
        if self.era is not None:
            out["era"] = self.era.value
        if self.target is not None:
            out[TARGET_MEMBER.get(self.method or "", "target")] = self.target
        return out


@dataclass(slots=True, kw_only=True)
class SessionOpened(AuditEvent):
    """A 2025 client's session began (its `initialize` answered)."""

    session: str  # as log lines name it: a keyed hash of its id, never the id
    upstream: str
    protocol_version: str
    client_name: str | None = None  # its `clientInfo`, as it describes itself
    client_version: str | None = None

    @property
    def kind(self) -> EventKind:
        return EventKind.SESSION_OPENED

    def members(self, policy: ContentPolicy) -> dict[str, Any]:
        out: dict[str, Any] = {
            "era": Era.LEGACY.value,
            "session": self.session,
            "upstream": self.upstream,
            "protocol_version": self.protocol_version,
        }
        if self.client_name is not None:
            out["client"] = {"name": self.client_name, "version": self.client_version or ""}
        return out


@dataclass(slots=True, kw_only=True)
class SessionClosed(AuditEvent):
    """A 2025 client's session ended: `how` is `deleted` (by its client; a session that
    lapses is not noticed: nothing is kept per session)."""

    session: str
    upstream: str
    how: str

    @property
    def kind(self) -> EventKind:
        return EventKind.SESSION_CLOSED

    def members(self, policy: ContentPolicy) -> dict[str, Any]:
        return {
            "era": Era.LEGACY.value,
            "session": self.session,
            "upstream": self.upstream,
            "how": self.how,
        }
