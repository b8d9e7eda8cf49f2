"""Fixtures of the in-process tier: the call core on a manual clock and a scripted upstream."""

from __future__ import annotations

import pytest

from tests.fakes.clock import ManualClock
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
