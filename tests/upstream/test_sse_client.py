"""The aiohttp client every HTTP+SSE upstream shares (`gateway.app.upstream_http_client`)."""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.app import upstream_http_client


async def test_a_cookie_one_upstream_sets_never_reaches_another() -> None:
    seen: list[str | None] = []

    async def sets(request: web.Request) -> web.Response:
        answer = web.Response(text="a")
        answer.set_cookie("session", "upstream-a-secret")
        return answer

    async def reads(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Cookie"))
        return web.Response(text="b")

    first, second = web.Application(), web.Application()
    first.router.add_get("/sse", sets)
    second.router.add_get("/sse", reads)
    servers = [TestServer(first, host="localhost"), TestServer(second, host="localhost")]
    for server in servers:
        await server.start_server()
    http = upstream_http_client()
    try:
        for server in servers:  # one host, two ports: a jar would send A's cookie to B
            async with http.get(server.make_url("/sse"), allow_redirects=False) as answer:
                assert answer.status == 200
                await answer.read()
    finally:
        await http.close()
        for server in servers:
            await server.close()
    assert seen == [None]
