"""A legacy session over HTTP+SSE (protocol 2024-11-05), an `UpstreamSession`.

The gateway opens the SSE stream (GET), takes the `endpoint` event that names
where to POST, then posts each message there; everything the server says,
responses included, arrives on the stream. The connection is the session: when
it drops, the session is dead (there is no resumption in this transport), and
the pool opens another. Both go through the gateway's HTTP/1.1 client
(`gateway.http1`); the stream is read by its connection's callbacks (`_Stream`),
with no task of its own. An event past `Endpoint.max_message_bytes` ends the
stream and so the session. Foreign errors become `UpstreamError` in
`transport.mapped_errors`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any
from urllib.parse import urljoin, urlsplit

import structlog

from gateway.errors import UpstreamError
from gateway.http1 import Http1Client, Http1Response
from gateway.protocol import jsonrpc, sse
from gateway.protocol.capabilities import ClientCaps
from gateway.upstream.duplex import DuplexSession
from gateway.upstream.http.wire import Endpoint
from gateway.upstream.transport import failure, mapped_errors, message_of

log = structlog.get_logger("gateway.upstream")


class SseSession(DuplexSession):
    def __init__(self, http: Http1Client, endpoint: Endpoint, caps: ClientCaps) -> None:
        super().__init__(
            endpoint.name,
            caps,
            timeout_s=endpoint.timeout_s,
            client_version=endpoint.client_version,
        )
        self.http = http
        self.endpoint = endpoint
        self.post_url: str | None = None
        self._stream: Http1Response | None = None

    async def _connect(self) -> None:
        endpoint = self.endpoint
        headers = await endpoint.request_headers(Accept="text/event-stream")
        found: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(endpoint.timeout_s):
                with mapped_errors("opening the SSE stream"):
                    resp = await self.http.request(
                        "GET", endpoint.url, headers, connect_timeout_s=endpoint.timeout_s
                    )
                self._stream = resp
                endpoint.refused(resp.status)
                ctype = resp.headers.get("content-type", "").split(";")[0].strip().lower()
                if resp.status != 200 or ctype != "text/event-stream":
                    raise UpstreamError(
                        f"upstream answered the SSE stream with HTTP {resp.status} "
                        f"({ctype or 'no type'})"
                    )
                parser = sse.Parser(endpoint.max_message_bytes)
                resp.stream_into(_Stream(parser, found, self._deliver, self._stream_ended))
                path = await found
        except TimeoutError as exc:
            self._let_go()
            raise UpstreamError("upstream sent no endpoint event on its SSE stream") from exc
        except BaseException:
            self._let_go()
            raise
        self.post_url = self._endpoint_url(path)

    def _endpoint_url(self, path: str) -> str:
        """The POST URL the `endpoint` event names; it must be on the stream's origin."""
        url = urljoin(self.endpoint.url, path.strip())
        here, there = urlsplit(self.endpoint.url), urlsplit(url)
        if (here.scheme, here.netloc) != (there.scheme, there.netloc):
            raise UpstreamError("upstream named an endpoint on another origin")
        return url

    def _stream_ended(self, error: UpstreamError) -> None:
        """The stream ended (or broke): the session is dead."""
        self._stream = None
        log.info("upstream_sse_stream_ended", upstream=self.name, error=str(error))
        self._lost(error)

    async def _write(self, message: dict[str, Any]) -> None:
        if self.post_url is None:
            raise UpstreamError("the SSE session has no endpoint yet")
        endpoint = self.endpoint
        headers = await endpoint.request_headers(**{"Content-Type": "application/json"})
        with mapped_errors("posting to the SSE endpoint"):
            async with asyncio.timeout(endpoint.timeout_s):
                resp = await self.http.request(
                    "POST",
                    self.post_url,
                    headers,
                    jsonrpc.dumps(message),
                    connect_timeout_s=endpoint.timeout_s,
                    max_body_bytes=endpoint.max_message_bytes,
                )
                async with resp:
                    await resp.read()
                    endpoint.refused(resp.status)
                    if resp.status >= 300:
                        raise UpstreamError(f"upstream answered HTTP {resp.status} to a message")

    async def _disconnect(self) -> None:
        self._let_go()
        self._lost(UpstreamError("the SSE session was closed"))

    def _let_go(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.release()  # not ended: its connection is closed, which ends the session


class _Stream:
    """The session's SSE stream, a `BodySink`: read by its connection's callbacks."""

    __slots__ = ("_parser", "_found", "_deliver", "_ended")

    def __init__(
        self,
        parser: sse.Parser,
        found: asyncio.Future[str],
        deliver: Callable[[dict[str, Any]], None],
        ended: Callable[[UpstreamError], None],
    ) -> None:
        self._parser = parser
        self._found = found  # the `endpoint` event's path, once
        self._deliver = deliver  # each message, in order
        self._ended = ended  # once, when the stream is over

    def data(self, chunk: bytes) -> None:
        """Raises: ValueError (`sse.EventTooLarge`): the client ends the stream."""
        for event in self._parser.feed(chunk):
            if event.event == "endpoint":
                if not self._found.done():
                    self._found.set_result(event.data)
                continue
            message = message_of(event)
            if message is not None:
                self._deliver(message)

    def end(self, error: BaseException | None) -> None:
        lost = (
            UpstreamError("upstream closed the SSE stream")
            if error is None
            else failure("reading the SSE stream", error)
        )
        if not self._found.done():
            self._found.set_exception(lost)
        self._ended(lost)
