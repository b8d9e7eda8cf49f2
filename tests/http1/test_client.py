"""The HTTP/1.1 client, against real loopback servers in this loop: keep-alive reuse,
streaming, what is and is not sent again, cut-off answers, bounded bodies."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gateway.http1 import Http1Client, Incomplete, TooLarge
from gateway.http1 import connection as h1client
from gateway.http1.connection import split_url
from tests.http1.servers import Server, turns_until

OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


@pytest.fixture
async def http() -> AsyncIterator[Http1Client]:
    client = Http1Client()
    yield client
    await client.close()


async def ok(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
    writer.write(OK)


async def test_requests_reuse_one_kept_alive_connection(http: Http1Client) -> None:
    server = await Server().start(ok)
    for _ in range(3):
        async with await http.request(
            "POST", server.url, {"A": "1"}, b"{}", connect_timeout_s=2
        ) as resp:
            assert resp.status == 200 and await resp.read() == b"{}"
            assert resp.headers["content-type"] == "application/json"
    assert server.connections == 1 and len(server.requests) == 3
    assert server.requests[0].startswith(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"\r\nA: 1\r\nContent-Length: 2\r\n\r\n{}" in server.requests[0]
    await server.stop()


async def test_a_connection_the_server_closes_is_not_reused(http: Http1Client) -> None:
    async def close_after(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> bool:
        writer.write(OK.replace(b"\r\n\r\n", b"\r\nconnection: close\r\n\r\n", 1))
        await writer.drain()
        return False

    server = await Server().start(close_after)
    for _ in range(2):
        async with await http.request("POST", server.url, {}, b"{}", connect_timeout_s=2) as resp:
            assert await resp.read() == b"{}"
    assert server.connections == 2
    await server.stop()


async def test_an_idle_connection_the_server_dropped_is_replaced_not_used(
    http: Http1Client,
) -> None:
    dropped = asyncio.Event()

    async def answer_then_drop(
        _r: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int
    ) -> bool:
        writer.write(OK)
        await writer.drain()
        if n == 1:
            dropped.set()
            return False  # a keep-alive timeout: the server closes the idle connection
        return True

    server = await Server().start(answer_then_drop)
    async with await http.request("POST", server.url, {}, b"{}", connect_timeout_s=2) as resp:
        await resp.read()
    await dropped.wait()
    (idle,) = http._idle[split_url(server.url)[0]]
    await turns_until(lambda: idle.closed)  # the server's close reaches the client's protocol
    async with await http.request("POST", server.url, {}, b"{}", connect_timeout_s=2) as resp:
        assert await resp.read() == b"{}"
    assert server.connections == 2
    await server.stop()


async def test_a_reused_connection_closed_unanswered_resends_a_get_but_never_a_post(
    http: Http1Client,
) -> None:
    async def first_then_hang_up(
        _r: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int
    ) -> bool:
        if n in (2, 4):
            return False  # read the request, close without a byte of answer
        writer.write(OK)
        return True

    server = await Server().start(first_then_hang_up)
    async with await http.request("POST", server.url, {}, b"{}", connect_timeout_s=2) as resp:
        await resp.read()
    with pytest.raises(ConnectionResetError):
        await http.request("POST", server.url, {}, b"{}", connect_timeout_s=2)
    assert len(server.requests) == 2  # the POST may have run: not sent again
    async with await http.request("GET", server.url, {}, connect_timeout_s=2) as resp:
        await resp.read()  # request 3, on a new connection
    async with await http.request("GET", server.url, {}, connect_timeout_s=2) as resp:
        assert await resp.read() == b"{}"  # request 4 hung up on; 5 answered it
    assert len(server.requests) == 5 and server.connections == 3
    await server.stop()


async def test_a_stream_is_read_as_it_arrives(http: Http1Client) -> None:
    release = asyncio.Event()

    async def stream(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await release.wait()
        writer.write(b"6\r\nsecond\r\n0\r\n\r\n")

    server = await Server().start(stream)
    async with await http.request("POST", server.url, {}, b"{}", connect_timeout_s=2) as resp:
        assert await resp.next_chunk() == b"first"  # before the server has sent the rest
        release.set()
        assert await resp.next_chunk() == b"second"
        assert await resp.next_chunk() is None
    assert http.idle_connections == 1  # read to its end: kept
    await server.stop()


async def test_a_reader_cancelled_mid_body_closes_its_connection(http: Http1Client) -> None:
    async def never_ends(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")

    server = await Server().start(never_ends)
    resp = await http.request("POST", server.url, {}, b"{}", connect_timeout_s=2)
    conn = resp._conn
    reading = asyncio.Event()

    async def read_all() -> None:
        async with resp:
            while await resp.next_chunk() is not None:
                reading.set()

    reader = asyncio.get_running_loop().create_task(read_all(), name="reader")
    await reading.wait()
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    assert conn is not None and conn.closed  # half-read: closed, never given to the next
    assert http.idle_connections == 0
    await server.stop()


async def test_an_answer_cut_mid_body_is_an_error_not_a_short_body(http: Http1Client) -> None:
    async def cut(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")
        await writer.drain()
        return False

    server = await Server().start(cut)
    async with await http.request("POST", server.url, {}, b"{}", connect_timeout_s=2) as resp:
        with pytest.raises(Incomplete):
            await resp.read()
    await server.stop()


async def test_a_large_body_pauses_the_socket_and_still_arrives_whole(http: Http1Client) -> None:
    size = 3 * h1client.HIGH_WATER

    async def big(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size)
        writer.write(b"x" * size)
        await writer.drain()

    server = await Server().start(big)
    async with await http.request("GET", server.url, {}, connect_timeout_s=2) as resp:
        conn = resp._conn
        assert conn is not None
        await turns_until(lambda: conn._paused)  # nobody reads: the socket is paused
        assert len(await resp.read()) == size
        assert not conn._paused
    await server.stop()


async def test_nothing_listening_is_an_os_error() -> None:
    server = await Server().start(ok)
    url = server.url
    await server.stop()
    await asyncio.sleep(0)
    client = Http1Client()
    with pytest.raises(OSError):
        await client.request("POST", url, {}, b"{}", connect_timeout_s=2)
    await client.close()


async def test_close_ends_connections_in_use_and_refuses_new_ones() -> None:
    async def hold(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")

    server = await Server().start(hold)
    client = Http1Client()
    resp = await client.request("GET", server.url, {}, connect_timeout_s=2)
    await client.close()
    with pytest.raises((OSError, ValueError)):
        await resp.read()
    with pytest.raises(ConnectionError):
        await client.request("GET", server.url, {}, connect_timeout_s=2)
    await server.stop()


def test_urls_split_into_origin_and_target() -> None:
    origin, target = split_url("https://example.test/a/mcp?x=1")
    assert (origin.host, origin.port, origin.host_header, target) == (
        "example.test",
        443,
        "example.test",
        "/a/mcp?x=1",
    )
    assert split_url("http://[::1]:8080")[0].host_header == "[::1]:8080"
    assert split_url("http://h")[1] == "/"
    with pytest.raises(ValueError):
        split_url("ftp://h/x")


async def test_an_idle_connection_whose_close_the_loop_has_not_seen_is_not_reused() -> None:
    """The race a keep-alive timeout makes: the server's close is in this process's socket
    but no loop turn has read it. A POST sent there would fail and is never re-sent."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    hang_up, hung_up = threading.Event(), threading.Event()
    accepted: list[socket.socket] = []

    def serve() -> None:
        while len(accepted) < 2:
            conn, _ = listener.accept()
            accepted.append(conn)
            conn.recv(65536)
            conn.sendall(OK)
            if len(accepted) == 1:
                hang_up.wait(5)
                conn.close()  # the keep-alive timeout
                hung_up.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client = Http1Client()
    url = f"http://127.0.0.1:{port}/mcp"
    async with await client.request("POST", url, {}, b"{}", connect_timeout_s=2) as resp:
        await resp.read()
    hang_up.set()
    hung_up.wait(5)  # blocking: the loop runs no turn, so the client's protocol saw nothing
    (idle,) = client._idle[split_url(url)[0]]
    assert not idle.closed and not idle.quiet()  # unseen by the loop, but on the socket
    async with await client.request("POST", url, {}, b"{}", connect_timeout_s=2) as resp:
        assert await resp.read() == b"{}"  # on a new connection, not the closed one
    assert len(accepted) == 2
    await client.close()
    thread.join(5)
    for conn in accepted:
        conn.close()
    listener.close()


