"""SSE framing: any chunking, any line ending, ids and retry kept."""

from __future__ import annotations

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
