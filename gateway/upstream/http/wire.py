"""The HTTP exchanges of one Streamable HTTP session, and nothing about calls.

`HttpWire` knows the endpoint, the session id and version headers, and how to
POST a message and read its answer (JSON or an SSE stream) up to the response,
resuming a broken stream with GET + Last-Event-ID where the server gave event
ids. A 404 for a request that carried the session id means the server forgot the
session: `SessionExpired`. A JSON answer must be the response to the request it
answers; an answer read whole, and each event of a stream, is at most
`Endpoint.max_message_bytes`. Foreign errors become `UpstreamError` here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from gateway.errors import UpstreamError
from gateway.http1 import Http1Client, Response
from gateway.protocol import jsonrpc, sse
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


class HttpWire:
    def __init__(self, http: Http1Client, endpoint: Endpoint) -> None:
        self.http = http
        self.endpoint = endpoint
        self.session_id: str | None = None
        self.version: Version = UPSTREAM_VERSIONS[0]
        self.gone = False  # the server answered 404 for this session

    async def headers(self, *, accept: str = _ACCEPT) -> dict[str, str]:
        headers = await self.endpoint.request_headers(Accept=accept)
        headers["Content-Type"] = "application/json"
        if self.session_id is not None:
            headers[SESSION_HEADER] = self.session_id
            headers[VERSION_HEADER] = str(self.version)  # a StrEnum's str() is its value, in C
        return headers

    def forget_session(self) -> None:
        self.session_id = None
        self.gone = False

    def _capture_session(self, resp: Response) -> None:
        if self.session_id is None:
            self.session_id = resp.headers.get(_SESSION_KEY)

    def _check_status(self, resp: Response) -> None:
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

    async def open_get(self, last_event_id: str | None = None) -> Response:
        """A GET stream on the session (the caller reads and closes it). Raises: UpstreamError."""
        headers = await self.headers(accept="text/event-stream")
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        with mapped_errors("opening a GET stream"):
            return await self._request("GET", headers)

    async def _request(
        self, method: str, headers: dict[str, str], message: dict[str, Any] | None = None
    ) -> Response:
        """Redirects are never followed: the headers (credentials) would go along."""
        body = jsonrpc.dumps(message) if message is not None else b""
        endpoint = self.endpoint
        return await self.http.request(
            method,
            endpoint.url,
            headers,
            body,
            connect_timeout_s=endpoint.timeout_s,
            max_body_bytes=endpoint.max_message_bytes,
        )

    def sse_parser(self) -> sse.Parser:
        """A parser for one of this server's streams, bounded as its messages are."""
        return sse.Parser(self.endpoint.max_message_bytes)

    async def post_call(
        self,
        message: dict[str, Any],
        cursor: StreamCursor,
        extra: Mapping[str, str] | None = None,
    ) -> Response | dict[str, Any]:
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
                        item = parse_message(await resp.read())
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
        with mapped_errors("posting a request"):
            async with answer as resp:
                async for item in self.read_stream(resp, rid, cursor):
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
        self, resp: Response, rid: Any, cursor: StreamCursor
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield a stream's messages until the response to `rid`, keeping the resume cursor.

        Raises:
            OSError, ValueError (`sse.EventTooLarge` among them): for `mapped_errors`.
        """
        parser = self.sse_parser()
        while (chunk := await resp.next_chunk()) is not None:
            for item in self.call_messages(parser, chunk, rid, cursor):
                yield item
            if cursor.answered:
                await drain(resp.next_chunk)
                return

    def call_messages(
        self, parser: sse.Parser, chunk: bytes, rid: Any, cursor: StreamCursor
    ) -> list[dict[str, Any]]:
        """The messages a piece of a call's stream completes, up to the response to `rid`
        (then `cursor.answered`); `cursor` keeps the server's retry hint and last event id.
        Shared by the awaited reader above and the callbacks' (`gateway.upstream.http.stream`)."""
        items: list[dict[str, Any]] = []
        for event in parser.feed(chunk):
            if event.retry is not None:
                cursor.retry_ms = event.retry
            if not event.data and event.id is not None and cursor.live is not None:
                cursor.live.set()  # a priming event: from here on the stream is live
            item = self.message(event)
            if item is None:
                continue
            items.append(item)
            if is_response_to(item, rid):
                cursor.answered = True
                return items
        cursor.last_id = parser.last_event_id or cursor.last_id
        return items

    def message(self, event: sse.Event) -> dict[str, Any] | None:
        """The message an event carries; bad JSON is logged and skipped."""
        item = message_of(event)
        if item is None and event.event == "message" and event.data:
            log.warning("upstream_sent_bad_json", upstream=self.endpoint.name)
        return item
