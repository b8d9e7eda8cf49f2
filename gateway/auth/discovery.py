"""Authorization server metadata discovery: from an issuer to its `jwks_uri`.

Tried in the order the MCP authorization spec gives clients (RFC 8414 first,
then OpenID Connect Discovery):

- issuer with a path (`https://as.example/tenant`):
  `/.well-known/oauth-authorization-server/tenant`,
  `/.well-known/openid-configuration/tenant`,
  `/tenant/.well-known/openid-configuration`;
- issuer without one: `/.well-known/oauth-authorization-server`,
  `/.well-known/openid-configuration`.

A document is used only if its `issuer` is exactly the configured one (RFC 8414
§3.3) and its `jwks_uri` passes `require_secure_url`. A 404 moves on to the next
candidate; an unreachable server ends discovery (the caller retries later).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from gateway.auth.ports import FetchError, HttpFetcher
from gateway.auth.resource import require_secure_url
from gateway.errors import ConfigError

OAUTH_WELL_KNOWN = "/.well-known/oauth-authorization-server"
OIDC_WELL_KNOWN = "/.well-known/openid-configuration"


class DiscoveryError(FetchError):
    """No candidate gave usable metadata; the message lists why, per URL."""


def metadata_candidates(issuer: str) -> list[str]:
    """The metadata URLs to try for `issuer`, in order."""
    parts = urlsplit(issuer)
    origin = f"{parts.scheme}://{parts.netloc}"
    path = parts.path.rstrip("/")
    if not path:
        return [origin + OAUTH_WELL_KNOWN, origin + OIDC_WELL_KNOWN]
    return [
        origin + OAUTH_WELL_KNOWN + path,
        origin + OIDC_WELL_KNOWN + path,
        origin + path + OIDC_WELL_KNOWN,
    ]


def jwks_uri_of(document: Any, issuer: str) -> str:
    """The `jwks_uri` of a metadata document that belongs to `issuer`.

    Raises:
        DiscoveryError: not an object, another issuer, no or an unsafe `jwks_uri`.
    """
    if not isinstance(document, dict):
        raise DiscoveryError("metadata is not a JSON object")
    if document.get("issuer") != issuer:
        raise DiscoveryError("metadata names another issuer")
    jwks_uri = document.get("jwks_uri")
    if not isinstance(jwks_uri, str) or not jwks_uri:
        raise DiscoveryError("metadata has no jwks_uri")
    try:
        return require_secure_url(jwks_uri, "jwks_uri in the issuer's metadata")
    except ConfigError as exc:
        raise DiscoveryError(str(exc)) from exc


async def discover_jwks_uri(fetcher: HttpFetcher, issuer: str) -> str:
    """Find `issuer`'s JWKS URL through its published metadata.

    Raises:
        DiscoveryError: no candidate document was usable (reasons per URL), or the
            server could not be reached.
    """
    problems: list[str] = []
    for url in metadata_candidates(issuer):
        try:
            reply = await fetcher.get_json(url)
        except FetchError as exc:
            raise DiscoveryError(f"{issuer}: {exc}") from exc
        if reply.status != 200:
            problems.append(f"{url}: status {reply.status}")
            continue
        try:
            return jwks_uri_of(reply.body, issuer)
        except DiscoveryError as exc:
            problems.append(f"{url}: {exc}")
    raise DiscoveryError(f"{issuer}: no usable metadata ({'; '.join(problems)})")
