"""A request as the pipeline hands it on, to either era's lane and to the seams.

Who sends it (`Caller`), what its end says (`RequestServed`: its `request_served` line,
its metrics), and the seams where the gateway's next capabilities hook in (`Seams`),
each plugged once for both eras (`gateway.web.pipeline` serves 2026 clients and hands
2025 clients' requests to `gateway.legacy_clients.lane`; both call the same seams):

- `listing`: a list result (`tools/list`, `prompts/list`, `resources/list`,
  `resources/templates/list`) on its way out, after the route's scopes left out what the
  caller may not see: a catalog filters or renames its entries;
- `lists`: where a 2026 client's list comes from when it is not asked of the upstream (a
  catalog serves it from what the server last listed): the result as the server gave
  it, and the cache hints it gets; None asks the upstream, as without it. (A 2025
  client's lists come from its own session, whose state they may reflect.)
- `calling`: a call (`tools/call`, `prompts/get`, `resources/read`; a 2026 retry is one
  too: it carries `requestState`) or a `completion/complete` (whose `ref` names a prompt
  or a resource) on its way in, before its target's scopes are checked or anything is
  sent upstream: a catalog refuses a hidden tool or gives the name the upstream knows it
  by, an approval is asked and waited for (a 2025 client's call can be asked a question
  of the gateway's own: `RequestServed.asker`, an `Asker`);
- `ended`: a request at its end, as its `request_served` line says it (a call's round or
  its end, a client's answer to a server request, a list): an audit trail.

Each seam is a tuple of callables run in order; empty (`NO_SEAMS`), a request pays one
attribute read for it. Nothing here does I/O nor knows aiohttp, so the legacy lane, which
must not import the web part, is handed the same objects as the 2026 lane.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from gateway.errors import GatewayError, RpcError
from gateway.immutable import immutable
from gateway.protocol.era import Lane
from gateway.protocol.jsonrpc import RequestId
from gateway.protocol.methods import INTERRUPTIBLE
from gateway.protocol.translate import CachePolicy

log = structlog.get_logger("gateway.web")

if TYPE_CHECKING:
    from gateway.auth import Identity


@immutable
class Caller:
    """The principal of one request, and what it may do (`gateway.web.front_door`)."""

    principal: str  # sealed into requestState and session ids, keys the caps and limits
    log_id: str  # what logs carry
    identity: Identity | None  # None: the route is not authenticated


class Answered(GatewayError):
    """Raised by a `calling` seam that answers the call itself with `result` (as the
    upstream would have: each era gives it as it gives an upstream's result); nothing goes
    upstream."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__("answered at the gateway")
        self.result = result


class Asker(Protocol):
    """How a `calling` seam asks a 2025 client a question of the gateway's own before its
    call goes upstream (`gateway.legacy_clients.asking.StreamAsker`): the question goes
    on the call's response stream, and its answer may reach any replica."""

    def declared(self, capability: str) -> bool | None:
        """Whether the client declared the client capability `capability` at `initialize`
        (`elicitation`: with form mode allowed; `elicitation.url`: URL mode; `sampling`,
        `roots`); None when the session does not say (its id was minted while the fleet
        wrote the previous release's format, which keeps no capabilities)."""
        ...

    async def ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The client's JSON-RPC response (with `result` or `error`) to the request
        `method` with `params` (`elicitation/create`, say).

        Raises:
            gateway.legacy_clients.asking.Unanswered: no answer within
                `limits.suspension_ttl_s` (`QuestionExpired`), or the client's stream is
                gone (`QuestionUndelivered`).
        """
        ...


#: A request that names no tool, prompt or resource.
NO_TARGET: Mapping[str, str] = MappingProxyType({})


class RequestServed:
    """One request as it is served, either era, filled in as it goes: what its end reads
    (its `request_served` line and metrics, the `ended` seam). The pipeline makes it once
    the request is read; a lane sets what it learns (the method of a 2025 client's
    message, its session, how its answer ended)."""

    __slots__ = (
        "lane",
        "caller",
        "started",
        "method",
        "rid",
        "target",
        "status",
        "outcome",
        "session",
        "upstream",
        "asker",
    )

    def __init__(
        self,
        lane: Lane,
        caller: Caller,
        started: float,
        method: str = "unknown",
        rid: RequestId | None = None,
        target: Mapping[str, str] = NO_TARGET,
        status: int = 500,
        outcome: str = "error",
        *,
        upstream: str = "",
    ) -> None:
        self.lane = lane  # which era's client sent it
        self.caller = caller
        self.started = started  # on the era's clock, where its duration is counted from
        self.method = method  # the JSON-RPC method ("response": a client's answer)
        self.rid = rid  # the JSON-RPC id its answer carries; None for a notification
        self.target = target  # what a call names, as a log line's key (`inbound.logged_target`)
        self.status = status  # the HTTP status answered
        self.outcome = outcome  # complete, input_required, error, refused, cut_short, ...
        self.session: str | None = None  # a 2025 session id's stand-in in logs
        self.upstream = upstream  # the route's upstream
        # A 2025 client's call that can be asked a question of the gateway's own: how
        # (`Asker`); None for any other request.
        self.asker: Asker | None = None

    def failed(self, error: RpcError, status: int | None = None) -> None:
        """It failed after it was read, either era: one `request_failed` line, and its
        `request_served` line says so (`status`: the HTTP status answered, when it is
        not the error's own)."""
        self.status, self.outcome = error.status if status is None else status, "error"
        log.info(
            "request_failed",
            code=error.error_object()["code"],
            error=error.message,
            kind=type(error).__name__,
        )


#: A list result on its way out, with its list method: the result to send (the same
#: object when unchanged).
ListSeam = Callable[[RequestServed, str, dict[str, Any]], dict[str, Any]]
#: A call on its way in: the params to go on with (the same object when unchanged).
#: Raises a `GatewayError` to refuse the call (it is answered as any other), or `Answered`
#: to answer it with a result.
CallSeam = Callable[[RequestServed, dict[str, Any]], Awaitable[dict[str, Any]]]
#: A request at its end, as its `request_served` line says it.
EndSeam = Callable[[RequestServed], None]
#: A list (its method, the client's params) served from elsewhere than the upstream: the
#: result as the server gave it and its cache hints, or None to ask the upstream.
ListSource = Callable[
    [RequestServed, str, dict[str, Any]], Awaitable["tuple[dict[str, Any], CachePolicy] | None"]
]

#: The requests that pass the `calling` seam: those about one target, and completions.
CALLING = INTERRUPTIBLE | {"completion/complete"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Seams:
    """The seams of one gateway, the same for both eras (see the module docstring)."""

    listing: tuple[ListSeam, ...] = ()
    lists: ListSource | None = None
    calling: tuple[CallSeam, ...] = ()
    ended: tuple[EndSeam, ...] = ()

    def listed(self, served: RequestServed, method: str, result: dict[str, Any]) -> dict[str, Any]:
        """`result` of list method `method` as the `listing` seams show it."""
        for seam in self.listing:
            result = seam(served, method, result)
        return result

    async def called(self, served: RequestServed, params: dict[str, Any]) -> dict[str, Any]:
        """The params a call goes on with, once every `calling` seam let it in.

        Raises:
            GatewayError: a seam refused the call.
        """
        for seam in self.calling:
            params = await seam(served, params)
        return params

    def end(self, served: RequestServed) -> None:
        for seam in self.ended:
            seam(served)


#: No capability plugged in: every seam passes what it is given on.
NO_SEAMS = Seams()
