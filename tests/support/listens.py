"""Driving a `subscriptions/listen` stream by hand, on the wire: what the listen tests share."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol

import aiohttp

from gateway.protocol.sse import Parser
from tests.support.cases import text_of
from tests.support.inprocess import Gateway
from tests.support.wire import default_headers, rpc

#: Spelt out, as a client reads it, not taken from the gateway's code.
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"


class Stream:
    """A listen's SSE answer, read one JSON-RPC message at a time."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp
        self.parser = Parser()
        self.ready: list[Any] = []

    async def next(self, timeout: float = 10.0) -> Any:
        """The next message, or None once the stream has ended."""
        async with asyncio.timeout(timeout):
            while not self.ready:
                chunk = await self.resp.content.readany()
                if not chunk:
                    return None
                self.ready += [json.loads(e.data) for e in self.parser.feed(chunk) if e.data]
        return self.ready.pop(0)


class Reachable(Protocol):
    """What a listen is sent to: a gateway (`Gateway`), or one replica of a fleet."""

    http: aiohttp.ClientSession
    url: str


@asynccontextmanager
async def listening(
    gateway: Reachable,
    notifications: dict[str, Any],
    rid: Any = "l-1",
    headers: dict[str, str] | None = None,
) -> AsyncIterator[Stream]:
    body = rpc("subscriptions/listen", {"notifications": notifications}, rid=rid)
    sent = {**default_headers(body), **(headers or {})}
    async with gateway.http.post(gateway.url, data=json.dumps(body), headers=sent) as resp:
        assert resp.status == 200, await resp.text()
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        yield Stream(resp)


async def call(gateway: Gateway, name: str, arguments: dict[str, Any]) -> Any:
    reply = await gateway.final(rpc("tools/call", {"name": name, "arguments": arguments}, rid=9))
    return text_of(reply)
