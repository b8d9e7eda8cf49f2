"""A replica alone, or one of a fleet: what it shares with the others and how it reaches
them, chosen once from the store's URL (`membership`), then asked of no one again.

- `InProcess` (`memory://`): its records in its own process; its bus is the fleet of
  one (`gateway.fleet.single`); nobody else hears of its list changes, lists its
  sessions, or reaches the sessions it holds.
- `OnRedis`: the store, the bus between replicas (heartbeats, inboxes, the lease, the
  fleet's format level), the ledger of upstream sessions and the feed of list changes,
  all on one Redis.

Each hands the call core what it does differently (`gateway.calls.replicas`), and
`gateway.compose` the parts that run (`Resource`: opened as the gateway starts, closed
as it stops).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.auth.ports import WallClock
from gateway.auth.ratelimit import MemoryTokenBucket, RateLimiter, RedisTokenBucket
from gateway.calls import replicas
from gateway.calls.suspension import ParkStep, park_only, withdrawing
from gateway.clock import Clock
from gateway.config import STDIO, GatewayConfig
from gateway.config.model import RateConfig
from gateway.fleet import messages
from gateway.fleet.changes import ChangeFeed
from gateway.fleet.ledger import SessionLedger
from gateway.fleet.port import Bus
from gateway.fleet.redis_bus import RedisBus
from gateway.fleet.single import SingleReplica
from gateway.legacy_clients.forwarding import Remote
from gateway.legacy_clients.upstream import SessionUpstream
from gateway.listens import Listens
from gateway.observability import Metrics
from gateway.protocol import formats
from gateway.protocol.formats import FleetLevel, Kind
from gateway.store.approvals import ApprovalStore, MemoryApprovals, RedisApprovals
from gateway.store.base import SuspendedCallStore
from gateway.store.ended import EndedSessions, MemoryEndedSessions, RedisEndedSessions
from gateway.store.memory import MemoryStore
from gateway.store.pins import MemoryPins, PinStore, RedisPins
from gateway.store.redis import RedisStore
from gateway.store.redis_client import connect
from gateway.store.tasks import MemoryTaskStore, RedisTaskStore, TaskStore
from gateway.upstream.pool import SessionPool

#: What serves this replica's inbox: each message another replica sent, decoded.
InboxHandler = Callable[[messages.Message], Coroutine[Any, Any, None]]
Told = Callable[[], Coroutine[Any, Any, None]]
#: How the legacy lane reaches a route's sessions that another replica holds.
Remoter = Callable[[str], SessionUpstream | None]


@dataclass(frozen=True, slots=True)
class Resource:
    """A part that runs while the gateway does: `open` as it starts, `close` as it stops."""

    name: str
    open: Callable[[], None]
    close: Callable[[], Awaitable[None]]


class Member(Bus, Protocol):
    """The bus as a resource: `RedisBus`, or the fleet of one."""

    def start(
        self, handler: InboxHandler, *, on_data_loss: Told, on_lease_regained: Told
    ) -> None: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Ledger:
    """The upstream sessions this replica holds, listed for a survivor to end should it
    die (`gateway.fleet.ledger`; on a fleet only): how a call parks (its session taken off
    the list meanwhile), and what runs."""

    park: ParkStep
    resources: tuple[Resource, ...]


class Membership(Protocol):
    """What this replica shares with the others, and how it reaches them."""

    @property
    def store(self) -> SuspendedCallStore: ...

    @property
    def task_store(self) -> TaskStore: ...

    @property
    def pins(self) -> PinStore:
        """The tools' pins (`gateway.catalog`): the fleet's, or this process's."""
        ...

    @property
    def approvals(self) -> ApprovalStore:
        """Approvals used and remembered (`gateway.approvals`): the fleet's, or this
        process's."""
        ...

    @property
    def ended_sessions(self) -> EndedSessions:
        """The ends of 2025 sessions on endpoints of several upstreams
        (`gateway.legacy_clients.endpoint`): the fleet's, or this process's."""
        ...

    @property
    def bus(self) -> Member: ...

    @property
    def calls(self) -> replicas.Replicas:
        """What the call core does differently (`gateway.calls.replicas`)."""
        ...

    def rate_limiter(self, rate: RateConfig, wall_s: WallClock) -> RateLimiter:
        """The rate limit of every route (a fleet's holds fleet-wide)."""
        ...

    @property
    def leases(self) -> Mapping[str, Callable[[], bool]]:
        """What readiness asks of the fleet, by name: on a fleet, that the lease is held."""
        ...

    def heard(self, upstream: str, method: str) -> None:
        """A list change heard here: told to the other replicas' listens."""
        ...

    def ledger(self, pools: Mapping[str, SessionPool], metrics: Metrics) -> Ledger: ...

    def feed(self, listens: Listens) -> tuple[Resource, ...]:
        """What relays the list changes other replicas heard to this one's listens."""
        ...

    def remote(self, route: str, wait_s: float, clock: Clock) -> Remoter:
        """How the lane reaches a route's sessions another replica holds, by its owner
        (None: that owner cannot be reached)."""
        ...


