"""The issuer's keys: rotation picked up in time, outages survived, floods of kids bounded."""

from __future__ import annotations

import asyncio
import json
import secrets

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from gateway.auth import Authenticator, AuthError, AuthUnavailable, FetchError, HttpReply
from gateway.auth.jwks import JwksCache, UnknownKey, parse_jwks
from tests.auth.conftest import FakeFetcher, ManualWallClock
from tests.peers.auth_server import AuthServer, make_key


def bearer(server: AuthServer, **sign) -> str:
    return "Bearer " + server.sign(**sign)


async def reason_of(authenticator: Authenticator, header: str) -> str:
    with pytest.raises(AuthError) as caught:
        await authenticator.authenticate(header)
    assert caught.value.http_status == 401
    return caught.value.reason


async def test_a_new_key_is_accepted_once_the_refresh_interval_has_passed(
    authenticator: Authenticator, auth_server: AuthServer, clock: ManualWallClock
) -> None:
    await authenticator.authenticate(bearer(auth_server))
    assert auth_server.jwks_fetches == 1
    kid = auth_server.rotate("EC")

    assert "unknown kid" in await reason_of(authenticator, bearer(auth_server, kid=kid))
    clock.advance(14.9)
    assert "unknown kid" in await reason_of(authenticator, bearer(auth_server, kid=kid))
    assert auth_server.jwks_fetches == 1  # refused from memory within the interval
    clock.advance(0.1)
    identity = await authenticator.authenticate(bearer(auth_server, kid=kid))
    assert identity.principal.subject == "alice"
    assert auth_server.jwks_fetches == 2


async def test_a_new_key_is_accepted_at_once_when_the_last_fetch_is_old(
    authenticator: Authenticator, auth_server: AuthServer, clock: ManualWallClock
) -> None:
    await authenticator.authenticate(bearer(auth_server))
    clock.advance(20)
    kid = auth_server.rotate()
    await authenticator.authenticate(bearer(auth_server, kid=kid))
    assert auth_server.jwks_fetches == 2


async def test_known_keys_keep_working_while_the_issuer_is_down(
    authenticator: Authenticator, auth_server: AuthServer, clock: ManualWallClock
) -> None:
    await authenticator.authenticate(bearer(auth_server))
    auth_server.jwks_status = 503
    clock.advance(301)  # the set is stale: the next lookup tries to refresh it, and fails
    await authenticator.authenticate(bearer(auth_server, kid="ec-1"))
    assert auth_server.jwks_fetches == 2
    assert "unknown kid" in await reason_of(
        authenticator, bearer(auth_server, headers={"kid": "x"})
    )

    await auth_server.down()  # connection refused now
    clock.advance(600)
    await authenticator.authenticate(bearer(auth_server))
    await authenticator.authenticate(bearer(auth_server, kid="ed-1"))
    assert auth_server.jwks_fetches == 2  # the refused connections never reached it

    await auth_server.up()
    auth_server.jwks_status = 200
    clock.advance(15)
    kid = auth_server.rotate()
    await authenticator.authenticate(bearer(auth_server, kid=kid))
    assert auth_server.jwks_fetches == 3


async def test_an_issuer_never_reached_is_503_not_401_and_is_not_hammered(
    authenticator: Authenticator, auth_server: AuthServer, clock: ManualWallClock
) -> None:
    auth_server.jwks_status = 503
    for _ in range(5):
        with pytest.raises(AuthUnavailable) as caught:
            await authenticator.authenticate(bearer(auth_server))
        assert caught.value.http_status == 503
        assert caught.value.headers == {"Retry-After": "30"}
    assert auth_server.jwks_fetches == 1
    auth_server.jwks_status = 200
    clock.advance(15)
    await authenticator.authenticate(bearer(auth_server))
    assert auth_server.jwks_fetches == 2


async def test_a_flood_of_unknown_kids_fetches_at_most_once_per_interval(
    authenticator: Authenticator, auth_server: AuthServer, clock: ManualWallClock
) -> None:
    await authenticator.authenticate(bearer(auth_server))

    async def flood(n: int) -> None:
        headers = [bearer(auth_server, headers={"kid": secrets.token_hex(8)}) for _ in range(n)]
        results = await asyncio.gather(
            *(authenticator.authenticate(h) for h in headers), return_exceptions=True
        )
        assert all(isinstance(r, AuthError) and r.http_status == 401 for r in results)

    await flood(300)
    assert auth_server.jwks_fetches == 1  # within the interval of the first load
    clock.advance(15)
    await flood(300)
    assert auth_server.jwks_fetches == 2  # concurrent misses shared one fetch
    for _ in range(150):
        clock.advance(1)
        await flood(10)
    assert auth_server.jwks_fetches == 2 + 150 // 15


async def test_a_withdrawn_key_stops_working_once_the_set_is_refreshed(
    authenticator: Authenticator, auth_server: AuthServer, clock: ManualWallClock
) -> None:
    old = auth_server.keys["rsa-1"]
    await authenticator.authenticate(bearer(auth_server))
    auth_server.retire("rsa-1")
    clock.advance(299)
    await authenticator.authenticate(bearer(auth_server, key=old, kid="rsa-1"))
    clock.advance(1)
    reason = await reason_of(authenticator, bearer(auth_server, key=old, kid="rsa-1"))
    assert "no longer published" in reason


