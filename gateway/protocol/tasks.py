"""The tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663), sans-IO.

A task is a view of one live legacy call that runs longer than a client should hold
its request: the client gets `CreateTaskResult` and polls `tasks/get`, answers the
call's questions with `tasks/update`, and may `tasks/cancel` it. This module holds
the task's record and its status table (`TRANSITIONS`), the keys of its questions
(unique over the task's life), and every wire shape of the extension. Who runs the
call and where the record is kept is `gateway.tasks`'s.

A legacy server's own tasks (2025-11-25) are `gateway.protocol.legacy_tasks`'s.

The status table, as h11 writes its states: `working` and `input_required` alternate
while the call runs; `completed` (a tool result, an `isError` one included), `failed`
(a JSON-RPC error) and `cancelled` are final, and nothing moves a task out of them.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from gateway.errors import InvalidParams, MissingClientCapability
from gateway.protocol import jsonrpc

EXTENSION = "io.modelcontextprotocol/tasks"
#: The 2025-11-25 request member that asked for a task: ignored, never forwarded.
LEGACY_TASK_PARAM = "task"
RELATED_TASK_META = "io.modelcontextprotocol/related-task"


def declared(capabilities: Any) -> bool:
    """Whether a request's `clientCapabilities` declare the tasks extension."""
    if not isinstance(capabilities, dict):
        return False
    extensions = capabilities.get("extensions")
    return isinstance(extensions, dict) and isinstance(extensions.get(EXTENSION), dict)


def extension_required(what: str) -> MissingClientCapability:
    """-32021 naming the extension (`data.requiredCapabilities.extensions[...]`)."""
    return MissingClientCapability(
        {"extensions": {EXTENSION: {}}},
        f"{what} requires the {EXTENSION} extension: declare it in this request's "
        "clientCapabilities.extensions",
    )


def unknown_task() -> InvalidParams:
    """The one error for a task that does not exist, expired or is another caller's:
    which of them it was is not said."""
    return InvalidParams("Unknown task: no such task, or it has expired")


def read_task_id(params: dict[str, Any]) -> str:
    """`params.taskId` of a `tasks/*` request.

    Raises:
        InvalidParams: missing or not a non-empty string.
    """
    task_id = params.get("taskId")
    if not isinstance(task_id, str) or not task_id:
        raise InvalidParams("params.taskId must be a non-empty string")
    return task_id


def read_responses(params: dict[str, Any]) -> dict[str, Any]:
    """`params.inputResponses` of `tasks/update`.

    Raises:
        InvalidParams: not an object.
    """
    responses = params.get("inputResponses")
    if not isinstance(responses, dict):
        raise InvalidParams("params.inputResponses must be an object")
    return responses


def new_task_id() -> str:
    """An unguessable task id (192 bits), also safe in an `Mcp-Name` header."""
    return "task-" + secrets.token_urlsafe(24)


class Status(StrEnum):
    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class TaskEvent(StrEnum):
    ASK = "ask"  # the call asks (again): its outstanding questions are published
    ANSWERED = "answered"  # every outstanding question has its answer: the call runs on
    COMPLETE = "complete"  # the call returned a tool result
    FAIL = "fail"  # the call ended with a JSON-RPC error (or was lost)
    CANCEL = "cancel"  # the client cancelled it


_LIVE = (Status.WORKING, Status.INPUT_REQUIRED)
TRANSITIONS: dict[tuple[Status, TaskEvent], Status] = {}
for _status in _LIVE:
    TRANSITIONS[(_status, TaskEvent.ASK)] = Status.INPUT_REQUIRED
    TRANSITIONS[(_status, TaskEvent.ANSWERED)] = Status.WORKING
    TRANSITIONS[(_status, TaskEvent.COMPLETE)] = Status.COMPLETED
    TRANSITIONS[(_status, TaskEvent.FAIL)] = Status.FAILED
    TRANSITIONS[(_status, TaskEvent.CANCEL)] = Status.CANCELLED
FINAL = frozenset({Status.COMPLETED, Status.FAILED, Status.CANCELLED})


class TaskEnded(Exception):
    """An event for a task in a final status: nothing changes (a late answer, a second
    cancel, an owner's write after the task was failed for its death)."""


def iso(ms: int) -> str:
    """Milliseconds since the epoch as ISO 8601 UTC (`2026-12-06T02:30:01.123Z`)."""
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