def membership(config: GatewayConfig, clock: Clock, owner: str) -> Membership:
    """`owner`: this replica, as the fleet names it (its incarnation included)."""
    if config.store.shared:
        return OnRedis(config, clock, owner)
    return InProcess(config, clock, owner)


def _gone(owner: str) -> None:
    """No other replica's session can be reached by a replica alone."""
    return None


class InProcess:
    """A replica alone: its records in its own process, its bus the fleet of one."""

    def __init__(self, config: GatewayConfig, clock: Clock, owner: str) -> None:
        self.store: SuspendedCallStore = MemoryStore(clock)
        self.task_store: TaskStore = MemoryTaskStore(clock)
        self.pins: PinStore = MemoryPins()
        self.approvals: ApprovalStore = MemoryApprovals(clock)
        self.ended_sessions: EndedSessions = MemoryEndedSessions(clock)
        self.bus = SingleReplica(owner, formats.single(config.fleet.format_level))
        self.calls = replicas.Alone(self.bus)
        self.leases: Mapping[str, Callable[[], bool]] = {}

    def rate_limiter(self, rate: RateConfig, wall_s: WallClock) -> RateLimiter:
        return MemoryTokenBucket(rate_per_s=rate.per_s, burst=rate.burst, clock=wall_s)

    def heard(self, upstream: str, method: str) -> None:
        return None

    def ledger(self, pools: Mapping[str, SessionPool], metrics: Metrics) -> Ledger:
        return Ledger(park_only, ())

    def feed(self, listens: Listens) -> tuple[Resource, ...]:
        return ()

    def remote(self, route: str, wait_s: float, clock: Clock) -> Remoter:
        return _gone  # a session of another incarnation's is gone with it


class OnRedis:
    """One replica of a fleet sharing a Redis store."""

    def __init__(self, config: GatewayConfig, clock: Clock, owner: str) -> None:
        self.config, self.clock, self.owner = config, clock, owner
        self.prefix = prefix = config.store.key_prefix
        # Which versions of the data shared with other replicas to write: learnt from
        # the heartbeats (`gateway.protocol.formats`).
        level = FleetLevel(settle_s=config.fleet.format_settle_s, pin=config.fleet.format_level)
        self.redis = client = connect(config.store.url)
        acked, wait_ms = config.store.replicas_acked, config.store.wait_ms
        self.store = RedisStore(
            client, prefix=prefix, clock=clock, replicas_acked=acked, wait_ms=wait_ms, level=level
        )
        self.task_store = RedisTaskStore(
            client, prefix=prefix, clock=clock, replicas_acked=acked, wait_ms=wait_ms
        )
        self.pins = RedisPins(
            client, prefix=prefix, version=lambda: level.version(Kind.PIN), clock=clock
        )
        self.approvals = RedisApprovals(
            client, prefix=prefix, version=lambda: level.version(Kind.APPROVAL), clock=clock
        )
        self.ended_sessions = RedisEndedSessions(
            client, prefix=prefix, version=lambda: level.version(Kind.ENDED_SESSION), clock=clock
        )
        beat = config.fleet.heartbeat_s
        self.bus = RedisBus(
            client, prefix=prefix, replica_id=owner, heartbeat_s=beat, clock=clock, level=level
        )
        self.calls = replicas.Fleet(self.bus, beat_s=beat)
        self.leases = {"fleet": self.bus.holds_lease}
        self.changes = ChangeFeed(
            client,
            prefix=prefix,
            interval_s=beat,
            clock=clock,
            upstreams=frozenset(u.name for u in config.upstreams if u.transport != STDIO),
        )

    def rate_limiter(self, rate: RateConfig, wall_s: WallClock) -> RateLimiter:
        return RedisTokenBucket(
            self.redis,
            rate_per_s=rate.per_s,
            burst=rate.burst,
            clock=wall_s,
            prefix=f"{self.prefix}rl:",
        )

    def heard(self, upstream: str, method: str) -> None:
        self.changes.heard(upstream, method)

    def ledger(self, pools: Mapping[str, SessionPool], metrics: Metrics) -> Ledger:
        fleet = self.config.fleet
        ledger = SessionLedger(
            self.redis,
            prefix=self.prefix,
            replica_id=self.owner,
            heartbeat_key=self.bus.replica_key,
            pools=pools,
            clock=self.clock,
            interval_s=fleet.heartbeat_s,
            sweep_s=fleet.orphan_sweep_s,
            level=self.bus.level,
            counted=lambda upstream, outcome: metrics.orphaned_sessions.labels(
                upstream, outcome
            ).inc(),
        )
        return Ledger(
            withdrawing(ledger.withdraw), (Resource("ledger", ledger.start, ledger.close),)
        )

    def feed(self, listens: Listens) -> tuple[Resource, ...]:
        changes = self.changes
        return (Resource("changes", lambda: changes.start(listens.relay), changes.close),)

    def remote(self, route: str, wait_s: float, clock: Clock) -> Remoter:
        bus = self.bus
        return lambda owner: Remote(bus, owner, route, wait_s=wait_s, clock=clock)
