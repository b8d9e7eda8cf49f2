"""What a replica is made of, built once from its configuration: `compose(config)` returns
`Components`, every long-lived part, each built in dependency order and handed what it
needs through its constructor (or, for what a running resource tells, its `start`).

One choice shapes the rest, made once from the store's URL (`gateway.membership`): a
replica alone (its records in its own process, its bus the fleet of one) or one of a
fleet (the store, the bus, the ledger of sessions and the change feed on Redis). Nothing
after it asks which it is.

`Components.resources` lists what opens and closes, in the order it opens (it closes in
reverse): tracing, the audit trail (closed after everything that records in it), the
HTTP clients, the store, the upstream pools, the bus, the ledger and the change feed (on
a fleet), the replica-bound legacy sessions, and the calls and tasks. Opening and
closing them, and the routes, are `gateway.app`'s. The seams where capabilities hook
into requests (`gateway.seams`) are handed to the legacy lanes here and to the 2026 lanes
with the routes.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import structlog

from gateway.approvals import Approvals
from gateway.audit.build import build_audit
from gateway.audit.trail import Audit, reopen_on_sighup
from gateway.auth import ClientCredentialsSource
from gateway.auth.fetcher import AiohttpFetcher
from gateway.calls.bridge import Bridge
from gateway.catalog import Catalog, UpstreamCatalog
from gateway.clock import Clock, SystemClock
from gateway.config import BOUND_TRANSPORTS, GatewayConfig
from gateway.fleet import messages
from gateway.http1 import Http1Client
from gateway.legacy_clients.asking import Questions
from gateway.legacy_clients.bound import BoundUpstream
from gateway.legacy_clients.forwarding import OwnerSide
from gateway.legacy_clients.lane import LaneSettings, LegacyLane
from gateway.legacy_clients.metrics import LaneMetrics
from gateway.legacy_clients.streams import Streams
from gateway.legacy_clients.trail import LaneTrail
from gateway.legacy_clients.upstream import HttpPassThrough, LegacyUpstream
from gateway.listens import Listens
from gateway.membership import InboxHandler, Ledger, Membership, Remoter, Resource, membership
from gateway.observability import Metrics
from gateway.protocol import state
from gateway.protocol.approval import PREFIX as APPROVAL_PREFIX
from gateway.protocol.formats import FleetLevel
from gateway.protocol.legacy_session import SESSION_PREFIX
from gateway.protocol.pins import Drift
from gateway.protocol.state import AesGcmKeyRing
from gateway.seams import NO_SEAMS, Seams
from gateway.store.base import SuspendedCallStore, TimedStore
from gateway.store.ended import EndedSessions
from gateway.store.pins import PinStore
from gateway.tasks.service import RECORD_PREFIX as TASK_RECORD_PREFIX
from gateway.tasks.service import Tasks
from gateway.tracing import TRACING
from gateway.upstream.factory import http_endpoint, link_factory, restart_backoff_s, session_factory
from gateway.upstream.pool import SessionPool
from gateway.web.front import FrontStreams
from gateway.web.front_door import FrontDoor, build_front_doors

log = structlog.get_logger("gateway")


@dataclass(frozen=True, slots=True, kw_only=True)
class Components:
    config: GatewayConfig
    clock: Clock
    owner: str  # this replica in the fleet: its name and this start's incarnation
    incarnation: str
    metrics: Metrics
    audit: Audit
    store: SuspendedCallStore
    pools: Mapping[str, SessionPool]
    #: What readiness asks of the fleet, by name: on a fleet, whether the lease is held.
    leases: Mapping[str, Callable[[], bool]]
    listens: Listens
    catalog: Catalog
    #: Where capabilities hook into requests, both eras: the catalog's, then the others'.
    seams: Seams
    streams: Streams
    bridge: Bridge
    tasks: Tasks
    doors: Mapping[str, FrontDoor]
    lanes: Mapping[str, LegacyLane]
    #: The ends of 2025 sessions on endpoints of several upstreams, fleet-wide.
    ended_sessions: EndedSessions
    #: In the order they open; they close in reverse.
    resources: tuple[Resource, ...]


def compose(
    config: GatewayConfig, clock: Clock | None = None, *, seams: Seams = NO_SEAMS
) -> Components:
    """Every part of a replica, built in dependency order (nothing runs yet)."""
    clock = SystemClock() if clock is None else clock
    # This process's identity in the fleet: the configured name plus an incarnation that
    # changes at every start, so a replica restarted under the same name (a pod keeps its
    # name) is a new owner and its predecessor's calls go to takeover or replay.
    incarnation = secrets.token_hex(4)
    owner = f"{config.replica_id}~{incarnation}"
    metrics = Metrics()
    audit = _trail(config, owner, clock, metrics)  # what records is handed it
    shared = membership(config, clock, owner)  # alone, or one of a fleet
    store = TimedStore(shared.store, metrics)
    limits = config.limits
    fetcher = AiohttpFetcher()  # issuers' metadata and keys, upstream token endpoints
    credentials = _credentials(config, fetcher, clock)
    # Every HTTP upstream's client (Streamable HTTP and HTTP+SSE, both lanes): no cookies,
    # no connection limit (a parked call, a legacy GET stream holds its connection).
    http = Http1Client()
    # What clients see of each upstream's lists, told of every list change (here or on
    # another replica) through the listens' relay.
    changed = ChangesToCatalog()
    listens = Listens(
        limits.max_listens,
        limits.max_listens_per_principal,
        metrics.listens,
        fleet=shared.heard,
        changed=changed,
    )
    pools = _pools(config, http, credentials, listens, metrics, clock)
    catalog = changed.catalog = _catalog(config, pools, shared.pins, metrics, clock, audit)
    seams = catalog.seams(seams)  # the catalog's first, for both eras
    ledger = shared.ledger(pools, metrics)
    streams = Streams(config.legacy.max_streams, config.legacy.max_streams_per_principal)
    codec = make_codec(config)
    approvals = _approvals(config, catalog, shared, codec, clock, pools, metrics, audit)
    seams = approvals.seams(seams)  # after the catalog's: a hidden name is asked of nobody
    bridge = Bridge(
        config,
        store=store,
        codec=codec,
        pools=pools,
        replicas=shared.calls,
        metrics=metrics,
        clock=clock,
        owner=owner,
        park=ledger.park,
        listens=listens,
        on_drain=(streams.end_all,),  # their clients reconnect elsewhere
        audit=audit,
        gate=approvals if approvals.asking else None,
    )
    tasks = _tasks(config, bridge, shared, codec, owner, pools, audit)
    _bind(metrics, bridge, pools, shared)
    rate = limits.rate_per_principal
    limiter = shared.rate_limiter(rate, clock.wall_s) if rate.enabled else None
    doors = build_front_doors(
        config, fetcher=fetcher, wall_s=clock.wall_s, limiter=limiter, audit=audit
    )
    remote = shared.remote  # how a lane reaches the sessions another replica holds
    questions = Questions(shared.bus)  # the gateway's own, to 2025 clients, waiting here
    lanes = _legacy_lanes(
        config,
        http,
        credentials,
        doors,
        codec,
        metrics,
        streams,
        owner,
        clock,
        remote,
        seams,
        LaneTrails(audit, clock, shared.bus.level),
        questions,
    )
    resources = _resources(
        config,
        owner,
        clock,
        audit,
        fetcher,
        http,
        store,
        pools,
        shared,
        bridge,
        tasks,
        ledger,
        listens,
        lanes,
        questions,
    )
    return Components(
        config=config,
        clock=clock,
        owner=owner,
        incarnation=incarnation,
        metrics=metrics,
        audit=audit,
        store=store,
        pools=pools,
        leases=shared.leases,
        listens=listens,
        catalog=catalog,
        seams=seams,
        streams=streams,
        bridge=bridge,
        tasks=tasks,
        doors=doors,
        lanes=lanes,
        ended_sessions=shared.ended_sessions,
        resources=resources,
    )


def _tasks(
    config: GatewayConfig,
    bridge: Bridge,
    shared: Membership,
    codec: AesGcmKeyRing,
    owner: str,
    pools: Mapping[str, SessionPool],
    audit: Audit,
) -> Tasks:
    """The tasks extension, on the call core, its records sealed with a prefix of their own."""
    return Tasks(
        bridge=bridge,
        store=shared.task_store,
        codec=codec.with_prefix(TASK_RECORD_PREFIX),
        limits=config.limits,
        owner=owner,
        pools=pools,
        bus=shared.bus,
        audit=audit,
    )


def _credentials(
    config: GatewayConfig, fetcher: AiohttpFetcher, clock: Clock
) -> dict[str, ClientCredentialsSource]:
    """The gateway's own tokens for the upstreams that take one (client credentials)."""
    return {
        u.name: ClientCredentialsSource(u.oauth_client, fetcher=fetcher, clock=clock.wall_s)
        for u in config.upstreams
        if u.oauth_client is not None
    }


