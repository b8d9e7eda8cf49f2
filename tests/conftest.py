"""Shared fixtures: real peers (legacy mcp 1.x server, modern mcp 2.x client), a real
redis-server, and the gateway.

The gateway runs in the test's event loop on a real loopback port, served as
`mrtr-gateway serve` serves it (`gateway.web.serving.serve`: aiohttp's runner and
site), so subprocess peers can reach it and tests can look inside it. Helpers live
in tests/support/, processes in tests/peers/tooling.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import aiohttp
import pytest
from hypothesis import settings

from gateway.app import build_app
from gateway.web.serving import Served, serve
from tests.peers.tooling import (
    PINS,
    LegacyClient,
    LegacyServer,
    ModernClient,
    RedisServer,
    ensure_venv,
)

# `Gateway`, `drive`, `PROTOCOL`, `default_headers` and `rpc` are re-exported for the
# modules that still import them from here (tests/test_cli.py,
# tests/integration/test_robustness.py, tests/web/test_front_errors.py); new code
# imports them from tests.support. Nothing else belongs here but fixtures.
from tests.support.cases import drive as drive
from tests.support.inprocess import Gateway, gateway_config
from tests.support.wire import PROTOCOL as PROTOCOL
from tests.support.wire import default_headers as default_headers
from tests.support.wire import rpc as rpc

# Property-based tests run the same examples on every run and machine (no example
# database, derandomized), and a busy machine's timings are not what they check.
settings.register_profile("repeatable", derandomize=True, database=None, deadline=None)
settings.load_profile("repeatable")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Each phase's report on the test (`report_setup`, `report_call`): a fixture that
    owns processes can tell at teardown whether the test failed (`tests.support.outcome`)."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


def pytest_collection_finish(session: pytest.Session) -> None:
    """The peer venvs are made (the first time, pip takes minutes) before any test runs,
    where the tests need them: not inside the first one's time bound (pytest-timeout)."""
    if session.config.option.collectonly:
        return
    if any(
        item.get_closest_marker("peers")
        or {"legacy", "modern"} & set(getattr(item, "fixturenames", ()))
        for item in session.items
    ):
        for kind in PINS:
            ensure_venv(kind)


@pytest.fixture(scope="session")
def legacy() -> Iterator[LegacyServer]:
    server = LegacyServer()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def legacy_client() -> Iterator[LegacyClient]:
    """The official mcp 1.x client (2025), driven a command at a time."""
    client = LegacyClient()
    yield client
    client.stop()


@pytest.fixture(scope="session")
def modern() -> Iterator[ModernClient]:
    client = ModernClient()
    yield client
    client.stop()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One real redis-server for the session: each test keeps to a key prefix of its own."""
    server = RedisServer()
    yield server
    server.stop()


@pytest.fixture
async def make_gateway(legacy: LegacyServer) -> AsyncIterator[Callable[..., Any]]:
    started: list[tuple[Served, aiohttp.ClientSession]] = []

    async def start(upstream_url: str | None = None, **overrides: Any) -> Gateway:
        upstream_url = upstream_url or legacy.url
        config = gateway_config(upstream_url, **overrides)
        server = await serve(
            build_app(config), "127.0.0.1", 0, idle_timeout_s=config.limits.idle_timeout_s
        )
        http = aiohttp.ClientSession()
        started.append((server, http))
        return Gateway(server, http, upstream_url)

    yield start
    for server, http in started:
        await http.close()
        await server.close()


@pytest.fixture
async def gateway(make_gateway: Callable[..., Any]) -> Gateway:
    gw: Gateway = await make_gateway()
    return gw


@pytest.fixture(scope="session", autouse=True)
def no_stdio_server_outlives_the_tests() -> Iterator[None]:
    """Every stdio server any test started (under its keeper) has ended when the run ends."""
    yield
    import os
    import select
    from pathlib import Path

    keeper = str(Path(__file__).resolve().parents[1] / "gateway/upstream/stdio/keeper.py")
    left = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if keeper in (entry / "cmdline").read_bytes().decode(errors="replace"):
                left.append(int(entry.name))
        except OSError:
            continue
    survivors = []
    for pid in left:  # each gets a moment to finish ending (an event: its pidfd)
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            if not select.select([fd], [], [], 10)[0]:
                survivors.append(pid)
        finally:
            os.close(fd)
    assert survivors == [], f"stdio servers still running after the tests: {survivors}"
