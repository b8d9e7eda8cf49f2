"""Middlewares: request ids and the one place errors become HTTP responses.

Order (stated once, in `gateway.app`): request id -> errors -> handler. A
`GatewayError` becomes its mapped status and body; anything unexpected becomes
a generic 500 whose details go only to the log, never a traceback on the wire
(or, once a streamed answer has begun, the end of that stream and its connection).
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler

from gateway import logging as log_context
from gateway.auth.errors import AuthError
from gateway.errors import HttpError, RpcError
from gateway.protocol import jsonrpc
from gateway.protocol.jsonrpc import RequestId

log = structlog.get_logger("gateway.web")


def rpc_error_reply(exc: RpcError, rid: RequestId | None) -> tuple[dict[str, Any], int]:
    """The JSON-RPC error message and HTTP status answering `exc`: the one mapping.

    The error's class carries both (`RpcError.error_object`, `RpcError.status`).
    """
    return jsonrpc.error(rid, exc.error_object()), exc.status


#: No headers beyond the answer's own (what most errors send).
NO_HEADERS: Mapping[str, str] = MappingProxyType({})


def rpc_error_headers(exc: RpcError) -> Mapping[str, str]:
    """The headers a JSON answer to `exc` carries: `Retry-After` for an error of a moment."""
    if exc.retry_after_s is None:
        return NO_HEADERS
    return {"Retry-After": str(exc.retry_after_s)}


#: The body of a 500: what went wrong is for the log only, never on the wire.
INTERNAL_ERROR_BODY = jsonrpc.dumps(jsonrpc.error(None, RpcError().error_object()))

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
    log_context.clear()
    log_context.bind(request_id=request_id)
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


def _refusal_body(detail: str) -> bytes:
    """The body of an HTTP-level refusal: a JSON-RPC error without id saying what is wrong."""
    return jsonrpc.dumps(jsonrpc.error(None, {"code": -32600, "message": detail}))


def _http_error(exc: HttpError) -> web.Response:
    """An error of the HTTP layer: its status and headers (a challenge, Allow, Retry-After),
    and a JSON-RPC error without id saying what is wrong (405 has no body)."""
    if exc.http_status == 405:
        return web.Response(status=405, headers=exc.headers)
    return web.Response(
        status=exc.http_status,
        body=_refusal_body(exc.detail),
        content_type="application/json",
        headers=exc.headers,
    )


def closing_refusal(kind: type[web.HTTPException], detail: str) -> web.HTTPException:
    """aiohttp's answer `kind`, with the body of the gateway's HTTP refusals, after which
    the connection closes (`Connection: close`): for a request whose body cannot be read
    to its end, after which the connection holds no sound next request."""
    refusal = kind(text=_refusal_body(detail).decode(), content_type="application/json")
    refusal.force_close()
    return refusal


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except AuthError as exc:
        # The reason (expired, wrong audience, missing scope ...) is for the log only.
        log.info("request_refused", status=exc.http_status, reason=exc.reason, path=request.path)
        return _http_error(exc)
    except HttpError as exc:
        log.info("request_refused", status=exc.http_status, reason=exc.detail, path=request.path)
        return _http_error(exc)
    except RpcError as exc:  # before the body was a request (e.g. not JSON): no id to answer
        body, status = rpc_error_reply(exc, None)
        log.info("request_rejected", code=body["error"]["code"], error=exc.message, status=status)
        return web.Response(
            status=status,
            body=jsonrpc.dumps(body),
            content_type="application/json",
            headers=rpc_error_headers(exc),
        )
    except (web.HTTPException, ConnectionResetError):  # the latter: its connection ends
        raise
    except Exception:
        log.exception("unhandled_error", path=request.path)
        begun: web.StreamResponse | None = request.get(STREAM)
        if begun is not None:  # nothing may follow a stream's head but its end
            begun.force_close()
            return begun
        return web.Response(status=500, body=INTERNAL_ERROR_BODY, content_type="application/json")
