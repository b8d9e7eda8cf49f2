"""Middlewares: request ids and the error middleware, and how an error is answered.

Order (stated once, in `gateway.app`): request id -> errors -> handler. A
`GatewayError` becomes its mapped status and body; anything unexpected becomes
a generic 500 whose details go only to the log, never a traceback on the wire
(or, once a streamed answer has begun, the end of that stream and its connection).
What an error is answered with is `gateway.protocol.rendering`'s, for every error of
either era: here it is sent as JSON (`error_response`), and an error refused before
any request was read is logged once (`rejected`: `request_rejected`).
"""

from __future__ import annotations

import itertools
import secrets

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


_REQUEST_IDS = itertools.count(1)
_REQUEST_ID_PREFIX = secrets.token_hex(4)


def _next_request_id() -> str:
    """A request id unique to this process and beyond (a random prefix per process, then a
    counter): a correlation handle, not a secret, so it costs no call for random bytes."""
    return f"{_REQUEST_ID_PREFIX}{next(_REQUEST_IDS):08x}"


#: The request's id, kept on the request for the stream a `ResponseChannel` prepares.
REQUEST_ID = web.RequestKey("request_id", str)
#: The streamed answer a `ResponseChannel` has begun: once its head is sent, an error can
#: only end it (and its connection), never be answered by a response of its own.
STREAM = web.RequestKey("stream", web.StreamResponse)


@web.middleware
async def request_id_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    incoming = request.headers.get("X-Request-Id", "")
    request_id = (
        incoming if 0 < len(incoming) <= 128 and incoming.isprintable() else _next_request_id()
    )
    log_context.begin(request_id=request_id)
    request[REQUEST_ID] = request_id
    # Every response names its request: set here on a JSON answer or an error, on
    # aiohttp's own refusals (a path nothing is served at), and by `ResponseChannel` on
    # a stream it prepares before the handler returns. (An `on_response_prepare` hook
    # did the same at the cost of a signal sent per response.)
    try:
        response: web.StreamResponse = await handler(request)
    except web.HTTPException as exc:
        exc.headers["X-Request-Id"] = request_id
        raise
    if not response.prepared:
        response.headers["X-Request-Id"] = request_id
    return response


class FrontStreams:
    """`gateway.legacy_clients.relay.StreamHooks` for the front: a stream the legacy lane
    answers names its request (`X-Request-Id`), and the error middleware knows it began."""

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


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except HttpError as exc:
        # An identity's reason (expired, wrong audience, missing scope ...) is for the log only.
        reason = exc.reason if isinstance(exc, AuthError) else exc.detail
        log.info("request_refused", status=exc.http_status, reason=reason, path=request.path)
        return error_response(exc)
    except RpcError as exc:  # before the body was a request (e.g. not JSON): no id to answer
        return rejected(exc)
    except (web.HTTPException, ConnectionResetError):  # the latter: its connection ends
        raise
    except Exception as exc:
        log.exception("unhandled_error", path=request.path)
        begun: web.StreamResponse | None = request.get(STREAM)
        if begun is not None:  # nothing may follow a stream's head but its end
            begun.force_close()
            return begun
        return error_response(exc)