def _bind(
    metrics: Metrics, bridge: Bridge, pools: Mapping[str, SessionPool], shared: Membership
) -> None:
    """The gauges read at each scrape: the calls, the pools, the lease."""
    metrics.bind(
        parked=lambda: bridge.parked,
        live=lambda: len(bridge.calls),
        lost=lambda: bridge.calls.lost,
        pools=pools,
        lease=shared.bus.holds_lease,
    )


def _approvals(
    config: GatewayConfig,
    catalog: Catalog,
    shared: Membership,
    codec: AesGcmKeyRing,
    clock: Clock,
    pools: Mapping[str, SessionPool],
    metrics: Metrics,
    audit: Audit,
) -> Approvals:
    """A person's approval of calls (`gateway.approvals`), its state sealed under the
    gateway's keys with a prefix of its own, waiting as long as a parked call's question."""
    return Approvals(
        catalog=catalog,
        upstreams={u.name: u for u in config.upstreams},
        store=shared.approvals,
        codec=codec.with_prefix(APPROVAL_PREFIX),
        audience=config.sealing.audience,
        answer_within_s=config.limits.suspension_ttl_s,
        clock=clock,
        pools=pools,
        metrics=metrics,
        audit=audit,
    )


def _resources(
    config: GatewayConfig,
    owner: str,
    clock: Clock,
    audit: Audit,
    fetcher: AiohttpFetcher,
    http: Http1Client,
    store: SuspendedCallStore,
    pools: Mapping[str, SessionPool],
    shared: Membership,
    bridge: Bridge,
    tasks: Tasks,
    ledger: Ledger,
    listens: Listens,
    lanes: Mapping[str, LegacyLane],
    questions: Questions,
) -> tuple[Resource, ...]:
    """What a replica opens, in order (it closes them in reverse): the bus with its inbox
    (the stdio and HTTP+SSE sessions held here served to other replicas' lanes), and the
    rest."""
    bound = {
        n: lane.upstream for n, lane in lanes.items() if isinstance(lane.upstream, BoundUpstream)
    }
    owner_side = OwnerSide(
        shared.bus, bound, check_every_s=2 * config.fleet.heartbeat_s, clock=clock
    )
    inbox = _inbox(bridge, tasks, owner_side, questions)

    async def close_calls() -> None:
        await tasks.close()
        await bridge.close()

    return (
        Resource("tracing", lambda: TRACING.configure("mrtr-gateway", owner), _flush_tracing),
        *_audited(audit),
        Resource("fetcher", _nothing, fetcher.close),
        Resource("http", _nothing, http.close),
        Resource("store", _nothing, store.close),
        *(Resource(f"pool {name}", pool.start, pool.close) for name, pool in pools.items()),
        Resource(
            "bus",
            lambda: shared.bus.start(
                inbox, on_data_loss=bridge.restore_records, on_lease_regained=bridge.hand_over_lost
            ),
            shared.bus.close,
        ),
        *ledger.resources,
        *shared.feed(listens),
        *(Resource(f"bound {name}", held.start, held.close) for name, held in bound.items()),
        Resource("calls", _nothing, close_calls),
    )