async def test_a_kid_found_absent_is_not_looked_up_again_within_the_interval(
    clock: ManualWallClock,
) -> None:
    key = make_key("k1", "RSA")
    url = "https://as.example/jwks"
    fetcher = FakeFetcher({url: HttpReply(200, {"keys": [key.public_jwk()]})})
    cache = JwksCache(issuer="https://as.example", jwks_url=url, fetcher=fetcher, clock=clock)
    await cache.key_for("k1")
    clock.advance(10)
    with pytest.raises(UnknownKey, match="not published"):
        await cache.key_for("k2")  # no fetch: the last one is 10 s old
    clock.advance(5)  # a fetch is due again, but k2 was found absent 5 s ago
    with pytest.raises(UnknownKey, match="recently absent"):
        await cache.key_for("k2")
    assert fetcher.count(url) == 1
    with pytest.raises(UnknownKey, match="not published"):
        await cache.key_for("k3")  # another kid is looked up
    assert fetcher.count(url) == 2


async def test_a_redirecting_or_failing_jwks_url_loads_nothing(clock: ManualWallClock) -> None:
    url = "https://as.example/jwks"
    for reply in (
        HttpReply(302, None, {"Location": "http://169.254.169.254/"}),
        HttpReply(200, {"keys": []}),
        HttpReply(200, ["not", "a", "jwks"]),
        FetchError("GET https://as.example/jwks: ClientConnectorError"),
    ):
        fetcher = FakeFetcher({url: reply})
        cache = JwksCache(issuer="https://as.example", jwks_url=url, fetcher=fetcher, clock=clock)
        assert await cache.refresh() is False
        assert fetcher.count(url) == 1


def rsa_jwk(bits: int = 2048, **extra) -> dict:
    key = rsa.generate_private_key(65537, bits).public_key()
    return json.loads(RSAAlgorithm.to_jwk(key)) | extra


@pytest.mark.parametrize(
    ("jwk", "dropped"),
    [
        ({"kty": "oct", "kid": "h", "k": "c2VjcmV0"}, "private or symmetric"),
        ({"kty": "oct", "kid": "h"}, "not accepted (asymmetric keys only)"),
        (rsa_jwk(kid="r", use="enc"), "use is not sig"),
        (rsa_jwk(kid="r", key_ops=["encrypt"]), "key_ops lacks verify"),
        (rsa_jwk(kid="r", alg="ES256"), "does not fit key type RSA"),
        (rsa_jwk(kid="r", alg="HS256"), "does not fit key type RSA"),
        (rsa_jwk(1024, kid="r"), "RSA key of 1024 bits"),
        (rsa_jwk(), "no kid"),
        (rsa_jwk(kid="r", d="AQAB"), "private or symmetric"),
        (make_key("e", "EC").public_jwk() | {"crv": "P-192"}, "curve 'P-192'"),
        ({"kty": "RSA", "kid": "r", "n": "AQAB", "e": "AQAB"}, "unreadable RSA key"),
        ({"kty": "RSA", "kid": "r"}, "unreadable RSA key"),
        (rsa_jwk(kid="r", alg=["RS256"]), "alg is not a string"),
        (make_key("e", "OKP").public_jwk() | {"crv": ["Ed25519"]}, "crv is not a string"),
        (make_key("e", "EC").public_jwk() | {"crv": {"P-256": 1}}, "crv is not a string"),
        ({"kty": ["RSA"], "kid": "r"}, "kty is not a string"),
    ],
)
def test_keys_that_could_be_misused_are_dropped(jwk: dict, dropped: str) -> None:
    keys, reasons = parse_jwks({"keys": [jwk]})
    assert keys == {}
    assert len(reasons) == 1 and dropped in reasons[0]


def test_an_entry_of_the_wrong_types_is_dropped_and_the_good_keys_kept() -> None:
    good = make_key("good", "RSA").public_jwk()
    keys, reasons = parse_jwks({"keys": [rsa_jwk(kid="odd", alg=["RS256"]), good]})
    assert set(keys) == {"good"} and len(reasons) == 1


def test_each_key_type_allows_only_its_own_algorithms() -> None:
    document = {
        "keys": [
            make_key("rsa", "RSA").public_jwk(),
            make_key("ec", "EC").public_jwk(),
            make_key("ed", "OKP").public_jwk(),
            rsa_jwk(kid="pinned", alg="PS384"),
        ]
    }
    keys, reasons = parse_jwks(document)
    assert reasons == []
    assert keys["rsa"].algorithms == {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}
    assert keys["ec"].algorithms == {"ES256"}
    assert keys["ed"].algorithms == {"EdDSA"}
    assert keys["pinned"].algorithms == {"PS384"}


async def test_a_key_pinned_to_one_alg_refuses_the_others_of_its_family(
    auth_server: AuthServer, fetcher, clock: ManualWallClock
) -> None:
    signer = auth_server.keys["rsa-1"]
    url = "https://as.example/jwks"
    fake = FakeFetcher({url: HttpReply(200, {"keys": [signer.public_jwk() | {"alg": "PS256"}]})})
    from gateway.auth import IssuerSettings, build_authenticator
    from tests.auth.conftest import settings_for

    authenticator = build_authenticator(
        settings_for(
            auth_server, issuers=[IssuerSettings(issuer=auth_server.issuer, jwks_url=url)]
        ),
        fetcher=fake,
        clock=clock,
    )
    await authenticator.authenticate(bearer(auth_server, alg="PS256"))
    reason = await reason_of(authenticator, bearer(auth_server, alg="RS256"))
    assert "alg RS256 does not fit" in reason
