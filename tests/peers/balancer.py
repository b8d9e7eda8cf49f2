"""A round-robin HTTP load balancer on loopback: each request goes to the next backend.

Streams responses through (SSE included) and records which backend served each
request, so a test can see that consecutive rounds of one call landed on
different replicas. Test infrastructure only.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


@dataclass
class Served:
    backend: int
    method: str | None  # the JSON-RPC method of the body, if it has one
    resumed: bool
    http: str = "POST"  # the HTTP method (a legacy client's GET stream, DELETE)


class RoundRobin:
    def __init__(self, backends: list[str], *, skip_refused: bool = False) -> None:
        self.backends = backends
        # Like a Service whose endpoints follow readiness: a backend refusing connections
        # (its process is down) is skipped for the next one.
        self.skip_refused = skip_refused
        self._next = itertools.cycle(range(len(backends)))
        self.served: list[Served] = []
        self.http: aiohttp.ClientSession | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.proxy)

        async def session(app: web.Application):  # type: ignore[no-untyped-def]
            self.http = aiohttp.ClientSession()
            yield
            await self.http.close()

        app.cleanup_ctx.append(session)
        return app

    async def proxy(self, request: web.Request) -> web.StreamResponse:
        assert self.http is not None
        index = next(self._next)
        body = await request.read()
        try:
            parsed: Any = json.loads(body) if body else {}
        except ValueError:
            parsed = {}
        params = parsed.get("params") if isinstance(parsed, dict) else None
        self.served.append(
            Served(
                backend=index,
                method=parsed.get("method") if isinstance(parsed, dict) else None,
                resumed=isinstance(params, dict) and "requestState" in params,
                http=request.method,
            )
        )
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        for _ in range(len(self.backends) if self.skip_refused else 1):
            url = self.backends[index] + request.path_qs
            try:
                return await self._relay(request, url, body, headers)
            except aiohttp.ClientConnectorError:
                if not self.skip_refused:
                    raise
                index = next(self._next)
            except aiohttp.ClientError as exc:  # the backend died before its answer began
                if not self.skip_refused:
                    raise
                return web.Response(status=502, text=f"bad gateway: {type(exc).__name__}")
        return web.Response(status=503, text="no backend accepts connections")

    async def _relay(
        self, request: web.Request, url: str, body: bytes, headers: dict[str, str]
    ) -> web.StreamResponse:
        assert self.http is not None
        async with self.http.request(request.method, url, data=body, headers=headers) as upstream:
            response = web.StreamResponse(
                status=upstream.status,
                headers={k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP},
            )
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response
