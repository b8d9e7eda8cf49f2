"""The gateway's exception tree and each error's wire mapping.

Every error the gateway raises on purpose derives from `GatewayError` and carries
its HTTP status and (where the wire has one) its JSON-RPC code as class
attributes; one renderer turns them into answers (`gateway.protocol.rendering`), for
both eras. Foreign exceptions are translated at the boundary
(`raise UpstreamError(...) from exc`).

The whole tree, with the errors defined beside the code that raises them (their line
names their module); `tests/test_errors.py` holds it to the classes:

    GatewayError
    ├── HttpError                      no JSON-RPC body (or one without id)
    │   ├── MethodNotAllowed           405  GET/DELETE on the MCP endpoint
    │   │   ├── LegacyMethodNotAllowed 405  not POST/GET/DELETE (gateway.legacy_clients.lane)
    │   │   └── NoGetStreams           405  GET streams off (gateway.legacy_clients.lane)
    │   ├── NotAcceptable              406  Accept lacks json or event-stream
    │   ├── UnsupportedMediaType       415  Content-Type is not application/json
    │   ├── PayloadTooLarge            413  body over the configured limit
    │   ├── ForbiddenOrigin            403  Origin not allowed
    │   ├── SessionNotFound            404  legacy session gone (gateway.legacy_clients.upstream)
    │   ├── MissingSession             400  no legacy session id (gateway.legacy_clients.lane)
    │   └── AuthError                  401  headers per instance (gateway.auth.errors)
    │       ├── Unauthenticated        401  no usable credential (gateway.auth.errors)
    │       ├── InsufficientScope      403  a scope is missing (gateway.auth.errors)
    │       ├── AuthUnavailable        503  no key set to check with (gateway.auth.errors)
    │       └── RateLimited            429  over this caller's rate (gateway.auth.errors)
    ├── RpcError                       a JSON-RPC error object
    │   ├── ParseError                 -32700 / 400
    │   ├── InvalidRequest             -32600 / 400
    │   ├── MethodNotFound             -32601 / 404
    │   ├── InvalidParams              -32602 / 400
    │   │   ├── InvalidRequestState    -32602 / 400, one frozen message
    │   │   └── UnknownTarget          -32602 / 400, a hidden ref, no upstream (gateway.catalog)
    │   ├── HeaderMismatch             -32020 / 400
    │   ├── MissingClientCapability    -32021 / 400, data.requiredCapabilities
    │   ├── UnsupportedProtocolVersion -32022 / 400, data.supported / requested
    │   ├── ToolNotApproved            -32603 / 403, drifted under pinning: block (gateway.catalog)
    │   ├── UpstreamRpcError           the legacy server's own error, translated
    │   ├── RelayedError               an error another replica answered with
    │   ├── ResultRefused              -32603, in a stream (gateway.legacy_clients.answers)
    │   ├── LimitExceeded              -32603, data.reason names the bound
    │   │   ├── CapacityExceeded       503 + Retry-After, busy now: retry later
    │   │   │   ├── Draining           503, this replica is shutting down
    │   │   │   ├── TasksHeldBack      503, a task-only tool while the fleet is upgrading
    │   │   │   ├── ApprovalsHeldBack  503, a 2025 client's approval while the fleet is upgrading
    │   │   │   ├── RoundInProgress    503, the retry's round is being resumed already
    │   │   │   ├── TakeoverUnavailable 503, the call's upstream cannot be reached now
    │   │   │   ├── GatewayFull        503, max_parked_calls
    │   │   │   ├── TasksFull          503, max_tasks
    │   │   │   ├── SessionsBusy       503, every upstream session busy
    │   │   │   ├── ListensFull        503, max_listens (gateway.listens)
    │   │   │   ├── StreamsFull        503, legacy.max_streams (gateway.legacy_clients.streams)
    │   │   │   └── BoundSessionsFull  503, legacy.max_bound_sessions (gateway.legacy_clients.bound)
    │   │   ├── PrincipalBusy          429, max_parked_per_principal
    │   │   ├── PrincipalTasksBusy     429, max_tasks_per_principal
    │   │   ├── PrincipalListening     429, max_listens_per_principal (gateway.listens)
    │   │   ├── PrincipalStreaming     429, GET streams (gateway.legacy_clients.streams)
    │   │   ├── TooManyRounds          502, max_rounds
    │   │   └── StateTooLarge          502, max_state_bytes
    │   ├── Unanswered                 -32603 / 408, unanswered (gateway.legacy_clients.asking)
    │   │   ├── QuestionExpired        -32603 / 408, in time (gateway.legacy_clients.asking)
    │   │   └── QuestionUndelivered    -32603 / 408, gone (gateway.legacy_clients.asking)
    │   ├── CallLost                   -32603 / 502, a parked call cannot continue
    │   ├── UpstreamError              -32603 / 502, the legacy server failed us
    │   │   ├── UpstreamExited         -32603 / 502, a stdio server's process ended
    │   │   ├── UpstreamTimeout        -32603 / 502, a round outlived hold_timeout_s
    │   │   ├── SessionExpired         -32603 / 502, gone upstream (gateway.upstream.port)
    │   │   ├── NotInSession           -32603 / 502, gone at start (gateway.legacy_clients.endpoint)
    │   │   └── UpstreamCredentialsError -32603 / 502, no token (gateway.auth.errors)
    │   └── StoreError                 -32603 / 503 + Retry-After, the store failed
    │       └── LeaseLost              -32603 / 503, this replica cannot renew its lease
    ├── Answered                       a call a seam answers itself (gateway.seams)
    └── ConfigError                    startup only; never reaches the wire

Security failures (`InvalidRequestState`) keep their reason for the log; the wire
always gets the same message. Errors whose detail names internals (`UpstreamError`,
`StoreError`, `CallLost`) send their generic message; the detail is logged.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, ClassVar

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
HEADER_MISMATCH = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022
LEGACY_RESOURCE_NOT_FOUND = -32002

#: HTTP status for a JSON-RPC error code on the 2026-07-28 front (spec §6.5).
#: Codes not listed (upstream application errors, -32603) are sent with 200.
STATUS_FOR_CODE: dict[int, int] = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}


class GatewayError(Exception):
    """Root of every error the gateway raises on purpose."""

    http_status: ClassVar[int] = 500


class ConfigError(GatewayError):
    """The configuration is unusable; raised at startup and by `check-config`.

    `problems` holds every mistake found, each a line that starts with its key path;
    the message is the one mistake, or all of them in one line.
    """

    def __init__(self, message: str, problems: tuple[str, ...] = ()) -> None:
        self.problems = problems or (message,)
        super().__init__(message)

    @classmethod
    def of(cls, problems: tuple[str, ...]) -> ConfigError:
        """One error for every mistake found (at least one)."""
        if len(problems) == 1:
            return cls(problems[0])
        return cls(f"{len(problems)} mistakes: " + " | ".join(problems), problems)


class HttpError(GatewayError):
    """Refused at the HTTP layer: the body is empty, or a JSON-RPC error without id."""

    message: ClassVar[str] = "Bad request"
    headers: ClassVar[dict[str, str]] = {}

    def __init__(self, detail: str | None = None) -> None:
        super().__init__(detail or self.message)
        self.detail = detail or self.message


class MethodNotAllowed(HttpError):
    http_status = 405
    message = "Only POST is served on the MCP endpoint at protocol 2026-07-28"
    headers = {"Allow": "POST"}


class NotAcceptable(HttpError):
    http_status = 406
    message = "Accept must list both application/json and text/event-stream"


class UnsupportedMediaType(HttpError):
    http_status = 415
    message = "Content-Type must be application/json"


class PayloadTooLarge(HttpError):
    http_status = 413
    message = "Request body is larger than the gateway accepts"


class ForbiddenOrigin(HttpError):
    http_status = 403
    message = "Origin not allowed"


class RpcError(GatewayError):
    """An error that is answered as a JSON-RPC error object."""

    code: ClassVar[int] = INTERNAL_ERROR
    default_message: ClassVar[str] = "Internal error"
    # False for errors whose detail names internals (hosts, store errors, upstream bodies):
    # the wire gets `default_message`, the log gets `message`.
    public_detail: ClassVar[bool] = True
    # Seconds for `Retry-After` on a JSON answer: set on the errors of a moment (503) that
    # the same request may get past soon, None where retrying would not help.
    retry_after_s: ClassVar[int | None] = None

    def __init__(self, message: str | None = None, data: Any = None) -> None:
        self.message = message or self.default_message
        self.data = data
        super().__init__(self.message)

    @property
    def status(self) -> int:
        return STATUS_FOR_CODE.get(self.code, self.http_status)

    def error_object(self) -> dict[str, Any]:
        message = self.message if self.public_detail else self.default_message
        error: dict[str, Any] = {"code": self.code, "message": message}
        if self.data is not None:
            error["data"] = self.data
        return error


class ParseError(RpcError):
    code = PARSE_ERROR
    http_status = 400
    default_message = "Parse error: the body is not valid JSON"


class InvalidRequest(RpcError):
    code = INVALID_REQUEST
    http_status = 400
    default_message = "Invalid request"


class MethodNotFound(RpcError):
    code = METHOD_NOT_FOUND
    http_status = 404
    default_message = "Method not found"


class InvalidParams(RpcError):
    code = INVALID_PARAMS
    http_status = 400
    default_message = "Invalid params"


class InvalidRequestState(InvalidParams):
    """A `requestState` failed verification; `reason` is for the log only."""

    WIRE_MESSAGE: ClassVar[str] = "Invalid or expired requestState"

    def __init__(self, reason: str) -> None:
        super().__init__(self.WIRE_MESSAGE)
        self.reason = reason


class HeaderMismatch(RpcError):
    code = HEADER_MISMATCH
    http_status = 400
    default_message = "Header mismatch"


class MissingClientCapability(RpcError):
    code = MISSING_REQUIRED_CLIENT_CAPABILITY
    http_status = 400

    def __init__(self, required: dict[str, Any], message: str | None = None) -> None:
        names = ", ".join(sorted(required)) or "a capability"
        super().__init__(
            message or f"The server requires the {names} client capability for this request",
            {"requiredCapabilities": required},
        )


class UnsupportedProtocolVersion(RpcError):
    code = UNSUPPORTED_PROTOCOL_VERSION
    http_status = 400

    def __init__(self, requested: Any, supported: list[str]) -> None:
        super().__init__(
            "Unsupported protocol version",
            {"supported": supported, "requested": requested},
        )


class UpstreamRpcError(RpcError):
    """A JSON-RPC error returned by the legacy server, passed on (codes translated)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message, data)
        self._code = code

    @property
    def status(self) -> int:
        return STATUS_FOR_CODE.get(self._code, 200)

    def error_object(self) -> dict[str, Any]:
        error = super().error_object()
        error["code"] = self._code
        return error


