"""The gateway's own token toward a legacy server (OAuth 2.1 client credentials grant).

The client's token never goes upstream (the spec forbids passing it through); an
upstream that wants OAuth gets a token the gateway obtains for itself from that
upstream's token endpoint. `ClientCredentialsSource.token()` returns a cached
access token, fetching a new one when none is cached or the cached one is within
`refresh_margin_s` of expiry; concurrent callers share one fetch. `invalidate()`
drops it (call it when the upstream answers 401, then retry once).

The client secret is read once from a file or an environment variable at
construction, kept in a `Secret` whose repr hides it, and never logged or put in
an error message. Errors from the token endpoint log its OAuth `error` code only.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from gateway.auth.errors import UpstreamCredentialsError
from gateway.auth.ports import FetchError, HttpFetcher, WallClock
from gateway.auth.resource import require_secure_url
from gateway.errors import ConfigError

log = structlog.get_logger("gateway.auth")

DEFAULT_LIFETIME_S = 300.0  # when the endpoint omits expires_in


class Secret:
    """A string that does not show itself in reprs, logs or tracebacks."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__


def read_secret(*, file: str | None = None, env: str | None = None, what: str) -> Secret:
    """The secret from exactly one of `file` (trailing newline dropped) or `env`.

    Raises:
        ConfigError: neither or both given, the file is unreadable, the variable is
            unset, or the value is empty. The message never contains the value.
    """
    if (file is None) == (env is None):
        raise ConfigError(f"{what}: give exactly one of a secret file or an environment variable")
    if file is not None:
        try:
            value = Path(file).read_text().rstrip("\r\n")
        except OSError as exc:
            raise ConfigError(
                f"{what}: secret file {file} cannot be read ({exc.strerror})"
            ) from exc
        source = f"secret file {file}"
    else:
        assert env is not None
        value = os.environ.get(env, "")
        source = f"environment variable {env}"
    if not value:
        raise ConfigError(f"{what}: {source} is empty or unset")
    return Secret(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientCredentials:
    """One upstream's client registration at its authorization server."""

    token_url: str
    """The authorization server's token endpoint (https, or loopback)."""
    client_id: str
    """The gateway's client id there."""
    secret: Secret = field(
        metadata={"yaml": "client_secret_file / client_secret_env", "type": "path / name"}
    )
    """The client secret: a file holding it, or the environment variable that does
    (exactly one)."""
    scope: str | None = None
    """Scopes asked for, space-separated (sent as `scope`)."""
    audience: str | None = None
    """Sent as `audience` (Auth0, Okta and others)."""
    resource: str | None = None
    """Sent as the RFC 8707 `resource` (an absolute URI)."""
    auth_method: str = "client_secret_basic"
    """`client_secret_basic` or `client_secret_post`."""
    where: str = field(default="upstream.auth", metadata={"yaml": None})
    """The key path of these settings, for messages."""

    def __post_init__(self) -> None:
        require_secure_url(self.token_url, f"{self.where}.token_url")
        if not self.client_id:
            raise ConfigError(f"{self.where}.client_id must not be empty")
        if self.auth_method not in ("client_secret_basic", "client_secret_post"):
            raise ConfigError(
                f"{self.where}.auth_method must be client_secret_basic or client_secret_post"
            )


class ClientCredentialsSource:
    """A cached upstream access token, refreshed shortly before it expires."""

    def __init__(
        self,
        credentials: ClientCredentials,
        *,
        fetcher: HttpFetcher,
        clock: WallClock = time.time,
        refresh_margin_s: float = 60.0,
    ) -> None:
        self.credentials = credentials
        self._fetcher = fetcher
        self._clock = clock
        self.refresh_margin_s = refresh_margin_s
        self._token: str | None = None
        self._refresh_at = 0.0
        self._lock = asyncio.Lock()
        #: Token requests made (for tests and metrics).
        self.fetches = 0

    def invalidate(self) -> None:
        """Forget the cached token: the next `token()` fetches a new one."""
        self._token = None

    async def authorization(self) -> str:
        """`Bearer <token>`, for the upstream request's Authorization header."""
        return "Bearer " + await self.token()

    async def token(self) -> str:
        """A current access token.

        Raises:
            UpstreamCredentialsError: the token endpoint failed or refused.
        """
        if self._token is not None and self._clock() < self._refresh_at:
            return self._token
        async with self._lock:
            if self._token is not None and self._clock() < self._refresh_at:
                return self._token
            token, lifetime = await self._fetch()
            # Refresh `refresh_margin_s` early, but never later than half-way through
            # a short lifetime.
            self._refresh_at = self._clock() + max(lifetime - self.refresh_margin_s, lifetime / 2)
            self._token = token
            return token

    async def _fetch(self) -> tuple[str, float]:
        creds = self.credentials
        form = {"grant_type": "client_credentials"}
        if creds.scope:
            form["scope"] = creds.scope
        if creds.audience:
            form["audience"] = creds.audience
        if creds.resource:
            form["resource"] = creds.resource
        basic = None
        if creds.auth_method == "client_secret_basic":
            basic = (creds.client_id, creds.secret.reveal())
        else:
            form["client_id"] = creds.client_id
            form["client_secret"] = creds.secret.reveal()
        self.fetches += 1
        try:
            reply = await self._fetcher.post_form(creds.token_url, form, basic_auth=basic)
        except FetchError as exc:
            log.warning("upstream_token_failed", token_url=creds.token_url, error=str(exc))
            raise UpstreamCredentialsError(f"token endpoint unreachable: {exc}") from exc
        body = reply.body if isinstance(reply.body, dict) else {}
        if reply.status != 200:
            code = body.get("error")
            code = code if isinstance(code, str) and len(code) <= 64 else "unknown"
            log.warning(
                "upstream_token_refused",
                token_url=creds.token_url,
                client_id=creds.client_id,
                status=reply.status,
                error=code,
            )
            raise UpstreamCredentialsError(f"token endpoint answered {reply.status} ({code})")
        token = body.get("access_token")
        token_type = body.get("token_type")
        if not isinstance(token, str) or not token:
            raise UpstreamCredentialsError("token endpoint answer has no access_token")
        if not isinstance(token_type, str) or token_type.lower() != "bearer":
            raise UpstreamCredentialsError("token endpoint answer is not a Bearer token")
        expires_in = body.get("expires_in", DEFAULT_LIFETIME_S)
        if isinstance(expires_in, str) and expires_in.isdigit():
            expires_in = int(expires_in)  # some servers send it as a string
        if isinstance(expires_in, bool) or not isinstance(expires_in, int | float):
            expires_in = DEFAULT_LIFETIME_S
        log.info("upstream_token_obtained", token_url=creds.token_url, expires_in=expires_in)
        return token, max(float(expires_in), 0.0)
