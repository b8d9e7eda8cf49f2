"""What replicas say to each other, every message of it, and the one codec for it.

Two families share the fleet's inboxes and reply lists (`gateway.fleet.redis_bus`), each a
kind of `gateway.protocol.formats` with a version of its own:

- About calls and tasks (`Kind.MESSAGE`; `gateway.calls.routing`, `gateway.tasks`). To a
  call's owner: `Resume` a claimed round with this request, `Cancel` the resume its client
  left; to a task's owner, `ForTask`: answers to its questions, or its cancel. Back on the
  request's reply list: `Notify` (a notification to relay), then `Outcome` (the result)
  or `Failure` (the error and its HTTP status).
- About the legacy lane's replica-bound sessions (`Kind.LANE_MESSAGE`;
  `gateway.legacy_clients.forwarding`). To a session's owner: `Exchange` (a 2025 client's
  POST, GET or DELETE of it), `Stop` (the reader of its answer stopped reading). Back on
  the exchange's reply list: `ExchangeHead` (status, headers, and a whole body or "a stream
  follows"), then the stream's `StreamEvent`s and its `ExchangeEnd`; or `ExchangeFailed`
  (the error the owner raised, and its HTTP status).
- About the gateway's own questions to 2025 clients (`Kind.GATEWAY_QUESTION`;
  `gateway.legacy_clients.asking`). To the replica waiting for an answer: `ClientAnswer`
  (the client's JSON-RPC response, which reached another replica). Nothing comes back.

On the wire each is one JSON object: its `op`, its fields, and its version where its kind
carries one (`formats.MARKS`). A message goes in the version of its kind that every live
replica reads, as the bus's fleet level says (`FleetLevel.version`). `decode` parses a
message once, whatever its family, and checks its version, its fields and their types:
anything else (another release's newer version, an unknown op, a field missing or of the
wrong type) is refused with `ValueError`, whole, never half-read. Its reader dispatches on
the type. No I/O here.
"""

from __future__ import annotations

import json
import types
import typing
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

from gateway.errors import CallLost
from gateway.protocol import formats, jsonrpc
from gateway.protocol.formats import Kind
from gateway.protocol.inbound import PROTOCOL_VERSION_KEY, FrontRequest, read_envelope
from gateway.protocol.jsonrpc import RequestId
from gateway.protocol.versions import Version

# -- about calls and tasks (Kind.MESSAGE) ------------------------------------------------


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


# -- about the legacy lane's replica-bound sessions (Kind.LANE_MESSAGE) ------------------


@dataclass(frozen=True, slots=True)
class Exchange:
    """A request of a session `reader` (a replica) got, for the replica holding it."""

    verb: str  # POST, GET or DELETE
    route: str  # the upstream's name
    session: str | None  # the upstream's session id
    body: str  # JSON, checked UTF-8 at the front door
    headers: dict[str, str]
    reply: str  # the reply list the answer goes on
    reader: str  # the replica reading it: the owner stops sending once it stops beating


@dataclass(frozen=True, slots=True)
class Stop:
    """The reader of `reply` stopped reading (its client went, its replica drains)."""

    reply: str


@dataclass(frozen=True, slots=True)
class ExchangeHead:
    """An exchange's answer: its status and headers, and its whole body, or (`stream`) a
    stream that follows event by event."""

    status: int
    headers: dict[str, str]
    body: str = ""
    stream: bool = False


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One event of a stream that follows an `ExchangeHead` (as `gateway.protocol.sse.SseEvent`)."""

    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


@dataclass(frozen=True, slots=True)
class ExchangeEnd:
    """A stream's end: `error` says why, when the upstream failed."""

    error: str | None = None


@dataclass(frozen=True, slots=True)
class ExchangeFailed:
    """The error the owner raised for an exchange, and its HTTP status."""

    error: dict[str, Any]
    status: int


# -- about the gateway's own questions to 2025 clients (Kind.GATEWAY_QUESTION) ---------


