"""A legacy MCP server over Streamable HTTP in the test's own event loop (a second aiohttp
app), for tests of the gateway that need no real peer: what the test plays is what the
server says.

It gives each `initialize` a session of its own (`s1`, `s2`, ...: `sessions` names the
client each was opened for), answers notifications and the client's answers with 202, a GET with
405 (it holds no standalone stream, unless `"GET"` is in `streamed`), a DELETE with 200,
and any other request with the result `results` has for its method (`{}` otherwise). A
request whose method is in `streamed` is answered with an SSE stream the test speaks on
(`next_stream`, then `Stream.send`/`Stream.end`); nothing is said on it until the test
says it. A GET on a session `busy` counts is refused as busy (409) that many times
first, as a server still holding another stream of the session refuses it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer


class Stream:
    """The server's SSE answer to one request (`method`, on `session`), spoken by the test."""

    def __init__(
        self, request: dict[str, Any], session: str | None, response: web.StreamResponse
    ) -> None:
        self.request = request
        self.method: str = request["method"]
        self.session = session
        self.response = response
        self.ended = asyncio.Event()

    async def send(self, message: dict[str, Any], event_id: str | None = None) -> None:
        head = f"id: {event_id}\n" if event_id is not None else ""
        await self.response.write(f"{head}event: message\ndata: {json.dumps(message)}\n\n".encode())

    async def respond(self, result: dict[str, Any]) -> None:
        """The response to the request, then the stream's end."""
        await self.send({"jsonrpc": "2.0", "id": self.request["id"], "result": result})
        self.end()

    def end(self) -> None:
        self.ended.set()


class StreamableServer:
    def __init__(
        self,
        results: Mapping[str, dict[str, Any]] | None = None,
        *,
        streamed: Iterable[str] = (),
        capabilities: dict[str, Any] | None = None,
    ) -> None:
        self.results = dict(results or {})
        self.streamed = frozenset(streamed)
        self.capabilities = capabilities or {"tools": {}}
        self.streams: list[Stream] = []  # open, not yet taken by `next_stream`
        self.sessions: dict[str, str] = {}  # session id -> the client it was opened for
        self.received: list[dict[str, Any]] = []  # every message POSTed, in order
        self.busy: dict[str, int] = {}  # session id -> GETs still to refuse with 409
        self.gets: list[str | None] = []  # the session of every GET, in order
        self.resumed: list[str | None] = []  # the Last-Event-ID of every GET, in order
        self._arrived = asyncio.Event()
        app = web.Application()
        app.router.add_route("*", "/mcp", self._serve)
        self.server = TestServer(app, host="127.0.0.1")

    @property
    def url(self) -> str:
        return str(self.server.make_url("/mcp"))

    async def start(self) -> StreamableServer:
        await self.server.start_server()
        return self

    async def stop(self) -> None:
        for stream in self.streams:
            stream.end()
        await self.server.close()

    def session_of(self, client: str) -> str:
        """The session opened for the client named `client` (its `clientInfo.name`)."""
        (session,) = [s for s, name in self.sessions.items() if name == client]
        return session

    async def next_stream(
        self, method: str, *, session: str | None = None, timeout_s: float = 5.0
    ) -> Stream:
        """The next request of `method` (on `session`, if given) answered with a stream:
        its head sent, nothing said yet."""
        async with asyncio.timeout(timeout_s):
            while True:
                for stream in self.streams:
                    if stream.method == method and session in (None, stream.session):
                        self.streams.remove(stream)
                        return stream
                self._arrived.clear()
                await self._arrived.wait()

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        if request.method == "GET":
            session = request.headers.get("Mcp-Session-Id")
            self.gets.append(session)
            self.resumed.append(request.headers.get("Last-Event-ID"))
            if session is not None and self.busy.get(session, 0) > 0:
                self.busy[session] -= 1
                return web.Response(status=409)
            if "GET" in self.streamed:
                return await self._stream(request, {"method": "GET"})
            return web.Response(status=405)
        if request.method == "DELETE":
            return web.Response(status=200)
        body = await request.json()
        self.received.append(body)
        if "id" not in body or "method" not in body:  # a notification, or a client's answer
            return web.Response(status=202)
        method = body["method"]
        if method in self.streamed:
            return await self._stream(request, body)
        headers = {"Mcp-Session-Id": request.headers.get("Mcp-Session-Id", "")}
        if method == "initialize":
            headers["Mcp-Session-Id"] = session = f"s{len(self.sessions) + 1}"
            self.sessions[session] = str(body["params"].get("clientInfo", {}).get("name"))
            result: dict[str, Any] = {
                "protocolVersion": body["params"]["protocolVersion"],
                "capabilities": self.capabilities,
                "serverInfo": {"name": "streamable", "version": "1"},
            }
        else:
            result = self.results.get(method, {})
        answer = {"jsonrpc": "2.0", "id": body["id"], "result": result}
        return web.json_response(answer, headers=headers)

    async def _stream(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        session = request.headers.get("Mcp-Session-Id")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        stream = Stream(body, session, response)
        self.streams.append(stream)
        self._arrived.set()
        await stream.ended.wait()
        return response
