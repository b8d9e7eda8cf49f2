"""SSE framing: any chunking, any line ending, ids and retry kept; each event bounded, and
the work linear in the bytes fed."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.protocol import sse

STREAM = (
    b'id: a1\ndata:\n\nevent: message\nid: a2\ndata: {"x":1}\n\n'
    b": comment\nretry: 250\ndata: line1\ndata: line2\n\n"
)


def test_events_survive_any_chunking() -> None:
    whole = sse.Parser().feed(STREAM)
    for size in (1, 2, 3, 7):
        parser, events = sse.Parser(), []
        for i in range(0, len(STREAM), size):
            events += parser.feed(STREAM[i : i + size])
        assert events == whole
    assert [e.data for e in whole] == ["", '{"x":1}', "line1\nline2"]
    assert [e.id for e in whole] == ["a1", "a2", None]
    assert whole[2].retry == 250


def test_crlf_and_cr_line_ends() -> None:
    for sep in (b"\r\n", b"\r"):
        # a trailing lone CR may be half a CRLF, so a following comment line completes it
        events = sse.Parser().feed(STREAM.replace(b"\n", sep) + b":" + sep)
        assert [e.data for e in events] == ["", '{"x":1}', "line1\nline2"]
    parser = sse.Parser()
    assert parser.feed(b"data: a\r") == []
    assert [e.data for e in parser.feed(b"\n\r\n")] == ["a"]


def test_last_event_id_persists_and_encode_round_trips() -> None:
    parser = sse.Parser()
    parser.feed(STREAM)
    assert parser.last_event_id == "a2"
    (event,) = sse.Parser().feed(sse.encode('{"a":1}'))
    assert (event.event, event.data) == ("message", '{"a":1}')


def test_a_line_end_cut_between_chunks_ends_its_line_once() -> None:
    """CR at a chunk's end and LF at the next one's start are one line end, not two."""
    for stream in (b"data: a\r\n\r\ndata: b\r\n\r\n", b"data: a\r\rdata: b\n\n"):
        for cut in range(len(stream) + 1):
            parser = sse.Parser()
            events = parser.feed(stream[:cut]) + parser.feed(stream[cut:])
            assert [e.data for e in events] == ["a", "b"], (stream, cut)


def test_retry_takes_ascii_digits_only_and_a_sane_length() -> None:
    """`str.isdigit` takes superscripts for digits (and int() then raises): bytes are
    looked at, and a retry of absurd length is ignored rather than converted."""
    stream = "retry: ¹²\ndata: a\n\nretry: 99999999999999\ndata: b\n\nretry: 250\ndata: c\n\n"
    events = sse.Parser().feed(stream.encode())
    assert [(e.data, e.retry) for e in events] == [("a", None), ("b", None), ("c", 250)]


def test_bad_utf8_is_replaced_not_raised() -> None:
    (event,) = sse.Parser().feed(b"event: m\xffx\ndata: caf\xc3\xa9 \xff\nid: \xfe\n\n")
    assert event.data == "café \ufffd" and event.event == "m\ufffdx" and event.id == "\ufffd"


def test_an_event_past_the_bound_is_refused_however_it_arrives() -> None:
    big = b"data: " + b"x" * 2000 + b"\n\n"
    for size in (len(big), 100, 7):
        parser = sse.Parser(max_event_bytes=1000)
        with pytest.raises(sse.EventTooLarge):
            for i in range(0, len(big), size):
                parser.feed(big[i : i + size])
    many_lines = b"data: x\n" * 200 + b"\n"  # short lines add up to one large event
    with pytest.raises(sse.EventTooLarge):
        sse.Parser(max_event_bytes=1000).feed(many_lines)
    endless_comment = sse.Parser(max_event_bytes=1000)  # no line end: nothing to dispatch
    with pytest.raises(sse.EventTooLarge):
        for _ in range(20):
            endless_comment.feed(b":" + b"c" * 100)


def test_events_within_the_bound_pass_one_after_another() -> None:
    """The bound is per event: a stream may carry any number of them."""
    parser = sse.Parser(max_event_bytes=1000)
    one = b"data: " + b"x" * 900 + b"\n\n"
    events = [e for _ in range(50) for e in parser.feed(one)]
    assert len(events) == 50 and all(len(e.data) == 900 for e in events)


def test_a_48_mb_answer_costs_about_what_the_same_answer_as_json_costs() -> None:
    """An honest FastMCP answer of 48 MB in one `data:` line, read as the socket hands it
    over (64 KiB at a time), costs within a generous factor of 3 of the same answer read
    as a JSON body: a parser that rescans or re-slices its growing buffer at every chunk
    costs hundreds of times more."""
    text = "x" * (48 * 1024 * 1024)
    message = orjson.dumps({"jsonrpc": "2.0", "id": "a-1", "result": {"text": text}})
    stream = b"event: message\r\ndata: " + message + b"\r\n\r\n"
    piece = 64 * 1024

    def as_sse() -> Any:
        parser = sse.Parser()
        for start in range(0, len(stream), piece):
            for event in parser.feed(stream[start : start + piece]):
                return orjson.loads(event.data)
        raise AssertionError("no event")

    def as_json() -> Any:
        body = bytearray()  # as the client reads a body whole
        for start in range(0, len(message), piece):
            body += message[start : start + piece]
        return orjson.loads(bytes(body))

    def cost(read: Callable[[], Any]) -> float:
        started = time.process_time()
        assert len(read()["result"]["text"]) == len(text)
        return time.process_time() - started

    json_cost = min(cost(as_json) for _ in range(2))
    sse_cost = min(cost(as_sse) for _ in range(2))
    assert sse_cost < 3 * json_cost, (sse_cost, json_cost)


_LINE = st.text(st.characters(blacklist_characters="\r\n\0", blacklist_categories=["Cs"]))


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(_LINE, min_size=1, max_size=4).map("\n".join),
    event=_LINE.filter(bool),
    event_id=st.none() | _LINE,
    retry=st.none() | st.integers(0, 10**9),
)
def test_an_event_framed_again_reads_back_as_the_same_event(
    data: str, event: str, event_id: str | None, retry: int | None
) -> None:
    """What the legacy lane relays: each event the parser read, framed again field for
    field, is the same event to the client's parser (its id and retry included)."""
    original = sse.SseEvent(data=data, event=event, id=event_id, retry=retry)
    parser = sse.Parser()
    assert parser.feed(sse.encode_event(original)) == [original]
    assert parser.last_event_id == event_id