class RelayedError(RpcError):
    """The error another replica produced for a forwarded retry, with its status."""

    def __init__(self, error: dict[str, Any], status: int) -> None:
        super().__init__(str(error.get("message", "Error")), error.get("data"))
        self._code = int(error.get("code", INTERNAL_ERROR))
        self._status = status

    @property
    def status(self) -> int:
        return self._status

    def error_object(self) -> dict[str, Any]:
        error = super().error_object()
        error["code"] = self._code
        return error


class LimitExceeded(RpcError):
    """A configured bound was reached; `data.reason` names it (the config key, mostly)."""

    reason: ClassVar[str] = ""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message, {"reason": self.reason} if self.reason else None)


class CapacityExceeded(LimitExceeded):
    """The gateway is too busy right now; the same request may succeed later."""

    http_status = 503
    retry_after_s = 1
    default_message = "The gateway is at capacity; retry later"


class Draining(CapacityExceeded):
    reason = "draining"
    default_message = "This replica is draining; send the request again"


class TasksHeldBack(CapacityExceeded):
    """A tool that runs only as a task, called while replicas of the previous release
    (which know no tasks) are still in the fleet: a rolling upgrade under way."""

    reason = "upgrading"
    default_message = (
        "Tasks are served once every replica runs this release (an upgrade is under way); "
        "send the request again later"
    )


