"""The wiring (`gateway.app`, `gateway.compose`): each resource opens as the gateway
starts and closes as it stops, in reverse; a start that fails midway closes what had
opened, and the gateway never says it started."""

from __future__ import annotations

import asyncio

import pytest
from structlog.testing import capture_logs

from gateway.app import COMPONENTS, build_app
from gateway.fleet.single import SingleReplica
from gateway.web.serving import serve
from tests.support.inprocess import gateway_config
from tests.support.streamable import StreamableServer


def pool_tasks() -> set[str]:
    """The running tasks of the upstream pools (their reaper, their openers)."""
    return {t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("pool-")}


async def test_a_start_that_fails_after_the_upstream_pools_opened_closes_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    upstream = await StreamableServer().start()
    try:
        app = build_app(gateway_config(upstream.url))
        parts = app[COMPONENTS]
        names = [resource.name for resource in parts.resources]
        assert names.index("pool legacy") < names.index("bus")  # the pools open first
        running_at_failure: set[str] = set()

        def refuse(*args: object, **kwargs: object) -> None:
            running_at_failure.update(pool_tasks())
            raise RuntimeError("the bus refused to start")

        monkeypatch.setattr(SingleReplica, "start", refuse)
        with capture_logs() as logs, pytest.raises(RuntimeError, match="refused"):
            await serve(app, "127.0.0.1", 0, idle_timeout_s=75)
        assert "pool-reaper-legacy" in running_at_failure  # the pool had opened
        assert pool_tasks() == set()  # closed: its reaper and its openers stopped
        assert parts.pools["legacy"].size == 0
        events = [entry["event"] for entry in logs]
        assert "gateway_started" not in events
    finally:
        await upstream.stop()


async def test_a_gateway_stopped_closes_every_resource_it_opened() -> None:
    upstream = await StreamableServer().start()
    try:
        app = build_app(gateway_config(upstream.url))
        with capture_logs() as logs:
            served = await serve(app, "127.0.0.1", 0, idle_timeout_s=75)
            assert "pool-reaper-legacy" in pool_tasks()
            await served.close()
        assert pool_tasks() == set()
        assert "gateway_started" in [entry["event"] for entry in logs]
    finally:
        await upstream.stop()
