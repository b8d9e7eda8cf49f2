"""The HTTP exchanges of one Streamable HTTP session, and nothing about calls.

`HttpWire` knows the endpoint, the session id and version headers, and how to
POST a message and read its answer (JSON or an SSE stream) up to the response,
resuming a broken stream with GET + Last-Event-ID where the server gave event
ids. A 404 for a request that carried the session id means the server forgot the
session: `SessionExpired`. A JSON answer must be the response to the request it
answers; an answer read whole, and each event of a stream, is at most
`Endpoint.max_message_bytes`. Foreign errors become `UpstreamError` here.

A response of `large.LARGE_BYTES` or more (a JSON body, or one event of a call's stream)
is read in steps (`gateway.protocol.large`), the event loop serving everyone else
between two of them, its bulk kept as the bytes it came in and written out as such;
one the steps do not read is read whole, as any other. A list's result (`tools/list`,
...) is always read whole: the gateway filters its entries.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from gateway.errors import UpstreamError
from gateway.http1 import Http1Client, Http1Response
from gateway.protocol import jsonrpc, large, methods, sse
from gateway.protocol.versions import UPSTREAM_VERSIONS, Version
from gateway.upstream.port import SessionExpired, StreamCursor
from gateway.upstream.transport import (
    drain,
    error_text,
    is_response_to,
    mapped_errors,
    message_of,
    parse_message,
)

log = structlog.get_logger("gateway.upstream")

T = TypeVar("T")

SESSION_HEADER = "Mcp-Session-Id"
_SESSION_KEY = SESSION_HEADER.lower()  # response header names arrive lower-cased
VERSION_HEADER = "MCP-Protocol-Version"
_ACCEPT = "application/json, text/event-stream"
_MAX_RESUME_ATTEMPTS = 6
#: Revisions whose servers open a resumed stream with a priming event (an id, no data),
#: which mcp 1.x sends once the stream is registered for the call's new events.
_PRIMING = frozenset({Version.V2025_11_25})


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where and how to reach one legacy server."""

    name: str
    url: str
    headers: dict[str, str]
    timeout_s: float
    # The largest message the server may send: a JSON body, or one event of a stream.
    max_message_bytes: int = sse.MAX_EVENT_BYTES
    client_name: str = "mrtr-gateway"
    client_version: str = "0.1.0"
    # The gateway's own `Authorization` for this upstream (never the client's), per request,
    # and what to do when the upstream refuses it (401): fetch a fresh one next time.
    authorization: Callable[[], Awaitable[str]] | None = None
    unauthorized: Callable[[], None] | None = None

    def refused(self, status: int) -> None:
        """Note an upstream answer: a 401 drops the gateway's cached token."""
        if status == 401 and self.unauthorized is not None:
            self.unauthorized()

    async def request_headers(self, **more: str) -> dict[str, str]:
        """The static headers, the gateway's own credentials, then `more`.

        Raises:
            UpstreamError: the credentials could not be obtained.
        """
        headers = dict(self.headers)
        if self.authorization is not None:
            headers["Authorization"] = await self.authorization()
        headers.update(more)
        return headers


async def stepped(raw: bytes, whole: Callable[[], T]) -> dict[str, Any] | T:
    """The response `raw` read in steps, the loop running between two of them; `whole()`
    where the steps do not read it (`large.Unstepped`): the message read whole."""
    steps = large.reading(raw)
    try:
        while True:
            next(steps)
            await asyncio.sleep(0)
    except StopIteration as done:
        message: dict[str, Any] = done.value
        return message
    except large.Unstepped:
        return whole()


