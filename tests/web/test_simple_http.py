"""Which requests the listener serves itself, and what it writes (sans-IO, no server)."""

from __future__ import annotations

import pytest

from gateway.web.simple_http import (
    LAST_CHUNK,
    MAX_HEAD_BYTES,
    HandOff,
    HttpDate,
    SimplePost,
    chunk,
    read_head,
    response_head,
)

PATHS = {"/mcp"}
BODY_WORK = "a chunked, encoded, expected or upgraded body"
TWICE = "a field that may come once came twice"
BODY = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'


def request(*lines: str, body: bytes = BODY, start: str = "POST /mcp HTTP/1.1") -> bytes:
    head = [start, "Host: gw", *lines]
    if not any(line.lower().startswith(("content-length", "transfer-encoding")) for line in lines):
        head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def test_a_plain_post_is_served_here_with_its_headers_and_sizes() -> None:
    raw = request("Accept: application/json", "X-Twice: a", "x-twice: b")
    found = read_head(raw, PATHS, 1000)
    assert isinstance(found, SimplePost)
    assert found.path == "/mcp" and not found.close
    assert found.head_size + found.body_size == len(raw)
    assert raw[found.head_size :] == BODY
    assert found.headers["accept"] == "application/json"
    assert found.headers.getall("X-Twice") == ["a", "b"]  # duplicates kept, in order


def test_a_head_not_yet_all_there_waits() -> None:
    raw = request()
    cut = raw.index(b"\r\n\r\n")
    assert read_head(raw[:cut], PATHS, 1000) is None
    assert isinstance(read_head(raw, PATHS, 1000), SimplePost)  # the body may follow later


def test_connection_close_is_kept_and_keep_alive_is_plain() -> None:
    closing = read_head(request("Connection: close"), PATHS, 1000)
    kept = read_head(request("Connection: keep-alive"), PATHS, 1000)
    assert isinstance(closing, SimplePost) and closing.close
    assert isinstance(kept, SimplePost) and not kept.close


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (request(start="GET /mcp HTTP/1.1"), "not a POST over HTTP/1.1"),
        (request(start="POST /mcp HTTP/1.0"), "not a POST over HTTP/1.1"),
        (request(start="POST /mcp  HTTP/1.1"), "not a POST over HTTP/1.1"),
        (request(start="POST /mcp?x=1 HTTP/1.1"), "not an MCP path"),
        (request(start="POST /healthz HTTP/1.1"), "not an MCP path"),
        (request("Transfer-Encoding: chunked"), BODY_WORK),
        (request("Expect: 100-continue"), BODY_WORK),
        (request("Upgrade: h2c", "Connection: upgrade"), BODY_WORK),
        (request("Content-Length: 41", "Content-Length: 41"), TWICE),
        (request("Host: other"), TWICE),  # which one would the origin check read?
        (request("Content-Type: a/b", "content-type: a/b"), TWICE),
        (request("User-Agent: a", "User-Agent: b"), TWICE),
        (request(start="POST /mcp HTTP/1.1\r\nX: y").replace(b"Host: gw\r\n", b""), "no Host"),
        (request("Content-Encoding: gzip"), BODY_WORK),
        (request("Sec-WebSocket-Key1: x"), BODY_WORK),
        (request(*[f"X-{i}: v" for i in range(128)]), "more header fields than aiohttp takes"),
        (request("X: " + "v" * 8190), "a line over aiohttp's limit"),
        (request("Content-Length: +41"), "no single Content-Length"),
        (request("Content-Length: 41, 41"), "no single Content-Length"),
        (request("Content-Length: 2000"), "a body over the limit"),
        (request("Bad Name: x"), "a malformed header line"),
        (request("NoColon"), "a malformed header line"),
        (request(" folded: x"), "a malformed header line"),
        (request("X: a\nY: b"), "a malformed header line"),
        (request("X: a\rb"), "a malformed header line"),
        (request("X: caf\xe9"), "bytes outside printable ASCII in the head"),
        (request("X: a\x00b"), "bytes outside printable ASCII in the head"),
        (request("Connection: TE"), "a Connection option"),
    ],
)
def test_anything_unusual_goes_to_aiohttp(raw: bytes, reason: str) -> None:
    assert read_head(raw, PATHS, 1000) == HandOff(reason)


def test_repeated_fields_aiohttp_takes_twice_are_kept() -> None:
    found = read_head(
        request("Accept: a", "Accept: b", *[f"X-{i}: v" for i in range(120)]), PATHS, 1000
    )
    assert isinstance(found, SimplePost) and found.headers.getall("Accept") == ["a", "b"]
    assert isinstance(read_head(request("X: " + "v" * 8180), PATHS, 1000), SimplePost)


def test_a_head_without_end_is_handed_off_at_the_size_limit() -> None:
    endless = b"POST /mcp HTTP/1.1\r\nX: " + b"a" * MAX_HEAD_BYTES
    assert read_head(endless[: MAX_HEAD_BYTES - 1], PATHS, 1000) is None
    assert read_head(endless, PATHS, 1000) == HandOff("head too large")


def test_response_heads_carry_length_or_chunking_and_never_a_line_break() -> None:
    head = response_head(200, [("Content-Type", "application/json")], "D", length=2)
    assert head == (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nDate: D\r\n\r\n"
    )
    streamed = response_head(200, [("Content-Length", "9")], "D", length=None)
    assert b"Transfer-Encoding: chunked\r\n" in streamed and b"Content-Length" not in streamed
    assert response_head(405, [("Allow", "POST")], "D", length=0).startswith(
        b"HTTP/1.1 405 Method Not Allowed\r\nAllow: POST\r\n"
    )
    closing = response_head(200, [("Connection", "keep-alive")], "D", length=0, close=True)
    assert closing.count(b"Connection") == 1 and b"Connection: close\r\n" in closing
    with pytest.raises(ValueError, match="line break"):
        response_head(200, [("X-Request-Id", "a\r\nSet-Cookie: x")], "D", length=0)


def test_chunks_and_dates() -> None:
    assert chunk(b"hello, world!") == b"d\r\nhello, world!\r\n"
    assert chunk(b"") == b""  # an empty chunk would end the body
    assert LAST_CHUNK == b"0\r\n\r\n"
    date = HttpDate()
    assert date.at(0.5) == "Thu, 01 Jan 1970 00:00:00 GMT"
    assert date.at(1.2) == "Thu, 01 Jan 1970 00:00:01 GMT"
