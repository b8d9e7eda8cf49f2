"""HTTP/1.1 for the upstream client, sans I/O: a request's bytes out, a response's events in.

The gateway's own upstream client (`gateway.upstream.http.client`) speaks plain
HTTP/1.1 to legacy servers: one request at a time per connection, kept alive
between requests. This module writes a request head and parses a response the
way h11 does (bytes in, events out, no sockets): `ResponseParser.feed` returns
`Head`, then the body as `bytes`, then `End`, for bodies framed by
`Content-Length`, by chunked transfer coding, or by the connection's close.
Informational (1xx) answers are skipped. Everything a server sends is untrusted:
a malformed or oversized head or chunk line raises `BadResponse` (a ValueError).
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_HEAD_BYTES = 64 * 1024
MAX_CHUNK_LINE_BYTES = 1024
_CRLF = b"\r\n"
_NO_BODY = frozenset({204, 304})


def _forbidden(text: str) -> bool:
    """Whether `text` holds CR, LF or NUL (they would end a header line, or the head).
    Three scans of a string, each by memchr, cost less than one regular-expression
    search through a character class, character by character."""
    return "\r" in text or "\n" in text or "\0" in text


class BadResponse(ValueError):
    """The server's bytes are not a valid HTTP/1.1 response."""


class Incomplete(BadResponse):
    """The connection ended in the middle of a response."""


@dataclass(frozen=True, slots=True)
class Head:
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


class ResponseParser:
    """One connection's responses, one after another (`reset` before each request)."""

    __slots__ = ("_buf", "_state", "_left", "_keep", "_no_body")

    def __init__(self) -> None:
        self._buf = b""
        self._state = "head"
        self._left = 0
        self._keep = False
        self._no_body = False

    def reset(self, *, no_body: bool = False) -> None:
        """Expect the next response; `no_body` for a HEAD request."""
        self._state = "head"
        self._no_body = no_body

    @property
    def started(self) -> bool:
        """Whether any byte of the current response has arrived."""
        return self._state != "head" or bool(self._buf)

    def feed(self, data: bytes) -> list[Event]:
        """The events `data` completes.

        Raises:
            BadResponse
        """
        self._buf = self._buf + data if self._buf else data
        events: list[Event] = []
        while True:
            step = _STATES[self._state](self)
            if step is _MORE:
                break
            if step is not _ON:
                events.append(step)
                if step is END:
                    self._state = "idle"
                    if self._buf:
                        raise BadResponse("the server sent bytes after its response")
                    break
        return events

    def eof(self) -> list[Event]:
        """The connection closed: the body it ended, if that is how the body was framed.

        Raises:
            Incomplete: a head, a length-framed or a chunked body was cut short.
        """
        if self._state == "close":
            self._state = "idle"
            return [END]
        if self._state == "idle":
            return []
        raise Incomplete("the server closed the connection in the middle of its response")

    # -- states: each gives an event, _ON (state changed, go on) or _MORE (needs bytes) --

    def _idle(self) -> object:
        if self._buf:
            raise BadResponse("the server sent bytes nobody asked for")
        return _MORE

    def _head(self) -> object:
        end = self._buf.find(b"\r\n\r\n")
        if end < 0 or end > MAX_HEAD_BYTES:
            if len(self._buf) > MAX_HEAD_BYTES:
                raise BadResponse("the response head is too large")
            return _MORE
        raw, self._buf = self._buf[:end], self._buf[end + 4 :]
        status, headers, version = _parse_head(raw)
        if 100 <= status < 200:
            return _ON  # informational: the real head follows
        self._keep = version == "1.1" and "close" not in headers.get("connection", "").lower()
        self._frame(status, headers)
        return Head(status, headers, self._keep)

    def _frame(self, status: int, headers: dict[str, str]) -> None:
        coding = headers.get("transfer-encoding")
        length = headers.get("content-length")
        if self._no_body or status in _NO_BODY:
            self._state = "done"
        elif coding is not None:
            if coding.lower().rsplit(",", 1)[-1].strip() == "chunked":
                self._state = "size"
            else:
                self._keep = False
                self._state = "close"
        elif length is not None:
            self._left = _content_length(length)
            self._state = "length" if self._left else "done"
        else:
            self._keep = False
            self._state = "close"

    def _done(self) -> object:
        return END

    def _length(self) -> object:
        return self._counted("done")

    def _counted(self, after: str) -> object:
        """Up to `_left` more bytes of a body (or chunk) of known length, then `after`."""
        if not self._buf:
            return _MORE
        piece = self._buf[: self._left]
        self._buf = self._buf[len(piece) :]
        self._left -= len(piece)
        if not self._left:
            self._state = after
        return piece

    def _close(self) -> object:
        if not self._buf:
            return _MORE
        piece, self._buf = self._buf, b""
        return piece

    def _size(self) -> object:
        end = self._buf.find(_CRLF)
        if end < 0:
            if len(self._buf) > MAX_CHUNK_LINE_BYTES:
                raise BadResponse("a chunk size line is too long")
            return _MORE
        line, self._buf = self._buf[:end], self._buf[end + 2 :]
        size_text = line.split(b";", 1)[0].strip()
        if not size_text or len(size_text) > 16 or not _is_hex(size_text):
            raise BadResponse("a chunk size is not a hexadecimal number")
        self._left = int(size_text, 16)
        self._state = "chunk" if self._left else "trailer"
        return _ON

    def _chunk(self) -> object:
        return self._counted("chunk_end")

    def _chunk_end(self) -> object:
        if len(self._buf) < 2:
            return _MORE
        if self._buf[:2] != _CRLF:
            raise BadResponse("a chunk does not end with CRLF")
        self._buf = self._buf[2:]
        self._state = "size"
        return _ON

    def _trailer(self) -> object:
        end = self._buf.find(_CRLF)
        if end < 0:
            if len(self._buf) > MAX_HEAD_BYTES:
                raise BadResponse("the trailer section is too large")
            return _MORE
        line, self._buf = self._buf[:end], self._buf[end + 2 :]
        return _ON if line else END  # a trailer field is read and ignored


_MORE = object()
_ON = object()
_STATES = {
    name: getattr(ResponseParser, f"_{name}")
    for name in ("idle", "head", "done", "length", "close", "size", "chunk", "chunk_end", "trailer")
}


_HEX_DIGITS = b"0123456789abcdefABCDEF"


def _is_hex(text: bytes) -> bool:
    return not text.strip(_HEX_DIGITS)  # nothing left once the digits are taken off


def _content_length(value: str) -> int:
    values = {v.strip() for v in value.split(",")}
    if len(values) != 1:
        raise BadResponse("conflicting Content-Length values")
    (text,) = values
    if not text.isdigit() or len(text) > 18:
        raise BadResponse("Content-Length is not a number")
    return int(text)


def _parse_head(raw: bytes) -> tuple[int, dict[str, str], str]:
    status_line, *fields = raw.decode("latin-1").split("\r\n")  # every byte decodes
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or parts[0] not in ("HTTP/1.1", "HTTP/1.0"):
        raise BadResponse("the response does not start with an HTTP/1.x status line")
    code = parts[1]
    if len(code) != 3 or not code.isdigit():
        raise BadResponse("the response's status code is not three digits")
    headers: dict[str, str] = {}
    for field in fields:
        name, sep, value = field.partition(":")
        if not sep or not name or name != name.strip() or name[0] in " \t":
            raise BadResponse("a response header line is malformed")
        key = name.lower()
        value = value.strip(" \t")
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return int(code), headers, parts[0][5:]