async def test_a_body_cut_before_it_is_streamed_reaches_the_sink_then_its_failure(
    http: Http1Client,
) -> None:
    async def cut(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nab")
        await writer.drain()
        return False

    class Sink:
        def __init__(self) -> None:
            self.chunks: list[bytes] = []
            self.ended: list[BaseException | None] = []

        def data(self, chunk: bytes) -> None:
            self.chunks.append(chunk)

        def end(self, error: BaseException | None) -> None:
            self.ended.append(error)

    server = await Server().start(cut)
    resp = await http.request("POST", server.url, {}, b"{}", connect_timeout_s=2)
    conn = resp._conn
    assert conn is not None
    await turns_until(lambda: conn._error is not None)  # cut before anyone streams it
    sink = Sink()
    resp.stream_into(sink)
    assert sink.chunks == [b"ab"]
    assert len(sink.ended) == 1 and isinstance(sink.ended[0], Incomplete)
    await server.stop()


async def test_a_body_read_whole_is_bounded_per_request() -> None:
    """Past its bound a body is refused as soon as the head announces it, or as soon as
    its bytes pass it: nothing close to the whole is held. A request can raise the
    client's bound for itself."""
    body = b"x" * 5000

    async def sized(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        if n % 2:  # announced
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        else:  # only counted
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))

    server = await Server().start(sized)
    client = Http1Client(max_body_bytes=4096)
    try:
        for _ in range(2):
            async with await client.request("GET", server.url, {}, connect_timeout_s=2) as resp:
                with pytest.raises(TooLarge):
                    await resp.read()
        for _ in range(2):
            async with await client.request(
                "GET", server.url, {}, connect_timeout_s=2, max_body_bytes=len(body)
            ) as resp:
                assert await resp.read() == body
    finally:
        await client.close()
        await server.stop()


