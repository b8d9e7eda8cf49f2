"""The real front under generated hostile requests (hypothesis), over real sockets, with
the real legacy server behind it.

Every request is written by hand on its own connection (so headers can be sent twice,
in any case, with any bytes) to the gateway as `mrtr-gateway serve` runs it, and every
answer must:

- come within `HANG_S` (far above the test's bounds, `limits.idle_timeout_s` and
  `limits.body_timeout_s` of `BOUND_S`), or the connection close by then;
- never be a 5xx: the upstream is healthy and nothing is near a capacity bound, so the
  client's input alone must never earn a 502 or a 503;
- pair its HTTP status and JSON-RPC code as the spec's table does (§6.5), carry the
  request's id when the request had a valid one (null for an HTTP-level refusal and a
  parse error), and a notification gets a bare 202;
- leave no ERROR line: neither the gateway's (structlog) nor a record of aiohttp's or
  asyncio's (stdlib logging, with the filter `gateway.logging.configure` installs).

Raw mutations of a whole request (bytes flipped, inserted, CR/LF/NUL, obs-fold, long
lines, framing headers) are answered below 500 or closed, and the next connection is
served. The examples are the same on every run (the profile in tests/conftest.py); the
counts are each test's own. The sans-IO properties are in tests/protocol/*_fuzz.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterator, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, currently_in_test_context, event, example, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from gateway.auth.apikeys import new_api_key
from gateway.protocol.listen import ACKNOWLEDGED
from gateway.protocol.sse import Parser
from tests.support.fuzz import (
    REFUSAL_STATUSES,
    Body,
    Raw,
    _deep,
    bodies,
    client_headers,
    header_garbage,
    header_lists,
    pair_allowed,
    read_as_client,
    render,
    request_id,
    requests,
)
from tests.support.inprocess import Gateway
from tests.support.wire import rpc

pytestmark = [pytest.mark.peers, pytest.mark.timeout(300)]

BOUND_S = 1.0  # the gateway's idle and body bounds here
HANG_S = 30.0  # an answer later than this is a hang
#: Each test runs many examples against one gateway (the fixture's): its state carrying
#: from one example to the next is part of what is tested, not an accident.
FRONT = settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
ERROR_LEVELS = {"error", "critical", "exception"}


class ErrorRecords(logging.Handler):
    """Every stdlib log record at ERROR or above (aiohttp's server, asyncio's loop)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def error_records(server_log: logging.Logger) -> Iterator[ErrorRecords]:
    """ERROR records of any logger, while aiohttp's server log has the gateway's filter."""
    handler = ErrorRecords()
    root = logging.getLogger()
    root.addHandler(handler)
    yield handler
    root.removeHandler(handler)


@pytest.fixture
async def front(make_gateway: Callable[..., Any]) -> AsyncIterator[Gateway]:
    gateway: Gateway = await make_gateway(
        limits={"idle_timeout_s": BOUND_S, "body_timeout_s": BOUND_S}
    )
    yield gateway
    await gateway.until_calls_ended()
    assert gateway.bridge.calls == {}  # nothing the fuzz sent is left parked


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    messages: list[Any]  # the JSON body, or the SSE stream's messages up to its final one
    raw: bytes


