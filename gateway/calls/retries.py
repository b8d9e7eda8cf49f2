"""A retry: its `requestState` opened, its round claimed, and resumed where the call is.

The state is opened (`Admission.open`: the security boundary); a replay-mode round's
retry runs its call afresh with the journal the state carries. Any other round is
claimed (`Admission.claim`), at most once; then the call is resumed here when this
replica holds it, or the retry goes where the call is (`Routes`: on a fleet its owner, a
takeover, a replay, or the error that it is lost; alone, lost). A retry whose round was
resumed already is answered with the outcome kept for it, where one is
(`gateway.calls.outcomes`). A copy of a call that another replica took over while this
one was cut off is handed over on the way.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from gateway.calls.admission import Admission
from gateway.calls.forwarding import Forward
from gateway.calls.lifecycle import Lifecycle
from gateway.calls.outcomes import Outcomes
from gateway.calls.replicas import Routes
from gateway.calls.runner import Notifier, Runner
from gateway.config import REPLAY, UpstreamConfig
from gateway.errors import InvalidRequestState, LeaseLost, RoundInProgress
from gateway.fleet.port import Bus
from gateway.protocol import state
from gateway.protocol.call import CallMachine
from gateway.protocol.inbound import FrontRequest


class Retries:
    def __init__(
        self,
        *,
        admission: Admission,
        lifecycle: Lifecycle,
        runner: Runner,
        bus: Bus,
        routing: Routes,
        outcomes: Outcomes,
    ) -> None:
        self.admission = admission
        self.lifecycle = lifecycle
        self.calls = lifecycle.calls
        self.runner = runner
        # The other replicas, where a retry goes, and the outcomes kept (none alone).
        self.bus = bus
        self.routing = routing
        self.outcomes = outcomes

    def handle(
        self,
        upstream: UpstreamConfig,
        front: FrontRequest,
        token: Any,
        principal: str,
        digest: state.RequestDigest,
        notify: Notifier,
    ) -> Awaitable[dict[str, Any]]:
        """The 2026 result of a retry that carries `token` (its `requestState`), to await.
        (The runner's or the claim's coroutine itself, not one of ours around it: a frame
        fewer to resume at every wake of the call.)

        Raises:
            RpcError: every failure, with its wire mapping.
        """
        claims = self.admission.open(upstream, token, principal, digest.value, front)
        if claims.mode == REPLAY:
            responses = front.params.get("inputResponses") or {}
            known = CallMachine.known_answers(claims.journal, responses)
            return self.runner.start(
                upstream,
                front,
                principal,
                digest,
                notify,
                known=known,
                round_=claims.round,
                trail_id=claims.call,
            )
        here = claims.call in self.calls
        if here and not self.bus.holds_lease():
            raise LeaseLost()  # cut off from the fleet: another replica may own it now
        if here:
            return self._claimed(upstream, claims, front, notify, None)
        return self._forwarding(upstream, claims, front, notify)

    async def _forwarding(
        self, upstream: UpstreamConfig, claims: state.Claims, front: FrontRequest, notify: Notifier
    ) -> dict[str, Any]:
        """Another replica holds the call (or nobody does): its claim can carry the forward."""
        with self.routing.forwarding(front) as forward:
            return await self._claimed(upstream, claims, front, notify, forward)

    async def _claimed(
        self,
        upstream: UpstreamConfig,
        claims: state.Claims,
        front: FrontRequest,
        notify: Notifier,
        forward: Forward | None,
    ) -> dict[str, Any]:
        """Claim the retry's round; resume it here, or route it (`forward` to its owner)."""
        responses = front.params.get("inputResponses") or {}
        try:
            record = await self.admission.claim(upstream, claims, responses, forward, front)
        except InvalidRequestState:
            before = await self.outcomes.answered_before(claims.call, claims.round)
            if before is None:
                raise
            return before
        call = self.calls.get(record.call_id)
        if call is not None and record.owner != self.lifecycle.owner:
            # A stale copy: the call was taken over while this replica was taken for dead
            # (and it has not let go of it yet). Its owner now resumes the round.
            await self.lifecycle.hand_over(call, "another replica took the call over")
            call = None
        if call is None:
            return await self.routing.elsewhere(upstream, record, front, notify, forward)
        try:
            return await self.runner.resume(call, front, notify, record.round)
        except RoundInProgress:
            await self.routing.give_back(record)  # for the retry sent again once it is done
            raise
