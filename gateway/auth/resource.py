"""The protected resource: its URL, its RFC 9728 metadata, and which URLs may be trusted.

`resource_url` is what clients connect to (public_url + MCP path) and what a token's
`aud` must name by default. `protected_resource_metadata` builds the document
served at the path-inserted well-known URI (`/.well-known/oauth-protected-resource/
<path>`) and at the root form; `metadata_url` is the URL a 401 challenge points to.

`require_secure_url` is the policy for every URL the gateway fetches from or
advertises as an authorization server: https, or http only on loopback
(127.0.0.0/8, ::1, localhost), with no credentials or fragment in it.

Pure: no I/O.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from gateway.errors import ConfigError

WELL_KNOWN_PRM = "/.well-known/oauth-protected-resource"
#: Never advertised: the spec asks resources not to steer clients toward refresh tokens.
NOT_ADVERTISED = frozenset({"offline_access"})


def is_loopback_host(host: str) -> bool:
    """True for localhost, 127.0.0.0/8 and ::1 (brackets allowed)."""
    host = host.strip("[]").lower().rstrip(".")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def require_secure_url(url: str, what: str) -> str:
    """`url` if it is https, or http on a loopback host; else a `ConfigError` naming `what`.

    Raises:
        ConfigError: not an absolute http(s) URL, http off loopback, user info,
            a fragment, or a `|` (which would make principals ambiguous).
    """
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise ConfigError(f"{what}: {url!r} is not a valid URL") from exc
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ConfigError(f"{what}: {url!r} must be an absolute https:// URL")
    if parts.scheme == "http" and not is_loopback_host(parts.hostname):
        raise ConfigError(
            f"{what}: {url!r} must use https (plain http is allowed only on loopback: "
            "127.0.0.0/8, ::1, localhost)"
        )
    if parts.username is not None or parts.password is not None:
        raise ConfigError(f"{what}: {url!r} must not carry credentials")
    if parts.fragment or url.endswith("#"):
        raise ConfigError(f"{what}: {url!r} must not have a fragment")
    if "|" in url:
        raise ConfigError(f"{what}: {url!r} must not contain '|'")
    return url


def _check_path(path: str) -> str:
    if not path.startswith("/"):
        raise ConfigError(f"MCP path {path!r} must start with '/'")
    return path


def resource_url(public_url: str, path: str) -> str:
    """The canonical resource: `public_url` (without a trailing slash) followed by `path`."""
    return public_url.rstrip("/") + _check_path(path)


def metadata_url(public_url: str, path: str) -> str:
    """Where the path-inserted PRM of `public_url` + `path` lives (RFC 9728 §3.1).

    `https://gw.example/base` and `/mcp` give
    `https://gw.example/.well-known/oauth-protected-resource/base/mcp`.
    """
    parts = urlsplit(resource_url(public_url, path))
    return f"{parts.scheme}://{parts.netloc}{WELL_KNOWN_PRM}{parts.path}"


def well_known_paths(path: str) -> tuple[str, str]:
    """The gateway's own routes for the PRM of the MCP endpoint at `path`.

    The path-inserted form first, then the root form. Serve the root form only
    for the one route it describes.
    """
    return WELL_KNOWN_PRM + _check_path(path), WELL_KNOWN_PRM


def protected_resource_metadata(
    *,
    public_url: str,
    path: str,
    authorization_servers: Iterable[str],
    scopes: Iterable[str] = (),
    resource_name: str | None = None,
) -> dict[str, Any]:
    """The RFC 9728 document for the MCP endpoint at `public_url` + `path`.

    `offline_access` is dropped from `scopes_supported`; scopes keep their order.
    """
    advertised: list[str] = []
    for scope in scopes:
        if scope not in NOT_ADVERTISED and scope not in advertised:
            advertised.append(scope)
    document: dict[str, Any] = {
        "resource": resource_url(public_url, path),
        "authorization_servers": list(dict.fromkeys(authorization_servers)),
        "scopes_supported": advertised,
        "bearer_methods_supported": ["header"],
    }
    if resource_name:
        document["resource_name"] = resource_name
    return document
