"""Fixtures for the identity core: a hand-moved wall clock and a real authorization server.

The server (tests/peers/auth_server.py) runs in the test's event loop on a free
loopback port and reads the same clock as the code under test, so token times,
key refresh intervals and token caching move only when a test says so.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from gateway.auth import Authenticator, IssuerSettings, RouteAuthSettings
from gateway.auth.build import build_authenticator
from gateway.auth.fetcher import AiohttpFetcher
from gateway.auth.ports import HttpReply
from tests.peers.auth_server import AUDIENCE, AuthServer

START = 1_800_000_000.0
PUBLIC_URL = "http://127.0.0.1:8000"
PATH = "/mcp"
assert PUBLIC_URL + PATH == AUDIENCE
PRM_URL = "http://127.0.0.1:8000/.well-known/oauth-protected-resource/mcp"


class ManualWallClock:
    """Wall seconds that move only on `advance`."""

    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> ManualWallClock:
    return ManualWallClock()


@pytest.fixture
async def auth_server(clock: ManualWallClock) -> AsyncIterator[AuthServer]:
    server = await AuthServer(clock=clock).start()
    yield server
    await server.stop()


@pytest.fixture
async def fetcher() -> AsyncIterator[AiohttpFetcher]:
    fetcher = AiohttpFetcher(timeout_s=5.0)
    yield fetcher
    await fetcher.close()


def settings_for(server: AuthServer, **overrides: Any) -> RouteAuthSettings:
    values: dict[str, Any] = {
        "public_url": PUBLIC_URL,
        "path": PATH,
        "issuers": [IssuerSettings(issuer=server.issuer)],
        "scopes": ["mcp:tools"],
        "refresh_interval_s": 15.0,
    }
    values.update(overrides)
    return RouteAuthSettings(**values)


@pytest.fixture
def authenticator(
    auth_server: AuthServer, fetcher: AiohttpFetcher, clock: ManualWallClock
) -> Authenticator:
    return build_authenticator(settings_for(auth_server), fetcher=fetcher, clock=clock)


class FakeFetcher:
    """An in-memory `HttpFetcher`: scripted replies per URL, every request recorded."""

    def __init__(self, replies: dict[str, HttpReply | Exception] | None = None) -> None:
        self.replies = dict(replies or {})
        self.requests: list[tuple[str, str, dict[str, str], tuple[str, str] | None]] = []

    def _answer(self, url: str) -> HttpReply:
        reply = self.replies.get(url, HttpReply(404, None))
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def get_json(self, url: str) -> HttpReply:
        self.requests.append(("GET", url, {}, None))
        return self._answer(url)

    async def post_form(
        self, url: str, form: Mapping[str, str], *, basic_auth: tuple[str, str] | None = None
    ) -> HttpReply:
        self.requests.append(("POST", url, dict(form), basic_auth))
        return self._answer(url)

    def count(self, url: str) -> int:
        return sum(1 for _, seen, _, _ in self.requests if seen == url)
