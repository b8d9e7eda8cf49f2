"""`gateway.web.front`: the request id every route gives, and what an error it meets answers."""

from __future__ import annotations

from aiohttp import web

from gateway.app import build_app
from gateway.errors import InvalidRequest, StoreError
from gateway.web.front import not_found, routed
from tests.support.inprocess import gateway_config


async def test_an_error_of_a_moment_says_when_to_retry_and_a_clients_mistake_does_not(
    aiohttp_client,
) -> None:
    async def store_down(request: web.Request) -> web.Response:
        raise StoreError("redis at 10.0.0.7:6379 refused")  # the shared rate limit's store

    async def mistaken(request: web.Request) -> web.Response:
        raise InvalidRequest("not a request")

    app = web.Application()
    app.router.add_route("*", "/down", routed(store_down, ["POST"]))
    app.router.add_route("*", "/mistaken", routed(mistaken, ["POST"]))
    client = await aiohttp_client(app)

    down = await client.post("/down")
    assert (down.status, down.headers["Retry-After"]) == (503, "1")
    assert "10.0.0.7" not in await down.text()  # the detail is for the log
    wrong = await client.post("/mistaken")
    assert wrong.status == 400 and "Retry-After" not in wrong.headers


async def test_every_route_names_its_request_and_refuses_a_method_it_does_not_answer(
    aiohttp_client,
) -> None:
    """No middleware: a route answers through `routed`, a path nothing serves through
    `not_found`, each naming its request as the MCP routes do."""

    async def fine(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def broken(request: web.Request) -> web.Response:
        raise RuntimeError("secret detail of a bug")

    app = web.Application()
    app.router.add_route("*", "/fine", routed(fine))
    app.router.add_route("*", "/broken", routed(broken))
    app.router.add_route("*", "/{path:.*}", not_found)
    client = await aiohttp_client(app)

    ok = await client.get("/fine", headers={"X-Request-Id": "mine-1"})
    assert ok.status == 200 and ok.headers["X-Request-Id"] == "mine-1"
    head = await client.head("/fine")
    assert head.status == 200 and len(head.headers["X-Request-Id"]) == 16
    wrong = await client.post("/fine", headers={"X-Request-Id": "mine-2"})
    assert wrong.status == 405 and wrong.headers["X-Request-Id"] == "mine-2"
    assert wrong.headers["Allow"] == "GET,HEAD"
    nothing = await client.delete("/nothing/here", headers={"X-Request-Id": "mine-3"})
    assert nothing.status == 404 and nothing.headers["X-Request-Id"] == "mine-3"
    unprintable = await client.get("/fine", headers={"X-Request-Id": "a\tb"})
    assert len(unprintable.headers["X-Request-Id"]) == 16  # made here instead
    bug = await client.get("/broken", headers={"X-Request-Id": "mine-4"})
    assert bug.status == 500 and bug.headers["X-Request-Id"] == "mine-4"
    assert "secret detail" not in await bug.text()


def test_the_gateway_runs_no_middleware() -> None:
    """Each would be a coroutine resumed at every wake of every request (and aiohttp adds
    one more behind any): the handlers name requests and answer errors themselves."""
    app = build_app(gateway_config("http://127.0.0.1:9/mcp"))
    assert list(app.middlewares) == []
    routes = [route.resource.canonical for route in app.router.routes()]
    assert routes[-1] == "/{path}" and routes.count("/{path}") == 1  # the last resort
