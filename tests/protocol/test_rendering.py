"""The one renderer (`gateway.protocol.rendering.rendered`): what each kind of error is
answered with, for the request's id, whatever era or place it is answered in."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.auth.errors import RateLimited
from gateway.errors import (
    CapacityExceeded,
    InvalidParams,
    MethodNotAllowed,
    PayloadTooLarge,
    RelayedError,
    StoreError,
    UpstreamError,
    UpstreamRpcError,
)
from gateway.legacy_clients.answers import ResultRefused
from gateway.legacy_clients.upstream import SessionNotFound
from gateway.protocol.rendering import rendered


def error(rid: Any, code: int, message: str, **data: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message}
    if data:
        body["data"] = data
    return {"jsonrpc": "2.0", "id": rid, "error": body}


@pytest.mark.parametrize(
    ("raised", "rid", "status", "headers", "message"),
    [
        (InvalidParams("bad"), 7, 400, {}, error(7, -32602, "bad")),
        (
            CapacityExceeded(),
            "r",
            503,
            {"Retry-After": "1"},
            error("r", -32603, CapacityExceeded.default_message),
        ),
        (
            StoreError("redis at 10.0.0.3 refused"),  # the detail is for the log only
            1,
            503,
            {"Retry-After": "1"},
            error(1, -32603, StoreError.default_message),
        ),
        (UpstreamError("boom"), 2, 502, {}, error(2, -32603, UpstreamError.default_message)),
        (UpstreamRpcError(-32000, "tool failed"), 3, 200, {}, error(3, -32000, "tool failed")),
        (RelayedError({"code": -32602, "message": "no"}, 400), 4, 400, {}, error(4, -32602, "no")),
        (
            ResultRefused(),
            5,
            500,
            {},
            error(5, -32603, ResultRefused.default_message, reason="insufficient_scope"),
        ),
        # The HTTP layer's refusals name no request, whatever id was read.
        (PayloadTooLarge(), 6, 413, {}, error(None, -32600, PayloadTooLarge.message)),
        (SessionNotFound(), 8, 404, {}, error(None, -32600, SessionNotFound.message)),
        (MethodNotAllowed(), None, 405, {"Allow": "POST"}, None),
        (
            RateLimited("over", retry_after="3"),
            None,
            429,
            {"Retry-After": "3"},
            error(None, -32600, RateLimited.message),
        ),
        (KeyError("a bug"), 9, 500, {}, error(None, -32603, "Internal error")),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else None,
)
def test_each_error_is_answered_with_its_status_headers_and_message(
    raised: BaseException, rid: Any, status: int, headers: dict[str, str], message: Any
) -> None:
    answer = rendered(raised, rid)
    assert (answer.status, dict(answer.headers), answer.message) == (status, headers, message)
