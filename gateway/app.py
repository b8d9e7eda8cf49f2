"""Wiring only: build the aiohttp application from a `GatewayConfig`.

Middleware order: request id -> errors -> handler. Long-lived resources (the
upstream HTTP client, session pools, the store, the fleet, the bridge) open and
close in one `cleanup_ctx` generator. Each route serves both eras: the legacy lane
(`gateway.legacy_clients`) shares the upstream HTTP client, the sealing keys (under
its own token prefix) and the front door; its GET streams end when the replica
drains or stops.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

import structlog
from aiohttp import web

from gateway.auth import ClientCredentialsSource
from gateway.auth.fetcher import AiohttpFetcher
from gateway.calls.bridge import Bridge
from gateway.clock import Clock, SystemClock
from gateway.config import (
    BOUND_TRANSPORTS,
    STDIO,
    GatewayConfig,
    UpstreamConfig,
)
from gateway.fleet import messages
from gateway.fleet.changes import ChangeFeed
from gateway.fleet.ledger import SessionLedger
from gateway.fleet.redis_bus import RedisBus
from gateway.http1 import Http1Client
from gateway.legacy_clients.bound import BoundUpstream
from gateway.legacy_clients.forwarding import Holder, Remote
from gateway.legacy_clients.lane import LaneSettings, LegacyLane
from gateway.legacy_clients.metrics import LaneMetrics
from gateway.legacy_clients.streams import Streams
from gateway.legacy_clients.upstream import HttpPassThrough, LegacyUpstream, SessionUpstream
from gateway.listens import Listens
from gateway.observability import Metrics
from gateway.protocol import formats, state
from gateway.protocol.formats import FleetLevel
from gateway.protocol.legacy_session import SESSION_PREFIX
from gateway.protocol.state import AesGcmKeyRing
from gateway.seams import NO_SEAMS, Seams
from gateway.store.base import SuspendedCallStore, TimedStore
from gateway.store.memory import MemoryStore
from gateway.store.redis import RedisStore
from gateway.store.redis_client import RedisClient, connect
from gateway.store.tasks import MemoryTaskStore, RedisTaskStore, TaskStore
from gateway.tasks.service import RECORD_PREFIX as TASK_RECORD_PREFIX
from gateway.tasks.service import Tasks
from gateway.tracing import TRACING
from gateway.upstream.factory import (
    http_endpoint,
    link_factory,
    restart_backoff_s,
    session_factory,
)
from gateway.upstream.pool import SessionPool
from gateway.web.front_door import FrontDoor, add_metadata_routes, build_front_doors
from gateway.web.middleware import FrontStreams, error_middleware, request_id_middleware
from gateway.web.pipeline import Pipeline

log = structlog.get_logger("gateway")

BRIDGE = web.AppKey("bridge", Bridge)


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


def make_codec(config: GatewayConfig) -> AesGcmKeyRing:
    if config.sealing.ephemeral:
        log.warning(
            "sealing_key_ephemeral",
            detail="no sealing key configured: a random key was generated for this process. "
            "requestState minted here is refused by any other replica and after a restart. "
            "Set sealing.keys_file or MRTR_GATEWAY_SEALING_KEYS "
            "(generate with: mrtr-gateway keygen).",
        )
        return AesGcmKeyRing.ephemeral()
    return AesGcmKeyRing(list(config.sealing.keys))


def build_app(
    config: GatewayConfig, *, clock: Clock | None = None, seams: Seams = NO_SEAMS
) -> web.Application:
    """The gateway; `clock`: the time it reads and waits on (the event loop's unless a
    test moves one by hand); `seams`: where capabilities hook into requests, both eras."""
    app = web.Application(
        middlewares=[request_id_middleware, error_middleware],
        client_max_size=config.limits.max_body_bytes + 1,
    )
    clock = SystemClock() if clock is None else clock
    # This process's identity in the fleet: the configured name plus an incarnation that
    # changes at every start, so a replica restarted under the same name (a pod keeps its
    # name) is a new owner and its predecessor's calls go to takeover or replay.
    incarnation = secrets.token_hex(4)
    owner = f"{config.replica_id}~{incarnation}"
    TRACING.configure("mrtr-gateway", owner)
    bus: RedisBus | None = None
    client: RedisClient | None = None
    store: SuspendedCallStore
    # Which versions of the data shared with other replicas to write: learnt from the
    # heartbeats on a fleet (`gateway.protocol.formats`).
    level = formats.single(config.fleet.format_level)
    if config.store.shared:
        level = FleetLevel(settle_s=config.fleet.format_settle_s, pin=config.fleet.format_level)
        client = connect(config.store.url)
        store = RedisStore(
            client,
            prefix=config.store.key_prefix,
            clock=clock,
            replicas_acked=config.store.replicas_acked,
            wait_ms=config.store.wait_ms,
            level=level,
        )
        bus = RedisBus(
            client,
            prefix=config.store.key_prefix,
            replica_id=owner,
            heartbeat_s=config.fleet.heartbeat_s,
            clock=clock,
            level=level,
        )
    else:
        store = MemoryStore(clock)
    metrics = Metrics()
    store = TimedStore(store, metrics)
    pools: dict[str, SessionPool] = {}  # filled when the app starts
    ledger: SessionLedger | None = None
    if bus is not None and client is not None:
        ledger = SessionLedger(
            client,
            prefix=config.store.key_prefix,
            replica_id=owner,
            heartbeat_key=bus.replica_key,
            pools=pools,
            clock=clock,
            interval_s=config.fleet.heartbeat_s,
            sweep_s=config.fleet.orphan_sweep_s,
            level=level,
            counted=lambda upstream, outcome: metrics.orphaned_sessions.labels(
                upstream, outcome
            ).inc(),
        )
    limits = config.limits
    listens = Listens(limits.max_listens, limits.max_listens_per_principal, metrics.listens)
    changes: ChangeFeed | None = None
    if bus is not None and client is not None:
        changes = ChangeFeed(
            client,
            prefix=config.store.key_prefix,
            interval_s=config.fleet.heartbeat_s,
            clock=clock,
            relay=listens.relay,
            upstreams=frozenset(u.name for u in config.upstreams if u.transport != STDIO),
        )
        listens.fleet = changes.heard
    codec = make_codec(config)
    bridge = Bridge(
        config,
        store=store,
        codec=codec,
        pools=pools,
        metrics=metrics,
        clock=clock,
        bus=bus,
        owner=owner,
        withdraw=ledger.withdraw if ledger is not None else None,
        listens=listens,
        level=level,
    )
    app[BRIDGE] = bridge
    task_store: TaskStore = (
        RedisTaskStore(
            client,
            prefix=config.store.key_prefix,
            clock=clock,
            replicas_acked=config.store.replicas_acked,
            wait_ms=config.store.wait_ms,
        )
        if client is not None
        else MemoryTaskStore(clock)
    )
    tasks = Tasks(
        bridge=bridge,
        store=task_store,
        codec=codec.with_prefix(TASK_RECORD_PREFIX),
        limits=config.limits,
        owner=owner,
        pools=pools,
        bus=bus,
        level=level,
    )
    bridge.on_task = tasks.told
    fetcher = AiohttpFetcher()  # issuers' metadata and keys, upstream token endpoints
    doors = build_front_doors(config, fetcher=fetcher, wall_s=clock.wall_s, redis=client)
    credentials = {
        u.name: ClientCredentialsSource(u.oauth_client, fetcher=fetcher, clock=clock.wall_s)
        for u in config.upstreams
        if u.oauth_client is not None
    }
    # Every HTTP upstream's client (Streamable HTTP and HTTP+SSE, both lanes): no cookies,
    # no connection limit (a parked call, a legacy GET stream holds its connection).
    http = Http1Client()
    streams = Streams(config.legacy.max_streams, config.legacy.max_streams_per_principal)
    bridge.on_drain.append(streams.end_all)  # their clients reconnect elsewhere
    lanes = _legacy_lanes(
        config, http, credentials, doors, codec, metrics, streams, owner, clock, bus, seams
    )
    bound = {
        name: lane.upstream
        for name, lane in lanes.items()
        if isinstance(lane.upstream, BoundUpstream)
    }
    # Other replicas' requests of the stdio and HTTP+SSE sessions held here come in the
    # same inbox as their retries of the calls parked here: decoded once by the bus, each
    # goes where its type says.
    holder = None
    if bus is not None and bound:
        holder = Holder(bus, bound, check_every_s=2 * config.fleet.heartbeat_s, clock=clock)

    async def forwarded(message: messages.Message) -> None:
        if holder is not None and isinstance(message, messages.Exchange | messages.Stop):
            await holder.serve(message)
        else:
            await bridge.serve_forwarded(message)

    async def resources(app: web.Application) -> AsyncIterator[None]:
        for upstream in config.upstreams:
            source = credentials.get(upstream.name)
            pool = SessionPool(
                upstream.name,
                session_factory(
                    http,
                    upstream,
                    source.authorization if source else None,
                    source.invalidate if source else None,
                    clock=clock,
                    max_message_bytes=limits.max_upstream_message_bytes,
                ),
                upstream.pool,
                on_error=metrics.upstream_errors.labels(upstream.name, "open").inc,
                clock=clock,
                restart_backoff_s=restart_backoff_s(upstream),
            )
            # Every list change its sessions hear goes to this upstream's listens.
            pool.on_change = functools.partial(listens.publish, upstream.name)
            pool.start()
            pools[upstream.name] = pool
        metrics.bind(
            parked=lambda: bridge.parked,
            live=lambda: len(bridge.calls),
            lost=lambda: bridge.calls.lost,
            pools=pools,
            lease=bus.holds_lease if bus is not None else (lambda: True),
        )
        if bus is not None:
            bus.on_data_loss = bridge.restore_records
            bus.on_lease_regained = bridge.hand_over_lost
            bus.start(forwarded)
        if ledger is not None:
            ledger.start()
        if changes is not None:
            changes.start()
        for held in bound.values():
            held.start()
        log.info(
            "gateway_started",
            replica=owner,  # with its incarnation: a replica restarted holds no session
            incarnation=incarnation,
            upstreams={u.path: where(u) for u in config.upstreams},
            store=redact(config.store.url),
            auth="none" if config.auth is None else "required",
        )
        if config.auth is None and not config.loopback:
            log.warning(
                "gateway_unauthenticated",
                detail=f"listening on {config.listen.host} without an auth section: anyone "
                "who reaches the gateway can call every tool with its upstream credentials",
            )
        yield
        await tasks.close()
        await bridge.close()
        TRACING.shutdown()
        if ledger is not None:
            await ledger.close()
        if changes is not None:
            await changes.close()
        if bus is not None:
            await bus.close()
        for each in pools.values():
            await each.close()
        for held in bound.values():
            await held.close()
        await store.close()
        await http.close()
        await fetcher.close()

    app.cleanup_ctx.append(resources)
    for upstream in config.upstreams:
        endpoint = Pipeline(
            config,
            upstream,
            bridge,
            pools,
            doors[upstream.name],
            listens,
            tasks,
            lanes.get(upstream.name),
            seams=seams,
        )
        app.router.add_route("*", upstream.path, endpoint.handle)

    async def end_streams(app: web.Application) -> None:
        # Stopping: long-lived legacy GET streams end now, cleanly, so their clients
        # reconnect elsewhere rather than wait out the shutdown grace.
        streams.end_all()

    app.on_shutdown.append(end_streams)
    add_metadata_routes(app, config)

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "alive"})

    async def readyz(request: web.Request) -> web.Response:
        store_ok = await store.ping()
        upstreams = {name: await pool.check() for name, pool in pools.items()}
        # A replica whose lease has lapsed resumes none of its calls, so a call parked on
        # it now would be refused on its retry until the next heartbeat: not ready.
        leased = bus is None or bus.holds_lease()
        ready = store_ok and leased and all(upstreams.values()) and not bridge.draining
        body: dict[str, Any] = {
            "ready": ready,
            "store": "ok" if store_ok else "unreachable",
            "upstreams": {name: "ok" if ok else "unreachable" for name, ok in upstreams.items()},
            "draining": bridge.draining,
        }
        if bus is not None:
            body["fleet"] = "ok" if leased else "lapsed"
        return web.json_response(body, status=200 if ready else 503)

    async def prometheus(request: web.Request) -> web.Response:
        return web.Response(body=metrics.render(), content_type="text/plain", charset="utf-8")

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", prometheus)
    return app


def _legacy_lanes(
    config: GatewayConfig,
    http: Http1Client,
    credentials: dict[str, ClientCredentialsSource],
    doors: dict[str, FrontDoor],
    codec: AesGcmKeyRing,
    metrics: Metrics,
    streams: Streams,
    owner: str,
    clock: Clock,
    bus: RedisBus | None,
    seams: Seams,
) -> dict[str, LegacyLane]:
    """The legacy lane of every route, by upstream name; none when `legacy.enabled` is off.
    A Streamable HTTP upstream is passed through; a stdio or HTTP+SSE one's sessions are
    held by the replica that opens them."""
    legacy = config.legacy
    if not legacy.enabled:
        return {}
    lane_metrics = LaneMetrics(metrics, lambda: len(streams))
    settings = LaneSettings(
        legacy=legacy,
        limits=config.limits,
        audience=config.sealing.audience,
        replica=owner,  # with its incarnation: a replica restarted holds no session
        log_salt=state.log_salt(config.sealing.keys),
    )
    sessions = codec.with_prefix(SESSION_PREFIX)
    hooks = FrontStreams()
    lanes = {}
    for upstream in config.upstreams:
        passed: LegacyUpstream
        source = credentials.get(upstream.name)
        authorization = source.authorization if source else None
        unauthorized = source.invalidate if source else None
        most = config.limits.max_upstream_message_bytes
        if upstream.transport in BOUND_TRANSPORTS:
            passed = BoundUpstream(
                upstream.name,
                link_factory(
                    http, upstream, authorization, unauthorized, clock=clock, max_message_bytes=most
                ),
                max_sessions=legacy.max_bound_sessions,
                idle_s=legacy.bound_session_idle_s,
                monotonic=clock.monotonic,
            )
            lane_metrics.held(upstream.name, functools.partial(len, passed.sessions))
        else:
            endpoint = http_endpoint(upstream, authorization, unauthorized, max_message_bytes=most)
            passed = HttpPassThrough(
                http, endpoint, wait_s=config.limits.hold_timeout_s, clock=clock
            )
        lanes[upstream.name] = LegacyLane(
            route=upstream.name,
            upstream=passed,
            door=doors[upstream.name],
            codec=sessions,
            settings=settings,
            streams=streams,
            metrics=lane_metrics,
            hooks=hooks,
            clock=clock,
            remote=_remote(bus, upstream.name, config.limits.hold_timeout_s, clock),
            seams=seams,
        )
    return lanes


def _remote(
    bus: RedisBus | None, route: str, wait_s: float, clock: Clock
) -> Callable[[str], SessionUpstream] | None:
    """How a route's sessions held by another replica are reached: over the fleet bus."""
    if bus is None:
        return None
    fleet = bus

    def remote(owner: str) -> SessionUpstream:
        return Remote(fleet, owner, route, wait_s=wait_s, clock=clock)

    return remote
