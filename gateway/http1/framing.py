"""HTTP/1.1 framing, sans I/O: a request's head written, a response's bytes parsed into events.

`ResponseParser.feed` returns `Head`, then the body as `bytes` pieces, then `End`, for
one response after another on a connection (`expect` before each). The parsing is
llhttp's (Node's parser, through the `httptools` binding), strict as llhttp is by
default: no obs-fold, no bare CR or LF, no NUL or control byte in a head, no
Content-Length beside Transfer-Encoding nor given twice, no malformed chunk. This
module adds what llhttp leaves to its caller: a bound on a head (and on interim 1xx
heads before it) and on what a body carries besides its bytes (chunk lines with their
extensions, trailers), a status of 100..599 in HTTP/1.0 or 1.1, no 101 (nothing asks to
switch protocols), nothing after a response but the next one asked for, and the end of
a body framed by the connection's close.

Everything a server sends is untrusted. A malformed response raises `BadResponse` (a
ValueError); the connection it came on is good for nothing after it. Work is linear in
the bytes fed: a head that arrives in pieces waits here until a blank line may have
come and is given to llhttp at once (llhttp's binding joins a field split across feeds
by copying it again for each piece), and a body is never copied into a growing buffer.

It must not do I/O, and imports nothing else of the gateway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import httptools

#: The most a response's head may take, interim (1xx) heads before it included.
MAX_HEAD_BYTES = 64 * 1024
#: What a status line and a field line cost beyond their text (CRLF, `: `, version, code):
#: counted so that many empty lines or interim answers reach the bound too.
_LINE_COST = 16

_NO_BODY_STATUSES = frozenset({204, 304})


class BadResponse(ValueError):
    """The server's bytes are not a valid HTTP/1.1 response."""


class Incomplete(BadResponse):
    """The connection ended in the middle of a response."""


class TooLarge(BadResponse):
    """A head or a body past the bound set for it."""


class Head(NamedTuple):
    """A response's head. (A named tuple, not a frozen dataclass: made for every response,
    whose fields a frozen dataclass sets at several times the cost.)"""

    status: int
    headers: dict[str, str]  # names lower-cased; repeated fields joined with ", "
    keep_alive: bool


@dataclass(frozen=True, slots=True)
class End:
    """The body is complete; the connection may carry the next request if `Head.keep_alive`."""


END = End()
Event = Head | bytes | End


def request_head(
    method: str, target: str, host: str, headers: dict[str, str], length: int
) -> bytes:
    """The head of a request with a `length`-byte body (none for GET without one).

    Raises:
        ValueError: a header name or value would break the head (CR, LF or NUL).
    """
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    for name, value in headers.items():
        if not name or ":" in name:
            raise ValueError(f"header {name!r} cannot be sent: it holds a forbidden character")
        lines.append(f"{name}: {value}")
    if _forbidden("".join(lines[2:])):  # one look at them all; then find which
        bad = next(n for n, v in headers.items() if _forbidden(n + v))
        raise ValueError(f"header {bad!r} cannot be sent: it holds a forbidden character")
    if length or method not in ("GET", "DELETE"):
        lines.append(f"Content-Length: {length}")
    lines.append("\r\n")
    return "\r\n".join(lines).encode("latin-1")


def _forbidden(text: str) -> bool:
    """Whether `text` holds CR, LF or NUL (they would end a header line, or the head).
    Three scans of a string, each by memchr, cost less than one regular-expression
    search through a character class, character by character."""
    return "\r" in text or "\n" in text or "\0" in text


# Where the response in flight stands.
_IDLE = 0  # no request in flight: any byte is one nobody asked for
_HEAD = 1  # its head (or an interim one) is arriving
_BODY = 2  # its head is out, its body arriving
_DONE = 3  # it ended; nothing may follow it (llhttp lets an empty line by, and says so)


