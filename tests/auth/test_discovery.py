"""From an issuer to its keys: RFC 8414 first, OpenID next, only safe URLs, and only its own."""

from __future__ import annotations

import pytest

from gateway.auth import AuthUnavailable, IssuerSettings, build_authenticator, require_secure_url
from gateway.auth.discovery import DiscoveryError, discover_jwks_uri, metadata_candidates
from gateway.auth.fetcher import AiohttpFetcher
from gateway.errors import ConfigError
from tests.auth.conftest import ManualWallClock, settings_for
from tests.peers.auth_server import AuthServer


def test_candidates_follow_the_order_the_spec_gives_clients() -> None:
    assert metadata_candidates("https://as.example") == [
        "https://as.example/.well-known/oauth-authorization-server",
        "https://as.example/.well-known/openid-configuration",
    ]
    assert metadata_candidates("https://as.example/tenant/") == [
        "https://as.example/.well-known/oauth-authorization-server/tenant",
        "https://as.example/.well-known/openid-configuration/tenant",
        "https://as.example/tenant/.well-known/openid-configuration",
    ]


@pytest.mark.parametrize(
    ("issuer_path", "oauth", "oidc", "metadata_fetches"),
    [
        ("", True, True, 1),  # RFC 8414 answers first
        ("", False, True, 2),  # OpenID after an RFC 8414 404
        ("/tenant", True, False, 1),  # path-inserted RFC 8414
        ("/tenant", False, True, 2),  # path-inserted OpenID
    ],
)
async def test_the_jwks_is_found_through_the_issuers_metadata(
    clock: ManualWallClock,
    fetcher: AiohttpFetcher,
    issuer_path: str,
    oauth: bool,
    oidc: bool,
    metadata_fetches: int,
) -> None:
    server = AuthServer(
        clock=clock, issuer_path=issuer_path, oauth_metadata=oauth, oidc_metadata=oidc
    )
    await server.start()
    try:
        authenticator = build_authenticator(settings_for(server), fetcher=fetcher, clock=clock)
        identity = await authenticator.authenticate("Bearer " + server.sign())
        assert identity.principal.issuer == server.issuer
        assert server.metadata_fetches == metadata_fetches
        assert server.jwks_fetches == 1
    finally:
        await server.stop()


async def test_openid_appended_to_an_issuer_path_is_the_last_resort(
    clock: ManualWallClock, fetcher: AiohttpFetcher
) -> None:
    server = await AuthServer(clock=clock, issuer_path="/tenant", oauth_metadata=False).start()
    server.oidc_inserted = False  # only <issuer>/.well-known/openid-configuration answers
    try:
        assert await discover_jwks_uri(fetcher, server.issuer) == server.jwks_url
        assert server.metadata_fetches == 3
    finally:
        await server.stop()


async def test_a_configured_jwks_url_skips_discovery(
    auth_server: AuthServer, fetcher: AiohttpFetcher, clock: ManualWallClock
) -> None:
    issuers = [IssuerSettings(issuer=auth_server.issuer, jwks_url=auth_server.jwks_url)]
    authenticator = build_authenticator(
        settings_for(auth_server, issuers=issuers), fetcher=fetcher, clock=clock
    )
    await authenticator.authenticate("Bearer " + auth_server.sign())
    assert auth_server.metadata_fetches == 0 and auth_server.jwks_fetches == 1


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        ({"issuer": "http://127.0.0.1:1/other"}, "names another issuer"),
        ({"jwks_uri": "http://keys.example/jwks"}, "must use https"),
        ({"jwks_uri": None}, "no jwks_uri"),
    ],
)
async def test_metadata_of_another_issuer_or_with_an_unsafe_jwks_uri_is_not_used(
    auth_server: AuthServer,
    fetcher: AiohttpFetcher,
    clock: ManualWallClock,
    overrides: dict,
    why: str,
) -> None:
    auth_server.metadata_overrides = overrides
    with pytest.raises(DiscoveryError, match=why):
        await discover_jwks_uri(fetcher, auth_server.issuer)
    authenticator = build_authenticator(settings_for(auth_server), fetcher=fetcher, clock=clock)
    with pytest.raises(AuthUnavailable):
        await authenticator.authenticate("Bearer " + auth_server.sign())
    assert auth_server.jwks_fetches == 0