def _trail(config: GatewayConfig, owner: str, clock: Clock, metrics: Metrics) -> Audit:
    """The audit trail: every call, round, task, refusal and 2025 session, recorded once
    (off without an `audit` section); its callers named as log lines name them."""
    return build_audit(
        config.audit,
        replica=owner,
        clock=clock,
        registry=metrics.registry,
        log_salt=state.log_salt(config.sealing.keys),
    )


@dataclass(frozen=True, slots=True)
class LaneTrails:
    """What each legacy lane records in the trail with: the trail, the clock, and which
    formats every replica reads (a call's questions are tagged once all read them)."""

    audit: Audit
    clock: Clock
    level: FleetLevel

    def of(self, route: str) -> LaneTrail:
        return LaneTrail(self.audit, route=route, clock=self.clock, level=self.level)


def _audited(audit: Audit) -> tuple[Resource, ...]:
    """The audit trail's sinks, open from the first request to the last event (a file
    opened again at every SIGHUP, for logrotate); none without a trail."""
    if not audit.on:
        return ()
    undo: list[Callable[[], None]] = []

    def start() -> None:
        audit.start()
        undo.append(reopen_on_sighup(audit))

    async def close() -> None:
        for step in undo:
            step()
        await audit.close()

    return (Resource("audit", start, close),)


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


