"""Fixtures of the in-process tier: the call core on a manual clock and a scripted upstream."""

from __future__ import annotations

import pytest

from tests.fakes.clock import ManualClock
from tests.fakes.fleet import Network
from tests.fakes.harness import Replica
from tests.fakes.upstream import ScriptedServer


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def server() -> ScriptedServer:
    return ScriptedServer()


@pytest.fixture
def replica(clock: ManualClock, server: ScriptedServer) -> Replica:
    return Replica(clock, server)


@pytest.fixture
def network(clock: ManualClock) -> Network:
    return Network(clock)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A regression here hangs on an event that never comes: fail it in seconds instead."""
    for item in items:
        if item.path.parent.name == "calls":
            item.add_marker(pytest.mark.timeout(10))
