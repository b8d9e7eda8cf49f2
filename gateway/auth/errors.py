"""The identity core's refusals, each carrying its HTTP status and response headers.

    GatewayError (gateway.errors)
    ├── HttpError
    │   └── AuthError                  status + headers per instance; `reason` for logs
    │       ├── Unauthenticated        401  WWW-Authenticate: Bearer resource_metadata, scope
    │       │                               (+ error="invalid_token" when a token was bad)
    │       ├── InsufficientScope      403  WWW-Authenticate: Bearer error="insufficient_scope"
    │       ├── AuthUnavailable        503  no key set could ever be loaded from the issuer
    │       └── RateLimited            429  Retry-After
    ├── RpcError
    │   └── UpstreamError
    │       └── UpstreamCredentialsError  502  the upstream's token endpoint failed us
    └── ConfigError                    bad issuer URL, keys file, secret source

The wire gets `detail` (a fixed sentence per class) and the headers; `reason` says
why, for the log only. No message ever contains a token, a key or a secret.
Because each instance carries its own headers, `AuthError` subclasses
`HttpError`, whose middleware branch sends `exc.http_status`, `exc.detail` and
`exc.headers` already.
"""

from __future__ import annotations

from typing import ClassVar

from gateway.errors import HttpError, UpstreamError


class AuthError(HttpError):
    """A refusal by the identity core. `reason` is for the log only."""

    http_status: ClassVar[int] = 401
    message: ClassVar[str] = "Authentication required"

    def __init__(self, reason: str, *, challenge: str | None = None) -> None:
        super().__init__(self.message)
        self.reason = reason
        # An instance attribute shadowing HttpError's class-level default: the
        # middleware reads `exc.headers` the same way for both.
        self.headers = {"WWW-Authenticate": challenge} if challenge else {}  # type: ignore[misc]

    @property
    def status(self) -> int:
        return self.http_status

    def __str__(self) -> str:
        return f"{type(self).__name__}({self.http_status}): {self.reason}"


class Unauthenticated(AuthError):
    """401: no usable credential. `token_given` says whether one was presented."""

    http_status = 401
    message = "Authentication required"

    def __init__(self, reason: str, *, challenge: str, token_given: bool) -> None:
        super().__init__(reason, challenge=challenge)
        self.token_given = token_given


class InsufficientScope(AuthError):
    """403: the credential is good but lacks `missing` of the scopes needed."""

    http_status = 403
    message = "The access token lacks a scope this request needs"

    def __init__(self, reason: str, *, challenge: str, missing: frozenset[str]) -> None:
        super().__init__(reason, challenge=challenge)
        self.missing = missing


class AuthUnavailable(AuthError):
    """503: tokens cannot be checked because no key set was ever loaded."""

    http_status = 503
    message = "The gateway cannot check access tokens right now; retry later"

    def __init__(self, reason: str, *, retry_after_s: int = 30) -> None:
        super().__init__(reason)
        self.headers["Retry-After"] = str(retry_after_s)


class RateLimited(AuthError):
    """429: this principal sent more than its rate; others are still served."""

    http_status = 429
    message = "Too many requests from this caller; retry later"

    def __init__(self, reason: str, *, retry_after: str) -> None:
        super().__init__(reason)
        self.headers["Retry-After"] = retry_after


class UpstreamCredentialsError(UpstreamError):
    """The token endpoint of an upstream refused or failed the client-credentials grant."""

    default_message = "The gateway could not obtain credentials for the upstream MCP server"
    kind = "credentials"
