"""The gateway's own upstream token (client credentials) against the real test server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from gateway.auth import (
    ClientCredentials,
    ClientCredentialsSource,
    Secret,
    UpstreamCredentialsError,
    read_secret,
)
from gateway.auth.fetcher import AiohttpFetcher
from gateway.auth.jwks import JwksCache
from gateway.auth.tokens import JwtVerifier
from gateway.errors import ConfigError
from tests.auth.conftest import ManualWallClock
from tests.peers.auth_server import AuthServer

SECRET = "s3cr3t-with:colon&amp"
UPSTREAM = "https://legacy.internal/mcp"


def source_for(
    server: AuthServer, fetcher: AiohttpFetcher, clock: ManualWallClock, **overrides: Any
) -> ClientCredentialsSource:
    server.clients["gateway"] = SECRET
    values: dict[str, Any] = {
        "token_url": server.token_url,
        "client_id": "gateway",
        "secret": Secret(SECRET),
        "scope": "legacy:call",
        "resource": UPSTREAM,
    }
    values.update(overrides)
    return ClientCredentialsSource(ClientCredentials(**values), fetcher=fetcher, clock=clock)


async def test_the_token_is_fetched_once_and_is_valid_for_the_upstream(
    auth_server: AuthServer, fetcher: AiohttpFetcher, clock: ManualWallClock
) -> None:
    source = source_for(auth_server, fetcher, clock)
    token = await source.token()
    assert await source.token() == token
    assert await source.authorization() == "Bearer " + token
    assert len(auth_server.token_requests) == 1
    form = auth_server.token_requests[0]
    assert form == {
        "grant_type": "client_credentials",
        "scope": "legacy:call",
        "resource": UPSTREAM,
        "_auth": "basic",
    }
    cache = JwksCache(issuer=auth_server.issuer, fetcher=fetcher, clock=clock)
    verifier = JwtVerifier(issuers=[cache], audiences=[UPSTREAM], clock=clock)
    identity = await verifier.verify(token)
    assert identity.principal.subject == "gateway" and identity.scopes == {"legacy:call"}


async def test_the_token_is_refreshed_shortly_before_it_expires(
    auth_server: AuthServer, fetcher: AiohttpFetcher, clock: ManualWallClock
) -> None:
    auth_server.token_lifetime_s = 600
    source = source_for(auth_server, fetcher, clock)
    first = await source.token()
    clock.advance(600 - 60 - 1)
    assert await source.token() == first
    clock.advance(1)
    assert await source.token() != first
    assert len(auth_server.token_requests) == 2


async def test_a_short_lived_token_is_refreshed_half_way(
    auth_server: AuthServer, fetcher: AiohttpFetcher, clock: ManualWallClock
) -> None:
    auth_server.token_lifetime_s = 30
    source = source_for(auth_server, fetcher, clock)
    await source.token()
    clock.advance(14)
    await source.token()
    clock.advance(1)
    await source.token()
    assert len(auth_server.token_requests) == 2


async def test_invalidate_fetches_on_demand_and_concurrent_callers_share_one_fetch(
    auth_server: AuthServer, fetcher: AiohttpFetcher, clock: ManualWallClock
) -> None:
    source = source_for(auth_server, fetcher, clock)
    tokens = await asyncio.gather(*(source.token() for _ in range(10)))
    assert len(set(tokens)) == 1 and len(auth_server.token_requests) == 1
    source.invalidate()
    assert await source.token() != tokens[0]
    assert len(auth_server.token_requests) == 2


async def test_client_secret_post_sends_the_credentials_in_the_form(
    auth_server: AuthServer, fetcher: AiohttpFetcher, clock: ManualWallClock
) -> None:
    source = source_for(
        auth_server,
        fetcher,
        clock,
        auth_method="client_secret_post",
        resource=None,
        audience="legacy-api",
    )
    await source.token()
    assert auth_server.token_requests[0] == {
        "grant_type": "client_credentials",
        "scope": "legacy:call",
        "audience": "legacy-api",
        "client_id": "gateway",
        "_auth": "post",
    }


async def test_a_refused_or_unreachable_token_endpoint_never_shows_the_secret(
    auth_server: AuthServer, fetcher: AiohttpFetcher, clock: ManualWallClock
) -> None:
    source = source_for(auth_server, fetcher, clock)
    auth_server.clients["gateway"] = "another"
    with capture_logs() as logs, pytest.raises(UpstreamCredentialsError) as refused:
        await source.token()
    assert refused.value.status == 502
    assert "401 (invalid_client)" in refused.value.message
    assert [entry["event"] for entry in logs] == ["upstream_token_refused"]
    assert logs[0]["error"] == "invalid_client"

    await auth_server.down()
    with capture_logs() as more, pytest.raises(UpstreamCredentialsError) as unreachable:
        await source.token()
    assert "unreachable" in unreachable.value.message
    for text in (repr(logs), repr(more), str(refused.value), str(unreachable.value)):
        assert SECRET not in text
    assert SECRET not in repr(source.credentials)


def test_the_secret_comes_from_a_file_or_an_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")
    monkeypatch.setenv("UPSTREAM_SECRET", SECRET)
    assert read_secret(file=str(path), what="u").reveal() == SECRET
    assert read_secret(env="UPSTREAM_SECRET", what="u").reveal() == SECRET
    assert SECRET not in repr(read_secret(env="UPSTREAM_SECRET", what="u"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of"),
        ({"file": "/nonexistent/secret", "env": "X"}, "exactly one of"),
        ({"file": "/nonexistent/secret"}, "cannot be read"),
        ({"env": "MRTR_TEST_UNSET_SECRET"}, "is empty or unset"),
    ],
)
def test_a_missing_secret_fails_at_startup_naming_its_source(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        read_secret(what="upstreams[0].auth.client_secret", **kwargs)
    assert str(caught.value).startswith("upstreams[0].auth.client_secret")


def test_the_token_endpoint_must_be_https_off_loopback() -> None:
    with pytest.raises(ConfigError, match="token_url"):
        ClientCredentials(token_url="http://as.example/token", client_id="g", secret=Secret("x"))