class ResponseParser:
    """One connection's responses, one after another (`expect` before each).

    llhttp calls the `on_*` methods from inside `feed`; they are its callbacks, not API.
    """

    __slots__ = (
        "max_head_bytes",
        "_llhttp",
        "_state",
        "_events",
        "_body",
        "_headers",
        "_head_size",
        "_pending",
        "_window",
        "_interim",
        "_close_framed",
        "_carried_body",
        "_bare_bytes",
    )

    def __init__(self, *, max_head_bytes: int = MAX_HEAD_BYTES) -> None:
        self.max_head_bytes = max_head_bytes
        self._llhttp = httptools.HttpResponseParser(self)
        self._state = _IDLE
        self._events: list[Event] = []
        self._body: list[bytes] = []  # the pieces one feed brought, handed out as one
        self._headers: dict[str, str] = {}
        self._head_size = 0  # the head's text so far, interim heads included
        self._pending = bytearray()  # head bytes held back from llhttp (see the module)
        self._window = b""  # the last bytes given llhttp while a head was still under way
        self._interim = False
        self._close_framed = False
        self._carried_body = False  # whether the feed under way brought any body byte
        self._bare_bytes = 0  # bytes in a row, past the head, that brought none

    def expect(self) -> None:
        """A request has been sent: its response comes next."""
        self._state = _HEAD
        self._headers = {}
        self._head_size = 0
        self._pending = bytearray()
        self._window = b""
        self._interim = False
        self._bare_bytes = 0

    @property
    def started(self) -> bool:
        """Whether any byte of the current response has arrived."""
        return self._state != _HEAD or self._head_size > 0 or bool(self._pending or self._window)

    def feed(self, data: bytes) -> list[Event]:
        """The events `data` completes.

        Raises:
            BadResponse
        """
        given: bytes | bytearray = data
        in_head = self._state == _HEAD
        if in_head:
            ready = self._head_so_far(data)
            if ready is None:
                return []
            given = ready
        elif self._state == _IDLE:
            raise BadResponse("the server sent bytes while no request was in flight")
        self._carried_body = False
        try:
            self._llhttp.feed_data(given)
        except httptools.HttpParserCallbackError as exc:
            raise _own(exc) from None
        except httptools.HttpParserError as exc:
            raise BadResponse(f"malformed response: {exc}") from None
        except httptools.HttpParserUpgrade:  # pragma: no cover - 101 is refused before
            raise BadResponse("the server switched protocols") from None
        if self._state == _HEAD:  # an interim answer, or no blank line after all
            self._window = bytes(given[-2:])
        elif in_head or self._carried_body:
            self._bare_bytes = 0
        else:  # chunk lines, trailers: llhttp sets them no bound, and one may never end
            self._bare_bytes += len(given)
            if self._bare_bytes > self.max_head_bytes:
                raise TooLarge("the response's chunk lines or trailers are too large")
        self._flush()
        events, self._events = self._events, []
        return events

    def eof(self) -> list[Event]:
        """The connection closed: the body it ended, if that is how the body was framed.

        Raises:
            Incomplete: a head, a length-framed or a chunked body was cut short.
        """
        if self._state == _BODY and self._close_framed:
            self._state = _DONE
            return [END]
        if self._state in (_IDLE, _DONE):
            return []
        raise Incomplete("the server closed the connection in the middle of its response")

    def _head_so_far(self, data: bytes) -> bytes | bytearray | None:
        """The head bytes to give llhttp now, or None while no blank line (LF, optional
        CR, LF) can have come: they wait in `_pending`. Each byte is looked at once,
        with the two before it."""
        pending = self._pending
        if pending:
            start = max(len(pending) - 2, 0)
            pending += data
            if pending.find(b"\n\r\n", start) >= 0 or pending.find(b"\n\n", start) >= 0:
                self._pending = bytearray()
                return pending
        elif b"\n\r\n" in data or b"\n\n" in data or self._window and self._ends(data):
            return data  # the whole head in one read, as an honest server sends it
        else:
            pending += data
        if self._head_size + len(pending) > self.max_head_bytes:
            raise TooLarge("the response head is too large")
        return None

    def _ends(self, data: bytes) -> bool:
        """Whether a blank line is cut between the bytes given llhttp last and `data`."""
        edge = self._window + data[:2]
        return b"\n\r\n" in edge or b"\n\n" in edge

    # -- llhttp's callbacks ------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._state != _HEAD:
            raise BadResponse("the server sent bytes after its response")

    def on_status(self, text: bytes) -> None:
        self._count(len(text) + _LINE_COST)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._state != _HEAD:
            return  # a trailer field: read and ignored
        # `_count`, written out: this runs for every header of every response.
        self._head_size += len(name) + len(value) + _LINE_COST
        if self._head_size > self.max_head_bytes:
            raise TooLarge("the response head is too large")
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers = self._headers
        headers[key] = f"{headers[key]}, {text}" if key in headers else text

    def on_headers_complete(self) -> None:
        llhttp = self._llhttp
        status = llhttp.get_status_code()
        if llhttp.get_http_version() not in ("1.1", "1.0"):
            raise BadResponse("the response is not HTTP/1.0 or HTTP/1.1")
        if not 100 <= status <= 599:
            raise BadResponse(f"the response's status {status:03d} is not 100..599")
        if status == 101:
            raise BadResponse("the server switched protocols, which nothing asked for")
        if status < 200:
            self._interim = True  # its own head and no body; the real answer follows
            return
        headers = self._headers
        keep_alive = llhttp.should_keep_alive()
        coding = headers.get("transfer-encoding")
        if status in _NO_BODY_STATUSES:
            self._close_framed = False
        elif coding is not None:  # llhttp reads a body not chunked last to the close
            self._close_framed = coding.rsplit(",", 1)[-1].strip().lower() != "chunked"
        else:
            self._close_framed = "content-length" not in headers
        self._state = _BODY
        self._events.append(Head(status, headers, keep_alive and not self._close_framed))

    def on_body(self, data: bytes) -> None:
        self._body.append(data)  # a chunked body's chunks come one call each
        self._carried_body = True

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            self._headers = {}
            return
        self._state = _DONE
        self._flush()
        self._events.append(END)

    def _flush(self) -> None:
        body = self._body
        if body:
            self._events.append(body[0] if len(body) == 1 else b"".join(body))
            body.clear()

    def _count(self, size: int) -> None:
        self._head_size += size
        if self._head_size > self.max_head_bytes:
            raise TooLarge("the response head is too large")


def _own(exc: httptools.HttpParserCallbackError) -> BadResponse:
    """The error one of the callbacks above raised inside llhttp, or one naming llhttp's."""
    cause = exc.__context__
    if isinstance(cause, BadResponse):
        return cause
    return BadResponse(f"malformed response: {exc}")
