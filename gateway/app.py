"""Wiring only: the aiohttp application of a replica, from a `GatewayConfig`.

What the replica is made of is `gateway.compose`'s (`compose`: every part, built in
dependency order). Here each of its resources gets a cleanup context of its own, opened
in the order `Components.resources` lists them and closed in reverse (aiohttp's
`cleanup_ctx`); a start that fails midway closes what had opened (`gateway.web.serving`
has aiohttp close them). No middleware: every handler names its request and answers
its errors itself (`gateway.web.front`); a path nothing serves gets `front.not_found`.
Each MCP route serves both eras (the legacy lane, `gateway.legacy_clients`, shares the HTTP
client, the sealing keys and the front door); its GET streams end when the replica
drains or stops. The probes and metrics are `gateway.web.probes`'.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from urllib.parse import urlsplit

import structlog
from aiohttp import web

from gateway.calls.bridge import Bridge
from gateway.clock import Clock
from gateway.compose import Components, compose, make_codec
from gateway.config import STDIO, EndpointConfig, GatewayConfig, UpstreamConfig
from gateway.legacy_clients.endpoint import EndpointLegacyLane
from gateway.membership import Resource
from gateway.protocol.endpoint_session import ENDPOINT_SESSION_PREFIX
from gateway.seams import NO_SEAMS, Seams
from gateway.web import front
from gateway.web.endpoint import EndpointLane, MemberLane
from gateway.web.front_door import add_metadata_routes
from gateway.web.handlers import ModernLane
from gateway.web.pipeline import Pipeline
from gateway.web.probes import Probes

log = structlog.get_logger("gateway")

BRIDGE = web.AppKey("bridge", Bridge)
COMPONENTS = web.AppKey("components", Components)


def redact(url: str) -> str:
    """A URL fit for a log: no credentials (user info or query), hosts and path kept as given."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return f"{parts.scheme}://{netloc}{parts.path}" if parts.scheme else parts.path


def where(upstream: UpstreamConfig) -> str:
    """An upstream fit for a log: a URL without credentials, or a command's program only."""
    if upstream.transport == STDIO:
        return f"stdio:{upstream.command[0]}"
    return f"{upstream.transport}:{redact(upstream.url)}"


def build_app(
    config: GatewayConfig, *, clock: Clock | None = None, seams: Seams = NO_SEAMS
) -> web.Application:
    """The gateway; `clock`: the time it reads and waits on (the event loop's unless a
    test moves one by hand); `seams`: where capabilities hook into requests, both eras."""
    parts = compose(config, clock, seams=seams)
    app = web.Application(client_max_size=config.limits.max_body_bytes + 1)
    app[COMPONENTS] = parts
    app[BRIDGE] = parts.bridge
    for resource in parts.resources:
        app.cleanup_ctx.append(_context(resource))
    app.on_startup.append(_started(parts))  # after every resource opened
    app.on_shutdown.append(_end_streams(parts))
    for path, upstreams, endpoint in config.routes():
        first = upstreams[0]
        joined = legacy = None
        if endpoint is not None and endpoint.several:
            joined = _joined(parts, endpoint, upstreams)
            legacy = _joined_legacy(parts, joined)
        pipeline = Pipeline(
            config,
            first,
            parts.bridge,
            parts.pools,
            parts.doors[first.name],
            parts.listens,
            parts.tasks,
            legacy if joined is not None else parts.lanes.get(first.name),
            seams=parts.seams,
            endpoint=joined,
        )
        app.router.add_route("*", path, pipeline.handle)
    add_metadata_routes(app, config)
    probes = Probes(
        store=parts.store,
        pools=parts.pools,
        draining=lambda: parts.bridge.draining,
        metrics=parts.metrics,
        leases=parts.leases,
    )
    probes.add_routes(app)
    app.router.add_route("*", "/{path:.*}", front.not_found)  # the last: what nothing serves
    return app


def _joined(
    parts: Components, endpoint: EndpointConfig, upstreams: tuple[UpstreamConfig, ...]
) -> EndpointLane:
    """The 2026 lane of an endpoint of several upstreams: each upstream's own, joined."""
    members = {}
    for upstream in upstreams:
        lane = ModernLane(
            parts.config,
            upstream,
            parts.bridge,
            parts.pools,
            parts.doors[upstream.name],
            parts.listens,
            parts.tasks,
            legacy=parts.config.legacy.enabled,  # served by the endpoint's legacy lane
            seams=parts.seams,
        )
        members[upstream.name] = MemberLane(lane, lane.served_by(), parts.doors[upstream.name])
    return EndpointLane(endpoint, members, parts.catalog)


def _joined_legacy(parts: Components, joined: EndpointLane) -> EndpointLegacyLane | None:
    """The legacy lane of an endpoint of several upstreams: each upstream's own, behind one
    session (None when `legacy.enabled` is off)."""
    if not parts.lanes:
        return None
    return EndpointLegacyLane(
        endpoint=joined.endpoint,
        members={name: parts.lanes[name] for name in joined.members},
        codec=make_codec(parts.config).with_prefix(ENDPOINT_SESSION_PREFIX),
        server_info=joined.server_info,
        owner_of=joined.legacy_owner,
        lists=joined.legacy_list,
        ended=parts.ended_sessions,
    )


def _context(resource: Resource) -> Callable[[web.Application], AsyncIterator[None]]:
    """`resource` as an aiohttp cleanup context: open as the app starts, closed as it
    stops; never closed if it never opened."""

    async def context(app: web.Application) -> AsyncIterator[None]:
        resource.open()
        yield
        await resource.close()

    return context


def _started(parts: Components) -> Callable[[web.Application], Awaitable[None]]:
    config = parts.config

    async def started(app: web.Application) -> None:
        log.info(
            "gateway_started",
            replica=parts.owner,  # with its incarnation: a replica restarted holds no session
            incarnation=parts.incarnation,
            upstreams={p: ", ".join(where(u) for u in ups) for p, ups, _ in config.routes()},
            store=redact(config.store.url),
            auth="none" if config.auth is None else "required",
        )
        if config.auth is None and not config.loopback:
            log.warning(
                "gateway_unauthenticated",
                detail=f"listening on {config.listen.host} without an auth section: anyone "
                "who reaches the gateway can call every tool with its upstream credentials",
            )

    return started


def _end_streams(parts: Components) -> Callable[[web.Application], Awaitable[None]]:
    async def end_streams(app: web.Application) -> None:
        # Stopping: long-lived legacy GET streams end now, cleanly, so their clients
        # reconnect elsewhere rather than wait out the shutdown grace.
        parts.streams.end_all()

    return end_streams
