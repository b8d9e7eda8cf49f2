"""The aiohttp fetcher: bounded in time and size, never follows redirects, errors name no secret."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.auth import FetchError
from gateway.auth.fetcher import AiohttpFetcher


@pytest.fixture
async def site() -> AsyncIterator[str]:
    never = asyncio.Event()

    async def big(request: web.Request) -> web.Response:
        return web.json_response({"pad": "x" * 5000})

    async def hang(request: web.Request) -> web.Response:
        await never.wait()
        raise AssertionError("unreachable")

    async def html(request: web.Request) -> web.Response:
        return web.Response(text="<html>oops</html>", status=int(request.query["status"]))

    async def moved(request: web.Request) -> web.Response:
        raise web.HTTPFound("/big")

    async def cookie(request: web.Request) -> web.Response:
        answer = web.json_response({"cookie": request.headers.get("Cookie")})
        answer.set_cookie("session", "issuer-secret")
        return answer

    app = web.Application()
    routes = (
        ("/big", big),
        ("/hang", hang),
        ("/html", html),
        ("/moved", moved),
        ("/cookie", cookie),
    )
    for path, handler in routes:
        app.router.add_get(path, handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("")).rstrip("/")
    never.set()
    await server.close()


async def test_a_body_over_the_cap_is_a_fetch_error(site: str) -> None:
    small, large = AiohttpFetcher(max_bytes=1000), AiohttpFetcher(max_bytes=10_000)
    try:
        with pytest.raises(FetchError, match="body over 1000 B"):
            await small.get_json(site + "/big")
        assert (await large.get_json(site + "/big")).status == 200
    finally:
        await small.close()
        await large.close()


async def test_an_answer_that_never_comes_times_out(site: str) -> None:
    fetcher = AiohttpFetcher(timeout_s=0.2)
    try:
        async with asyncio.timeout(5):
            with pytest.raises(FetchError, match="Timeout"):
                await fetcher.get_json(site + "/hang")
    finally:
        await fetcher.close()


async def test_redirects_come_back_as_answers(site: str) -> None:
    fetcher = AiohttpFetcher()
    try:
        reply = await fetcher.get_json(site + "/moved")
        assert reply.status == 302 and reply.body is None
        assert reply.headers["Location"] == "/big"
    finally:
        await fetcher.close()


async def test_an_error_page_is_a_status_and_a_2xx_page_is_a_fetch_error(site: str) -> None:
    fetcher = AiohttpFetcher()
    try:
        assert (await fetcher.get_json(site + "/html?status=503")).status == 503
        with pytest.raises(FetchError, match="not JSON"):
            await fetcher.get_json(site + "/html?status=200")
    finally:
        await fetcher.close()


async def test_a_cookie_one_answer_sets_is_never_sent_again(site: str) -> None:
    named = site.replace("127.0.0.1", "localhost")  # a jar keeps no cookie of an IP address
    fetcher = AiohttpFetcher()
    try:
        first = await fetcher.get_json(f"{named}/cookie")
        again = await fetcher.get_json(f"{named}/cookie")
    finally:
        await fetcher.close()
    assert first.status == again.status == 200
    assert again.body == {"cookie": None}