# -- the parts ----------------------------------------------------------------------------


def _pools(
    config: GatewayConfig,
    http: Http1Client,
    credentials: Mapping[str, ClientCredentialsSource],
    listens: Listens,
    metrics: Metrics,
    clock: Clock,
) -> dict[str, SessionPool]:
    """Each upstream's session pool (opened when the gateway starts); every list change
    its sessions hear goes to that upstream's listens."""
    pools = {}
    for upstream in config.upstreams:
        source = credentials.get(upstream.name)
        pools[upstream.name] = SessionPool(
            upstream.name,
            session_factory(
                http,
                upstream,
                source.authorization if source else None,
                source.invalidate if source else None,
                clock=clock,
                max_message_bytes=config.limits.max_upstream_message_bytes,
            ),
            upstream.pool,
            on_error=metrics.upstream_errors.labels(upstream.name, "open").inc,
            on_change=functools.partial(listens.publish, upstream.name),
            clock=clock,
            restart_backoff_s=restart_backoff_s(upstream),
        )
    return pools


class ChangesToCatalog:
    """Tells the catalog of a list change (it is built after the listens that relay it)."""

    catalog: Catalog | None = None

    def __call__(self, upstream: str, method: str) -> None:
        if self.catalog is not None:
            self.catalog.changed(upstream, method)


def _catalog(
    config: GatewayConfig,
    pools: Mapping[str, SessionPool],
    pins: PinStore,
    metrics: Metrics,
    clock: Clock,
    audit: Audit,
) -> Catalog:
    def drifted(upstream: str, drift: Drift) -> None:
        metrics.catalog_drift.labels(upstream, drift.severity).inc()

    return Catalog(
        {
            u.name: UpstreamCatalog(u, pools[u.name], pins, clock, on_drift=drifted)
            for u in config.upstreams
        },
        audit,
    )


def _inbox(
    bridge: Bridge, tasks: Tasks, owner_side: OwnerSide, questions: Questions
) -> InboxHandler:
    """This replica's inbox: other replicas' retries of the calls parked here, messages
    for the tasks run here, requests of the stdio and HTTP+SSE sessions held here, and
    2025 clients' answers to the gateway's questions waiting here, each decoded once by
    the bus and served where its type says."""

    async def serve(message: messages.Message) -> None:
        if isinstance(message, messages.ForTask):
            await tasks.told(message)
        elif isinstance(message, messages.ClientAnswer):
            await questions.serve(message)
        elif isinstance(message, messages.Exchange | messages.Stop) and owner_side.upstreams:
            await owner_side.serve(message)
        else:
            await bridge.serve_forwarded(message)

    return serve


def _legacy_lanes(
    config: GatewayConfig,
    http: Http1Client,
    credentials: Mapping[str, ClientCredentialsSource],
    doors: Mapping[str, FrontDoor],
    codec: AesGcmKeyRing,
    metrics: Metrics,
    streams: Streams,
    owner: str,
    clock: Clock,
    remote: Callable[[str, float, Clock], Remoter],
    seams: Seams,
    trails: LaneTrails,
    questions: Questions,
) -> dict[str, LegacyLane]:
    """The legacy lane of every upstream, by its name (on an endpoint of several, each
    serves its part of the endpoint's sessions); none when `legacy.enabled` is off.
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
        level=trails.level,  # which session id claims every replica reads
    )
    sessions = codec.with_prefix(SESSION_PREFIX)
    hooks = FrontStreams()
    lanes = {}
    # On an endpoint of several upstreams, what an upstream sends the client is marked
    # with its name (`gateway.legacy_clients.endpoint` serves the session).
    joined = {name for e in config.endpoints if e.several for name in e.upstreams}
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
            lane_metrics.bound_sessions(upstream.name, functools.partial(len, passed.sessions))
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
            remote=remote(upstream.name, config.limits.hold_timeout_s, clock),
            seams=seams,
            trail=trails.of(upstream.name),
            questions=questions,
            marks=upstream.name if upstream.name in joined else None,
        )
    return lanes


def _nothing() -> None:
    return None


async def _flush_tracing() -> None:
    TRACING.shutdown()
