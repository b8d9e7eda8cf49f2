"""A legacy session over HTTP+SSE (protocol 2024-11-05), an `UpstreamSession`.

The gateway opens the SSE stream (GET), takes the `endpoint` event that names
where to POST, then posts each message there; everything the server says,
responses included, arrives on the stream. The connection is the session: when
it drops, the session is dead (there is no resumption in this transport), and
the pool opens another. Foreign errors become `UpstreamError` in
`transport.mapped_errors`.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp
import structlog

from gateway.aio import cancel_and_wait, spawn
from gateway.errors import UpstreamError
from gateway.protocol import jsonrpc, sse
from gateway.protocol.capabilities import ClientCaps
from gateway.upstream.duplex import DuplexSession
from gateway.upstream.http.wire import Endpoint
from gateway.upstream.transport import mapped_errors, message_of, sse_events, stream_timeout

log = structlog.get_logger("gateway.upstream")


class SseSession(DuplexSession):
    def __init__(self, http: aiohttp.ClientSession, endpoint: Endpoint, caps: ClientCaps) -> None:
        super().__init__(
            endpoint.name,
            caps,
            timeout_s=endpoint.timeout_s,
            client_version=endpoint.client_version,
        )
        self.http = http
        self.endpoint = endpoint
        self.post_url: str | None = None
        self._reader: asyncio.Task[None] | None = None

    async def _connect(self) -> None:
        headers = await self.endpoint.request_headers(Accept="text/event-stream")
        with mapped_errors("opening the SSE stream"):
            resp = await self.http.get(
                self.endpoint.url,
                headers=headers,
                timeout=stream_timeout(self.endpoint.timeout_s),
                allow_redirects=False,  # a redirect would carry the headers to another origin
            )
        self.endpoint.refused(resp.status)
        ctype = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if resp.status != 200 or ctype != "text/event-stream":
            resp.release()
            raise UpstreamError(
                f"upstream answered the SSE stream with HTTP {resp.status} ({ctype or 'no type'})"
            )
        found: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._reader = spawn(self._read(resp, found), name=f"sse-read-{self.name}", detached=True)
        try:
            async with asyncio.timeout(self.endpoint.timeout_s):
                path = await found
        except TimeoutError as exc:
            await cancel_and_wait(self._reader)
            raise UpstreamError("upstream sent no endpoint event on its SSE stream") from exc
        self.post_url = self._endpoint_url(path)

    def _endpoint_url(self, path: str) -> str:
        """The POST URL the `endpoint` event names; it must be on the stream's origin."""
        url = urljoin(self.endpoint.url, path.strip())
        here, there = urlsplit(self.endpoint.url), urlsplit(url)
        if (here.scheme, here.netloc) != (there.scheme, there.netloc):
            raise UpstreamError("upstream named an endpoint on another origin")
        return url

    async def _read(self, resp: aiohttp.ClientResponse, found: asyncio.Future[str]) -> None:
        error = UpstreamError("upstream closed the SSE stream")
        try:
            async with resp:
                parser = sse.Parser()
                with mapped_errors("reading the SSE stream"):
                    async for events in sse_events(resp.content.iter_any(), parser):
                        for event in events:
                            if event.event == "endpoint":
                                if not found.done():
                                    found.set_result(event.data)
                                continue
                            message = message_of(event)
                            if message is not None:
                                self._deliver(message)
        except UpstreamError as exc:
            error = exc
        except Exception as exc:  # noqa: BLE001 - whatever broke the reader, the session is dead
            log.exception("upstream_reader_failed", upstream=self.name)
            error = UpstreamError(f"reading the SSE stream failed: {type(exc).__name__}")
        if not found.done():
            found.set_exception(error)
        log.info("upstream_sse_stream_ended", upstream=self.name, error=str(error))
        self._lost(error)

    async def _write(self, message: dict[str, Any]) -> None:
        if self.post_url is None:
            raise UpstreamError("the SSE session has no endpoint yet")
        headers = await self.endpoint.request_headers(**{"Content-Type": "application/json"})
        with mapped_errors("posting to the SSE endpoint"):
            async with asyncio.timeout(self.endpoint.timeout_s):
                async with self.http.post(
                    self.post_url,
                    data=jsonrpc.dumps(message),
                    headers=headers,
                    allow_redirects=False,
                ) as resp:
                    await resp.read()
                    self.endpoint.refused(resp.status)
                    if resp.status >= 300:
                        raise UpstreamError(f"upstream answered HTTP {resp.status} to a message")

    async def _disconnect(self) -> None:
        await cancel_and_wait(self._reader)
        self._lost(UpstreamError("the SSE session was closed"))
