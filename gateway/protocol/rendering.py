"""How an error is answered on the wire: the one renderer, for both eras.

An error's class carries its wire mapping (`gateway.errors`: the HTTP status, the
JSON-RPC code, `Retry-After`); `rendered` turns any exception into what is sent for
it: the status, the headers and the JSON-RPC error message. Every place an error
becomes an answer goes through it: the error middleware, a request that failed after it
was read (either era), a 2025 client's stream cut short, a result refused inside a
stream, the answer for a session this replica does not hold. The web part sends the
message as a JSON body, or as a stream's last event once its head has gone.

Sans-IO: exceptions in, data out; nothing is logged or sent here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from gateway.errors import INVALID_REQUEST, HttpError, RpcError
from gateway.protocol import jsonrpc
from gateway.protocol.jsonrpc import RequestId

#: No headers beyond the answer's own (what most errors send).
NO_HEADERS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Rendered:
    """What an error is answered with."""

    status: int
    headers: Mapping[str, str]
    message: dict[str, Any] | None  # the JSON-RPC error message; None: no body (405)


def rendered(error: BaseException, rid: RequestId | None = None) -> Rendered:
    """The answer to `error`, for the request of id `rid` (None: none was read).

    - `RpcError`: its JSON-RPC error for `rid` and its status (`RpcError.status`), with
      `Retry-After` for an error of a moment (`RpcError.retry_after_s`);
    - `HttpError` (an `AuthError` too): its status and headers (a challenge, `Allow`,
      `Retry-After`) and a JSON-RPC error without id saying what is wrong, -32600; a
      405 has no body;
    - anything else: a generic 500, the details of which are for the log only.
    """
    if isinstance(error, RpcError):
        after = error.retry_after_s
        headers = NO_HEADERS if after is None else {"Retry-After": str(after)}
        return Rendered(error.status, headers, jsonrpc.error(rid, error.error_object()))
    if isinstance(error, HttpError):
        status = error.http_status
        if status == 405:
            return Rendered(status, error.headers, None)
        refusal = {"code": INVALID_REQUEST, "message": error.detail}
        return Rendered(status, error.headers, jsonrpc.error(None, refusal))
    return rendered(RpcError())
