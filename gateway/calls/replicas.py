"""This replica among the others: what the call core does differently on a replica alone
and on one of a fleet, chosen once, where the gateway is composed (`gateway.compose`).

Both hand the core a `Bus` (alone: the fleet of one, `gateway.fleet.single`), so it
asks no question of whether there is a fleet: it asks the bus whether its lease is held,
who is alive, what the fleet's format level is. What differs is chosen here:

- a retry whose call is not here (`Routes`): alone, it is lost (`Nowhere`); in a fleet
  it is forwarded to its owner, or the call taken over or replayed (`Routing`);
- a resumed round's outcome (`Outcomes`): alone, not kept; in a fleet, kept as long as
  its state may live, for the retry sent again;
- a wait counted in heartbeats (`beat_s`): alone, none; in a fleet, the fleet's beat.

A replica alone keeps its records in its own process: every call it parked is here, or
ended, so a retry that finds none here is lost, and no reply can be lost between two
replicas.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol

from gateway.calls.forwarding import Forward
from gateway.calls.lifecycle import Lifecycle
from gateway.calls.outcomes import NoOutcomes, Outcomes, StoredOutcomes
from gateway.calls.routing import Routing
from gateway.calls.runner import Notifier, Runner
from gateway.clock import Clock
from gateway.config import LimitsConfig, UpstreamConfig
from gateway.errors import CallLost
from gateway.fleet import messages
from gateway.fleet.port import Bus
from gateway.observability import Metrics
from gateway.protocol.inbound import FrontRequest
from gateway.store.base import SuspendedCall, SuspendedCallStore
from gateway.upstream.port import UpstreamPool


class Routes(Protocol):
    """Where a claimed retry goes when this replica does not hold its call."""

    def forwarding(self, front: FrontRequest) -> AbstractContextManager[Forward | None]:
        """The retry's way to the replica holding its call, made before its round is
        claimed (None: there is none)."""
        ...

    async def elsewhere(
        self,
        upstream: UpstreamConfig,
        record: SuspendedCall,
        front: FrontRequest,
        notify: Notifier,
        forward: Forward | None = None,
    ) -> dict[str, Any]:
        """Raises: RpcError (CallLost when nobody can serve it)."""
        ...

    async def give_back(self, record: SuspendedCall) -> None:
        """Park again a round this replica claimed and nobody resumed, best effort."""
        ...

    async def serve_message(self, message: messages.Message) -> None:
        """A message about a call, from another replica's inbox."""
        ...


class Nowhere:
    """The routes of a replica alone: a call not here is lost, and nothing comes in."""

    def forwarding(self, front: FrontRequest) -> AbstractContextManager[Forward | None]:
        return nullcontext()

    async def elsewhere(
        self,
        upstream: UpstreamConfig,
        record: SuspendedCall,
        front: FrontRequest,
        notify: Notifier,
        forward: Forward | None = None,
    ) -> dict[str, Any]:
        raise CallLost()

    async def give_back(self, record: SuspendedCall) -> None:
        return None  # alone, a round claimed stays claimed: its call is here, resuming

    async def serve_message(self, message: messages.Message) -> None:
        return None


class Replicas(Protocol):
    """Alone or in a fleet, as the call core needs to know it."""

    bus: Bus
    beat_s: float

    def outcomes(self, *, store: SuspendedCallStore, metrics: Metrics, ttl_s: float) -> Outcomes:
        """What is kept of a resumed round's outcome; `ttl_s`: how long a state lives."""
        ...

    def routes(
        self,
        *,
        lifecycle: Lifecycle,
        pools: Mapping[str, UpstreamPool],
        runner: Runner,
        outcomes: Outcomes,
        store: SuspendedCallStore,
        clock: Clock,
        limits: LimitsConfig,
        metrics: Metrics,
    ) -> Routes: ...


class Alone:
    """A replica alone (an in-process store): its bus is the fleet of one."""

    beat_s = 0.0

    def __init__(self, bus: Bus) -> None:
        self.bus = bus

    def outcomes(self, *, store: SuspendedCallStore, metrics: Metrics, ttl_s: float) -> Outcomes:
        return NoOutcomes()

    def routes(
        self,
        *,
        lifecycle: Lifecycle,
        pools: Mapping[str, UpstreamPool],
        runner: Runner,
        outcomes: Outcomes,
        store: SuspendedCallStore,
        clock: Clock,
        limits: LimitsConfig,
        metrics: Metrics,
    ) -> Routes:
        return Nowhere()


class Fleet:
    """One replica of a fleet sharing a store, reached over `bus`, beating every `beat_s`."""

    def __init__(self, bus: Bus, *, beat_s: float) -> None:
        self.bus = bus
        self.beat_s = beat_s

    def outcomes(self, *, store: SuspendedCallStore, metrics: Metrics, ttl_s: float) -> Outcomes:
        return StoredOutcomes(store=store, metrics=metrics, ttl_s=ttl_s)

    def routes(
        self,
        *,
        lifecycle: Lifecycle,
        pools: Mapping[str, UpstreamPool],
        runner: Runner,
        outcomes: Outcomes,
        store: SuspendedCallStore,
        clock: Clock,
        limits: LimitsConfig,
        metrics: Metrics,
    ) -> Routes:
        return Routing(
            bus=self.bus,
            lifecycle=lifecycle,
            pools=pools,
            runner=runner,
            outcomes=outcomes,
            store=store,
            clock=clock,
            limits=limits,
            metrics=metrics,
        )
