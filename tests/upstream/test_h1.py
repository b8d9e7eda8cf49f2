"""The upstream client's HTTP/1.1, sans I/O: request heads out, response events in."""

from __future__ import annotations

import pytest

from gateway.upstream.http import h1
from gateway.upstream.http.h1 import END, BadResponse, Head, Incomplete, ResponseParser

SSE = b'event: message\r\ndata: {"jsonrpc":"2.0","id":"a-1","result":{}}\r\n\r\n'
CHUNKED = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    b"Mcp-Session-Id: s1\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"%x;name=value\r\n" % len(SSE)
    + SSE
    + b"\r\n5\r\nhello\r\n0\r\nX-Trailer: ignored\r\n\r\n"
)


def parse(*pieces: bytes, no_body: bool = False) -> list[h1.Event]:
    parser = ResponseParser()
    parser.reset(no_body=no_body)
    events: list[h1.Event] = []
    for piece in pieces:
        events += parser.feed(piece)
    return events


def body_of(events: list[h1.Event]) -> bytes:
    return b"".join(e for e in events if isinstance(e, bytes))


def test_a_chunked_stream_reads_the_same_however_the_bytes_are_cut() -> None:
    whole = parse(CHUNKED)
    head = whole[0]
    assert isinstance(head, Head) and head.status == 200 and head.keep_alive
    assert head.headers["mcp-session-id"] == "s1"  # names lower-cased
    assert body_of(whole) == SSE + b"hello" and whole[-1] is END
    for size in range(1, 40):
        cut = [CHUNKED[i : i + size] for i in range(0, len(CHUNKED), size)]
        events = parse(*cut)
        assert events[0] == head and body_of(events) == SSE + b"hello", size
        assert events[-1] is END and events.count(END) == 1, size


def test_a_body_comes_out_as_it_arrives_not_at_its_end() -> None:
    parser = ResponseParser()
    parser.reset()
    first = parser.feed(CHUNKED[: CHUNKED.index(SSE) + len(SSE)])
    assert body_of(first) == SSE and END not in first  # the event, before the stream ends


def test_content_length_bodies_end_at_their_length_and_the_connection_carries_on() -> None:
    parser = ResponseParser()
    parser.reset()
    assert parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab") == [
        Head(200, {"content-length": "5"}, True),
        b"ab",
    ]
    assert parser.feed(b"cde") == [b"cde", END]
    parser.reset()  # the next response on the same connection
    assert parser.feed(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n")[-1] is END


def test_responses_without_a_body() -> None:
    assert parse(b"HTTP/1.1 204 No Content\r\n\r\n")[-1] is END
    assert parse(b"HTTP/1.1 304 Not Modified\r\n\r\n")[-1] is END
    head_only = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", no_body=True)
    assert head_only[-1] is END


def test_informational_answers_are_skipped() -> None:
    events = parse(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
    assert [e.status for e in events if isinstance(e, Head)] == [200]
    assert body_of(events) == b"ok"


def test_a_body_framed_by_the_close_ends_at_eof_and_the_connection_is_not_kept() -> None:
    parser = ResponseParser()
    parser.reset()
    events = parser.feed(b"HTTP/1.0 200 OK\r\ncontent-type: application/json\r\n\r\n{}")
    head = events[0]
    assert isinstance(head, Head) and not head.keep_alive
    assert parser.eof() == [END]
    closing = parse(b"HTTP/1.1 200 OK\r\nConnection: close\r\ncontent-length: 0\r\n\r\n")
    assert isinstance(closing[0], Head) and not closing[0].keep_alive


def test_repeated_headers_are_joined() -> None:
    (head, *_) = parse(b"HTTP/1.1 200 OK\r\nVary: a\r\nvary: b\r\ncontent-length: 0\r\n\r\n")
    assert isinstance(head, Head) and head.headers["vary"] == "a, b"


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/2 200 OK\r\n\r\n",
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n folded: value\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXX",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nab",  # bytes after the response
    ],
)
def test_malformed_responses_are_refused(raw: bytes) -> None:
    with pytest.raises(BadResponse):
        parse(raw)


def test_an_endless_head_or_chunk_line_is_refused_not_buffered() -> None:
    with pytest.raises(BadResponse, match="too large"):
        parse(b"HTTP/1.1 200 OK\r\n" + b"X: " + b"a" * h1.MAX_HEAD_BYTES)
    with pytest.raises(BadResponse, match="too long"):
        parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"1" * 2000)


def test_a_connection_closed_mid_response_is_incomplete() -> None:
    for partial in (
        b"HTTP/1.1 200 OK\r\nContent-Le",
        b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nab",
    ):
        parser = ResponseParser()
        parser.reset()
        parser.feed(partial)
        with pytest.raises(Incomplete):
            parser.eof()
    parser = ResponseParser()
    parser.reset()
    parser.feed(CHUNKED[:-7])
    with pytest.raises(Incomplete):
        parser.eof()
    assert not ResponseParser().started  # nothing arrived: the client can tell


def test_the_request_head_frames_the_body_and_refuses_header_injection() -> None:
    head = h1.request_head("POST", "/mcp?x=1", "example.test:8080", {"Accept": "a/b"}, 3)
    assert head == (
        b"POST /mcp?x=1 HTTP/1.1\r\nHost: example.test:8080\r\nAccept: a/b\r\n"
        b"Content-Length: 3\r\n\r\n"
    )
    assert b"Content-Length" not in h1.request_head("GET", "/", "h", {}, 0)
    for name, value in (("X", "a\r\nEvil: 1"), ("X", "a\nb"), ("Bad\r\nName", "v"), ("", "v")):
        with pytest.raises(ValueError):
            h1.request_head("POST", "/", "h", {name: value}, 0)
    with pytest.raises(ValueError, match="header 'X-Bad' cannot be sent"):  # it names which
        h1.request_head("POST", "/", "h", {"Accept": "a/b", "X-Bad": "a\0b", "Z": "c"}, 0)
