"""The entry of the call core: an interruptible client request in, its 2026 result out.

Wiring and dispatch only: a request without `requestState` starts a call (unless this
replica is draining); a retry goes to `Retries`.
`Bridge` also drains and closes the replica's calls. Which phase a call is in and how it
ends is `gateway.calls.lifecycle`'s; where a retry goes, `retries` and `routing`'s; what
differs between a replica alone and one of a fleet, `replicas`'.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

import structlog

from gateway import clock as clocks
from gateway.audit.trail import OFF, Audit
from gateway.calls.admission import Admission
from gateway.calls.lifecycle import Lifecycle, Registry
from gateway.calls.replicas import Replicas
from gateway.calls.retries import Retries
from gateway.calls.runner import Notifier, Runner
from gateway.calls.suspension import ParkStep, Suspender, park_only
from gateway.calls.trail import CallTrail
from gateway.clock import Clock, SystemClock
from gateway.config import GatewayConfig, UpstreamConfig
from gateway.errors import Draining, RpcError
from gateway.fleet import messages
from gateway.listens import Listens
from gateway.observability import Metrics
from gateway.protocol import state
from gateway.protocol.call import Trigger
from gateway.protocol.inbound import FrontRequest
from gateway.store.base import SuspendedCallStore
from gateway.upstream.port import UpstreamPool

log = structlog.get_logger("gateway.calls")


class Gate(Protocol):
    """What a call passes before the call core serves it (`gateway.approvals`: a
    person's approval): the request to serve (the same, or changed), or the result to
    answer at once. Raises: RpcError, answered as any call's."""

    async def admit(
        self, upstream: UpstreamConfig, front: FrontRequest, principal: str
    ) -> FrontRequest | dict[str, Any]: ...


class Bridge:
    def __init__(
        self,
        config: GatewayConfig,
        *,
        store: SuspendedCallStore,
        codec: state.StateCodec,
        pools: Mapping[str, UpstreamPool],
        replicas: Replicas,
        metrics: Metrics | None = None,
        clock: Clock | None = None,
        owner: str | None = None,
        park: ParkStep = park_only,
        listens: Listens | None = None,
        on_drain: Iterable[Callable[[], None]] = (),
        audit: Audit = OFF,
        gate: Gate | None = None,
    ) -> None:
        """`replicas`: this replica alone or in a fleet (`gateway.calls.replicas`);
        `park`: how a call's record is parked (on a fleet, its session withdrawn from the
        ledger meanwhile, `suspension.withdrawing`); `on_drain`: told when the replica
        starts draining (what else it serves ends: legacy GET streams); `audit`: the
        audit trail, told every call's start, rounds and end (`gateway.calls.trail`);
        `gate`: what every `tools/call` passes first (its rounds, a task's too)."""
        self.config = config
        self.gate = gate
        self.listens = listens
        self.on_drain = tuple(on_drain)
        limits = self.limits = config.limits
        self.metrics = metrics = metrics or Metrics()
        self.clock = clock = clock or SystemClock()
        self.draining = False
        owner = owner or config.replica_id
        bus = replicas.bus
        self.audit = audit
        trail = CallTrail(audit, clock)
        self.admission = Admission(
            codec=codec,
            store=store,
            clock=clock,
            metrics=metrics,
            audience=config.sealing.audience,
            claimer=owner,
            alive=bus.alive,
            written_back=bus.written_back,
            beat_s=replicas.beat_s,
            trail=trail,
        )
        # Whoever resumes a round keeps its outcome, on a fleet (`gateway.calls.outcomes`).
        outcomes = replicas.outcomes(store=store, metrics=metrics, ttl_s=limits.suspension_ttl_s)
        self.lifecycle = lifecycle = Lifecycle(
            store=store,
            metrics=metrics,
            clock=clock,
            limits=limits,
            owner=owner,
            lease_term=bus.lease_term,
            outcomes=outcomes,
            trail=trail,
        )
        self.suspender = suspender = Suspender(
            lifecycle=lifecycle,
            store=store,
            codec=codec,
            audience=self.admission.audience,
            clock=clock,
            limits=limits,
            outcomes=outcomes,
            level=bus.level,
            park=park,
        )
        self.runner = runner = Runner(
            lifecycle=lifecycle,
            pools=pools,
            suspender=suspender,
            clock=clock,
            limits=limits,
            metrics=metrics,
            on_change=listens.publish if listens is not None else None,
        )
        self.routing = replicas.routes(
            lifecycle=lifecycle,
            pools=pools,
            runner=runner,
            outcomes=outcomes,
            store=store,
            clock=clock,
            limits=limits,
            metrics=metrics,
        )
        self.retries = Retries(
            admission=self.admission,
            lifecycle=lifecycle,
            runner=runner,
            bus=bus,
            routing=self.routing,
            outcomes=outcomes,
        )

    @property
    def calls(self) -> Registry:
        """The live calls of this replica."""
        return self.lifecycle.calls

    @property
    def parked(self) -> int:
        return self.calls.parked

    def handle(
        self, upstream: UpstreamConfig, front: FrontRequest, principal: str, notify: Notifier
    ) -> Awaitable[dict[str, Any]]:
        """Serve one interruptible request: its 2026 result, to await. (Past the approvals
        gate, the runner's or the retries' coroutine itself, not one of ours around it: a
        frame fewer to resume at every wake of the call.)

        Raises:
            RpcError: every failure, with its wire mapping.
        """
        self.audit.act_for(principal)  # what the trail records names the caller
        if self.gate is not None and front.method == "tools/call":
            return self._gated(upstream, front, principal, notify)
        return self._admitted(upstream, front, principal, notify)

    async def _gated(
        self, upstream: UpstreamConfig, front: FrontRequest, principal: str, notify: Notifier
    ) -> dict[str, Any]:
        """A tool call through the approvals gate first."""
        assert self.gate is not None
        admitted = await self.gate.admit(upstream, front, principal)
        if isinstance(admitted, dict):
            return admitted  # answered at the gate: nothing went upstream
        return await self._admitted(upstream, admitted, principal, notify)

    def _admitted(
        self, upstream: UpstreamConfig, front: FrontRequest, principal: str, notify: Notifier
    ) -> Awaitable[dict[str, Any]]:
        """A call started, or a retry served: its coroutine."""
        digest = state.RequestDigest(front.method, front.target, front.params.get("arguments"))
        token = front.params.get("requestState")
        responses = front.params.get("inputResponses") or {}
        if token is None:
            if self.draining:
                raise Draining()
            # (No comprehension run for nothing: nearly every first call brings no answers.)
            known = {key: [answer] for key, answer in responses.items()} if responses else {}
            return self.runner.start(upstream, front, principal, digest, notify, known=known)
        return self.retries.handle(upstream, front, token, principal, digest, notify)

    async def abandon(
        self, upstream: UpstreamConfig, token: str, principal: str, front: FrontRequest
    ) -> None:
        """End the call that `token` (a `requestState` of `front`'s, minted for
        `principal`) names, if it is parked on this replica: its questions released, the
        call cancelled upstream (a task cancelled while it waits for answers)."""
        digest = state.RequestDigest(front.method, front.target, front.params.get("arguments"))
        try:
            claims = self.admission.open(upstream, token, principal, digest.value, front)
        except RpcError:
            return  # expired meanwhile: its deadline ends it
        call = self.calls.get(claims.call)
        if call is not None:
            await self.lifecycle.end(call, Trigger.CANCEL, "task cancelled")

    async def restore_records(self) -> None:
        """The store lost its data: write back the records of the calls parked here."""
        await self.lifecycle.restore()

    async def hand_over_lost(self) -> None:
        """The lease is back after a time without it: let go of calls taken over meanwhile."""
        await self.lifecycle.hand_over_lost()

    async def serve_forwarded(self, message: messages.Message) -> None:
        """A message about a call another replica pushed into this replica's inbox
        (decoded by the bus); any other is logged."""
        await self.routing.serve_message(message)

    async def drain(self, timeout_s: float) -> None:
        """No new calls; retries of the calls held here are served until they end or time is up."""
        self.draining = True
        log.info("drain_started", calls=len(self.calls), timeout_s=timeout_s)
        if self.listens is not None:
            self.listens.end_all()  # their clients listen again elsewhere
        for told in self.on_drain:
            told()
        try:
            async with clocks.timeout(self.clock, timeout_s):
                await self.calls.idle.wait()
            log.info("drain_finished", lost=self.calls.lost)
        except TimeoutError:
            log.warning("drain_timeout", calls=len(self.calls))
            self.metrics.drain_timeouts.inc()
        await self.close()

    async def close(self) -> None:
        """Shut down: every live call is cancelled upstream, every listen ended."""
        if self.listens is not None:
            self.listens.end_all()
        await self.lifecycle.close()
