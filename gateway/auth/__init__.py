"""Identity: who is calling, with which scopes, and how much they may send.

The gateway is an OAuth resource server toward its clients and an OAuth client
toward legacy servers that want their own token. This package holds:

    ports          WallClock and the HttpFetcher Protocol (the seams tests replace)
    fetcher        AiohttpFetcher: bounded, redirect-free JSON fetches
    resource       resource URL, RFC 9728 metadata, the https-or-loopback URL policy
    challenge      WWW-Authenticate values for 401 and 403 (pure)
    errors         Unauthenticated 401, InsufficientScope 403, AuthUnavailable 503,
                   RateLimited 429, UpstreamCredentialsError 502
    principal      Principal (jwt:<iss>|<sub>[|<client>], key:<id>) and Identity
    discovery      issuer -> metadata -> jwks_uri (RFC 8414, then OpenID)
    jwks           JwksCache: per-kty algorithms, bounded refresh, last-good keys
    tokens         JwtVerifier: signature, iss, aud, exp/nbf/iat, scopes
    apikeys        mrtr_ keys: make, hash, load the YAML file, check in constant time
    authenticator  Authorization header -> Identity, or the 401/403 to send
    build          settings -> Authenticator and the route's metadata document
    ratelimit      per-principal token bucket, in memory and on Redis
    upstream       client-credentials token source for an upstream

It must not import the web layer, the call core or the config package: those
import it. Tokens, keys and secrets are never logged or put in messages.

This package's namespace loads neither aiohttp nor redis, so the config layer may
import it (check-config loads no transport): take `AiohttpFetcher` from
`gateway.auth.fetcher` and the rate limiters from `gateway.auth.ratelimit`.
"""

from gateway.auth.apikeys import (
    ApiKeyEntry,
    ApiKeyStore,
    hash_key,
    load_api_keys,
    new_api_key,
    parse_api_keys,
)
from gateway.auth.authenticator import Authenticator
from gateway.auth.build import (
    IssuerSettings,
    RouteAuthSettings,
    build_authenticator,
    check_route_settings,
    prime,
    route_metadata,
)
from gateway.auth.challenge import insufficient_scope_challenge, unauthorized_challenge
from gateway.auth.errors import (
    AuthError,
    AuthUnavailable,
    InsufficientScope,
    RateLimited,
    Unauthenticated,
    UpstreamCredentialsError,
)
from gateway.auth.ports import FetchError, HttpFetcher, HttpReply, WallClock
from gateway.auth.principal import Identity, Principal
from gateway.auth.resource import (
    metadata_url,
    protected_resource_metadata,
    require_secure_url,
    resource_url,
    well_known_paths,
)
from gateway.auth.upstream import (
    ClientCredentials,
    ClientCredentialsSource,
    Secret,
    read_secret,
)

__all__ = [
    "ApiKeyEntry",
    "ApiKeyStore",
    "AuthError",
    "AuthUnavailable",
    "Authenticator",
    "ClientCredentials",
    "ClientCredentialsSource",
    "FetchError",
    "HttpFetcher",
    "HttpReply",
    "Identity",
    "InsufficientScope",
    "IssuerSettings",
    "Principal",
    "RateLimited",
    "RouteAuthSettings",
    "Secret",
    "Unauthenticated",
    "UpstreamCredentialsError",
    "WallClock",
    "build_authenticator",
    "check_route_settings",
    "hash_key",
    "insufficient_scope_challenge",
    "load_api_keys",
    "metadata_url",
    "new_api_key",
    "parse_api_keys",
    "prime",
    "protected_resource_metadata",
    "read_secret",
    "require_secure_url",
    "resource_url",
    "route_metadata",
    "unauthorized_challenge",
    "well_known_paths",
]
