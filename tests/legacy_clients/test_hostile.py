"""Hostile legacy servers behind the legacy lane (raw loopback sockets): each hostile
answer to a 2025 client's call gets it a clear error (502, -32603), never a 500, an ERROR
line or a traceback; the next call of the same session gets its own answer on a clean
connection; a stream the server breaks before its response ends with an error for it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from gateway.app import build_app
from gateway.web.serving import serve
from tests.http1.hostile import HOSTILE
from tests.support.inprocess import Gateway, gateway_config
from tests.support.legacy_wire import call, open_session, send
from tests.upstream.test_call_stream import SSE_HEAD, chunk
from tests.upstream.test_hostile_upstreams import LIMIT, answer_to, hostile_first, legacy, quiet

__all__ = ["quiet"]  # a fixture of the 2026 lane's hostile tests, used here too


@pytest.fixture
async def start_gateway() -> AsyncIterator[Callable[..., Awaitable[Gateway]]]:
    started: list[tuple[Any, aiohttp.ClientSession]] = []

    async def start(upstream_url: str) -> Gateway:
        config = gateway_config(upstream_url, limits={"max_upstream_message_bytes": LIMIT})
        server = await serve(build_app(config), "127.0.0.1", 0, idle_timeout_s=75)
        http = aiohttp.ClientSession()
        started.append((server, http))
        return Gateway(server, http, upstream_url)

    yield start
    for server, http in started:
        await http.close()
        await server.close()


async def refused_then_clean(gateway: Gateway) -> dict[str, Any]:
    session = await open_session(gateway.http, gateway.url)
    first = await send(gateway.http, gateway.url, call("t", rid=1), session=session)
    assert first.status in (200, 502), first
    assert first.last["id"] == 1 and first.last["error"]["code"] == -32603, first
    then = await send(gateway.http, gateway.url, call("t", rid=2), session=session)
    assert then.status == 200 and then.last["result"]["content"][0]["text"] == "real", then
    return {"first": first}


@pytest.mark.parametrize("name", HOSTILE)
async def test_a_hostile_answer_is_a_clear_error_and_the_next_call_is_served(
    start_gateway: Callable[..., Awaitable[Gateway]], quiet: Any, name: str
) -> None:
    upstream = await legacy(hostile_first(HOSTILE[name]))
    try:
        await refused_then_clean(await start_gateway(upstream.url))
    finally:
        await upstream.stop()


@pytest.mark.parametrize("cut", ["mid-event", "before any event", "an event too large"])
async def test_a_stream_broken_before_its_response_ends_with_an_error_for_it(
    start_gateway: Callable[..., Awaitable[Gateway]], quiet: Any, cut: str
) -> None:
    async def broken(writer: asyncio.StreamWriter, rid: Any) -> object:
        writer.write(SSE_HEAD)
        progress = {"jsonrpc": "2.0", "method": "notifications/progress",
                    "params": {"progressToken": 1, "progress": 1}}  # fmt: skip
        writer.write(chunk(b"event: message\ndata: " + json.dumps(progress).encode() + b"\n\n"))
        if cut == "mid-event":
            writer.write(chunk(b'event: message\ndata: {"jsonrpc"'))
        elif cut == "an event too large":
            writer.write(chunk(b"data: " + answer_to(rid, "x" * 2 * LIMIT) + b"\n\n"))
        await writer.drain()
        writer.close()
        return None

    upstream = await legacy(broken)
    try:
        answers = await refused_then_clean(await start_gateway(upstream.url))
        first = answers["first"]
        assert first.status == 200 and first.messages[0]["method"] == "notifications/progress"
    finally:
        await upstream.stop()


@pytest.mark.parametrize("before", ["its head only", "a priming event"])
async def test_a_stream_broken_before_its_first_message_ends_as_one_broken_later(
    start_gateway: Callable[..., Awaitable[Gateway]], quiet: Any, before: str
) -> None:
    """The head of a POST's stream waits for its first message; a stream that breaks
    first still reaches the client as a stream: with an error for the request when it gave
    no event id, and with the events it gave (a priming event's id, to resume from) when
    it did."""

    async def broken(writer: asyncio.StreamWriter, rid: Any) -> object:
        writer.write(SSE_HEAD)
        if before == "a priming event":
            writer.write(chunk(b"id: stream-1:0\nevent: message\ndata: \n\n"))
        await writer.drain()
        writer.close()
        return None

    upstream = await legacy(broken)
    try:
        gateway = await start_gateway(upstream.url)
        session = await open_session(gateway.http, gateway.url)
        first = await send(gateway.http, gateway.url, call("t", rid=1), session=session)
        assert first.status == 200
        assert first.headers["Content-Type"].startswith("text/event-stream")
        if before == "its head only":
            assert first.last["id"] == 1 and first.last["error"]["code"] == -32603
        else:  # the client resumes it (GET with Last-Event-ID): no error is made up
            assert first.raw.startswith(b"id: stream-1:0\n") and first.messages == []
        then = await send(gateway.http, gateway.url, call("t", rid=2), session=session)
        assert then.status == 200 and then.last["result"]["content"][0]["text"] == "real"
    finally:
        await upstream.stop()
