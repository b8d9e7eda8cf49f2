"""Generated and mutated responses through the sans-IO parser: whatever the bytes, it
returns events or raises `BadResponse` (nothing else escapes to the connection), and
the outcome does not depend on how the bytes are cut into reads."""

from __future__ import annotations

from typing import Any

import httptools
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.http1 import framing
from gateway.http1.framing import END, BadResponse, Head, ResponseParser

TOKEN = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-0123456789", min_size=1, max_size=12)
VALUE = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=24)
#: Bytes that matter to HTTP framing, and some that only look like they might.
TRICKY = [b"\r", b"\n", b"\0", b" ", b"\t", b":", b",", b"0", b"9", b"\xb9", b"\x7f", b"\xff"]


@st.composite
def responses(draw: st.DrawFn) -> tuple[bytes, dict[str, str], bytes]:
    """A well-formed response: its bytes, the headers it carries, its body."""
    status = draw(st.sampled_from([200, 201, 202, 400, 404, 409, 500]))
    names = draw(st.lists(TOKEN, max_size=5, unique=True))
    fields = {f"x-{name}": draw(VALUE).strip(" \t") for name in names}
    body = draw(st.binary(max_size=300))
    chunked = draw(st.booleans())
    interim = draw(st.sampled_from([b"", b"HTTP/1.1 100 Continue\r\n\r\n"]))
    lines = [f"{name}: {value}" for name, value in fields.items()]
    if chunked:
        cut = draw(st.integers(min_value=0, max_value=len(body)))
        pieces = [p for p in (body[:cut], body[cut:]) if p]
        framed = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
        lines.append("transfer-encoding: chunked")
    else:
        framed = body
        lines.append(f"content-length: {len(body)}")
    head = "\r\n".join([f"HTTP/1.1 {status} Reason", *lines, "", ""]).encode("latin-1")
    return interim + head + framed, fields, body


def outcome(data: bytes, cuts: list[int]) -> Any:
    """What parsing `data`, read in pieces at `cuts`, comes to: "refused", or the head's
    status and headers, the body, and whether it ended."""
    parser = ResponseParser()
    parser.expect()
    events: list[framing.Event] = []
    bounds = [0, *sorted(c for c in cuts if 0 < c < len(data)), len(data)]
    try:
        for start, stop in zip(bounds, bounds[1:], strict=False):
            events += parser.feed(data[start:stop])
        events += parser.eof()
    except BadResponse:
        return "refused"
    heads = [e for e in events if isinstance(e, Head)]
    body = b"".join(e for e in events if isinstance(e, bytes))
    return [(h.status, h.headers) for h in heads], body, events.count(END)


CUTS = st.lists(st.integers(min_value=1, max_value=2000), max_size=12)
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(responses(), CUTS)
def test_a_well_formed_response_reads_the_same_however_it_is_cut(
    response: tuple[bytes, dict[str, str], bytes], cuts: list[int]
) -> None:
    data, fields, body = response
    heads, read, ends = outcome(data, cuts)
    assert read == body and ends == 1
    ((status, headers),) = heads
    assert {k: v for k, v in headers.items() if k.startswith("x-")} == fields


@FUZZ
@given(
    responses(),
    st.lists(
        st.tuples(st.integers(min_value=0, max_value=400), st.sampled_from(TRICKY), st.booleans()),
        min_size=1,
        max_size=4,
    ),
    CUTS,
)
def test_a_mutated_response_is_read_or_refused_never_anything_else(
    response: tuple[bytes, dict[str, str], bytes],
    mutations: list[tuple[int, bytes, bool]],
    cuts: list[int],
) -> None:
    data = bytearray(response[0])
    for where, byte, replace in mutations:
        where = min(where, len(data))
        data[where : where + (1 if replace else 0)] = byte
    whole = outcome(bytes(data), [])  # any other exception fails the test here
    assert outcome(bytes(data), cuts) == whole


class _Callbacks:
    """llhttp's fields as its callbacks give them, one call each (how the parser read
    them before it read them from the head's text): the reference for the test below."""

    def __init__(self) -> None:
        self.fields: dict[str, str] = {}
        self.heads: list[dict[str, str]] = []

    def on_header(self, name: bytes, value: bytes) -> None:
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        self.fields[key] = f"{self.fields[key]}, {text}" if key in self.fields else text

    def on_headers_complete(self) -> None:
        self.heads.append(self.fields)
        self.fields = {}


def by_callbacks(data: bytes) -> dict[str, str] | None:
    """The last head's fields as llhttp's callbacks give them (None: llhttp refused)."""
    callbacks = _Callbacks()
    try:
        httptools.HttpResponseParser(callbacks).feed_data(data)
    except httptools.HttpParserError:
        return None
    return callbacks.heads[-1] if callbacks.heads else None


SPACE = st.text(alphabet=" \t", max_size=3)


@st.composite
def spaced_heads(draw: st.DrawFn) -> bytes:
    """A head with spaces and tabs around its values, repeated fields, empty values, an
    interim answer before it and empty lines before its status line."""
    names = draw(st.lists(st.sampled_from(["x-a", "X-A", "x-b", "Etag", "x-c"]), max_size=6))
    lines = [f"{n}:{draw(SPACE)}{draw(VALUE)}{draw(SPACE)}" for n in names]
    before = draw(
        st.sampled_from([b"", b"\r\n", b"\n", b"HTTP/1.1 100 Continue\r\nx-i: 1\r\n\r\n"])
    )
    head = "\r\n".join(["HTTP/1.1 200 OK", *lines, "content-length: 0", "", ""])
    return before + head.encode("latin-1")


@FUZZ
@given(
    st.one_of(spaced_heads(), responses().map(lambda r: r[0])),
    st.lists(
        st.tuples(st.integers(min_value=0, max_value=200), st.sampled_from(TRICKY), st.booleans()),
        max_size=3,
    ),
    CUTS,
)
def test_the_fields_read_from_a_head_are_those_llhttp_gives_its_callbacks(
    data: bytes, mutations: list[tuple[int, bytes, bool]], cuts: list[int]
) -> None:
    mutated = bytearray(data)
    for where, byte, replace in mutations:
        where = min(where, len(mutated))
        mutated[where : where + (1 if replace else 0)] = byte
    read = outcome(bytes(mutated), cuts)
    if read == "refused":
        return  # llhttp's refusal, or a bound of the parser's own
    heads, _, _ = read
    assert heads, "a response read has a head"
    assert heads[-1][1] == by_callbacks(bytes(mutated))
