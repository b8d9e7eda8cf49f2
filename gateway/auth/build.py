"""Wiring helpers: from plain settings to a route's `Authenticator` and its metadata document.

The config layer reads its keys into `RouteAuthSettings` (one per protected MCP
route) and calls `build_authenticator` once at startup with a shared
`HttpFetcher` and clock; the web layer serves `route_metadata(...)` at both
well-known paths. Every URL is checked here, so a bad one fails at startup with
the key named.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.auth.apikeys import ApiKeyEntry, ApiKeyStore
from gateway.auth.authenticator import Authenticator
from gateway.auth.jwks import JwksCache
from gateway.auth.ports import HttpFetcher, WallClock
from gateway.auth.resource import (
    metadata_url,
    protected_resource_metadata,
    require_secure_url,
    resource_url,
)
from gateway.auth.tokens import DEFAULT_LEEWAY_S, JwtVerifier
from gateway.errors import ConfigError


@dataclass(frozen=True, slots=True, kw_only=True)
class IssuerSettings:
    """One trusted authorization server. `jwks_url` skips metadata discovery."""

    issuer: str
    jwks_url: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RouteAuthSettings:
    """How one MCP route is protected (what the config layer fills in)."""

    public_url: str  # how clients reach the gateway, e.g. https://mcp.example.com
    path: str  # the MCP endpoint path, e.g. /mcp
    issuers: Sequence[IssuerSettings] = ()
    audiences: Sequence[str] = ()  # default: the resource URL alone
    scopes: Sequence[str] = ()  # needed on the route; advertised in PRM and 401s
    api_keys: Sequence[ApiKeyEntry] | None = None  # None: API keys are not accepted
    leeway_s: float = DEFAULT_LEEWAY_S
    refresh_interval_s: float = 15.0
    max_key_age_s: float = 300.0
    resource_name: str | None = None
    where: str = field(default="auth", compare=False)  # config path, for error messages


def check_route_settings(settings: RouteAuthSettings) -> None:
    """Validate `settings` without building anything (for `check-config`).

    Raises:
        ConfigError: an unsafe URL, a duplicate issuer, no credential kind, bad bounds;
            the message starts with `settings.where`.
    """
    where = settings.where
    require_secure_url(settings.public_url, f"{where}.public_url")
    if not settings.path.startswith("/"):
        raise ConfigError(f"{where}: the MCP path {settings.path!r} must start with '/'")
    for index, item in enumerate(settings.issuers):
        require_secure_url(item.issuer, f"{where}.issuers[{index}].issuer")
        if item.jwks_url is not None:
            require_secure_url(item.jwks_url, f"{where}.issuers[{index}].jwks_url")
    if len({item.issuer for item in settings.issuers}) != len(settings.issuers):
        raise ConfigError(f"{where}.issuers: an issuer is listed twice")
    if not settings.issuers and settings.api_keys is None:
        raise ConfigError(
            f"{where}: give issuers (OAuth), an API keys file, or both; "
            "an unauthenticated route must be configured as such explicitly"
        )
    if not 0 <= settings.leeway_s <= 300:
        raise ConfigError(f"{where}.leeway_s must be between 0 and 300 seconds")
    if not 1 <= settings.refresh_interval_s <= 60:
        raise ConfigError(
            f"{where}.refresh_interval_s must be between 1 and 60 seconds "
            "(a new issuer key is accepted within this interval)"
        )


def build_authenticator(
    settings: RouteAuthSettings,
    *,
    fetcher: HttpFetcher,
    clock: WallClock = time.time,
) -> Authenticator:
    """The route's authenticator; issuers' keys load on first use (or `prime`).

    Raises:
        ConfigError: an unsafe URL, a duplicate issuer, no credential kind, bad bounds.
    """
    check_route_settings(settings)
    verifier = None
    if settings.issuers:
        caches = [
            JwksCache(
                issuer=item.issuer,
                jwks_url=item.jwks_url,
                fetcher=fetcher,
                clock=clock,
                refresh_interval_s=settings.refresh_interval_s,
                max_age_s=settings.max_key_age_s,
            )
            for item in settings.issuers
        ]
        audiences = list(settings.audiences) or [resource_url(settings.public_url, settings.path)]
        verifier = JwtVerifier(
            issuers=caches, audiences=audiences, clock=clock, leeway_s=settings.leeway_s
        )
    return Authenticator(
        jwt=verifier,
        api_keys=ApiKeyStore(settings.api_keys) if settings.api_keys is not None else None,
        resource_metadata=(
            metadata_url(settings.public_url, settings.path) if settings.issuers else None
        ),
        scopes=settings.scopes,
    )


async def prime(authenticator: Authenticator) -> dict[str, bool]:
    """Load every issuer's keys now (startup); True per issuer that loaded. Never raises."""
    loaded: dict[str, bool] = {}
    if authenticator.jwt is not None:
        for cache in authenticator.jwt.caches:
            loaded[cache.issuer] = await cache.refresh()
    return loaded


def route_metadata(settings: RouteAuthSettings) -> dict[str, Any]:
    """The RFC 9728 document for the route (serve it only when it has issuers)."""
    return protected_resource_metadata(
        public_url=settings.public_url,
        path=settings.path,
        authorization_servers=[item.issuer for item in settings.issuers],
        scopes=settings.scopes,
        resource_name=settings.resource_name,
    )