@dataclass(frozen=True, slots=True)
class ClientAnswer:
    """A 2025 client's answer to a question of the gateway's own (`question`, its id), for
    the replica waiting for it; `session`: the log stand-in of the session it came on
    (the answer counts only on the session asked)."""

    question: str
    session: str
    answer: dict[str, Any]  # the client's JSON-RPC response, as it came


CallMessage = Resume | Cancel | ForTask | Notify | Outcome | Failure
LaneMessage = Exchange | Stop | ExchangeHead | StreamEvent | ExchangeEnd | ExchangeFailed
Message = CallMessage | LaneMessage | ClientAnswer

#: Every message: its op on the wire, and its kind in the formats registry.
CATALOGUE: dict[str, tuple[type[Message], Kind]] = {
    "resume": (Resume, Kind.MESSAGE),
    "cancel": (Cancel, Kind.MESSAGE),
    "for_task": (ForTask, Kind.MESSAGE),
    "notify": (Notify, Kind.MESSAGE),
    "outcome": (Outcome, Kind.MESSAGE),
    "failure": (Failure, Kind.MESSAGE),
    "legacy_exchange": (Exchange, Kind.LANE_MESSAGE),
    "legacy_stop": (Stop, Kind.LANE_MESSAGE),
    "legacy_head": (ExchangeHead, Kind.LANE_MESSAGE),
    "legacy_event": (StreamEvent, Kind.LANE_MESSAGE),
    "legacy_end": (ExchangeEnd, Kind.LANE_MESSAGE),
    "legacy_failure": (ExchangeFailed, Kind.LANE_MESSAGE),
    "legacy_answer": (ClientAnswer, Kind.GATEWAY_QUESTION),
}
_OPS = {cls: op for op, (cls, _) in CATALOGUE.items()}
_KINDS = {cls: kind for cls, kind in CATALOGUE.values()}


def kind_of(message: Message) -> Kind:
    """The formats kind `message` is versioned under."""
    return _KINDS[type(message)]


def encode(message: Message, version: int | None = None) -> str:
    """`message` in `version` of its kind (None: this release's). Versions 1 and 2 of a
    call's message differ only in 2 saying it is 2."""
    kind = _KINDS[type(message)]
    if version is None:
        version = formats.written(kind, formats.LEVEL)
    data = formats.stamped(kind, {"op": _OPS[type(message)], **asdict(message)}, version)
    return json.dumps(data, separators=(",", ":"), default=jsonrpc.plain)  # a large result's bulk


def decode(text: str | bytes) -> Message:
    """Raises: ValueError when the text is not one message of a known op, version, shape
    and field types."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("a fleet message must be a JSON object")
    op = data.get("op")
    known = CATALOGUE.get(op) if isinstance(op, str) else None
    if known is None:
        raise ValueError("unknown fleet message")
    cls, kind = known
    _, data = formats.unstamped(kind, data)
    del data["op"]
    shape = _SHAPES[cls]
    if not shape.required <= set(data) <= set(shape.types):
        raise ValueError(f"a {cls.__name__} message has the fields {sorted(shape.types)}")
    for name, value in data.items():
        accepted = shape.types[name]
        if not isinstance(value, accepted) or (isinstance(value, bool) and bool not in accepted):
            raise ValueError(f"a {cls.__name__} message's {name} is not one of {accepted}")
    return cls(**data)


# -- each message's fields, and the JSON types each takes --------------------------------


@dataclass(frozen=True, slots=True)
class _Shape:
    types: dict[str, tuple[type, ...]]
    required: frozenset[str]


def _accepted(hint: Any) -> tuple[type, ...]:
    """The JSON values a field of type `hint` takes, as `isinstance` checks them."""
    if hint is Any:
        return (object,)
    if hint is None or hint is type(None):
        return (type(None),)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return tuple(t for arg in typing.get_args(hint) for t in _accepted(arg))
    return (typing.get_origin(hint) or hint,)


def _shape(cls: type[Message]) -> _Shape:
    hints = typing.get_type_hints(cls)
    return _Shape(
        types={f.name: _accepted(hints[f.name]) for f in fields(cls)},
        required=frozenset(
            f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING
        ),
    )


_SHAPES = {cls: _shape(cls) for cls, _ in CATALOGUE.values()}
