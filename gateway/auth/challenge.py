"""`WWW-Authenticate: Bearer ...` values (RFC 6750 §3, RFC 9728 §5.1, MCP authorization).

Pure functions: scopes and URLs in, one header value out. A missing or bad token
gets `unauthorized_challenge`; a good token short of a scope gets
`insufficient_scope_challenge`, which names every scope the request needs so a
client can step up in one authorization.

Never put a token or a reason in a challenge: `error_description` is not used.
"""

from __future__ import annotations

from collections.abc import Iterable

INVALID_TOKEN = "invalid_token"
INSUFFICIENT_SCOPE = "insufficient_scope"


def quote(value: str) -> str:
    """An RFC 9110 quoted-string."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def scope_value(scopes: Iterable[str]) -> str:
    """Scopes as the space-separated, sorted, de-duplicated `scope` parameter."""
    return " ".join(sorted(set(scopes)))


def bearer_challenge(params: Iterable[tuple[str, str | None]]) -> str:
    """`Bearer k="v", ...` for the params whose value is not None, in the given order."""
    parts = [f"{name}={quote(value)}" for name, value in params if value is not None]
    return "Bearer " + ", ".join(parts) if parts else "Bearer"


def unauthorized_challenge(
    *,
    resource_metadata: str | None,
    scopes: Iterable[str] = (),
    invalid_token: bool = False,
) -> str:
    """The 401 challenge: where the metadata is and which scopes to ask for.

    `invalid_token` adds `error="invalid_token"` (a token was presented and refused);
    without a token there is no error code (RFC 6750 §3.1).
    """
    scope = scope_value(scopes) or None
    return bearer_challenge(
        [
            ("error", INVALID_TOKEN if invalid_token else None),
            ("resource_metadata", resource_metadata),
            ("scope", scope),
        ]
    )


def insufficient_scope_challenge(*, resource_metadata: str | None, scopes: Iterable[str]) -> str:
    """The 403 challenge: `error="insufficient_scope"` and every scope the request needs."""
    return bearer_challenge(
        [
            ("error", INSUFFICIENT_SCOPE),
            ("scope", scope_value(scopes) or None),
            ("resource_metadata", resource_metadata),
        ]
    )
