"""Hostile answers a legacy server can give, as scripts for `tests.http1.servers.Server`.

Each writes its bytes around a real body (the JSON answer the request deserves), so a
lenient client would take many of them for a good answer: the tests that use them show
the client refuses each with a ValueError or OSError, never reuses the connection, and
serves the next request cleanly. They are used against the client alone
(tests/http1/test_hostile.py) and through the gateway (tests/upstream/test_hostile_upstreams.py).
A script returns False to close the connection after it, None to keep it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

Hostile = Callable[[asyncio.StreamWriter, bytes], Awaitable[object]]

JSON = b"content-type: application/json\r\n"


def sized(body: bytes) -> bytes:
    return b"content-length: %d\r\n" % len(body)


async def endless(writer: asyncio.StreamWriter, piece: bytes) -> bool:
    """Write `piece` again and again until the client closes the connection."""
    try:
        while True:
            writer.write(piece)
            await writer.drain()
    except ConnectionError:
        return False


async def length_and_chunked(writer: asyncio.StreamWriter, body: bytes) -> None:
    writer.write(
        b"HTTP/1.1 200 OK\r\n" + JSON + sized(body) + b"transfer-encoding: chunked\r\n\r\n"
        b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    )


async def two_lengths(writer: asyncio.StreamWriter, body: bytes) -> None:
    writer.write(
        b"HTTP/1.1 200 OK\r\n" + JSON + sized(body) + sized(body + b" ") + b"\r\n" + body + b" "
    )


async def bad_chunk_size(writer: asyncio.StreamWriter, body: bytes) -> None:
    writer.write(
        b"HTTP/1.1 200 OK\r\n" + JSON + b"transfer-encoding: chunked\r\n\r\n"
        b"%xg\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    )


async def chunk_without_its_crlf(writer: asyncio.StreamWriter, body: bytes) -> None:
    writer.write(
        b"HTTP/1.1 200 OK\r\n" + JSON + b"transfer-encoding: chunked\r\n\r\n"
        b"%x\r\n%sXX0\r\n\r\n" % (len(body), body)
    )


async def interim_only(writer: asyncio.StreamWriter, body: bytes) -> bool:
    writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\n")
    await writer.drain()
    return False


def head_with(line: bytes) -> Hostile:
    """An answer whose head carries `line` among good fields."""

    async def answer(writer: asyncio.StreamWriter, body: bytes) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\n" + JSON + line + sized(body) + b"\r\n" + body)

    return answer


async def superscript_length(writer: asyncio.StreamWriter, body: bytes) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\n" + JSON + b"content-length: \xb9\xb2\r\n\r\n" + body)


async def status_099(writer: asyncio.StreamWriter, body: bytes) -> None:
    writer.write(b"HTTP/1.1 099 OK\r\n" + JSON + sized(body) + b"\r\n" + body)


async def early_close(writer: asyncio.StreamWriter, body: bytes) -> bool:
    writer.write(b"HTTP/1.1 200 OK\r\n" + JSON + sized(body) + b"\r\n" + body[: len(body) // 2])
    await writer.drain()
    return False


def past_the_body(smuggled: bytes) -> Hostile:
    """A good answer, and right behind it a whole second answer nobody asked for (for the
    next request on the connection, if the client reused it)."""

    async def answer(writer: asyncio.StreamWriter, body: bytes) -> None:
        second = b"HTTP/1.1 200 OK\r\n" + JSON + sized(smuggled) + b"\r\n" + smuggled
        writer.write(b"HTTP/1.1 200 OK\r\n" + JSON + sized(body) + b"\r\n" + body + second)

    return answer


async def endless_head(writer: asyncio.StreamWriter, body: bytes) -> bool:
    writer.write(b"HTTP/1.1 200 OK\r\n" + JSON)
    return await endless(writer, b"x-padding: " + b"a" * 1000 + b"\r\n")


async def huge_announced_body(writer: asyncio.StreamWriter, body: bytes) -> bool:
    writer.write(b"HTTP/1.1 200 OK\r\n" + JSON + b"content-length: 2000000000\r\n\r\n")
    return await endless(writer, b" " * 65536)


async def huge_chunked_body(writer: asyncio.StreamWriter, body: bytes) -> bool:
    writer.write(b"HTTP/1.1 200 OK\r\n" + JSON + b"transfer-encoding: chunked\r\n\r\n")
    return await endless(writer, b"10000\r\n" + b" " * 0x10000 + b"\r\n")


async def endless_trailer(writer: asyncio.StreamWriter, body: bytes) -> bool:
    writer.write(
        b"HTTP/1.1 200 OK\r\n" + JSON + b"transfer-encoding: chunked\r\n\r\n"
        b"%x\r\n%s\r\n0\r\n" % (len(body), body)
    )
    return await endless(writer, b"x-trailer: " + b"t" * 1000 + b"\r\n")


async def endless_chunk_extension(writer: asyncio.StreamWriter, body: bytes) -> bool:
    writer.write(b"HTTP/1.1 200 OK\r\n" + JSON + b"transfer-encoding: chunked\r\n\r\n1;x=")
    return await endless(writer, b"e" * 1000)


#: Each refused: a clear error, the connection closed.
HOSTILE: dict[str, Hostile] = {
    "length and chunked": length_and_chunked,
    "two lengths": two_lengths,
    "bad chunk size": bad_chunk_size,
    "chunk without its CRLF": chunk_without_its_crlf,
    "interim answers only": interim_only,
    "obs-fold": head_with(b"x-folded: a\r\n b\r\n"),
    "CR in a head": head_with(b"x-cr: a\rb\r\n"),
    "bare LF in a head": head_with(b"x-lf: a\nx-other: b\r\n"),
    "NUL in a head": head_with(b"x-nul: a\0b\r\n"),
    "superscript digits for a length": superscript_length,
    "status 099": status_099,
    "early close": early_close,
    "bytes past the body": past_the_body(b'{"smuggled":true}'),
    "endless head": endless_head,
    "huge announced body": huge_announced_body,
    "huge chunked body": huge_chunked_body,
    "endless trailer": endless_trailer,
    "endless chunk extension": endless_chunk_extension,
}


async def interim_then_final(writer: asyncio.StreamWriter, body: bytes) -> None:
    """Not hostile: interim answers, then the real one."""
    writer.write(
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n"
        b"HTTP/1.1 200 OK\r\n" + JSON + sized(body) + b"\r\n" + body
    )


class Drip:
    """A valid answer sent a byte at a time, never ending, until `released` (or the
    client closes): `sent` once its head is out, `over` once it stopped."""

    def __init__(self) -> None:
        self.sent, self.released, self.over = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def __call__(self, writer: asyncio.StreamWriter, body: bytes) -> bool:
        try:
            writer.write(b"HTTP/1.1 200 OK\r\n" + JSON + b"content-length: 1000000\r\n\r\n")
            await writer.drain()
            self.sent.set()
            while not self.released.is_set():
                writer.write(b" ")
                await writer.drain()
                await asyncio.sleep(0.01)  # the drip's pace, what makes it slow
        except ConnectionError:
            pass
        finally:
            self.over.set()
        return False
