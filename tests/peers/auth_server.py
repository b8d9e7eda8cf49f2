"""A real OAuth authorization server for tests, in process on a free loopback port.

It serves RFC 8414 and OpenID metadata (either can be switched off), a JWKS with
RSA, EC and Ed25519 keys generated per run, and a client-credentials token
endpoint. Tests can rotate keys (add a new one, retire an old one), take the JWKS
down (503) or the whole server down (connection refused, same port on `up`),
count what was fetched, and sign tokens with any claims, kid and alg, including
deliberately bad ones (`alg: none`, HS256 keyed with the RSA public key).

The server's clock is injected, so tokens' `iat`/`exp` follow the test's clock.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_plus

import jwt
from aiohttp import web
from aiohttp.test_utils import TestServer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

AUDIENCE = "http://127.0.0.1:8000/mcp"  # the resource the tests' gateway claims to be


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


@dataclass
class SigningKey:
    kid: str
    kty: str
    alg: str  # what `sign` uses by default
    private: Any

    def public_jwk(self) -> dict[str, Any]:
        public = self.private.public_key()
        jwk: dict[str, Any]
        if self.kty == "RSA":
            jwk = json.loads(RSAAlgorithm.to_jwk(public))
        elif self.kty == "EC":
            jwk = json.loads(ECAlgorithm.to_jwk(public))
        else:
            jwk = json.loads(OKPAlgorithm.to_jwk(public))
        jwk.update({"kid": self.kid, "use": "sig"})
        return jwk

    def public_pem(self) -> bytes:
        pem: bytes = self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return pem


def make_key(kid: str, kty: str) -> SigningKey:
    if kty == "RSA":
        return SigningKey(kid, "RSA", "RS256", rsa.generate_private_key(65537, 2048))
    if kty == "EC":
        return SigningKey(kid, "EC", "ES256", ec.generate_private_key(ec.SECP256R1()))
    if kty == "OKP":
        return SigningKey(kid, "OKP", "EdDSA", ed25519.Ed25519PrivateKey.generate())
    raise ValueError(kty)


class AuthServer:
    """The authorization server. `await start()`, then use `issuer`, `sign`, the switches."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        issuer_path: str = "",
        oauth_metadata: bool = True,
        oidc_metadata: bool = True,
        audience: str = AUDIENCE,
    ) -> None:
        self.clock = clock
        self.issuer_path = issuer_path
        self.oauth_metadata = oauth_metadata
        self.oidc_metadata = oidc_metadata
        self.audience = audience
        self.keys: dict[str, SigningKey] = {}
        for kid, kty in (("rsa-1", "RSA"), ("ec-1", "EC"), ("ed-1", "OKP")):
            self.keys[kid] = make_key(kid, kty)
        self._serial = itertools.count(2)
        self.oidc_inserted = True  # False: only `<issuer>/.well-known/openid-configuration`
        self.metadata_overrides: dict[str, Any] = {}  # e.g. another issuer, an unsafe jwks_uri
        self.jwks_status = 200  # the outage switch: 503 answers every JWKS GET with 503
        self.jwks_fetches = 0
        self.metadata_fetches = 0
        self.clients: dict[str, str] = {}
        self.token_requests: list[dict[str, str]] = []  # forms, without client_secret
        self.token_lifetime_s = 3600
        self.port = 0
        self._server: TestServer | None = None

    # --- lifecycle -----------------------------------------------------------------

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/.well-known/oauth-authorization-server{tail:.*}", self._oauth_meta)
        app.router.add_get("/.well-known/openid-configuration{tail:.*}", self._oidc_meta)
        app.router.add_get("/{prefix:.*}/.well-known/openid-configuration", self._oidc_appended)
        app.router.add_get("/jwks", self._jwks)
        app.router.add_get("/redirect-jwks", self._redirect)
        app.router.add_post("/token", self._token)
        return app

    async def start(self) -> AuthServer:
        self._server = TestServer(self._app(), host="127.0.0.1", port=self.port)
        await self._server.start_server()
        assert self._server.port is not None
        self.port = self._server.port
        return self

    async def down(self) -> None:
        """Close the listener: connections are refused until `up`."""
        if self._server is not None:
            await self._server.close()
            self._server = None

    async def up(self) -> None:
        await self.start()

    stop = down

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def issuer(self) -> str:
        return self.base + self.issuer_path

    @property
    def jwks_url(self) -> str:
        return self.base + "/jwks"

    @property
    def token_url(self) -> str:
        return self.base + "/token"

    # --- keys ----------------------------------------------------------------------

    def rotate(self, kty: str = "RSA") -> str:
        """Publish a new key; returns its kid."""
        kid = f"{kty.lower()}-{next(self._serial)}"
        self.keys[kid] = make_key(kid, kty)
        return kid

    def retire(self, kid: str) -> None:
        del self.keys[kid]

    def jwks(self) -> dict[str, Any]:
        return {"keys": [key.public_jwk() for key in self.keys.values()]}

    # --- tokens --------------------------------------------------------------------

    def claims(self, **overrides: Any) -> dict[str, Any]:
        """Good claims for `sub` alice; `None` values remove a claim."""
        now = int(self.clock())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "sub": "alice",
            "aud": self.audience,
            "iat": now,
            "exp": now + 300,
            "scope": "mcp:tools mcp:read",
            "client_id": "test-client",
            "jti": f"t{next(self._serial)}",
        }
        claims.update(overrides)
        return {k: v for k, v in claims.items() if v is not None}

    def sign(
        self,
        claims: dict[str, Any] | None = None,
        *,
        kid: str = "rsa-1",
        alg: str | None = None,
        key: SigningKey | None = None,
        headers: dict[str, Any] | None = None,
    ) -> str:
        """A token over `claims` (default: `self.claims()`), signed by `kid` (or `key`)."""
        signer = key or self.keys[kid]
        merged = {"kid": kid, **(headers or {})}  # a None value removes a header
        extra = {name: value for name, value in merged.items() if value is not None}
        return jwt.encode(
            claims if claims is not None else self.claims(),
            signer.private,
            algorithm=alg or signer.alg,
            headers=extra,
        )

    def unsigned_token(self, claims: dict[str, Any] | None = None, kid: str = "rsa-1") -> str:
        """`alg: none` with an empty signature."""
        header = {"alg": "none", "typ": "JWT", "kid": kid}
        return self._compact(header, claims) + "."

    def hs256_with_public_key(
        self, claims: dict[str, Any] | None = None, kid: str = "rsa-1"
    ) -> str:
        """Algorithm confusion: HS256 keyed with the RSA key's public PEM."""
        header = {"alg": "HS256", "typ": "JWT", "kid": kid}
        signing_input = self._compact(header, claims)
        mac = hmac.new(self.keys[kid].public_pem(), signing_input.encode(), hashlib.sha256)
        return signing_input + "." + b64url(mac.digest())

    def _compact(self, header: dict[str, Any], claims: dict[str, Any] | None) -> str:
        payload = claims if claims is not None else self.claims()
        return ".".join(
            b64url(json.dumps(part, separators=(",", ":")).encode()) for part in (header, payload)
        )

    # --- handlers ------------------------------------------------------------------

    def _metadata(self) -> dict[str, Any]:
        document = {
            "issuer": self.issuer,
            "jwks_uri": self.jwks_url,
            "token_endpoint": self.token_url,
            "grant_types_supported": ["client_credentials"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "response_types_supported": ["code"],
        }
        return document | self.metadata_overrides

    async def _oauth_meta(self, request: web.Request) -> web.Response:
        self.metadata_fetches += 1
        if not self.oauth_metadata or request.match_info["tail"] != self.issuer_path:
            raise web.HTTPNotFound()
        return web.json_response(self._metadata())

    async def _oidc_meta(self, request: web.Request) -> web.Response:
        self.metadata_fetches += 1
        if request.match_info["tail"] and not self.oidc_inserted:
            raise web.HTTPNotFound()
        if not self.oidc_metadata or request.match_info["tail"] != self.issuer_path:
            raise web.HTTPNotFound()
        return web.json_response(self._metadata())

    async def _oidc_appended(self, request: web.Request) -> web.Response:
        self.metadata_fetches += 1
        if not self.oidc_metadata or "/" + request.match_info["prefix"] != self.issuer_path:
            raise web.HTTPNotFound()
        return web.json_response(self._metadata())

    async def _jwks(self, request: web.Request) -> web.Response:
        self.jwks_fetches += 1
        if self.jwks_status != 200:
            return web.json_response({"error": "unavailable"}, status=self.jwks_status)
        return web.json_response(self.jwks())

    async def _redirect(self, request: web.Request) -> web.Response:
        raise web.HTTPFound(self.jwks_url)

    async def _token(self, request: web.Request) -> web.Response:
        form = {k: str(v) for k, v in (await request.post()).items()}
        client_id, secret = form.get("client_id"), form.pop("client_secret", None)
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Basic "):
            decoded = base64.b64decode(auth[6:]).decode()
            raw_id, _, raw_secret = decoded.partition(":")
            client_id, secret = unquote_plus(raw_id), unquote_plus(raw_secret)
            form["_auth"] = "basic"
        else:
            form["_auth"] = "post"
        self.token_requests.append(form)
        if client_id is None or self.clients.get(client_id) != secret:
            return web.json_response({"error": "invalid_client"}, status=401)
        if form.get("grant_type") != "client_credentials":
            return web.json_response({"error": "unsupported_grant_type"}, status=400)
        audience = form.get("resource") or form.get("audience") or "upstream"
        claims = self.claims(sub=client_id, aud=audience, scope=form.get("scope"))
        claims["exp"] = int(self.clock()) + self.token_lifetime_s
        return web.json_response(
            {
                "access_token": self.sign(claims),
                "token_type": "Bearer",
                "expires_in": self.token_lifetime_s,
                **({"scope": form["scope"]} if "scope" in form else {}),
            }
        )
