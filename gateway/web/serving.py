"""Serving the application on a TCP port: aiohttp's runner and site, with the front's bounds.

aiohttp's own server reads, parses and answers every connection; this module only
chooses its public settings. What they give a client:

- a connection with no request under way is closed `idle_timeout_s` after it opened or
  after its last answer: idle between requests, or a request head still arriving (aiohttp
  arms its keep-alive timer when a connection opens and after each answer, and closes a
  connection still waiting for a whole head when it fires);
- the handler of a client that disconnects is cancelled (`handler_cancellation`);
- pipelined requests are answered in order, a few at a time: aiohttp stops reading a
  connection while it holds a few dozen requests not yet served, and a handler's writes
  wait while its client does not read (so a client that sends and never reads costs the
  gateway a few answers' memory, and none of its loop's time);
- after an answer given before its request's body was all read (413, 408, a refusal),
  the rest of the body is read and dropped for up to `LINGER_S`, so that the client sees
  the answer rather than a reset; a body not over by then closes the connection;
- the port is bound before the application starts, so a port in use or an address not
  there refuses the start (`BindError`) before anything is opened or logged as started;
- a start that fails midway (a resource that cannot open) closes, in reverse, what had
  opened (aiohttp's runner, cleaning up, closes the cleanup contexts entered), and the
  port, before the failure is raised;
- on `Served.close`, the port stops accepting, idle connections close, and requests in
  flight get `SHUTDOWN_GRACE_S` to finish before their handlers are cancelled (and waited
  for) ahead of the application's clean-up.

The body's own bound (`limits.body_timeout_s`) is the request pipeline's (`pipeline.read_body`):
aiohttp's timer does not run while a handler reads. Nothing here parses HTTP.

**Routes served directly.** A route of one path for every method (every MCP route, the
probes, the metadata documents) is resolved by aiohttp's router to its handler by that
path alone. The server hands such a request to its handler after one dict lookup
(`direct_routes`, `dispatch`) instead of the application's handler, which awaits the
router's resolution in a coroutine and is one more coroutine resumed at every wake of the
request (1.7% of a pass-through call's instructions). Everything else goes through the
application as before: another path, a request with `Expect`, and every request of an
application with middlewares (which a direct handler would skip).
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler
from yarl import URL

#: How long requests still in flight when the gateway stops (after the drain) may take.
SHUTDOWN_GRACE_S = 10.0
#: How long the rest of a body not read is drained after its answer (aiohttp's default).
LINGER_S = 10.0


class Served:
    """An application served on a port: what tests and the command line hold on to."""

    def __init__(self, app: web.Application, runner: web.AppRunner, host: str, port: int) -> None:
        self.app, self.runner = app, runner
        self.host, self.port = host, port

    def make_url(self, path: str) -> URL:
        return URL.build(scheme="http", host=self.host, port=self.port, path=path)

    async def close(self) -> None:
        """Stop accepting, let requests in flight finish (bounded), clean the app up."""
        await self.runner.cleanup()


def direct_routes(app: web.Application) -> dict[str, Handler]:
    """The handler of each path whose route answers every method, as aiohttp's router
    would resolve a request of that path (its first resource of that path: a resource
    with variables never matches a plain path before it); none for an application with
    middlewares, static files or sub-applications (whose prefixes may come first)."""
    resources = list(app.router.resources())
    routed = (web.PlainResource, web.DynamicResource)
    if app.middlewares or not all(isinstance(r, routed) for r in resources):
        return {}
    routes: dict[str, Handler] = {}
    seen: set[str] = set()
    for resource in resources:
        if not isinstance(resource, web.PlainResource) or resource.canonical in seen:
            continue
        seen.add(resource.canonical)
        (route, *others) = list(resource)
        if not others and route.method == hdrs.METH_ANY:
            routes[resource.canonical] = route.handler
    return routes


def dispatch(
    routes: Mapping[str, Handler],
    through_app: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]],
) -> Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]:
    """The server's handler: a request of a direct route (`direct_routes`) to its own
    handler, anything else to the application's. A plain function (not a coroutine, nor
    an object called through `__call__`), so that the handler's coroutine is the one
    aiohttp awaits."""
    direct = routes.get

    def handler_of(request: web.BaseRequest) -> Awaitable[web.StreamResponse]:
        handler = direct(request.rel_url.path_safe)  # the path the router matches
        if handler is None or hdrs.EXPECT in request.headers:  # the app answers `Expect`
            return through_app(request)
        return handler(request)  # type: ignore[arg-type]  # a web.Request: the app's factory

    return handler_of


class BindError(OSError):
    """The listening address cannot be bound (in use, not this machine's, not allowed)."""


def bind(host: str, port: int) -> list[socket.socket]:
    """Listening sockets for every address `host` names (as asyncio's `create_server`
    binds them), not yet accepting. With `port` 0 they all take the first one's port.

    Raises:
        BindError: naming the address and the system's reason.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise BindError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in dict.fromkeys(infos):  # once each
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(sockets) > 1:
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            try:
                sock.bind(address)
            except OSError as exc:
                raise BindError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


async def serve(
    app: web.Application,
    host: str,
    port: int,
    *,
    idle_timeout_s: float,
    shutdown_grace_s: float = SHUTDOWN_GRACE_S,
    linger_s: float = LINGER_S,
    sockets: list[socket.socket] | None = None,
) -> Served:
    """Bind `host`:`port` (0: a free port), then start `app` (its cleanup contexts) and
    accept on it; or accept on `sockets` bound already (by `bind`: its caller knew the
    address was free before building the app).

    Raises:
        BindError: before the application started.
    """
    if sockets is None:
        sockets = bind(host, port)
    runner = web.AppRunner(
        app,
        handler_cancellation=True,
        access_log=None,  # a request is one line of the gateway's own (`request_served`)
        keepalive_timeout=idle_timeout_s,
        lingering_time=linger_s,
        shutdown_timeout=shutdown_grace_s,
    )
    try:
        await runner.setup()
    except BaseException:
        try:
            await runner.cleanup()  # what had opened before the failure closes
        finally:
            for sock in sockets:
                sock.close()
        raise
    routes = direct_routes(app)
    if routes:  # before any connection: each takes the server's handler as it opens
        server = runner.server
        assert server is not None
        server.request_handler = dispatch(routes, server.request_handler)
    try:
        for sock in sockets:
            await web.SockSite(runner, sock).start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = int(runner.addresses[0][1])  # the port chosen when `port` is 0
    return Served(app, runner, host, bound)
