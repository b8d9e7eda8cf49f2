"""An HTTP+SSE session over the gateway's HTTP/1.1 client, against scripted loopback
servers: its stream read by the connection's callbacks, no cookie ever carried between
upstreams, and a stream that breaks its bound ending the session, not the process."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.errors import UpstreamError
from gateway.http1 import Http1Client
from gateway.protocol.capabilities import ClientCaps
from gateway.upstream.http.wire import Endpoint
from gateway.upstream.port import Inbox, StreamCursor, StreamEnd
from gateway.upstream.sse.session import SseSession
from tests.http1.servers import Server

INIT = {"protocolVersion": "2025-03-26", "capabilities": {}, "serverInfo": {"name": "s"}}


@pytest.fixture
async def http() -> AsyncIterator[Http1Client]:
    client = Http1Client()
    yield client
    await client.close()


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class SseServer:
    """An HTTP+SSE server: each GET /sse holds a session's stream (after `endpoint`), each
    POST to that session's /messages is answered 202 and its response, if any, sent on
    the stream; `on_call` writes the stream's bytes for a tools/call instead."""

    def __init__(self, cookie: str | None = None) -> None:
        self.cookie = cookie
        self.streams: list[asyncio.StreamWriter] = []
        self.on_call: Any = None
        self.server = Server()

    async def start(self) -> SseServer:
        await self.server.start(self.answer)
        return self

    @property
    def url(self) -> str:
        return self.server.url.replace("/mcp", "/sse")

    async def answer(self, _r: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> Any:
        request = self.server.requests[-1]
        cookie = b"set-cookie: session=%s\r\n" % self.cookie.encode() if self.cookie else b""
        if request.startswith(b"GET"):
            self.streams.append(writer)
            where = b"/messages?session_id=%d" % (len(self.streams) - 1)
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n%s"
                b"transfer-encoding: chunked\r\n\r\n"
                % cookie
                + chunk(b"event: endpoint\r\ndata: %s\r\n\r\n" % where)
            )
            return None  # the stream stays open: nothing more is read on it
        writer.write(b"HTTP/1.1 202 Accepted\r\n%scontent-length: 0\r\n\r\n" % cookie)
        session = int(request.split(b" ", 2)[1].rsplit(b"=", 1)[1])
        stream = self.streams[session]
        body = json.loads(request.split(b"\r\n\r\n", 1)[1])
        if body.get("method") == "tools/call":
            stream.write(self.on_call(body["id"]))
        elif "id" in body and "method" in body:
            result = INIT if body["method"] == "initialize" else {"tools": []}
            reply = json.dumps({"jsonrpc": "2.0", "id": body["id"], "result": result}).encode()
            stream.write(chunk(b"event: message\r\ndata: %s\r\n\r\n" % reply))
        return None

    async def stop(self) -> None:
        await self.server.stop()


def session_of(http: Http1Client, server: SseServer, **more: Any) -> SseSession:
    return SseSession(http, Endpoint("u", server.url, {}, timeout_s=5, **more), ClientCaps())


async def test_a_session_opens_over_its_stream_and_posts_where_the_endpoint_says(
    http: Http1Client,
) -> None:
    server = await SseServer().start()
    session = session_of(http, server)
    try:
        info = await session.open()
        assert info.protocol_version == "2025-03-26"
        assert session.post_url is not None and session.post_url.endswith("/messages?session_id=0")
        posts = [r for r in server.server.requests if r.startswith(b"POST")]
        assert [json.loads(p.split(b"\r\n\r\n", 1)[1])["method"] for p in posts] == [
            "initialize",
            "notifications/initialized",
        ]
        assert posts[0].startswith(b"POST /messages?session_id=0 HTTP/1.1\r\n")
    finally:
        await session.close()
        await server.stop()


async def test_a_cookie_one_upstream_sets_never_reaches_another(http: Http1Client) -> None:
    """One client serves every upstream: a cookie one sets is never sent anywhere (the
    client keeps no jar), so it cannot follow the gateway to another upstream."""
    first, second = await SseServer(cookie="upstream-a-secret").start(), await SseServer().start()
    sessions = [session_of(http, first), session_of(http, second)]
    try:
        for session in sessions:
            await session.open()
        await sessions[0].send({"jsonrpc": "2.0", "method": "notifications/x"})
        for request in first.server.requests + second.server.requests:
            assert b"cookie" not in request.lower()
    finally:
        for session in sessions:
            await session.close()
        await first.stop()
        await second.stop()


async def test_an_event_past_the_bound_ends_the_session_and_fails_its_call(
    http: Http1Client,
) -> None:
    server = await SseServer().start()
    server.on_call = lambda rid: chunk(b"event: message\r\ndata: " + b"x" * 200_000)
    session = session_of(http, server, max_message_bytes=100_000)
    lost: list[UpstreamError] = []
    try:
        await session.open()
        session.on_lost = lost.append
        inbox = Inbox()
        rid = session.next_id()
        call = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": "t"}}
        await session.start(call, inbox, StreamCursor())
        end = await asyncio.wait_for(inbox.get(), 5)
        assert isinstance(end, StreamEnd) and "is over 100000 bytes" in str(end.error)
        assert not session.alive and len(lost) == 1
    finally:
        await session.close()
        await server.stop()


async def test_an_endpoint_on_another_origin_is_refused(http: Http1Client) -> None:
    server = await SseServer().start()
    session = session_of(http, server)
    with pytest.raises(UpstreamError, match="another origin"):
        session._endpoint_url("http://elsewhere.example/messages")
    await server.stop()
