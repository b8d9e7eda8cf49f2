"""From an `Authorization` header to an `Identity`, or to the 401/403 that says what is missing.

`Authenticator.authenticate` takes the header value (or None) of one request:

- no header, or a scheme other than Bearer → `Unauthenticated` without an error code;
- a token with the API-key prefix → the key store; anything else → the JWT verifier;
- a token either refuses → `Unauthenticated` with `error="invalid_token"`;
- an issuer whose keys never loaded → `AuthUnavailable` (503), not a 401: the
  client's token may be fine, and a 401 would send it to re-authorize for nothing.

`Authenticator.require` turns a missing scope into `InsufficientScope` (403) whose
challenge names the scopes needed plus those already held that the route
advertises, so a step-up authorization does not drop them.

Call both on every request, MRTR retries included. Nothing here logs or keeps a
token; reasons go into the exceptions for the caller's log.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from gateway.auth.apikeys import ApiKeyStore, looks_like_api_key
from gateway.auth.challenge import insufficient_scope_challenge, unauthorized_challenge
from gateway.auth.errors import AuthUnavailable, InsufficientScope, Unauthenticated
from gateway.auth.jwks import KeysUnavailable
from gateway.auth.principal import Identity, Principal
from gateway.auth.tokens import JwtVerifier, TokenRejected

_TOKEN68 = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


class Authenticator:
    """Checks the credentials of one protected route (an MCP endpoint).

    `resource_metadata` is the URL of the route's RFC 9728 document (None when
    the route takes API keys only: there is no authorization server to point at);
    `scopes` are the scopes the route needs, named in every 401 challenge.
    """

    def __init__(
        self,
        *,
        jwt: JwtVerifier | None = None,
        api_keys: ApiKeyStore | None = None,
        resource_metadata: str | None = None,
        scopes: Sequence[str] = (),
    ) -> None:
        if jwt is None and api_keys is None:
            raise ValueError("an Authenticator needs a JWT verifier, API keys, or both")
        self.jwt = jwt
        self.api_keys = api_keys
        self.resource_metadata = resource_metadata
        self.scopes = tuple(dict.fromkeys(scopes))

    def challenge(self, *, invalid_token: bool = False) -> str:
        """The route's 401 `WWW-Authenticate` value."""
        return unauthorized_challenge(
            resource_metadata=self.resource_metadata,
            scopes=self.scopes,
            invalid_token=invalid_token,
        )

    def _missing(self, reason: str) -> Unauthenticated:
        return Unauthenticated(reason, challenge=self.challenge(), token_given=False)

    def _invalid(self, reason: str) -> Unauthenticated:
        return Unauthenticated(
            reason, challenge=self.challenge(invalid_token=True), token_given=True
        )

    async def authenticate(self, authorization: str | None) -> Identity:
        """The identity proven by the `Authorization` header value.

        Raises:
            Unauthenticated: 401, no usable credential (reason for the log only).
            AuthUnavailable: 503, the issuer's keys could never be loaded.
        """
        if authorization is None or not authorization.strip():
            raise self._missing("no credentials")
        scheme, _, rest = authorization.strip().partition(" ")
        if scheme.lower() != "bearer":
            raise self._missing("not a Bearer credential")
        token = rest.strip()
        if not _TOKEN68.fullmatch(token):
            raise self._invalid("malformed bearer token")
        if looks_like_api_key(token):
            return self._check_api_key(token)
        if self.jwt is None:
            raise self._invalid("access tokens are not accepted on this route")
        try:
            return await self.jwt.verify(token)
        except TokenRejected as exc:
            raise self._invalid(f"token refused: {exc}") from None
        except KeysUnavailable as exc:
            raise AuthUnavailable(str(exc)) from None

    def _check_api_key(self, key: str) -> Identity:
        if self.api_keys is None:
            raise self._invalid("API keys are not accepted on this route")
        entry = self.api_keys.check(key)
        if entry is None:
            raise self._invalid("unknown API key")
        return Identity(Principal.for_api_key(entry.id), entry.scopes)

    def require(self, identity: Identity, needed: Iterable[str]) -> None:
        """Refuse `identity` unless it holds every scope in `needed`.

        Raises:
            InsufficientScope: 403, with the scopes to ask for in its challenge.
        """
        wanted = frozenset(needed)
        missing = identity.lacks(wanted)
        if not missing:
            return
        keep = identity.scopes & frozenset(self.scopes)
        raise InsufficientScope(
            f"missing scope(s) {' '.join(sorted(missing))}",
            challenge=insufficient_scope_challenge(
                resource_metadata=self.resource_metadata, scopes=wanted | keep
            ),
            missing=missing,
        )
