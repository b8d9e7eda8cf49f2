"""The HTTP/1.1 requests the gateway's listener serves without aiohttp, sans-IO.

Nearly every request a 2026-07-28 client sends is the same shape: `POST` to an MCP
path over HTTP/1.1, with a `Content-Length` body. `read_head` recognises exactly
that shape in the bytes a connection has buffered and says, for anything else,
why it goes to aiohttp instead (`HandOff`): another method or path, chunked or
`Expect` bodies, upgrades, oversize or unusual heads, non-ASCII bytes, anything
malformed. When in doubt it hands off: aiohttp's parser answers the odd cases
(400, 413, 405 ...) as it always has, so this path only ever sees requests whose
message boundaries are plain. The rest is serialising what the gateway answers.
"""

from __future__ import annotations

import re
from collections.abc import Container, Iterable
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus

from multidict import CIMultiDict, CIMultiDictProxy

#: A head longer than this goes to aiohttp (which takes lines up to 8,190 bytes).
MAX_HEAD_BYTES = 16 * 1024
#: aiohttp's limits on one line and on the number of header fields (it answers 400).
MAX_LINE_BYTES = 8190
MAX_FIELDS = 128
#: Fields aiohttp refuses to see twice (its parser's `SINGLETON_HEADERS`), lowercase.
SINGLETONS = frozenset(
    {
        "content-length",
        "content-location",
        "content-range",
        "content-type",
        "etag",
        "host",
        "max-forwards",
        "server",
        "transfer-encoding",
        "user-agent",
    }
)

_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
# A field's value without the whitespace around it, in a pattern that cannot backtrack
# (runs of other bytes separated by runs of SP / HT).
_VALUE = r"[ \t]*((?:[^\r\n \t]+(?:[ \t]+[^\r\n \t]+)*)?)[ \t]*\r\n"
#: Every header line well formed: a token, a colon, a value without CR or LF.
_FIELDS = re.compile(f"(?:{_TOKEN}:[^\r\n]*\r\n)*")
_FIELD = re.compile(f"({_TOKEN}):{_VALUE}")
# Control bytes but HT, CR and LF (CR and LF may only end lines, as `_FIELDS` checks).
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class SimplePost:
    """A `POST` this listener serves itself; its body follows `head_size` bytes in."""

    path: str
    headers: CIMultiDictProxy[str]
    head_size: int
    body_size: int
    close: bool  # `Connection: close`: the connection ends after the answer


@dataclass(frozen=True, slots=True)
class HandOff:
    """A request for aiohttp (and the connection with it, from this request on)."""

    reason: str


def read_head(
    buf: bytes | bytearray, paths: Container[str], max_body: int
) -> SimplePost | HandOff | None:
    """What the request at the start of `buf` is; None until its head is all there."""
    if not 0x41 <= buf[0] <= 0x5A:  # a method starts with a capital letter; TLS does not
        return HandOff("not the start of an HTTP request")
    end = buf.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES)
    if end < 0:
        if len(buf) >= MAX_HEAD_BYTES:
            return HandOff("head too large")
        if b"\n\n" in buf[:MAX_HEAD_BYTES]:  # lines ended by a bare LF: aiohttp decides
            return HandOff("a head of bare LF line ends")
        return None
    head = buf[:end]
    if not head.isascii() or _CONTROL.search(head):
        return HandOff("bytes outside printable ASCII in the head")
    text = head.decode("ascii")
    line_end = text.find("\r\n")
    request_line = text if line_end < 0 else text[:line_end]
    method, _, rest = request_line.partition(" ")
    path, _, version = rest.partition(" ")
    if method != "POST" or version != "HTTP/1.1":
        return HandOff("not a POST over HTTP/1.1")
    if path not in paths:
        return HandOff("not an MCP path")
    fields = text[line_end + 2 :] + "\r\n" if line_end >= 0 else ""
    if not _FIELDS.fullmatch(fields):
        return HandOff("a malformed header line")
    if end > MAX_LINE_BYTES and max(map(len, text.split("\r\n"))) > MAX_LINE_BYTES:
        return HandOff("a line over aiohttp's limit")
    headers: CIMultiDict[str] = CIMultiDict(_FIELD.findall(fields))
    if len(headers) > MAX_FIELDS:
        return HandOff("more header fields than aiohttp takes")
    if len(set(map(str.lower, headers.keys()))) != len(headers) and any(
        len(headers.getall(name, ())) > 1 for name in SINGLETONS
    ):
        return HandOff("a field that may come once came twice")
    if "Host" not in headers:
        return HandOff("no Host")
    # Fields that make aiohttp do more than read the body (de-chunk or decompress it,
    # answer 100 Continue, upgrade) or refuse the request: left to it.
    if (
        "Transfer-Encoding" in headers
        or "Content-Encoding" in headers
        or "Expect" in headers
        or "Upgrade" in headers
        or "Sec-WebSocket-Key1" in headers
    ):
        return HandOff("a chunked, encoded, expected or upgraded body")
    lengths = headers.getall("Content-Length", [])
    if len(lengths) != 1 or not lengths[0].isdigit() or len(lengths[0]) > 18:
        return HandOff("no single Content-Length")
    size = int(lengths[0])
    if size > max_body:
        return HandOff("a body over the limit")
    close = False
    for option in headers.getall("Connection", []):
        for token in option.lower().split(","):
            token = token.strip()
            if token == "close":
                close = True
            elif token not in ("keep-alive", ""):
                return HandOff("a Connection option")
    return SimplePost(path, CIMultiDictProxy(headers), end + 4, size, close)


_REASONS = {status.value: status.phrase for status in HTTPStatus}


def response_head(
    status: int,
    headers: Iterable[tuple[str, str]],
    date: str,
    *,
    length: int | None,
    close: bool = False,
) -> bytes:
    """Status line and headers; `length` None: a chunked body follows; `close`: the
    connection ends after this answer (and says so).

    Raises:
        ValueError: a header would break the head (CR or LF in it).
    """
    out = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\n"]
    for name, value in headers:
        if name.lower() in ("content-length", "transfer-encoding", "date", "connection"):
            continue
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value:
            raise ValueError(f"header {name!r} holds a line break")
        out.append(f"{name}: {value}\r\n")
    if length is None:
        out.append("Transfer-Encoding: chunked\r\n")
    else:
        out.append(f"Content-Length: {length}\r\n")
    if close:
        out.append("Connection: close\r\n")
    out.append(f"Date: {date}\r\n\r\n")
    return "".join(out).encode("latin-1")


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data) if data else b""


LAST_CHUNK = b"0\r\n\r\n"


class HttpDate:
    """The `Date` header's value, formatted once a second."""

    def __init__(self) -> None:
        self._second = -1
        self._text = ""

    def at(self, now: float) -> str:
        second = int(now)
        if second != self._second:
            self._second, self._text = second, formatdate(second, usegmt=True)
        return self._text