@dataclass(slots=True, kw_only=True)
class Task:
    """A task's record: what `tasks/get` shows on any replica, and what its owner needs
    to go on (the call's current `requestState`, which question is which)."""

    id: str
    principal: str
    upstream: str
    owner: str  # the replica running its call
    created_ms: int
    ttl_ms: int
    poll_ms: int
    updated_ms: int = 0
    status: Status = Status.WORKING
    message: str | None = None  # the latest progress message (`statusMessage`)
    # Outstanding questions by task key, as `inputRequests` shows them.
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The call's key of each outstanding question, by task key.
    call_keys: dict[str, str] = field(default_factory=dict)
    used_keys: list[str] = field(default_factory=list)  # every task key ever given
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    # The call's `requestState` while it waits for answers (none for a legacy task's).
    state: str | None = None
    # The request that started it (`id`, `method`, `params`): another replica carries the
    # call on with it, as a retry, if the owner dies while the call waits for answers.
    request: dict[str, Any] | None = None
    # The changes not yet recorded in the audit trail (`created`, then each status it
    # moved to): its writer records them, once (not part of the record).
    changes: list[str] = field(default_factory=list, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.updated_ms = self.updated_ms or self.created_ms

    @property
    def expires_ms(self) -> int:
        return self.created_ms + self.ttl_ms

    @property
    def final(self) -> bool:
        return self.status in FINAL

    @property
    def resumable(self) -> bool:
        """Whether another replica can carry the call on: it waits for answers, with the
        round's `requestState` and the request that started it at hand."""
        return (
            self.status is Status.INPUT_REQUIRED
            and self.state is not None
            and self.request is not None
        )

    def fire(self, event: TaskEvent, now_ms: int) -> None:
        """Move to the status `event` leads to.

        Raises:
            TaskEnded: the task is final already; nothing changed.
        """
        if self.final:
            raise TaskEnded(self.status)
        before, self.status = self.status, TRANSITIONS[(self.status, event)]
        if self.status is not before:
            self.changes.append(self.status.value)
        self.updated_ms = max(now_ms, self.updated_ms)
        if self.final:
            self.inputs.clear()
            self.call_keys.clear()
            self.state = None

    # -- the call's life, as the task shows it ----------------------------------------

    def asked(self, requests: dict[str, dict[str, Any]], state: str | None, now_ms: int) -> None:
        """The call waits for answers to `requests` (by the call's keys), resumable with
        `state`. A question still outstanding keeps its task key; a new one gets a key
        no earlier question of this task had.

        Raises:
            TaskEnded
        """
        if self.final:
            raise TaskEnded(self.status)
        by_call_key = {c: t for t, c in self.call_keys.items()}
        inputs: dict[str, dict[str, Any]] = {}
        call_keys: dict[str, str] = {}
        for call_key, request in requests.items():
            task_key = by_call_key.get(call_key) or self._new_key(call_key)
            inputs[task_key] = request
            call_keys[task_key] = call_key
        self.fire(TaskEvent.ASK, now_ms)
        self.inputs, self.call_keys, self.state = inputs, call_keys, state

    def take_answers(self, responses: dict[str, Any], now_ms: int) -> dict[str, Any]:
        """The answers of `responses` to outstanding questions, by the call's keys; those
        questions are no longer outstanding. Unknown and already answered keys are
        ignored. With nothing left outstanding the task is working again.

        Raises:
            TaskEnded
        """
        if self.final:
            raise TaskEnded(self.status)
        answers = {}
        for task_key in [k for k in responses if k in self.call_keys]:
            answers[self.call_keys.pop(task_key)] = responses[task_key]
            del self.inputs[task_key]
        if answers:
            self.updated_ms = max(now_ms, self.updated_ms)
        if answers and not self.call_keys:
            self.fire(TaskEvent.ANSWERED, now_ms)
        return answers

    def working(self, now_ms: int, message: str | None = None) -> None:
        """The call runs (again), saying `message` if it said something."""
        if self.status is Status.INPUT_REQUIRED and not self.call_keys:
            self.fire(TaskEvent.ANSWERED, now_ms)
        if message is not None:
            self.message = message
            self.updated_ms = max(now_ms, self.updated_ms)

    def completed(self, result: dict[str, Any], now_ms: int) -> None:
        """Raises: TaskEnded."""
        self.fire(TaskEvent.COMPLETE, now_ms)
        self.result = without_related_task(result)

    def failed(self, error: dict[str, Any], now_ms: int) -> None:
        """Raises: TaskEnded."""
        self.fire(TaskEvent.FAIL, now_ms)
        self.error = error

    def cancelled(self, now_ms: int) -> None:
        """Raises: TaskEnded."""
        self.fire(TaskEvent.CANCEL, now_ms)

    def ended(
        self,
        now_ms: int,
        *,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        max_result_bytes: int,
    ) -> bool:
        """The call ended with `result` (completed, or failed when it is over
        `max_result_bytes`) or `error` (failed); False when the task had ended already
        (cancelled meanwhile: that stands)."""
        try:
            if result is not None:
                body, problem = inlined(result, max_result_bytes)
                if problem is None:
                    self.completed(body, now_ms)
                    return True
                error = problem
            if error is not None:
                self.failed(error, now_ms)
        except TaskEnded:
            return False
        return True

    def _new_key(self, call_key: str) -> str:
        key, n = call_key, 1
        while key in self.used_keys:
            n += 1
            key = f"{call_key}-{n}"
        self.used_keys.append(key)
        return key

    # -- the wire ----------------------------------------------------------------------

    def _task_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "taskId": self.id,
            "status": str(self.status),
            "createdAt": iso(self.created_ms),
            "lastUpdatedAt": iso(self.updated_ms),
            "ttlMs": self.ttl_ms,
            "pollIntervalMs": self.poll_ms,
        }
        if self.message is not None and not self.final:
            fields["statusMessage"] = self.message
        return fields

    def created(self) -> dict[str, Any]:
        """The `CreateTaskResult` (flat, `resultType: "task"`)."""
        return {"resultType": "task", **self._task_fields()}

    def detailed(self) -> dict[str, Any]:
        """The result of `tasks/get`: the task with what its status carries."""
        detail = {"resultType": "complete", **self._task_fields()}
        if self.status is Status.INPUT_REQUIRED:
            detail["inputRequests"] = dict(self.inputs)
        elif self.status is Status.COMPLETED:
            detail["result"] = self.result or {}
        elif self.status is Status.FAILED:
            detail["error"] = self.error or {"code": -32603, "message": "Task failed"}
        return detail

    # -- at rest -----------------------------------------------------------------------

    def to_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "id": self.id,
            "principal": self.principal,
            "upstream": self.upstream,
            "owner": self.owner,
            "created_ms": self.created_ms,
            "updated_ms": self.updated_ms,
            "ttl_ms": self.ttl_ms,
            "poll_ms": self.poll_ms,
            "status": str(self.status),
            "inputs": self.inputs,
            "call_keys": self.call_keys,
            "used_keys": self.used_keys,
        }
        optional = {"message": self.message, "result": self.result, "error": self.error}
        optional["state"] = self.state
        optional["request"] = self.request
        record.update((k, v) for k, v in optional.items() if v is not None)
        return record

    @classmethod
    def from_record(cls, data: Any) -> Task:
        """`data`: a record's fields, its format version taken off
        (`gateway.protocol.formats`, `Kind.TASK`).

        Raises: ValueError, for a record not of this shape."""
        if not isinstance(data, dict):
            raise ValueError("not a task record")
        try:
            return cls(
                id=data["id"],
                principal=data["principal"],
                upstream=data["upstream"],
                owner=data["owner"],
                created_ms=data["created_ms"],
                updated_ms=data["updated_ms"],
                ttl_ms=data["ttl_ms"],
                poll_ms=data["poll_ms"],
                status=Status(data["status"]),
                message=data.get("message"),
                inputs=dict(data["inputs"]),
                call_keys=dict(data["call_keys"]),
                used_keys=list(data["used_keys"]),
                result=data.get("result"),
                error=data.get("error"),
                state=data.get("state"),
                request=data.get("request"),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"task record: {exc}") from exc


