"""What a request the listener serves looks like to the handler, and its answers.

`SimpleRequest` carries what the handler and the middlewares read of an aiohttp
request, under aiohttp's names; a handler answers it with `SimpleRequest.answer` (a
whole answer, lighter than `web.Response`) or `SimpleRequest.stream` (a chunked
stream, which `ResponseChannel` commits to for SSE). The listener writes both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, cast

from aiohttp import web

from gateway.web.simple_http import LAST_CHUNK, SimplePost, chunk, response_head


class Connection(Protocol):
    """The listener's side of a connection, as an answer writes to it."""

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def date(self) -> str: ...


class SimpleRequest(dict[Any, Any]):
    """What the handler and middlewares read of a request (aiohttp's names), and its
    keys (`request[REQUEST_ID]`)."""

    def __init__(self, conn: Connection, post: SimplePost, body: bytes) -> None:
        super().__init__()
        self.method = "POST"
        self.path = post.path
        self.headers = post.headers
        self.content_length = len(body)
        self.content = _Body(body)
        self.streamed: SimpleStream | None = None
        self._conn = conn

    def answer(self, status: int, body: bytes, content_type: str) -> web.StreamResponse:
        """A whole answer, lighter than aiohttp's `web.Response` (which it stands for: the
        middlewares read `prepared` and set `headers` on either)."""
        return cast(web.StreamResponse, SimpleAnswer(status, body, content_type))

    def stream(self, headers: Mapping[str, str]) -> SimpleStream:
        """Commit the answer to a chunked `200` stream (what `ResponseChannel` sends)."""
        self.streamed = SimpleStream(self._conn, headers)
        return self.streamed


class _Body:
    """The body, read whole before the handler runs (`request.content`'s one read)."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    async def readexactly(self, n: int) -> bytes:
        return self._body[:n]


class SimpleAnswer:
    """A whole answer (what a `web.Response` would carry), for the listener to write."""

    prepared = False  # the middlewares may still add headers

    def __init__(self, status: int, body: bytes, content_type: str) -> None:
        self.status, self.body = status, body
        self.headers = {"Content-Type": content_type}


class SimpleStream:
    """A streamed answer: written as it comes, each piece a chunk."""

    prepared = True  # what the middlewares ask of a response already on its way

    def __init__(self, conn: Connection, headers: Mapping[str, str]) -> None:
        self._conn = conn
        self.headers = dict(headers)
        self.ended = False
        conn.write(response_head(200, self.headers.items(), conn.date(), length=None))

    async def write(self, data: bytes) -> None:
        self._conn.write(chunk(data))
        await self._conn.drain()

    async def write_eof(self) -> None:
        if not self.ended:
            self.ended = True
            self._conn.write(LAST_CHUNK)