async def test_a_jwks_url_that_redirects_is_not_followed(
    auth_server: AuthServer, fetcher: AiohttpFetcher, clock: ManualWallClock
) -> None:
    redirect = auth_server.base + "/redirect-jwks"
    issuers = [IssuerSettings(issuer=auth_server.issuer, jwks_url=redirect)]
    authenticator = build_authenticator(
        settings_for(auth_server, issuers=issuers), fetcher=fetcher, clock=clock
    )
    with pytest.raises(AuthUnavailable):
        await authenticator.authenticate("Bearer " + auth_server.sign())
    assert auth_server.jwks_fetches == 0


@pytest.mark.parametrize(
    "url",
    [
        "https://as.example",
        "https://as.example/tenant",
        "http://127.0.0.1:8080",
        "http://127.9.9.9/x",
        "http://[::1]:8080/",
        "http://localhost:9000",
    ],
)
def test_https_or_loopback_urls_are_accepted(url: str) -> None:
    assert require_secure_url(url, "auth.issuers[0].issuer") == url


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://as.example", "must use https"),
        ("http://10.0.0.1", "must use https"),
        ("http://localhost.evil.example", "must use https"),
        ("http://127.0.0.1.nip.io", "must use https"),
        ("ftp://as.example", "absolute https:// URL"),
        ("as.example", "absolute https:// URL"),
        ("https://user:pw@as.example", "credentials"),
        ("https://as.example/#x", "fragment"),
        ("https://as.example:99999", "not a valid URL"),
        ("https://as.example/a|b", "'|'"),
    ],
)
def test_other_urls_are_refused_naming_the_key(url: str, why: str) -> None:
    with pytest.raises(ConfigError, match="auth.issuers\\[0\\].issuer") as caught:
        require_secure_url(url, "auth.issuers[0].issuer")
    assert why in str(caught.value)


def test_building_with_an_http_issuer_off_loopback_fails_at_startup(
    fetcher: AiohttpFetcher,
) -> None:
    from gateway.auth import RouteAuthSettings

    settings = RouteAuthSettings(
        public_url="https://mcp.example.com",
        path="/mcp",
        issuers=[IssuerSettings(issuer="http://as.example")],
        where="routes[0].auth",
    )
    with pytest.raises(ConfigError, match=r"routes\[0\]\.auth\.issuers\[0\]\.issuer"):
        build_authenticator(settings, fetcher=fetcher)


async def test_priming_loads_each_issuer_and_never_raises(
    auth_server: AuthServer, fetcher: AiohttpFetcher, clock: ManualWallClock
) -> None:
    from gateway.auth import prime

    authenticator = build_authenticator(settings_for(auth_server), fetcher=fetcher, clock=clock)
    assert await prime(authenticator) == {auth_server.issuer: True}
    assert auth_server.jwks_fetches == 1
    await authenticator.authenticate("Bearer " + auth_server.sign())
    assert auth_server.jwks_fetches == 1

    await auth_server.down()
    cold = build_authenticator(settings_for(auth_server), fetcher=fetcher, clock=clock)
    assert await prime(cold) == {auth_server.issuer: False}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"issuers": [], "api_keys": None}, "give issuers (OAuth), an API keys file, or both"),
        ({"public_url": "http://mcp.example.com"}, "routes[1].auth.public_url"),
        ({"path": "mcp"}, "must start with '/'"),
        ({"refresh_interval_s": 120}, "refresh_interval_s must be between 1 and 60"),
        ({"leeway_s": -1}, "leeway_s must be between 0 and 300"),
    ],
)
def test_route_settings_are_checked_without_building_anything(changes: dict, message: str) -> None:
    from dataclasses import replace

    from gateway.auth import RouteAuthSettings, check_route_settings

    good = RouteAuthSettings(
        public_url="https://mcp.example.com",
        path="/mcp",
        issuers=[IssuerSettings(issuer="https://as.example")],
        where="routes[1].auth",
    )
    check_route_settings(good)
    twice = replace(good, issuers=[*good.issuers, *good.issuers])
    with pytest.raises(ConfigError, match="listed twice"):
        check_route_settings(twice)
    with pytest.raises(ConfigError) as caught:
        check_route_settings(replace(good, **changes))
    assert message in str(caught.value)
