"""What replicas say to each other about calls, and the one codec for it.

To a call's owner (its inbox): `Resume` a claimed round with this request,
`Cancel` the resume its client left; to a task's owner, `ForTask`: answers to its
questions, or its cancel (`gateway.tasks`). Back on the per-request reply list:
`Notify` (a notification to relay), then `Outcome` (the result) or `Failure`
(the error and its HTTP status). On the wire each is one JSON object with an
`op` and, from version 2 on, its version `v` (`gateway.protocol.formats`: a message goes in
the version every live replica reads, as the bus's fleet level says). `decode` reads the
versions this release reads and refuses anything else with `ValueError`, so a message
from a replica of another release is refused, never half-read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

from gateway.errors import CallLost
from gateway.protocol import formats
from gateway.protocol.formats import Kind
from gateway.protocol.inbound import PROTOCOL_VERSION_KEY, FrontRequest, read_envelope
from gateway.protocol.jsonrpc import RequestId
from gateway.protocol.versions import Version
from gateway.store.base import Reply


@dataclass(frozen=True, slots=True)
class Resume:
    call: str
    round: int
    request_id: RequestId
    method: str
    params: dict[str, Any]
    reply: str
    trace: dict[str, str] = field(default_factory=dict)  # W3C context of the forward

    def front(self) -> FrontRequest:
        """The client's retry this message carries. Raises: CallLost (no protocol version)."""
        meta = self.params.get("_meta") or {}
        version = Version.parse(meta.get(PROTOCOL_VERSION_KEY))
        if version is None:
            raise CallLost("a forwarded retry without a protocol version")
        envelope = read_envelope(version, meta)
        return FrontRequest(self.request_id, self.method, self.params, envelope)


@dataclass(frozen=True, slots=True)
class Cancel:
    call: str
    reply: str


@dataclass(frozen=True, slots=True)
class ForTask:
    """`tasks/update` answers (or `tasks/cancel`) another replica received for a task
    whose call runs on the receiving one."""

    task: str
    principal: str
    answers: dict[str, Any] = field(default_factory=dict)
    cancel: bool = False


@dataclass(frozen=True, slots=True)
class Notify:
    notification: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Outcome:
    result: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Failure:
    error: dict[str, Any]
    status: int


Message = Resume | Cancel | ForTask | Notify | Outcome | Failure

_OPS: dict[str, type[Message]] = {
    "resume": Resume,
    "cancel": Cancel,
    "for_task": ForTask,
    "notify": Notify,
    "outcome": Outcome,
    "failure": Failure,
}
_NAMES = {kind: op for op, kind in _OPS.items()}


#: The version this release writes once the whole fleet reads it.
MESSAGE_VERSION = formats.written(Kind.MESSAGE, formats.LEVEL)


def encode(message: Message, version: int = MESSAGE_VERSION) -> str:
    """`message` in `version` (versions 1 and 2 differ only in 2 saying it is 2)."""
    data = formats.stamped(Kind.MESSAGE, {"op": _NAMES[type(message)], **asdict(message)}, version)
    return json.dumps(data, separators=(",", ":"))


def decode(text: str | bytes) -> Message:
    """Raises: ValueError when the text is not one message of a known kind, shape and
    version."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("a fleet message must be a JSON object")
    _, data = formats.unstamped(Kind.MESSAGE, data)
    kind = _OPS.get(data.pop("op", None))
    if kind is None:
        raise ValueError("unknown fleet message")
    names = {f.name for f in fields(kind)}
    required = {
        f.name for f in fields(kind) if f.default is MISSING and f.default_factory is MISSING
    }
    if not required <= set(data) <= names:
        raise ValueError(f"a {kind.__name__} message has the fields {sorted(names)}")
    try:
        return kind(**data)
    except TypeError as exc:
        raise ValueError(str(exc)) from exc


def outcome_reply(
    key: str, ttl_ms: int, version: int = MESSAGE_VERSION
) -> Callable[[dict[str, Any]], Reply]:
    """How a forwarded round's result goes back: its `Outcome`, pushed on `key`."""

    def reply(result: dict[str, Any]) -> Reply:
        return Reply(key, encode(Outcome(result), version), ttl_ms)

    return reply
