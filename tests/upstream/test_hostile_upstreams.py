"""Hostile legacy servers through the whole gateway (raw loopback sockets behind a real
app): each hostile answer to a tool call gets the client a clear 502 (-32603), never an
ERROR line or a traceback; the call after it gets its own answer on a clean connection,
never one smuggled by the server; and the gateway serves other requests meanwhile. A
slow drip ends at the round's `hold_timeout_s`."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from structlog.testing import capture_logs

from gateway.app import build_app
from gateway.web.serving import serve
from tests.http1.hostile import HOSTILE, Drip, Hostile, past_the_body
from tests.http1.servers import Server
from tests.support.inprocess import Gateway, gateway_config
from tests.support.wire import rpc
from tests.upstream.test_call_stream import SSE_HEAD, answer_handshake, body_of, chunk
from tests.upstream.test_sse_client import SseServer

LIMIT = 1 << 20  # limits.max_upstream_message_bytes here


def answer_to(rid: Any, text: str) -> bytes:
    result = {"content": [{"type": "text", "text": text}], "isError": False}
    return json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}).encode()


def json_answer(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


FirstCall = Callable[[asyncio.StreamWriter, Any], Awaitable[object]]


async def legacy(first_call: FirstCall) -> Server:
    """A Streamable HTTP legacy server: the handshake, no GET stream, no tools listed, the
    first tools/call answered by `first_call`, every later one with the text "real"."""
    calls = 0

    async def answer(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> object:
        nonlocal calls
        request = server.requests[-1]
        if request.startswith(b"GET"):
            writer.write(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n")
            return None
        if request.startswith(b"DELETE"):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            return None
        body = body_of(request)
        if body.get("method") == "tools/list":  # asked for the tools' declared headers
            listing = {"jsonrpc": "2.0", "id": body["id"], "result": {"tools": []}}
            writer.write(json_answer(json.dumps(listing).encode()))
            return None
        if body.get("method") != "tools/call":
            answer_handshake(writer, body)
            return None
        calls += 1
        if calls == 1:
            return await first_call(writer, body["id"])
        writer.write(json_answer(answer_to(body["id"], "real")))
        return None

    server = await Server().start(answer)
    return server


def hostile_first(hostile: Hostile) -> FirstCall:
    async def first(writer: asyncio.StreamWriter, rid: Any) -> object:
        return await hostile(writer, answer_to(rid, "hostile"))

    return first


@pytest.fixture
async def start_gateway() -> AsyncIterator[Callable[..., Awaitable[Gateway]]]:
    started: list[tuple[Any, aiohttp.ClientSession]] = []

    async def start(upstream_url: str, **overrides: Any) -> Gateway:
        overrides.setdefault("limits", {})
        overrides["limits"].setdefault("max_upstream_message_bytes", LIMIT)
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
def quiet(caplog: pytest.LogCaptureFixture) -> Any:
    """The gateway's log lines while the test runs; none may be an error (structlog's),
    and nothing at ERROR may reach the standard library's loggers (the loop's own
    "Fatal error: protocol.data_received() call failed", "never retrieved")."""
    with caplog.at_level(logging.ERROR), capture_logs() as logs:
        yield logs
    errors = [e for e in logs if e["log_level"] in ("error", "critical") or "exc_info" in e]
    records = caplog.get_records("setup") + caplog.get_records("call") + caplog.records
    assert errors == [] and [r.getMessage() for r in records if r.levelno >= logging.ERROR] == []


async def call(gateway: Gateway) -> tuple[int, dict[str, Any]]:
    status, reply, _ = await gateway.post(rpc("tools/call", {"name": "t", "arguments": {}}))
    if isinstance(reply, list):  # held long enough to become an SSE stream
        reply = reply[-1]
    return status, reply


async def served_meanwhile(gateway: Gateway) -> None:
    async with gateway.http.get(str(gateway.server.make_url("/healthz"))) as resp:
        assert resp.status == 200


async def upstream_errors(gateway: Gateway) -> dict[str, float]:
    """`mrtr_upstream_errors_total` of the upstream `legacy`, by kind, as scraped."""
    async with gateway.http.get(str(gateway.server.make_url("/metrics"))) as resp:
        text = await resp.text()
    found = re.findall(
        r'^mrtr_upstream_errors_total\{kind="(\w+)",upstream="legacy"\} (\S+)$', text, re.M
    )
    return {kind: float(value) for kind, value in found}


async def refused_then_clean(gateway: Gateway, upstream: Server) -> None:
    """The first call gets 502 (while /healthz is served) and is counted as the upstream's
    failure; the next gets its own answer."""
    first = asyncio.get_running_loop().create_task(call(gateway))
    await served_meanwhile(gateway)
    status, reply = await first
    assert status == 502 and reply["error"]["code"] == -32603, reply
    assert (await upstream_errors(gateway)).get("failed") == 1
    status, reply = await call(gateway)
    assert status == 200 and reply["result"]["content"][0]["text"] == "real", reply


@pytest.mark.parametrize("name", HOSTILE)
async def test_a_hostile_answer_to_a_call_is_a_502_and_the_next_call_is_served(
    start_gateway: Callable[..., Awaitable[Gateway]], quiet: Any, name: str
) -> None:
    upstream = await legacy(hostile_first(HOSTILE[name]))
    try:
        await refused_then_clean(await start_gateway(upstream.url), upstream)
    finally:
        await upstream.stop()


async def test_an_answer_smuggled_for_the_next_call_never_reaches_it(
    start_gateway: Callable[..., Awaitable[Gateway]], quiet: Any
) -> None:
    """Behind its answer the server writes a whole second answer, carrying the id the
    session's next request will have: had the connection been kept, the next call would
    read it as its own."""

    async def smuggle(writer: asyncio.StreamWriter, rid: Any) -> object:
        prefix, number = str(rid).rsplit("-", 1)
        following = f"{prefix}-{int(number) + 1}"
        hostile = past_the_body(answer_to(following, "smuggled"))
        return await hostile(writer, answer_to(rid, "hostile"))

    upstream = await legacy(smuggle)
    try:
        await refused_then_clean(await start_gateway(upstream.url), upstream)
    finally:
        await upstream.stop()


async def test_a_json_answer_to_another_request_is_a_502(
    start_gateway: Callable[..., Awaitable[Gateway]], quiet: Any
) -> None:
    async def misdirected(writer: asyncio.StreamWriter, rid: Any) -> None:
        writer.write(json_answer(answer_to(f"{rid}-not-this-one", "someone else's")))

    upstream = await legacy(misdirected)
    try:
        await refused_then_clean(await start_gateway(upstream.url), upstream)
    finally:
        await upstream.stop()


@pytest.mark.parametrize("depth", [300, 1_000])
async def test_an_answer_nested_deeper_than_the_gateway_writes_is_a_502(
    start_gateway: Callable[..., Awaitable[Gateway]], quiet: Any, depth: int
) -> None:
    """JSON the gateway could not write on (orjson writes 254 levels, the standard library
    runs out of stack near 1,000): refused where it is read, never a 500 later."""

    async def deep(writer: asyncio.StreamWriter, rid: Any) -> None:
        nested = b"[" * depth + b"]" * depth
        body = b'{"jsonrpc":"2.0","id":%s,"result":{"content":%s}}' % (
            json.dumps(rid).encode(),
            nested,
        )
        writer.write(json_answer(body))

    upstream = await legacy(deep)
    try:
        await refused_then_clean(await start_gateway(upstream.url), upstream)
    finally:
        await upstream.stop()


async def test_an_sse_event_past_the_bound_is_a_502(
    start_gateway: Callable[..., Awaitable[Gateway]], quiet: Any
) -> None:
    """A real answer, but larger than `max_upstream_message_bytes`, in pieces."""

    async def huge_line(writer: asyncio.StreamWriter, rid: Any) -> object:
        data = b"event: message\r\ndata: " + answer_to(rid, "x" * (3 * LIMIT)) + b"\r\n\r\n"
        writer.write(SSE_HEAD)
        for start in range(0, len(data), LIMIT // 4):
            writer.write(chunk(data[start : start + LIMIT // 4]))
        writer.write(b"0\r\n\r\n")
        return None

    upstream = await legacy(huge_line)
    try:
        await refused_then_clean(await start_gateway(upstream.url), upstream)
    finally:
        await upstream.stop()


async def test_an_sse_answer_within_the_bound_is_served_whole(
    start_gateway: Callable[..., Awaitable[Gateway]], quiet: Any
) -> None:
    text = "y" * (LIMIT - 1000)

    async def large(writer: asyncio.StreamWriter, rid: Any) -> object:
        data = answer_to(rid, text)
        writer.write(SSE_HEAD + chunk(b"event: message\r\ndata: " + data + b"\r\n\r\n"))
        writer.write(b"0\r\n\r\n")
        return None

    upstream = await legacy(large)
    try:
        status, reply = await call(await start_gateway(upstream.url))
        assert status == 200 and reply["result"]["content"][0]["text"] == text
    finally:
        await upstream.stop()


async def test_a_slow_drip_ends_at_the_hold_timeout_and_stalls_nothing(
    start_gateway: Callable[..., Awaitable[Gateway]], quiet: Any
) -> None:
    drip = Drip()

    async def dripping(writer: asyncio.StreamWriter, rid: Any) -> object:
        return await drip(writer, answer_to(rid, "never"))

    upstream = await legacy(dripping)
    try:
        gateway = await start_gateway(upstream.url, limits={"hold_timeout_s": 1})
        first = asyncio.get_running_loop().create_task(call(gateway))
        await drip.sent.wait()
        await served_meanwhile(gateway)
        assert not first.done()  # still dripping: only the round's bound ends it
        status, reply = await first
        assert status == 502 and "did not answer within 1 s" in reply["error"]["message"]
        assert (await upstream_errors(gateway)).get("timeout") == 1
        await drip.over.wait()  # the gateway let its connection go
        status, reply = await call(gateway)
        assert status == 200 and reply["result"]["content"][0]["text"] == "real", reply
    finally:
        drip.released.set()
        await upstream.stop()


async def test_an_sse_transport_event_past_the_bound_is_a_502_and_a_new_session_serves(
    start_gateway: Callable[..., Awaitable[Gateway]], quiet: Any
) -> None:
    """HTTP+SSE: the answer arrives on the session's stream; an event past the bound ends
    the stream, and with it the session: the call gets 502, the next a new session."""
    upstream = await SseServer().start()
    calls = 0

    def on_call(rid: Any) -> bytes:
        nonlocal calls
        calls += 1
        text = "x" * (LIMIT + 10) if calls == 1 else "real"  # a real answer, too large
        return chunk(b"event: message\r\ndata: " + answer_to(rid, text) + b"\r\n\r\n")

    upstream.on_call = on_call
    try:
        gateway = await start_gateway(upstream.url, upstream={"transport": "sse"})
        await refused_then_clean(gateway, upstream.server)
    finally:
        await upstream.stop()
