"""Fixtures of the legacy lane's tests: the official mcp 1.x client as a long-lived peer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.peers.tooling import LegacyClient


@pytest.fixture(scope="session")
def legacy_client() -> Iterator[LegacyClient]:
    client = LegacyClient()
    yield client
    client.stop()
