"""Access-token (JWT) verification: signature by the issuer's key, then every claim.

Order of checks, each failure a `TokenRejected` whose reason is for the log only:

1. shape and size; the header names an asymmetric `alg` (never `none`, never HS*)
   and a `kid`;
2. the unverified `iss` picks one of the configured issuers (no fetch for others);
3. that issuer's `JwksCache` gives the key for `kid`, and `alg` must be one the
   key's type allows (an HS256 token "signed" with the RSA public key fails here);
4. PyJWT checks the signature with exactly that algorithm, `iss` and `aud`;
5. `exp` (required), `nbf` and `iat` against the injected clock with `leeway_s`
   (PyJWT reads the system clock, so its own time checks are off);
6. `sub` is a non-empty string; scopes come from `scope` (space-separated) and
   `scp` (a list or a string).

The principal is `(iss, sub, client)`, the client being `azp` or `client_id` when
the token names one: a refreshed token of the same subject and application is the
same principal, another application's token for the same user is not.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import jwt

from gateway.auth.jwks import ASYMMETRIC_ALGORITHMS, JwksCache, UnknownKey
from gateway.auth.ports import WallClock
from gateway.auth.principal import Identity, Principal

DEFAULT_LEEWAY_S = 60.0
MAX_TOKEN_CHARS = 16 * 1024
VERIFIED_TTL_S = 60.0  # how long a verified token is trusted without checking it again
VERIFIED_MAX = 10_000  # tokens remembered at most


class TokenRejected(Exception):
    """The token is not acceptable; the message is the reason, for the log only."""


def _number(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TokenRejected(f"claim {name} is not a number")
    return float(value)


def scopes_of(claims: Mapping[str, Any]) -> frozenset[str]:
    """The scopes granted: `scope` (RFC 8693/9068, space-separated) and `scp` (list or string)."""
    found: set[str] = set()
    for name in ("scope", "scp"):
        value = claims.get(name)
        if isinstance(value, str):
            found.update(value.split())
        elif isinstance(value, list):
            found.update(item for item in value if isinstance(item, str) and item)
        elif value is not None:
            raise TokenRejected(f"claim {name} is neither a string nor a list")
    return frozenset(found)


class JwtVerifier:
    """Verifies bearer JWTs from the configured issuers for the configured audiences."""

    def __init__(
        self,
        *,
        issuers: Sequence[JwksCache],
        audiences: Sequence[str],
        clock: WallClock,
        leeway_s: float = DEFAULT_LEEWAY_S,
    ) -> None:
        if not issuers:
            raise ValueError("JwtVerifier needs at least one issuer")
        if not audiences:
            raise ValueError("JwtVerifier needs at least one audience")
        self._issuers = {cache.issuer: cache for cache in issuers}
        self.audiences = list(audiences)
        self._clock = clock
        self.leeway_s = leeway_s
        # Tokens verified lately, by their SHA-256: a client sends the same token on every
        # request, and a signature check costs 100-200 us. An entry lives until the token
        # expires, and at most VERIFIED_TTL_S, so a key withdrawn at the issuer stops
        # working within that bound as well as by the key cache's own maximum age.
        self._verified: dict[bytes, tuple[Identity, float, float]] = {}

    @property
    def caches(self) -> list[JwksCache]:
        return list(self._issuers.values())

    async def verify(self, token: str) -> Identity:
        """The identity `token` proves.

        Raises:
            TokenRejected: the token is not acceptable (reason for the log only).
            KeysUnavailable: its issuer's keys could never be loaded.
        """
        if len(token) > MAX_TOKEN_CHARS:
            raise TokenRejected("token too long")
        digest = hashlib.sha256(token.encode()).digest()
        known = self._verified.get(digest)
        if known is not None:
            identity, exp, until = known
            now = self._clock()
            if now < until:
                if now >= exp + self.leeway_s:
                    raise TokenRejected("expired")
                return identity
            del self._verified[digest]
        identity, exp = await self._verify(token)
        if len(self._verified) >= VERIFIED_MAX:
            del self._verified[next(iter(self._verified))]  # the oldest entry
        self._verified[digest] = (identity, exp, self._clock() + VERIFIED_TTL_S)
        return identity

    async def _verify(self, token: str) -> tuple[Identity, float]:
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError as exc:
            raise TokenRejected(f"malformed ({type(exc).__name__})") from exc
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in ASYMMETRIC_ALGORITHMS:
            raise TokenRejected(f"alg {str(alg)[:16]!r} is not accepted")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise TokenRejected("no kid in the header")
        issuer = unverified.get("iss")
        cache = self._issuers.get(issuer) if isinstance(issuer, str) else None
        if cache is None:
            raise TokenRejected("issuer is not trusted")
        try:
            key = await cache.key_for(kid)
        except UnknownKey as exc:
            raise TokenRejected(f"unknown kid ({exc})") from exc
        if alg not in key.algorithms:
            raise TokenRejected(f"alg {alg} does not fit the {key.kty} key {kid[:64]!r}")
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.public_key,
                algorithms=[alg],
                audience=self.audiences,
                issuer=cache.issuer,
                options={
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                    "require": ["iss", "sub", "aud", "exp"],
                },
            )
        except jwt.InvalidSignatureError as exc:
            raise TokenRejected("bad signature") from exc
        except jwt.InvalidAudienceError as exc:
            raise TokenRejected("wrong audience") from exc
        except jwt.InvalidIssuerError as exc:
            raise TokenRejected("wrong issuer") from exc
        except jwt.MissingRequiredClaimError as exc:
            raise TokenRejected(f"missing claim {exc.claim}") from exc
        except jwt.PyJWTError as exc:
            raise TokenRejected(f"invalid ({type(exc).__name__})") from exc
        self._check_times(claims)
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            raise TokenRejected("sub is not a non-empty string")
        client = _client(claims)
        identity = Identity(
            Principal.for_token(cache.issuer, subject, client or ""),
            scopes_of(claims),
            client,
            expires_at=float(claims["exp"]) + self.leeway_s,
        )
        return identity, float(claims["exp"])

    def _check_times(self, claims: Mapping[str, Any]) -> None:
        now = self._clock()
        exp = _number(claims, "exp")
        if exp is None:
            raise TokenRejected("missing claim exp")
        if now >= exp + self.leeway_s:
            raise TokenRejected("expired")
        nbf = _number(claims, "nbf")
        if nbf is not None and nbf > now + self.leeway_s:
            raise TokenRejected("not yet valid (nbf)")
        iat = _number(claims, "iat")
        if iat is not None and iat > now + self.leeway_s:
            raise TokenRejected("issued in the future (iat)")


def _client(claims: Mapping[str, Any]) -> str | None:
    """The application the token was issued to: `azp` (OpenID Connect), else RFC 9068's
    `client_id`; None when neither is a non-empty string."""
    for name in ("azp", "client_id"):
        client = claims.get(name)
        if isinstance(client, str) and client:
            return client
    return None
