"""What outlives one request upstream (a kept-alive connection, whose callbacks read
every later call's stream) runs in the context of none of the requests it served, so
it logs as none of them (structlog's `request_id`, `call_id` are context variables)."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator

import pytest

from gateway.http1 import Http1Client
from tests.http1.servers import Server
from tests.upstream.test_call_stream import SSE_HEAD, chunk

REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="none")


@pytest.fixture
async def http() -> AsyncIterator[Http1Client]:
    client = Http1Client()
    yield client
    await client.close()


class Sink:
    """A `BodySink` noting the context each piece of the body was handed over in."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.ended = asyncio.Event()

    def data(self, _chunk: bytes) -> None:
        self.seen.append(REQUEST.get())

    def end(self, error: BaseException | None) -> None:
        self.ended.set()


async def test_a_kept_alive_connection_reads_in_the_context_of_no_request(
    http: Http1Client,
) -> None:
    go_on = asyncio.Event()

    async def stream(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        writer.write(SSE_HEAD)
        await writer.drain()
        if n > 1:
            await go_on.wait()  # the body comes after the head: read by callbacks
        writer.write(chunk(b"data: {}\n\n") + b"0\r\n\r\n")

    server = await Server().start(stream)
    try:
        REQUEST.set("the-first-request")
        async with await http.request("POST", server.url, {}, b"{}", connect_timeout_s=5) as r:
            await r.read()
        REQUEST.set("a-later-request")
        resp = await http.request("POST", server.url, {}, b"{}", connect_timeout_s=5)
        sink = Sink()
        resp.stream_into(sink)
        go_on.set()
        await asyncio.wait_for(sink.ended.wait(), 5)
        assert server.connections == 1  # the later request went on the first one's
        assert sink.seen and "the-first-request" not in sink.seen, sink.seen
    finally:
        await server.stop()