#: The acknowledgement of `tasks/update` and `tasks/cancel`: nothing but the type.
ACK: dict[str, Any] = {"resultType": "complete"}


def without_related_task(result: dict[str, Any]) -> dict[str, Any]:
    """A result inlined in `tasks/get` carries no `related-task` `_meta` (2025 tasks' link)."""
    meta = result.get("_meta")
    if not isinstance(meta, dict) or RELATED_TASK_META not in meta:
        return result
    rest = {k: v for k, v in meta.items() if k != RELATED_TASK_META}
    trimmed = {k: v for k, v in result.items() if k != "_meta"}
    if rest:
        trimmed["_meta"] = rest
    return trimmed


def progress_message(params: dict[str, Any]) -> str | None:
    """What a progress notification says, as a `statusMessage` (progress itself is not
    carried on tasks): its message, else `progress/total`."""
    message = params.get("message")
    if isinstance(message, str) and message:
        return message
    progress, total = params.get("progress"), params.get("total")
    if isinstance(progress, int | float) and not isinstance(progress, bool):
        return f"{progress:g}/{total:g}" if isinstance(total, int | float) else f"{progress:g}"
    return None


#: The members of a tool result the call core adds for the 2026 wire (its type, its cache
#: hints) that a result inlined in `tasks/get` does not carry.
_ENVELOPE_MEMBERS = ("resultType", "ttlMs", "cacheScope")


def inlined(result: dict[str, Any], max_bytes: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A tool result as `tasks/get` inlines it (without the 2026 envelope's members), and
    the error that fails the task instead when it is over `max_bytes`."""
    body = {k: v for k, v in result.items() if k not in _ENVELOPE_MEMBERS}
    size = len(jsonrpc.dumps(body))
    if size <= max_bytes:
        return body, None
    return body, {
        "code": -32603,
        "message": f"The tool's result ({size} bytes) is over the gateway's {max_bytes}-byte "
        "limit for task results",
        "data": {"reason": "max_task_result_bytes"},
    }
