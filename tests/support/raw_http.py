"""HTTP/1.1 by hand on a plain socket, for what no well-behaved client sends: pipelined
requests, heads and bodies in pieces, requests that never end, answers left unread."""

from __future__ import annotations

import asyncio


def post(path: str, body: bytes = b"{}", *extra: str, length: int | None = None) -> bytes:
    """A POST's bytes; `length` overrides its `Content-Length` (a body that never ends)."""
    size = len(body) if length is None else length
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {size}", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response: status, headers (lower-case names, the last value wins) and
    body (chunks joined)."""
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionResetError("the connection closed before an answer")
    status = int(status_line.split()[1])
    headers: dict[str, str] = {}
    while (line := await reader.readline()) != b"\r\n":
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        return status, headers, await reader.readexactly(int(headers["content-length"]))
    body = b""
    while size := int((await reader.readline()).strip(), 16):
        body += await reader.readexactly(size)
        await reader.readexactly(2)
    await reader.readexactly(2)
    return status, headers, body


async def closed(reader: asyncio.StreamReader, timeout: float = 30.0) -> bool:
    """Whether the peer closes the connection within `timeout` (what it sends first is
    read and dropped): an event awaited, never a duration measured."""
    try:
        async with asyncio.timeout(timeout):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return False
    except ConnectionError:  # reset rather than closed: closed all the same
        return True
    return True
