"""Reading who may call: the `auth` section, per-tool scopes, per-principal rate limits,
and the gateway's own credentials toward an upstream (`upstreams[].oauth_client`).

    auth:
      public_url: https://mcp.example.com     # resource = public_url + each upstream's path
      oauth: {issuer, audience?, jwks_url?, scopes: [...]}
      api_keys_file: /secrets/api-keys.yaml    # entries {id, hash, scopes}

Everything that can be checked without the network is checked here, so
`check-config` names the key: unsafe URLs (https, or loopback), unreadable key
files, secrets that are not there. The keys file and client secrets are read at
start; nothing secret is ever put in a message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.auth import (
    ApiKeyEntry,
    ClientCredentials,
    IssuerSettings,
    RouteAuthSettings,
    Secret,
    check_route_settings,
    load_api_keys,
    read_secret,
)
from gateway.config.section import Section
from gateway.errors import ConfigError


@dataclass(frozen=True, slots=True, kw_only=True)
class OAuthConfig:
    issuer: str
    """The token issuer's URL (https, or loopback)."""
    audience: str | None = None
    """The audience tokens must carry; none: the resource (`public_url` + the path)."""
    jwks_url: str | None = None
    """The issuer's key set; none: discovered from the issuer's metadata."""
    scopes: tuple[str, ...] = ()
    """Scopes any access needs; advertised in the protected resource metadata."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthConfig:
    public_url: str
    """How clients reach the gateway, e.g. `https://mcp.example.com`; the resource of a
    route is `public_url` + its path."""
    oauth: OAuthConfig | None = None
    """OAuth 2.1 bearer tokens (JWTs) from one issuer."""
    api_keys: tuple[ApiKeyEntry, ...] | None = field(
        default=None, metadata={"yaml": "api_keys_file", "type": "path"}
    )
    """A file of API keys (entries `{id, hash, scopes}`; make one with `mrtr-gateway
    apikey`); none: API keys are not accepted."""

    @property
    def scopes(self) -> tuple[str, ...]:
        return self.oauth.scopes if self.oauth is not None else ()

    def route(self, path: str, where: str = "auth") -> RouteAuthSettings:
        """How the MCP route at `path` is protected."""
        oauth = self.oauth
        return RouteAuthSettings(
            public_url=self.public_url,
            path=path,
            issuers=(IssuerSettings(issuer=oauth.issuer, jwks_url=oauth.jwks_url),)
            if oauth is not None
            else (),
            audiences=(oauth.audience,) if oauth is not None and oauth.audience else (),
            scopes=self.scopes,
            api_keys=self.api_keys,
            where=where,
        )


def parse_scopes(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise ConfigError(f"{where}: expected a list of scope names, e.g. [mcp]")
    if any(" " in s for s in value):
        raise ConfigError(f"{where}: a scope name has no spaces")
    return tuple(value)


def parse_auth(sec: Section, base: Path, paths: list[str]) -> AuthConfig | None:
    """The `auth` section, checked for every upstream path; None when it is absent.

    Raises:
        ConfigError
    """
    if not sec.has_any():
        sec.done()
        return None
    public_url = sec.get("public_url", str)
    if not public_url:
        raise ConfigError(
            f"{sec.at('public_url')}: how clients reach the gateway is required, "
            "e.g. https://mcp.example.com (the resource is public_url + the path)"
        )
    oauth = None
    oauth_sec = sec.section("oauth")
    if oauth_sec.has_any():
        issuer = oauth_sec.get("issuer", str)
        if not issuer:
            raise ConfigError(f"{oauth_sec.at('issuer')}: the token issuer's URL is required")
        oauth = OAuthConfig(
            issuer=issuer,
            audience=oauth_sec.get("audience", str),
            jwks_url=oauth_sec.get("jwks_url", str),
            scopes=parse_scopes(oauth_sec.raw("scopes"), oauth_sec.at("scopes")),
        )
    oauth_sec.done()
    keys_file = sec.get("api_keys_file", str)
    api_keys = tuple(load_api_keys(base / keys_file)) if keys_file else None
    sec.done()
    config = AuthConfig(public_url=public_url.rstrip("/"), oauth=oauth, api_keys=api_keys)
    for path in paths:
        check_route_settings(config.route(path, where="auth"))
    return config


def parse_oauth_client(
    sec: Section, env: Mapping[str, str], base: Path
) -> ClientCredentials | None:
    """`upstreams[].oauth_client`: the gateway's own token for that upstream, or None.

    Raises:
        ConfigError
    """
    if not sec.has_any():
        sec.done()
        return None
    secret_file = sec.get("client_secret_file", str)
    secret_env = sec.get("client_secret_env", str)
    if (secret_file is None) == (secret_env is None):
        raise ConfigError(
            f"{sec.path}: give the client secret as exactly one of client_secret_file "
            "or client_secret_env"
        )
    if secret_env is not None:
        if not env.get(secret_env):
            raise ConfigError(
                f"{sec.at('client_secret_env')}: environment variable {secret_env} is empty "
                "or not set"
            )
        secret = Secret(env[secret_env])
    else:
        secret = read_secret(file=str(base / str(secret_file)), what=sec.at("client_secret_file"))
    credentials = ClientCredentials(
        token_url=sec.get("token_url", str) or "",
        client_id=sec.get("client_id", str) or "",
        secret=secret,
        scope=sec.get("scope", str),
        audience=sec.get("audience", str),
        resource=sec.get("resource", str),
        auth_method=sec.get("auth_method", str) or "client_secret_basic",
        where=sec.path,
    )
    sec.done()
    return credentials
