"""The error middleware: what an error raised before a request was classified answers."""

from __future__ import annotations

from aiohttp import web

from gateway.errors import InvalidRequest, StoreError
from gateway.web.middleware import error_middleware


async def test_an_error_of_a_moment_says_when_to_retry_and_a_clients_mistake_does_not(
    aiohttp_client,
) -> None:
    async def store_down(request: web.Request) -> web.Response:
        raise StoreError("redis at 10.0.0.7:6379 refused")  # the shared rate limit's store

    async def mistaken(request: web.Request) -> web.Response:
        raise InvalidRequest("not a request")

    app = web.Application(middlewares=[error_middleware])
    app.router.add_post("/down", store_down)
    app.router.add_post("/mistaken", mistaken)
    client = await aiohttp_client(app)

    down = await client.post("/down")
    assert (down.status, down.headers["Retry-After"]) == (503, "1")
    assert "10.0.0.7" not in await down.text()  # the detail is for the log
    wrong = await client.post("/mistaken")
    assert wrong.status == 400 and "Retry-After" not in wrong.headers
