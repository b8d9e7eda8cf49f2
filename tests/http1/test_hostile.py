"""The client alone against hostile servers (raw loopback sockets): each hostile answer is
refused with a clear error (a ValueError or OSError the caller maps, never a traceback
from the loop), its connection is closed and never reused, the next request on the pool
gets a clean answer, nobody gets another's answer, and other requests are served while
a hostile one is in flight."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from gateway.http1 import Http1Client
from tests.http1.hostile import HOSTILE, Drip, Hostile, interim_then_final
from tests.http1.servers import Server

REAL = b'{"real":true}'
OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 13\r\n\r\n" + REAL
LIMIT = 1 << 20  # what a body read whole may take here
#: What the refusal says, where it matters which refusal it is.
SAYS = {"endless head": "too large", "huge announced body": "too large"}
SAYS |= {"huge chunked body": "too large", "endless trailer": "too large"}
SAYS["endless chunk extension"] = "too large"


@pytest.fixture
async def http() -> AsyncIterator[Http1Client]:
    client = Http1Client(max_body_bytes=LIMIT)
    yield client
    await client.close()


@pytest.fixture
def no_error_logged(caplog: pytest.LogCaptureFixture) -> AsyncIterator[None]:
    """Nothing at ERROR (the loop's "Fatal error: protocol.data_received() call failed",
    "exception was never retrieved") while the test runs."""
    with caplog.at_level(logging.ERROR):
        yield
    records = caplog.get_records("setup") + caplog.get_records("call") + caplog.records
    assert [r.getMessage() for r in records if r.levelno >= logging.ERROR] == []


async def first_hostile(hostile: Hostile) -> Server:
    """A server whose first answer is `hostile` and every later one good."""

    async def answer(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> object:
        if n == 1:
            return await hostile(writer, REAL)
        writer.write(OK)
        return None

    return await Server().start(answer)


async def answer_ok(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
    writer.write(OK)


class Sink:
    """A sink that, as a stream's reader must, bounds what it takes."""

    def __init__(self) -> None:
        self.body = b""
        self.ended: asyncio.Future[BaseException | None] = (
            asyncio.get_running_loop().create_future()
        )

    def data(self, chunk: bytes) -> None:
        self.body += chunk
        if len(self.body) > LIMIT:
            raise ValueError("the stream is too large")

    def end(self, error: BaseException | None) -> None:
        self.ended.set_result(error)


async def good(http: Http1Client, url: str) -> bytes:
    async with await http.request("POST", url, {}, b"{}", connect_timeout_s=5) as resp:
        return await resp.read()


@pytest.mark.usefixtures("no_error_logged")
@pytest.mark.parametrize("how", ["read whole", "streamed into a sink"])
@pytest.mark.parametrize("name", HOSTILE)
async def test_a_hostile_answer_is_refused_and_poisons_nothing(
    http: Http1Client, name: str, how: str
) -> None:
    server = await first_hostile(HOSTILE[name])
    other = await Server().start(answer_ok)
    try:
        others = asyncio.get_running_loop().create_task(good(http, other.url))
        with pytest.raises((ValueError, OSError), match=SAYS.get(name)):
            resp = await http.request("POST", server.url, {}, b"{}", connect_timeout_s=5)
            if how == "read whole":
                async with resp:
                    await resp.read()
            else:
                sink = Sink()
                resp.stream_into(sink)
                error = await asyncio.wait_for(sink.ended, 10)
                assert error is not None, sink.body
                raise error
        assert await others == REAL  # served while the hostile one was in flight
        assert await good(http, server.url) == REAL  # the next request: a clean answer
        assert server.connections == 2  # on a new connection: the hostile one was closed
    finally:
        await server.stop()
        await other.stop()


@pytest.mark.usefixtures("no_error_logged")
async def test_an_answer_smuggled_past_the_body_reaches_no_later_caller(
    http: Http1Client,
) -> None:
    server = await first_hostile(HOSTILE["bytes past the body"])
    try:
        with pytest.raises(ValueError, match="after its response"):
            await good(http, server.url)
        answers = await asyncio.gather(*(good(http, server.url) for _ in range(4)))
        assert answers == [REAL] * 4 and b"smuggled" not in b"".join(answers)
    finally:
        await server.stop()


async def test_interim_answers_then_the_real_one_are_read_and_the_connection_kept(
    http: Http1Client,
) -> None:
    server = await first_hostile(interim_then_final)
    try:
        assert await good(http, server.url) == REAL
        assert await good(http, server.url) == REAL
        assert server.connections == 1
    finally:
        await server.stop()


@pytest.mark.usefixtures("no_error_logged")
async def test_a_slow_drip_is_bounded_by_its_caller_and_stalls_nothing(
    http: Http1Client,
) -> None:
    """A valid answer dripped forever never fails by itself: the caller's own bound ends
    the wait (the gateway's is the round's `hold_timeout_s`), closes the connection, and
    everything else is served meanwhile."""
    drip = Drip()
    server = await first_hostile(drip)
    try:
        resp = await http.request("POST", server.url, {}, b"{}", connect_timeout_s=5)
        reading = asyncio.get_running_loop().create_task(resp.read())
        await drip.sent.wait()
        assert await asyncio.gather(*(good(http, server.url) for _ in range(3))) == [REAL] * 3
        assert not reading.done()  # still dripping
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):  # the caller's bound
                await reading
        resp.release()
        assert await good(http, server.url) == REAL
        await drip.over.wait()  # the server saw the connection closed
    finally:
        drip.released.set()
        await server.stop()
