"""The real gateway's front against clients that hold a connection without a request:
a head or a body that trickles, a connection that idles (each closed within its bound,
`limits.idle_timeout_s` and `limits.body_timeout_s`, shortened here), and requests
aiohttp cannot parse or decode (a clear 4xx and one info line, never an ERROR)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from tests.support.inprocess import Gateway
from tests.support.raw_http import closed, post, read_response
from tests.support.wire import default_headers, rpc

pytestmark = pytest.mark.peers  # the gateway under test fronts the real legacy server

BOUNDS = {"idle_timeout_s": 0.5, "body_timeout_s": 0.5}


@pytest.fixture
async def bounded(make_gateway: Callable[..., Any]) -> Gateway:
    gateway: Gateway = await make_gateway(limits=BOUNDS)
    return gateway


async def connect(gateway: Gateway) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", gateway.server.port)


def mcp_post(body: bytes, *extra: str, length: int | None = None) -> bytes:
    """A POST to /mcp with every header a correct client sends (`extra` added)."""
    headers = default_headers(rpc("tools/list"))
    lines = [f"{name}: {value}" for name, value in headers.items()]
    return post("/mcp", body, *lines, *extra, length=length)


async def test_a_connection_that_idles_after_an_answer_is_closed(bounded: Gateway) -> None:
    reader, writer = await connect(bounded)
    writer.write(mcp_post(json.dumps(rpc("tools/list")).encode()))
    assert (await read_response(reader))[0] == 200
    assert await closed(reader)
    writer.close()


async def test_a_head_that_trickles_is_closed(bounded: Gateway) -> None:
    reader, writer = await connect(bounded)
    head = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"y" * 8000
    for byte in head:  # a byte at a time, each well within the bound
        try:
            writer.write(bytes([byte]))
            await writer.drain()
        except ConnectionError:
            break
        if await closed(reader, BOUNDS["idle_timeout_s"] / 4):
            break
    else:
        pytest.fail("the whole head was taken a byte at a time")
    writer.close()


async def test_a_body_that_trickles_gets_408_and_its_connection_ends(bounded: Gateway) -> None:
    reader, writer = await connect(bounded)
    body = json.dumps(rpc("tools/list")).encode()
    writer.write(mcp_post(body[:5], length=len(body)))  # and the rest never comes
    with capture_logs() as logs:
        status, headers, answer = await read_response(reader)
    assert status == 408 and headers["connection"] == "close"
    assert json.loads(answer)["error"]["code"] == -32600
    assert [e["event"] for e in logs if e["event"].startswith("request_")] == [
        "request_body_timed_out"
    ]
    writer.write_eof()  # aiohttp drains what still comes for a while, then closes
    assert await closed(reader)
    writer.close()


async def test_a_compressed_body_that_does_not_decompress_is_a_415_and_one_info_line(
    bounded: Gateway, server_log: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    reader, writer = await connect(bounded)
    with capture_logs() as logs, caplog.at_level(logging.DEBUG, logger="aiohttp.server"):
        writer.write(mcp_post(b"not gzip at all", "Content-Encoding: gzip"))
        status, _, answer = await read_response(reader)
        assert await closed(reader)  # the body is unsound: nothing after it is read
    assert status == 415 and json.loads(answer)["error"]["code"] == -32600
    malformed = [e for e in logs if e["event"] == "request_malformed"]
    assert malformed == [
        {
            "event": "request_malformed",
            "kind": "ContentEncodingError",
            "part": "body",
            "log_level": "info",
        }
    ]
    assert [e for e in logs if e["log_level"] not in ("info", "debug")] == []
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    writer.close()


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nBad Header: x\r\n\r\n{}",
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
        b"\x16\x03\x01\x00\xc8\x01\x00\x00\xc4\x03\x03" + b"\x00" * 40,  # a TLS ClientHello
    ],
    ids=["bad-header", "bad-chunk", "two-lengths", "tls-hello"],
)
async def test_what_aiohttp_cannot_parse_is_a_400_and_never_an_error_line(
    bounded: Gateway,
    server_log: logging.Logger,
    caplog: pytest.LogCaptureFixture,
    request_bytes: bytes,
) -> None:
    reader, writer = await connect(bounded)
    with capture_logs() as logs, caplog.at_level(logging.DEBUG, logger="aiohttp.server"):
        writer.write(request_bytes)
        status, _, _ = await read_response(reader)
        assert await closed(reader)
    assert status == 400
    assert [e["event"] for e in logs] == ["request_malformed"]
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    writer.close()