class ApprovalsHeldBack(CapacityExceeded):
    """A 2025 client's call that needs a person's approval, while replicas of the previous
    release (which would pass the client's answer on to the server) are still in the
    fleet: a rolling upgrade under way. Nothing goes upstream."""

    reason = "upgrading"
    default_message = (
        "This tool needs a person's approval, which 2025 clients are asked for once every "
        "replica runs this release (an upgrade is under way); send the request again later"
    )


class RoundInProgress(CapacityExceeded):
    """The retry's round is being resumed already, by an earlier sending of the same retry
    whose first receiver died: its outcome is kept for the retry sent again a moment later."""

    reason = "round_in_progress"
    default_message = "This round of the call is still being resumed; send the retry again"


class TakeoverUnavailable(CapacityExceeded):
    """The call's owner is gone and the upstream cannot be reached to continue its session
    now: the call is kept as it was, for the same retry sent again."""

    reason = "takeover_unavailable"
    default_message = (
        "The call's upstream cannot be reached to continue it now; send the retry again"
    )


class GatewayFull(CapacityExceeded):
    reason = "max_parked_calls"
    default_message = "Too many calls are waiting for input on this replica; retry later"


class SessionsBusy(CapacityExceeded):
    reason = "upstream_sessions"
    default_message = "Every upstream session is busy; retry later"


