"""Generated and mutated responses through the sans-IO parser: whatever the bytes, it
returns events or raises `BadResponse` (nothing else escapes to the connection), and
the outcome does not depend on how the bytes are cut into reads."""

from __future__ import annotations

from typing import Any

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
