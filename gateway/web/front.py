"""What every request of the front gets: an id that names it, and its errors answered.

No aiohttp middleware wraps the handlers: each would be a coroutine of its own, resumed
at every wake of every request (with the one aiohttp adds behind any middleware, three
layers: 3.4% of a pass-through call's instructions). Instead each handler does both
itself, with the functions here: the MCP routes' `Pipeline.handle` inline, every other
route through `routed`, and a path nothing is served at through `not_found`.

- `begin` names the request: the client's `X-Request-Id` when it is a sane one, else one
  made here; it is bound to every log line of the request, and `named` puts it on the
  response (a stream the gateway prepares carries it from `REQUEST_ID`).
- `failed` answers what a handler raised: a `GatewayError` its mapped status and body; an
  unexpected error a generic 500 whose details go only to the log, never a traceback on
  the wire (or, once a streamed answer has begun, the end of that stream and its
  connection). What an error is answered with is `gateway.protocol.rendering`'s, for
  every error of either era: here it is sent as JSON (`error_response`), and an error
  refused before any request was read is logged once (`rejected`: `request_rejected`).
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Collection

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler

from gateway import logging as log_context
from gateway.auth.errors import AuthError
from gateway.errors import HttpError, RpcError
from gateway.protocol import jsonrpc
from gateway.protocol.jsonrpc import RequestId
from gateway.protocol.rendering import rendered

log = structlog.get_logger("gateway.web")


def error_response(error: BaseException, rid: RequestId | None = None) -> web.Response:
    """`error` answered as JSON (`gateway.protocol.rendering.rendered`), for the request
    of id `rid` (None: none was read)."""
    answer = rendered(error, rid)
    if answer.message is None:
        return web.Response(status=answer.status, headers=answer.headers)
    return web.Response(
        status=answer.status,
        body=jsonrpc.dumps(answer.message),
        content_type="application/json",
        headers=answer.headers,
    )


def rejected(error: RpcError, rid: RequestId | None = None) -> web.Response:
    """The answer to a body refused before it was a request the gateway serves (not
    JSON, not a valid 2026 request): one `request_rejected` line, no `request_served`."""
    response = error_response(error, rid)
    log.info(
        "request_rejected",
        code=error.error_object()["code"],
        error=error.message,
        status=response.status,
    )
    return response


#: A request id the gateway makes is unique to this process and beyond: a random prefix
#: per process, then a counter (a correlation handle, not a secret: no random bytes each).
_REQUEST_IDS = itertools.count(1)
_REQUEST_ID_PREFIX = secrets.token_hex(4)


#: The request's id, kept on the request for the stream a `ResponseChannel` prepares.
REQUEST_ID = web.RequestKey("request_id", str)
#: The streamed answer a `ResponseChannel` has begun: once its head is sent, an error can
#: only end it (and its connection), never be answered by a response of its own.
STREAM = web.RequestKey("stream", web.StreamResponse)


class FrontStreams:
    """`gateway.legacy_clients.relay.StreamHooks` for the front: a stream the legacy lane
    answers names its request (`X-Request-Id`), and `failed` knows it began."""

    def heading(self, request: web.Request, headers: dict[str, str]) -> None:
        request_id = request.get(REQUEST_ID)
        if request_id is not None:
            headers["X-Request-Id"] = request_id

    def begun(self, request: web.Request, response: web.StreamResponse) -> None:
        request[STREAM] = response


def closing_refusal(kind: type[web.HTTPException], detail: str) -> web.HTTPException:
    """aiohttp's answer `kind`, with the body of the gateway's HTTP refusals, after which
    the connection closes (`Connection: close`): for a request whose body cannot be read
    to its end, after which the connection holds no sound next request."""
    message = rendered(HttpError(detail)).message
    refusal = kind(text=jsonrpc.dumps(message).decode(), content_type="application/json")
    refusal.force_close()
    return refusal


def begin(request: web.Request) -> str:
    """Name `request`: its id (the client's `X-Request-Id` when it is printable and at most
    128 characters long, else one made here), bound to its log lines and kept on it."""
    request_id = request.headers.get("X-Request-Id", "")
    if not (0 < len(request_id) <= 128 and request_id.isprintable()):
        request_id = f"{_REQUEST_ID_PREFIX}{next(_REQUEST_IDS):08x}"
    log_context.begin(request_id=request_id)
    request[REQUEST_ID] = request_id
    return request_id


def named(response: web.StreamResponse, request_id: str) -> web.StreamResponse:
    """`response`, naming its request (a stream prepared already named it as it began)."""
    if not response.prepared:
        response.headers["X-Request-Id"] = request_id
    return response


def failed(request: web.Request, request_id: str, error: Exception) -> web.StreamResponse:
    """The answer to `error`, raised by the handler of `request`. aiohttp's own answers
    (`web.HTTPException`) are raised on, naming the request, and a connection reset by
    its client is raised on (its connection ends).

    Raises:
        web.HTTPException, ConnectionResetError: `error`
    """
    if isinstance(error, web.HTTPException):
        error.headers["X-Request-Id"] = request_id
        raise error
    if isinstance(error, HttpError):
        # An identity's reason (expired, wrong audience, missing scope ...) is for the log only.
        reason = error.reason if isinstance(error, AuthError) else error.detail
        log.info("request_refused", status=error.http_status, reason=reason, path=request.path)
        return named(error_response(error), request_id)
    if isinstance(error, RpcError):  # before the body was a request (e.g. not JSON): no id
        return named(rejected(error), request_id)
    if isinstance(error, ConnectionResetError):
        raise error
    log.error("unhandled_error", path=request.path, exc_info=error)
    begun: web.StreamResponse | None = request.get(STREAM)
    if begun is not None:  # nothing may follow a stream's head but its end
        begun.force_close()
        return begun
    return named(error_response(error), request_id)


def routed(handler: Handler, methods: Collection[str] | None = ("GET", "HEAD")) -> Handler:
    """`handler`, for a route of every method, answering only `methods` (None: any; others
    get 405), its request named and its errors answered as the MCP routes' are."""
    allowed = None if methods is None else frozenset(methods)

    async def handle(request: web.Request) -> web.StreamResponse:
        request_id = begin(request)
        try:
            if allowed is not None and request.method not in allowed:
                raise web.HTTPMethodNotAllowed(request.method, sorted(allowed))
            return named(await handler(request), request_id)
        except Exception as exc:
            return failed(request, request_id, exc)

    return handle


async def _nothing_here(request: web.Request) -> web.StreamResponse:
    raise web.HTTPNotFound()


#: The handler of every path nothing else is served at (a route of its own, the router's
#: last): aiohttp's 404, naming its request.
not_found = routed(_nothing_here, None)