async def test_head_requests_are_refused_rather_than_misread(http: Http1Client) -> None:
    with pytest.raises(ValueError, match="HEAD"):
        await http.request("HEAD", "http://127.0.0.1:1/", {}, connect_timeout_s=2)


async def test_a_sink_that_refuses_the_body_ends_the_response_and_its_connection(
    http: Http1Client,
) -> None:
    async def stream(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        writer.write(b"6\r\nsecond\r\n0\r\n\r\n")

    class Refusing:
        def __init__(self) -> None:
            self.chunks: list[bytes] = []
            self.ended: asyncio.Future[BaseException | None] = (
                asyncio.get_running_loop().create_future()
            )

        def data(self, chunk: bytes) -> None:
            self.chunks.append(chunk)
            raise ValueError("not what this sink reads")

        def end(self, error: BaseException | None) -> None:
            self.ended.set_result(error)

    server = await Server().start(stream)
    resp = await http.request("POST", server.url, {}, b"{}", connect_timeout_s=2)
    conn = resp._conn
    sink = Refusing()
    resp.stream_into(sink)
    error = await asyncio.wait_for(sink.ended, 5)
    assert isinstance(error, ValueError) and len(sink.chunks) == 1  # nothing after it
    assert conn is not None and conn.closed and http.idle_connections == 0
    await server.stop()