class TasksFull(CapacityExceeded):
    reason = "max_tasks"
    default_message = "Too many tasks are running on this replica; retry later"


class PrincipalTasksBusy(LimitExceeded):
    """This caller has too many tasks running; others are still served."""

    http_status = 429
    reason = "max_tasks_per_principal"
    default_message = "Too many tasks of this caller are running"


class PrincipalBusy(LimitExceeded):
    """This caller has too many calls waiting for input; others are still served."""

    http_status = 429
    reason = "max_parked_per_principal"
    default_message = "Too many calls of this caller are waiting for input"


class TooManyRounds(LimitExceeded):
    """The upstream kept asking past `limits.max_rounds`; retrying the same call cannot help."""

    http_status = 502
    reason = "max_rounds"
    default_message = "The call needed more rounds than the gateway allows"


class StateTooLarge(LimitExceeded):
    """A replay-mode journal outgrew `limits.max_state_bytes`."""

    http_status = 502
    reason = "max_state_bytes"
    default_message = "The answers of this call no longer fit in requestState"


class CallLost(RpcError):
    """A parked call can no longer continue; the client may start it again."""

    http_status = 502
    default_message = "The suspended call was lost; start the request again without requestState"
    public_detail = False


class UpstreamError(RpcError):
    """The legacy server could not be reached or broke the protocol."""

    http_status = 502
    default_message = "The upstream MCP server failed"
    public_detail = False
    #: How it failed, as `mrtr_upstream_errors_total{kind}` counts it.
    kind: ClassVar[str] = "failed"


class UpstreamExited(UpstreamError):
    """A stdio server's process ended while it was serving the request."""

    kind = "exited"

    default_message = (
        "The upstream MCP server exited during the request; the next request starts it again"
    )


class UpstreamTimeout(UpstreamError):
    """The legacy server took longer than the gateway waits for one round."""

    default_message = "The upstream MCP server did not answer in time"
    public_detail = True
    kind = "timeout"


class StoreError(RpcError):
    """The suspended-call store failed; the call could not be parked or resumed."""

    http_status = 503
    retry_after_s = 1
    default_message = "The gateway's call store is unavailable"
    public_detail = False


class LeaseLost(StoreError):
    """This replica could not renew its lease (its heartbeat) in the store: until it can,
    it resumes none of its calls, since another replica may have taken them over."""

    default_message = "This gateway replica is cut off from its fleet; retry"
    reason = "lease_lost"

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message, {"reason": self.reason})


class ErrorWatch:
    """A context manager that shows `seen` each exception leaving its block (which may
    raise another in its place); a plain class, as those on every request are cheaper
    than a generator's `contextmanager`."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if error is not None:
            self.seen(error)

    def seen(self, error: BaseException) -> None:
        raise NotImplementedError