class HttpWire:
    def __init__(self, http: Http1Client, endpoint: Endpoint) -> None:
        self.http = http
        self.endpoint = endpoint
        self.session_id: str | None = None
        self.version: Version = UPSTREAM_VERSIONS[0]
        self.gone = False  # the server answered 404 for this session

    async def headers(self, *, accept: str = _ACCEPT) -> dict[str, str]:
        endpoint = self.endpoint
        if endpoint.authorization is None:  # as `request_headers`, without its coroutine
            headers = {**endpoint.headers, "Accept": accept}
        else:
            headers = await endpoint.request_headers(Accept=accept)
        headers["Content-Type"] = "application/json"
        if self.session_id is not None:
            headers[SESSION_HEADER] = self.session_id
            headers[VERSION_HEADER] = str(self.version)  # a StrEnum's str() is its value, in C
        return headers

    def forget_session(self) -> None:
        self.session_id = None
        self.gone = False

    def _capture_session(self, resp: Http1Response) -> None:
        if self.session_id is None:
            self.session_id = resp.headers.get(_SESSION_KEY)

    def _check_status(self, resp: Http1Response) -> None:
        """Raises: SessionExpired on a 404 for a request that carried the session id;
        UpstreamError on a redirect (never followed: it would carry the headers along)."""
        self.endpoint.refused(resp.status)
        if 300 <= resp.status < 400:
            where = resp.headers.get("location", "elsewhere")
            raise UpstreamError(
                f"upstream redirected to {where}; set the upstream's url to where it points"
            )
        if resp.status == 404 and self.session_id is not None:
            self.gone = True
            raise SessionExpired()

    async def send(self, message: dict[str, Any]) -> None:
        """POST a response or notification; the server answers 202.

        Raises:
            UpstreamError
        """
        kind = "notification" if "method" in message else "response"
        with mapped_errors(f"sending a {kind}"):
            async with asyncio.timeout(self.endpoint.timeout_s):
                async with await self._request("POST", await self.headers(), message) as resp:
                    self._capture_session(resp)
                    await resp.read()
                    self._check_status(resp)
                    if resp.status >= 400:
                        raise UpstreamError(f"upstream answered HTTP {resp.status} to a {kind}")

    async def delete(self) -> int:
        """End the session upstream: the HTTP status it answered. Raises: UpstreamError."""
        with mapped_errors("ending the session"):
            async with asyncio.timeout(5):
                async with await self._request("DELETE", await self.headers()) as resp:
                    await resp.read()
                    return resp.status

    async def open_get(self, last_event_id: str | None = None) -> Http1Response:
        """A GET stream on the session (the caller reads and closes it). Raises: UpstreamError."""
        headers = await self.headers(accept="text/event-stream")
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        with mapped_errors("opening a GET stream"):
            return await self._request("GET", headers)

    def _request(
        self, method: str, headers: dict[str, str], message: dict[str, Any] | None = None
    ) -> Awaitable[Http1Response]:
        """The request's response, to await. Redirects are never followed: the headers
        (credentials) would go along. (The client's coroutine itself, not one of ours
        around it: a frame fewer to resume while the server answers.)"""
        body = jsonrpc.dumps(message) if message is not None else b""
        endpoint = self.endpoint
        return self.http.request(
            method,
            endpoint.url,
            headers,
            body,
            connect_timeout_s=endpoint.timeout_s,
            max_body_bytes=endpoint.max_message_bytes,
        )

    def sse_parser(self, *, large_raw: bool = False) -> sse.Parser:
        """A parser for one of this server's streams, bounded as its messages are;
        `large_raw`: a large event held undecoded, for `read_large` (a call's stream)."""
        raw_over = large.LARGE_BYTES - 1 if large_raw else None
        return sse.Parser(self.endpoint.max_message_bytes, raw_over)

    async def post_call(
        self,
        message: dict[str, Any],
        cursor: StreamCursor,
        extra: Mapping[str, str] | None = None,
    ) -> Http1Response | dict[str, Any]:
        """POST a call's request: its JSON answer (the response to it, else an error),
        or the SSE response to read it from (the caller reads and releases it).

        Raises:
            SessionExpired, UpstreamError
        """
        headers = await self.headers()
        if extra:
            headers.update(extra)
        with mapped_errors("posting a request"):
            resp = await self._request("POST", headers, message)
            try:
                self._capture_session(resp)
                self._check_status(resp)
                cursor.accepted = resp.status < 400
                ctype = resp.headers.get("content-type", "").split(";")[0].strip().lower()
                if resp.status >= 400:
                    body = await resp.read()
                    raise UpstreamError(f"upstream answered HTTP {resp.status}: {error_text(body)}")
                if ctype == "application/json":
                    async with resp:  # read whole: its connection goes back to the pool
                        body = await resp.read()
                    if len(body) < large.LARGE_BYTES or message.get("method") in methods.LISTS:
                        item = parse_message(body)
                    else:
                        item = await stepped(body, lambda: parse_message(body))
                    if not is_response_to(item, message.get("id")):
                        raise UpstreamError(
                            "upstream answered with JSON that is not the response to its request"
                        )
                    return item
                if ctype != "text/event-stream":
                    raise UpstreamError(f"upstream answered with Content-Type {ctype!r}")
            except BaseException:
                resp.release()
                raise
        return resp

    async def exchange(
        self,
        message: dict[str, Any],
        rid: Any,
        cursor: StreamCursor,
        extra: Mapping[str, str] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """POST `message`; yield the messages of its answer until the response to `rid`.

        Raises:
            SessionExpired, UpstreamError
        """
        answer = await self.post_call(message, cursor, extra)
        if isinstance(answer, dict):
            yield answer
            return
        lists = message.get("method") in methods.LISTS
        with mapped_errors("posting a request"):
            async with answer as resp:
                async for item in self.read_stream(resp, rid, cursor, large_raw=not lists):
                    yield item
        if cursor.answered:
            return
        if cursor.last_id is None:
            raise UpstreamError("upstream closed the stream before answering")
        async for item in self.resume(rid, cursor):
            yield item

    async def resume(self, rid: Any, cursor: StreamCursor) -> AsyncIterator[dict[str, Any]]:
        """Continue a broken POST stream with GET + Last-Event-ID (2025-11-25 polling).

        A connection that cannot be made is tried again with a growing delay (a server
        restarting, a blip), up to `_MAX_RESUME_ATTEMPTS`; a 404 means the session is gone.

        Raises:
            SessionExpired, UpstreamError
        """
        delay = (cursor.retry_ms or 0) / 1000
        for attempt in range(_MAX_RESUME_ATTEMPTS):
            await asyncio.sleep(delay)
            try:
                resp = await self.open_get(cursor.last_id or "")
                async with resp:
                    self._check_status(resp)
                    if resp.status != 200:
                        raise UpstreamError(
                            f"upstream refused to resume the stream: HTTP {resp.status}"
                        )
                    if cursor.live is not None and self.version not in _PRIMING:
                        cursor.live.set()  # no priming event will say so: the head must do
                    with mapped_errors("resuming a stream"):
                        async for item in self.read_stream(resp, rid, cursor):
                            yield item
            except SessionExpired:
                raise
            except UpstreamError as exc:
                connection_failed = isinstance(exc.__cause__, OSError)
                if not connection_failed or attempt + 1 == _MAX_RESUME_ATTEMPTS:
                    raise
            if cursor.answered:
                return
            delay = max(delay * 2, 0.2)
        raise UpstreamError("upstream stream could not be resumed")

    async def read_stream(
        self, resp: Http1Response, rid: Any, cursor: StreamCursor, *, large_raw: bool = True
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield a stream's messages until the response to `rid`, keeping the resume cursor;
        `large_raw`: a large event read in steps (`read_large`), else whole.

        Raises:
            OSError, ValueError (`sse.EventTooLarge` among them): for `mapped_errors`.
        """
        parser = self.sse_parser(large_raw=large_raw)
        while (chunk := await resp.next_chunk()) is not None:
            for item in self.call_messages(parser, chunk, rid, cursor):
                yield item
            while parser.held is not None and not cursor.answered:
                for item in await self.read_large(parser, rid, cursor):
                    yield item
            if cursor.answered:
                await drain(resp.next_chunk)
                return

    def call_messages(
        self, parser: sse.Parser, chunk: bytes, rid: Any, cursor: StreamCursor
    ) -> list[dict[str, Any]]:
        """The messages a piece of a call's stream completes, up to the response to `rid`
        (then `cursor.answered`) or a large event (`parser.held`: `read_large` reads it and
        what follows it); `cursor` keeps the server's retry hint and last event id.
        Shared by the awaited reader above and the callbacks' (`gateway.upstream.http.stream`)."""
        items: list[dict[str, Any]] = []
        for event in parser.feed(chunk):
            if event.retry is not None:
                cursor.retry_ms = event.retry
            if not event.data and event.id is not None and cursor.live is not None:
                cursor.live.set()  # a priming event: from here on the stream is live
            # The stream resumes after the last event read whole: not after one whose id
            # line came but not yet its end (a large one, held for its reading, neither).
            cursor.last_id = event.id or cursor.last_id
            item = self.message(event)
            if item is None:
                continue
            items.append(item)
            if is_response_to(item, rid):
                cursor.answered = True
                return items
        return items

    async def read_large(
        self, parser: sse.Parser, rid: Any, cursor: StreamCursor
    ) -> list[dict[str, Any]]:
        """The message of the large event `parser` holds, read in steps, then those of the
        events after it (`call_messages`: the parser may hold the next large one)."""
        held = parser.held
        assert held is not None
        if held.retry is not None:
            cursor.retry_ms = held.retry
        item = None
        if held.event == "message":

            def whole() -> dict[str, Any] | None:  # as a parser without `raw_over` gives it
                text = held.raw.decode("utf-8", "replace")
                return self.message(sse.SseEvent(text, held.event, held.id, held.retry))

            item = await stepped(held.raw, whole)
        parser.release()
        cursor.last_id = held.id or cursor.last_id
        if item is not None and is_response_to(item, rid):
            cursor.answered = True
            return [item]
        rest = self.call_messages(parser, b"", rid, cursor)
        return rest if item is None else [item, *rest]

    def message(self, event: sse.SseEvent) -> dict[str, Any] | None:
        """The message an event carries; bad JSON is logged and skipped."""
        item = message_of(event)
        if item is None and event.event == "message" and event.data:
            log.warning("upstream_sent_bad_json", upstream=self.endpoint.name)
        return item