def request_bytes(
    method: str, headers: list[tuple[str, str]], body: bytes, path: str = "/mcp"
) -> bytes:
    """An HTTP/1.1 request; a header value is written in Latin-1 where it can be (bytes
    past 0x7f that are no UTF-8), else in UTF-8."""
    lines = [f"{method} {path} HTTP/1.1".encode()]
    for name, value in [*headers, ("Content-Length", str(len(body)))]:
        try:
            raw = value.encode("latin-1")
        except UnicodeEncodeError:
            raw = value.encode()
        lines.append(name.encode() + b": " + raw)
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def exchange(port: int, data: bytes) -> Answer | None:
    """Send `data` on a new connection and read one answer (None: the connection closed
    without one). An SSE answer is read up to its final message, or to a listen's
    acknowledgement (a listen goes on until its client leaves, which this one then does)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        async with asyncio.timeout(HANG_S):
            writer.write(data)
            try:
                return await read_answer(reader)
            except (ConnectionError, asyncio.IncompleteReadError):
                return None
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except ConnectionError:
            pass


async def read_answer(reader: asyncio.StreamReader) -> Answer | None:
    status = 100
    while 100 <= status < 200:  # `100 Continue` (to `Expect: 100-continue`) comes first
        status_line = await reader.readline()
        if not status_line:
            return None
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
    if headers.get("content-type", "").startswith("text/event-stream"):
        return Answer(status, headers, await read_stream(reader), b"")
    if "content-length" in headers:
        raw = await reader.readexactly(int(headers["content-length"]))
    else:
        raw = b"".join([chunk async for chunk in chunks(reader)])
    is_json = headers.get("content-type", "").startswith("application/json")
    return Answer(status, headers, [json.loads(raw)] if is_json else [], raw)


async def chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while size := int((await reader.readline()).strip(), 16):
        yield await reader.readexactly(size)
        await reader.readexactly(2)
    await reader.readexactly(2)


async def read_stream(reader: asyncio.StreamReader) -> list[Any]:
    parser, messages = Parser(), []
    async for chunk in chunks(reader):
        for sse_event in parser.feed(chunk):
            if not sse_event.data:
                continue
            message = json.loads(sse_event.data)
            messages.append(message)
            if "id" in message or message.get("method") == ACKNOWLEDGED:
                return messages
    return messages


@contextmanager
def no_error_lines(records: ErrorRecords) -> Iterator[list[MutableMapping[str, Any]]]:
    """The gateway's log lines of a block; none of them, and no stdlib record, an ERROR,
    and each one a line the JSON format can write (it is orjson's, with `repr` for what
    orjson cannot write: a client's text that no UTF-8 holds would fail it)."""
    records.records.clear()
    with capture_logs() as logs:
        yield logs
    errors = [e for e in logs if e.get("log_level") in ERROR_LEVELS]
    assert errors == [], errors
    assert records.records == [], [r.getMessage() for r in records.records]
    for entry in logs:
        orjson.dumps(entry, default=repr)


def tally(what: str) -> None:
    """Count `what` in the statistics of a property's run (`--hypothesis-show-statistics`)."""
    if currently_in_test_context():
        event(what)


def check_answer(answer: Answer, body: bytes) -> None:
    """The properties every answer to a request whose HTTP framing was sound must have."""
    status = answer.status
    assert status < 500, (status, answer.raw[:300])
    tally(f"HTTP {status}")
    if status == 405:
        assert answer.headers.get("allow") == "POST"
        return
    if status == 202:
        value = read_as_client(body)
        assert isinstance(value, dict) and "id" not in value and "method" in value
        assert answer.raw == b""
        return
    assert answer.messages, (status, answer.raw[:300])
    final = answer.messages[-1]
    if final.get("method") == ACKNOWLEDGED:  # a listen, acknowledged: it stands for its id
        tally("listen acknowledged")
        assert status == 200
        rid = final["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"]
        assert rid == request_id(body)
        return
    error = final.get("error")
    if error is not None:
        tally(f"code {error['code']}")
        streamed = answer.headers["content-type"].startswith("text/event-stream")
        assert streamed or pair_allowed(status, error["code"]), (status, error)
        assert "Traceback" not in json.dumps(error)
    if status in REFUSAL_STATUSES or (error is not None and error["code"] == -32700):
        assert final["id"] is None, final
    else:
        assert final["id"] == request_id(body), (final, body[:200])
    if status == 200 and error is None:
        assert "resultType" in final["result"], final


async def served(gateway: Gateway) -> None:
    """A correct request on a new connection is answered 200: the front still serves."""
    body = rpc("server/discover")
    data = request_bytes("POST", host_and(client_headers(body)), render(body))
    answer = await exchange(gateway.server.port, data)
    assert answer is not None and answer.status == 200, answer


def host_and(headers: dict[str, str]) -> list[tuple[str, str]]:
    return [("Host", "127.0.0.1"), *headers.items()]


# --- bodies ------------------------------------------------------------------------


@settings(FRONT, max_examples=300)
@given(body=bodies())
@example(body=Body(b'{"jsonrpc":"2.0","id":7,"method":"tools/list","params":NaN}', None))
async def test_any_body_is_answered_by_the_table(
    front: Gateway, error_records: ErrorRecords, body: Body
) -> None:
    data = request_bytes("POST", host_and(client_headers(body.meant)), body.data)
    with no_error_lines(error_records):
        answer = await exchange(front.server.port, data)
    assert answer is not None, "closed without an answer"
    check_answer(answer, body.data)


@pytest.mark.parametrize("depth", [990, 1000, 1020])
async def test_a_body_nested_past_the_bound_is_a_parse_error_with_no_error_line(
    front: Gateway, error_records: ErrorRecords, depth: int
) -> None:
    """orjson reads up to 1,024 levels; writing such arguments on to the upstream (orjson
    gives up at 255, the standard library near 1,000) must not be where it fails."""
    meant = rpc("tools/call", {"name": "echo", "arguments": {"text": Raw(_deep(depth, "["))}})
    data = request_bytes("POST", host_and(client_headers(meant)), render(meant))
    with no_error_lines(error_records):
        answer = await exchange(front.server.port, data)
    assert answer is not None and answer.status == 400, answer
    assert answer.messages[0]["error"]["code"] == -32700


# --- headers -----------------------------------------------------------------------

OTHER_METHODS = st.sampled_from(["GET", "DELETE", "PUT", "OPTIONS", "PATCH", "post"])


@settings(FRONT, max_examples=150)
@given(data=st.data())
async def test_any_headers_are_answered_by_the_table(
    front: Gateway, error_records: ErrorRecords, data: st.DataObject
) -> None:
    method = data.draw(OTHER_METHODS) if data.draw(st.integers(0, 7)) == 0 else "POST"
    meant = data.draw(requests(most_off=0), label="request")
    headers = data.draw(header_lists(meant, first=(("host", "127.0.0.1"),)), label="headers")
    body = render(meant)
    with no_error_lines(error_records):
        answer = await exchange(front.server.port, request_bytes(method, headers, body))
    assert answer is not None, "closed without an answer"
    if answer.status == 400 and not answer.messages:
        tally(f"HTTP 400 from aiohttp: {answer.raw[:60]!r}")
        return
    check_answer(answer, body)


@pytest.mark.parametrize(
    ("name", "value", "status"),
    [
        ("Authorization", "Bearer \xff\xfe", 200),  # bytes that are no UTF-8
        ("Authorization", "Bearer \u65e5\u672c", 200),  # UTF-8, no ASCII
        ("Origin", "http://[", 403),
        ("Origin", "http://[::1", 403),
        ("Host", "[::1", 403),
    ],
)
async def test_header_values_that_are_no_text_or_no_url_get_their_rows_answer(
    front: Gateway, error_records: ErrorRecords, name: str, value: str, status: int
) -> None:
    """Without auth, any Authorization is hashed into the caller's principal, whatever
    its bytes; an Origin or Host whose brackets do not pair is not served."""
    body = rpc("tools/list")
    headers = [(n, v) for n, v in host_and(client_headers(body)) if n != name] + [(name, value)]
    with no_error_lines(error_records):
        answer = await exchange(front.server.port, request_bytes("POST", headers, render(body)))
    assert answer is not None and answer.status == status, answer
    check_answer(answer, render(body))


# --- authorization with auth on ----------------------------------------------------


@dataclass
class Guarded:
    """A gateway that takes API keys only (no issuer to reach), and its one good key."""

    gateway: Gateway
    key: str


@pytest.fixture
async def guarded(make_gateway: Callable[..., Any], tmp_path: Path) -> Guarded:
    key, entry = new_api_key("fuzz", ["mcp"])
    keys = tmp_path / "keys.yaml"
    keys.write_text(entry)
    gateway: Gateway = await make_gateway(
        auth={"public_url": "http://127.0.0.1:8000", "api_keys_file": str(keys)},
        limits={"idle_timeout_s": BOUND_S, "body_timeout_s": BOUND_S},
    )
    return Guarded(gateway, key)


AUTHORIZATIONS = st.one_of(
    header_garbage,
    st.builds(
        lambda scheme, token: f"{scheme} {token}",
        st.sampled_from(["Bearer", "bearer", "BEARER", "Basic", "Bearer  ", ""]),
        st.one_of(header_garbage, st.text(alphabet="mrt_ABCxyz019-._~+/=", max_size=60)),
    ),
)


@settings(FRONT, max_examples=60)
@given(authorization=AUTHORIZATIONS)
async def test_any_authorization_but_a_good_key_is_a_401_with_its_challenge(
    guarded: Guarded, error_records: ErrorRecords, authorization: str
) -> None:
    body = rpc("tools/list")
    headers = [*host_and(client_headers(body)), ("Authorization", authorization)]
    data = request_bytes("POST", headers, render(body))
    with no_error_lines(error_records):
        answer = await exchange(guarded.gateway.server.port, data)
    assert answer is not None
    if answer.status == 400 and not answer.messages:
        tally(f"HTTP 400 from aiohttp: {answer.raw[:60]!r}")
        return
    assert answer.status == 401, answer
    assert answer.headers["www-authenticate"].startswith("Bearer")
    check_answer(answer, render(body))


async def test_the_guarded_gateway_serves_its_key(
    guarded: Guarded, error_records: ErrorRecords
) -> None:
    """The property above holds for a reason: its gateway serves a good key."""
    body = rpc("tools/list")
    headers = [*host_and(client_headers(body)), ("Authorization", f"Bearer {guarded.key}")]
    data = request_bytes("POST", headers, render(body))
    answer = await exchange(guarded.gateway.server.port, data)
    assert answer is not None and answer.status == 200, answer


# --- raw mutations of a request ----------------------------------------------------

BASE_BODY = render(rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}}))
BASE = request_bytes("POST", host_and(client_headers(json.loads(BASE_BODY))), BASE_BODY)
HEAD_END = BASE.index(b"\r\n\r\n")
INSERTS = [b"\r", b"\n", b"\x00", b" ", b"\t", b":", b"\x7f", b"\xff", b"\r\n", b"\r\n\r\n"]
FRAMING = [
    b"Content-Length: 5",
    b"Content-Length: -1",
    b"Content-Length: +5",
    b"Content-Length: 99999999999999999999",
    b"Content-Length: 1e3",
    b"Content-Length: 0x10",
    b"Content-Length: 5, 6",
    b"Transfer-Encoding: chunked",
    b"Transfer-Encoding: gzip, chunked",
    b"Transfer-Encoding: identity",
    b"Transfer-Encoding: xchunked",
    b"Content-Encoding: gzip",
    b"Connection: close",
    b"Expect: 100-continue",
    b"Upgrade: websocket",
]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """The base request with one to three raw mutations, mostly in its head."""
    data = bytearray(BASE)
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, min(HEAD_END + 2, len(data))))
        kind = draw(
            st.sampled_from(["flip", "insert", "delete", "obs-fold", "long-line", "framing"])
        )
        tally(kind)
        if kind == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "insert":
            data[at:at] = draw(st.sampled_from(INSERTS))
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 4))]
        elif kind == "obs-fold":  # a header line continued on the next, as RFC 7230 forbids
            end = data.find(b"\r\n", at)
            if end != -1:
                data[end:end] = b"\r\n folded"
        elif kind == "long-line":
            data[at:at] = b"a" * draw(st.sampled_from([8190, 8191, 9000, 70000]))
        else:
            first_line_end = data.find(b"\r\n") + 2
            data[first_line_end:first_line_end] = draw(st.sampled_from(FRAMING)) + b"\r\n"
    return bytes(data)


@settings(FRONT, max_examples=150)
@given(data=mutated())
@example(data=BASE)
@example(data=BASE[:-5])  # a body that stops short: 408 at the body's bound
@example(data=BASE[: HEAD_END + 2])  # a head that never ends: closed at the idle bound
@example(data=BASE.replace(b"Content-Length", b"Transfer-Encoding: chunked\r\nContent-Length"))
@example(data=BASE.replace(b"Host", b"Expect: 100-continue\r\nHost"))
async def test_a_mutated_request_is_answered_below_500_or_closed_and_the_next_is_served(
    front: Gateway, error_records: ErrorRecords, data: bytes
) -> None:
    with no_error_lines(error_records):
        answer = await exchange(front.server.port, data)
        if answer is None:
            tally("closed")
        else:
            tally(f"HTTP {answer.status}")
            assert answer.status < 500, (answer.status, answer.raw[:300])
    await served(front)
