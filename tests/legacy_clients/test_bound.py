"""stdio and HTTP+SSE (2024-11-05) upstreams served to 2025 clients: each session a process
or a connection of its own, held by the replica that opened it. The official mcp 1.x
client gets through the gateway what it gets from the same server behind a Streamable
HTTP route (every tool, prompt and resource; elicitation, sampling and roots asked of it);
by hand on the wire: a process per session, DELETE, the process's death and the idle
bound ending the session with 404, the per-replica cap, a new GET stream replacing the
open one."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.legacy_clients.bound import BoundUpstream
from gateway.legacy_clients.lane import LegacyLane
from gateway.web.pipeline import Pipeline
from tests.legacy_clients.test_sdk_client import STEPS, run_script
from tests.peers.tooling import LegacyClient, LegacyServer, legacy_stdio_command
from tests.support.inprocess import Gateway
from tests.support.legacy_wire import call, initialize, open_session, send

pytestmark = pytest.mark.peers


def stdio_route(tmp_path: Path, **legacy: Any) -> dict[str, Any]:
    """A gateway whose /mcp route is the legacy test server as a stdio program."""
    route = {"upstream": {"command": legacy_stdio_command(tmp_path), "pool": {"min_idle": 0}}}
    return {**route, "legacy": legacy} if legacy else route


def lane(gateway: Gateway) -> LegacyLane:
    """The legacy lane of the gateway's route."""
    for resource in gateway.app.router.resources():
        for route in resource:
            endpoint = getattr(route.handler, "__self__", None)
            if isinstance(endpoint, Pipeline) and endpoint.legacy is not None:
                return endpoint.legacy
    raise AssertionError("no legacy lane")


def held(gateway: Gateway) -> BoundUpstream:
    """The route's table of sessions held here."""
    upstream = lane(gateway).upstream
    assert isinstance(upstream, BoundUpstream)
    return upstream


async def test_the_mcp_1_client_gets_from_a_stdio_or_sse_upstream_what_it_gets_over_http(
    make_gateway: Callable[..., Any],
    legacy_client: LegacyClient,
    sse_server: LegacyServer,
    tmp_path: Path,
) -> None:
    over_http: Gateway = await make_gateway()
    over_stdio: Gateway = await make_gateway(**stdio_route(tmp_path))
    over_sse: Gateway = await make_gateway(sse_server.url, upstream={"transport": "sse"})
    want = await run_script(legacy_client, over_http.url)
    for gateway in (over_stdio, over_sse):
        got = await run_script(legacy_client, gateway.url)
        assert got["get_stream"] and got["session_id"].startswith("lg1.")
        assert got["initialize"]["serverInfo"] == want["initialize"]["serverInfo"]
        for step, expected, answer in zip(STEPS, want["steps"], got["steps"], strict=True):
            assert answer == expected, step
        assert held(gateway).sessions == {}  # the client's DELETE ended it


async def test_each_session_is_a_process_of_its_own_and_ends_with_404_when_it_exits(
    make_gateway: Callable[..., Any], tmp_path: Path
) -> None:
    gateway: Gateway = await make_gateway(**stdio_route(tmp_path))
    table = held(gateway)
    first = await open_session(gateway.http, gateway.url)
    second = await open_session(gateway.http, gateway.url)
    links = [s.link for s in table.sessions.values()]
    pids = {getattr(link, "pid", None) for link in links}
    assert len(table.sessions) == 2 and len(pids) == 2 and None not in pids
    for session in (first, second):
        reply = await send(gateway.http, gateway.url, call("echo", text=session), session=session)
        assert reply.status == 200 and reply.last["result"]["content"][0]["text"] == session
    ended = await send(gateway.http, gateway.url, None, session=first, method="DELETE")
    assert ended.status == 200 and len(table.sessions) == 1
    gone = await send(gateway.http, gateway.url, call("echo", text="x"), session=first)
    assert gone.status == 404
    (survivor,) = table.sessions.values()
    proc = getattr(survivor.link, "proc")  # noqa: B009 - a StdioSession's process
    os.killpg(proc.pid, signal.SIGKILL)  # the server dies (its keeper's group: all of it)
    async with asyncio.timeout(10):
        await survivor.gone.wait()
    after = await send(gateway.http, gateway.url, call("echo", text="x"), session=second)
    assert after.status == 404  # the client starts over
    assert table.sessions == {}
    again = await open_session(gateway.http, gateway.url)
    echoed = await send(gateway.http, gateway.url, call("echo", text="back"), session=again)
    assert echoed.status == 200 and echoed.last["result"]["content"][0]["text"] == "back"


async def test_sessions_are_capped_per_replica_and_a_new_get_stream_replaces_the_old(
    make_gateway: Callable[..., Any], tmp_path: Path
) -> None:
    gateway: Gateway = await make_gateway(**stdio_route(tmp_path, max_bound_sessions=1))
    session = await open_session(gateway.http, gateway.url)
    async with gateway.http.get(gateway.server.make_url("/metrics")) as exposed:
        assert 'mrtr_legacy_bound_sessions{upstream="legacy"} 1.0' in await exposed.text()
    refused = await send(gateway.http, gateway.url, initialize())
    assert refused.status == 503
    assert refused.last["error"]["data"]["reason"] == "legacy.max_bound_sessions"
    headers = {"Accept": "text/event-stream", "Mcp-Session-Id": session}
    async with gateway.http.get(gateway.url, headers=headers) as first:
        assert first.status == 200
        async with gateway.http.get(gateway.url, headers=headers) as second:
            assert second.status == 200  # the client reconnected: its new stream wins
            async with asyncio.timeout(10):
                await first.read()  # the old one has ended
            assert not second.content.at_eof()
    await send(gateway.http, gateway.url, None, session=session, method="DELETE")
    assert (await send(gateway.http, gateway.url, initialize())).status == 200


async def test_a_draining_replica_opens_no_session_that_would_end_with_it(
    make_gateway: Callable[..., Any], tmp_path: Path
) -> None:
    gateway: Gateway = await make_gateway(**stdio_route(tmp_path))
    session = await open_session(gateway.http, gateway.url)
    lane(gateway).streams.end_all()  # what a drain does first
    refused = await send(gateway.http, gateway.url, initialize())
    assert refused.status == 503 and refused.last["error"]["data"]["reason"] == "draining"
    echoed = await send(gateway.http, gateway.url, call("echo", text="on"), session=session)
    assert echoed.status == 200  # its own sessions are served until it stops


async def test_a_session_unused_for_the_idle_bound_is_ended(
    make_gateway: Callable[..., Any], tmp_path: Path
) -> None:
    gateway: Gateway = await make_gateway(**stdio_route(tmp_path, bound_session_idle_s=0.5))
    table = held(gateway)
    # Initialized and then left unused: nothing more is sent before the sweep (a
    # `notifications/initialized` would race the half-second bound on a busy machine).
    opened_reply = await send(gateway.http, gateway.url, initialize())
    assert opened_reply.status == 200, opened_reply
    session = opened_reply.headers["Mcp-Session-Id"]
    (opened,) = table.sessions.values()
    async with asyncio.timeout(10):
        await opened.gone.wait()  # the sweep closed its process
    gone = await send(gateway.http, gateway.url, call("echo", text="x"), session=session)
    assert gone.status == 404 and table.sessions == {}
