"""The entry of the call core: an interruptible client request in, its 2026 result out.

A request without `requestState` starts a call (unless this replica is
draining). A retry is admitted (state opened, round claimed) and resumed here
when this replica holds the call, or routed to its owner, taken over or replayed
when another did. A replay-mode retry starts its call afresh with the journal.
`Bridge` also drains and closes the replica's calls; it wires the parts and holds
no logic of its own beyond that dispatch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from gateway import clock as clocks
from gateway.calls.admission import CLAIMER_PATIENCE_BEATS, MISSING_RECORD_BEATS, Admission
from gateway.calls.endings import Endings
from gateway.calls.forwarding import Bus, Forward
from gateway.calls.live import Registry
from gateway.calls.ownership import Ownership
from gateway.calls.routing import Routing
from gateway.calls.runner import Notify, Runner
from gateway.calls.suspension import Suspender, Withdraw
from gateway.clock import Clock, SystemClock
from gateway.config import REPLAY, GatewayConfig, UpstreamConfig
from gateway.errors import CallLost, Draining, InvalidRequestState, LeaseLost, RoundInProgress
from gateway.listens import Listens
from gateway.observability import Metrics
from gateway.protocol import state
from gateway.protocol.call import CallMachine, Trigger
from gateway.protocol.inbound import FrontRequest
from gateway.store.base import SuspendedCallStore
from gateway.upstream.port import UpstreamPool

log = structlog.get_logger("gateway.calls")


class Bridge:
    def __init__(
        self,
        config: GatewayConfig,
        *,
        store: SuspendedCallStore,
        codec: state.StateCodec,
        pools: Mapping[str, UpstreamPool],
        metrics: Metrics | None = None,
        clock: Clock | None = None,
        bus: Bus | None = None,
        owner: str | None = None,
        withdraw: Withdraw | None = None,
        listens: Listens | None = None,
    ) -> None:
        self.config = config
        self.listens = listens
        self.limits = config.limits
        self.store = store
        self.pools = pools
        self.metrics = metrics or Metrics()
        self.clock = clock or SystemClock()
        self.draining = False
        self.bus = bus
        self.calls = Registry()
        beat = config.fleet.heartbeat_s
        self.admission = Admission(
            codec=codec,
            store=store,
            clock=self.clock,
            metrics=self.metrics,
            audience=config.sealing.audience,
            missing_grace_s=MISSING_RECORD_BEATS * beat if bus is not None else 0.0,
            claimer=owner or config.replica_id,
            alive=bus.alive if bus is not None else None,
            claimer_ttl_s=CLAIMER_PATIENCE_BEATS * beat,
        )
        # On a fleet, whoever resumes a round keeps its outcome (`gateway.calls.outcomes`).
        outcomes_ttl_s = self.limits.suspension_ttl_s if bus is not None else None
        ownership = Ownership(
            store, owner or config.replica_id, bus.lease_term if bus is not None else None
        )
        self.endings = Endings(
            self.calls, store, self.metrics, outcomes_ttl_s=outcomes_ttl_s, ownership=ownership
        )
        self.suspender = suspender = Suspender(
            registry=self.calls,
            store=store,
            admission=self.admission,
            endings=self.endings,
            clock=self.clock,
            limits=self.limits,
            replica_id=owner or config.replica_id,
            keeps_outcomes=bus is not None,
            withdraw=withdraw,
            ownership=ownership,
        )
        self.runner = Runner(
            registry=self.calls,
            pools=pools,
            suspender=suspender,
            endings=self.endings,
            clock=self.clock,
            limits=self.limits,
            metrics=self.metrics,
            on_change=listens.publish if listens is not None else None,
        )
        self.routing = (
            Routing(
                bus=bus,
                runner=self.runner,
                registry=self.calls,
                store=store,
                clock=self.clock,
                limits=self.limits,
                metrics=self.metrics,
            )
            if bus is not None
            else None
        )

    @property
    def parked(self) -> int:
        return self.calls.parked

    async def handle(
        self, upstream: UpstreamConfig, front: FrontRequest, principal: str, notify: Notify
    ) -> dict[str, Any]:
        """Serve one interruptible request; return its 2026 result.

        Raises:
            RpcError: every failure, with its wire mapping.
        """
        digest = state.RequestDigest(front.method, front.target, front.params.get("arguments"))
        token = front.params.get("requestState")
        responses = front.params.get("inputResponses") or {}
        if token is None:
            if self.draining:
                raise Draining()
            known = {key: [answer] for key, answer in responses.items()}
            return await self.runner.start(upstream, front, principal, digest, notify, known=known)
        claims = self.admission.open(upstream, token, principal, digest.value)
        if claims.mode == REPLAY:
            known = CallMachine.known_answers(claims.journal, responses)
            return await self.runner.start(
                upstream, front, principal, digest, notify, known=known, round_=claims.round
            )
        here = claims.call in self.calls
        if here and self.bus is not None and not self.bus.holds_lease():
            raise LeaseLost()  # cut off from the fleet: another replica may own it now
        if here or self.routing is None:
            return await self._resume(upstream, claims, front, notify, None)
        # Another replica holds it (or nobody does): its claim can carry the forward.
        with self.routing.forwarding(front) as forward:
            return await self._resume(upstream, claims, front, notify, forward)

    async def _resume(
        self,
        upstream: UpstreamConfig,
        claims: state.Claims,
        front: FrontRequest,
        notify: Notify,
        forward: Forward | None,
    ) -> dict[str, Any]:
        """Claim the retry's round; resume it here, or route it (`forward` to its owner)."""
        responses = front.params.get("inputResponses") or {}
        try:
            record = await self.admission.claim(upstream, claims, responses, forward)
        except InvalidRequestState:
            if self.routing is None:
                raise
            before = await self.routing.outcomes.answered_before(claims.call, claims.round)
            if before is None:
                raise
            return before
        call = self.calls.get(record.call_id)
        if self.routing is None:
            if call is None:
                raise CallLost()
            return await self.runner.resume(call, front, notify, record.round)
        if call is not None and record.owner != self.suspender.replica_id:
            # A stale copy: the call was taken over while this replica was taken for dead
            # (and it has not let go of it yet). Its owner now resumes the round.
            await self.endings.abandon(call, "another replica took the call over")
            call = None
        if call is None:
            return await self.routing.elsewhere(upstream, record, front, notify, forward)
        try:
            return await self.runner.resume(call, front, notify, record.round)
        except RoundInProgress:
            await self.routing.give_back(record)  # for the retry sent again once it is done
            raise

    async def restore_records(self) -> None:
        """The store lost its data: write back the records of the calls parked here."""
        self.metrics.store_data_losses.inc()
        await self.suspender.restore()

    async def hand_over_lost(self) -> None:
        """The lease is back after a time without it: let go of calls taken over meanwhile."""
        await self.suspender.hand_over_lost()

    async def serve_forwarded(self, payload: str) -> None:
        """A message another replica pushed into this replica's inbox."""
        if self.routing is not None:
            await self.routing.serve(payload)

    async def drain(self, timeout_s: float) -> None:
        """No new calls; retries of the calls held here are served until they end or time is up."""
        self.draining = True
        log.info("drain_started", calls=len(self.calls), timeout_s=timeout_s)
        if self.listens is not None:
            self.listens.end_all()  # their clients listen again elsewhere
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
        for call in list(self.calls.values()):
            await self.endings.end(call, Trigger.CANCEL, "gateway shutting down")
