"""A retry's way in: the `requestState` security boundary, in one place.

`open` verifies the sealed state against this request (AEAD, key, expiry,
principal, request digest, audience) and `claim` takes the round from the store
atomically, after checking the answers' shapes so a malformed retry uses
nothing up; on a fleet, the same step can push the retry to the call's owner.
Every refusal is the same frozen error on the wire; its reason goes to the log
and the refusal counter only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from gateway import clock as clocks
from gateway import logging as log_context
from gateway.aio import spawn
from gateway.calls.forwarding import Forward
from gateway.calls.trail import CallTrail
from gateway.clock import Clock
from gateway.config import UpstreamConfig
from gateway.errors import ErrorWatch, InvalidRequestState, StoreError
from gateway.observability import Metrics
from gateway.protocol import state
from gateway.protocol.call import Pending, check_answers
from gateway.protocol.inbound import FrontRequest
from gateway.store.base import PARKED, SuspendedCall, SuspendedCallStore

log = structlog.get_logger("gateway.calls")

#: On a fleet, in heartbeats: how long a retry that finds no record waits for its owner
#: to write it back (a store that lost its data) when the state does not name the owner
#: (minted before it did), and how long a claimer (or an owner) that may have died is
#: given to prove it lives (its heartbeat's TTL is two beats).
MISSING_RECORD_BEATS = 1.5
CLAIMER_PATIENCE_BEATS = 2.5
#: At most how long, in heartbeats, a retry that finds no record waits while the owner
#: its state names is still writing its records back: it notices the loss within a beat,
#: then writes one record a round trip, slower on a busy machine.
WRITE_BACK_BEATS = 15


class Admission:
    def __init__(
        self,
        *,
        codec: state.StateCodec,
        store: SuspendedCallStore,
        clock: Clock,
        metrics: Metrics,
        audience: str,
        claimer: str,
        alive: Callable[[str], Awaitable[bool]],
        written_back: Callable[[str], Awaitable[bool | None]],
        beat_s: float,
        trail: CallTrail | None = None,
    ) -> None:
        """`beat_s`: the fleet's heartbeat, in which every wait here is counted (0 alone:
        no wait, there is no heartbeat to wait on)."""
        # Whether a replica has written its records back since the store last lost its
        # data (`Bus.written_back`), and how long a retry waits for that.
        self.written_back = written_back
        self.write_back_s = WRITE_BACK_BEATS * beat_s
        # Who claims (this replica), and whether another replica is alive: a round claimed
        # by a replica that died resuming it may be claimed again (in a fleet).
        self.claimer = claimer
        self.alive = alive
        self.claimer_ttl_s = CLAIMER_PATIENCE_BEATS * beat_s
        # In a fleet, a record missing because the store just lost its data is written
        # back by its owner within a heartbeat: a retry looks again once after this.
        self.missing_grace_s = MISSING_RECORD_BEATS * beat_s
        self.codec = codec
        self.store = store
        self.clock = clock
        self.metrics = metrics
        self._audience = audience
        self.trail = trail or CallTrail()  # a refusal is recorded with its reason

    def audience(self, upstream: UpstreamConfig) -> str:
        """What every state minted for `upstream` is bound to."""
        return f"{self._audience}|{upstream.name}"

    def _refusals(
        self, upstream: UpstreamConfig, front: FrontRequest | None, call_id: str | None = None
    ) -> _Refusals:
        method, target = ("tools/call", None) if front is None else (front.method, front.target)
        return _Refusals(self.metrics, upstream.name, self.trail, call_id, method, target)

    def open(
        self,
        upstream: UpstreamConfig,
        token: Any,
        principal: str,
        digest: str,
        front: FrontRequest | None = None,
    ) -> state.Claims:
        """The verified claims of a retry's `requestState` (`front`'s, when given: what a
        refusal names).

        Raises:
            InvalidRequestState
        """
        with self._refusals(upstream, front):
            claims = state.open_claims(
                self.codec,
                token,
                now_ms=self.clock.wall_ms(),
                principal=principal,
                digest=digest,
                audience=self.audience(upstream),
            )
        log_context.bind(call_id=claims.call, round=claims.round)
        return claims

    async def claim(
        self,
        upstream: UpstreamConfig,
        claims: state.Claims,
        responses: Any,
        forward: Forward | None = None,
        front: FrontRequest | None = None,
    ) -> SuspendedCall:
        """The parked record, claimed for this retry; bad answers are refused first.
        `forward`, the retry's way to another replica holding the call, goes with the
        claim where the store can push it in the same step (`forward.delivered`).

        Raises:
            InvalidRequestState, InvalidParams, StoreError
        """
        with self._refusals(upstream, front, state.first_id(claims.call)):
            record = await self.store.get(claims.call)
            if record is None:
                record = await self._written_back(claims)
            if record is None:
                raise InvalidRequestState("no live call (finished, expired or never parked)")
            if record.round != claims.round:
                raise InvalidRequestState("round already resumed (replay)")
            check_answers([Pending.from_record(p) for p in record.pending], responses)
            if record.status != PARKED:
                return await self._claim_from_the_dead(record)
            delivery = forward.delivery(record) if forward is not None else None
            if forward is None or delivery is None:
                claimed = await self._whole(
                    self.store.claim(claims.call, claims.round, self.claimer), _itself
                )
            else:
                claimed, forward.delivered = await self._whole(
                    self.store.claim_delivering(claims.call, claims.round, self.claimer, delivery),
                    _unless_pushed,
                )
            if claimed is None:
                raise InvalidRequestState("round already resumed (replay)")
        return claimed

    async def _written_back(self, claims: state.Claims) -> SuspendedCall | None:
        """The record of a retry that found none, if its owner writes it back: on a fleet
        the store may have lost its data (a Redis restarted empty) and the owner be writing
        back its parked calls. While the owner the state names is alive and not done, the
        retry waits (bounded); once it is done, a record still missing is gone for good.
        Its heartbeat is looked at before the record, so a write-back that ends between
        the two looks is never missed. A state that names no owner gets one look more
        after `missing_grace_s`. Alone, nothing is written back (the store never loses a
        record its replica keeps), and no retry waits.

        Raises:
            StoreError
        """
        if not claims.owner or not self.write_back_s:
            if not self.missing_grace_s:
                return None
            await clocks.sleep(self.clock, self.missing_grace_s)
            return await self.store.get(claims.call)
        started = self.clock.monotonic()
        while True:
            done = await self.written_back(claims.owner)
            record = await self.store.get(claims.call)
            if record is not None or done:
                return record
            waited = self.clock.monotonic() - started
            # No heartbeat: gone, unless it beats again within its patience (every key
            # is lost with the store's data, the owner's heartbeat too, until it beats).
            if waited >= (self.claimer_ttl_s if done is None else self.write_back_s):
                log.info("record_not_written_back", owner_alive=done is not None)
                return None
            await clocks.sleep(self.clock, self.claimer_ttl_s / 8)

    async def _claim_from_the_dead(self, record: SuspendedCall) -> SuspendedCall:
        """The round of a retry whose first claimer died resuming it (its client sent the
        retry again): claimed again, so the call goes on by takeover or replay.

        Raises:
            InvalidRequestState: the claimer lives (the round is being resumed), or none.
        """
        dead = record.claimer
        if not dead or dead == self.claimer:
            raise InvalidRequestState("round already resumed (replay)")
        # A claimer killed a moment ago still has a heartbeat for up to its TTL: give it
        # that long to prove it lives (it beats on) or that it died (the beat lapses).
        give_up = self.clock.monotonic() + self.claimer_ttl_s
        while await self.alive(dead):
            if self.clock.monotonic() >= give_up:
                raise InvalidRequestState("round already resumed (replay)")
            await clocks.sleep(self.clock, self.claimer_ttl_s / 8)
        stolen = await self._whole(
            self.store.steal(record.call_id, record.round, dead, self.claimer), _itself
        )
        if stolen is None:
            raise InvalidRequestState("round already resumed (replay)")
        log.warning("round_claimed_from_dead_replica", dead=dead)
        self.trail.maybe_answered(state.first_id(record.call_id), record.round)
        self.metrics.handoffs.labels("claimed_from_dead").inc()
        return stolen

    async def _whole(self, step: Coroutine[Any, Any, T], claim_of: Callable[[T], Claim]) -> T:
        """`step`, which claims a round, run to its end even if the retry's client leaves
        meanwhile (cut short, it would leave unknown whether the store made the claim). A
        claim made for a client gone is given back at once, so the client's next sending
        of the retry finds the round parked instead of claimed, resumed by nobody, until
        its deadline. `claim_of` names what to give back of the step's result: nothing
        where its forward went with it (its owner is told the client left)."""
        if self.store.in_process:
            return await step  # it runs to its end before anything can cancel the request
        # Its failure is the request's (a store error answered 503), not a background
        # task's: carried out as a value, raised here.
        task = spawn(_outcome(step), name="claim")
        try:
            outcome = await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(lambda done: self._abandoned(done, claim_of))
            raise
        if isinstance(outcome, _Failed):
            raise outcome.error
        return outcome

    def _abandoned(self, done: asyncio.Task[T | _Failed], claim_of: Callable[[T], Claim]) -> None:
        if done.cancelled() or done.exception() is not None:
            return  # the process is going down: nothing more to do here
        if isinstance(outcome := done.result(), _Failed):
            return  # no claim was made, or none is known (the next retry waits it out)
        claim = claim_of(outcome)
        if claim is not None:
            spawn(self._give_back(claim), name=f"give-back-{claim.call_id}")

    async def _give_back(self, claim: SuspendedCall) -> None:
        try:
            given = await self.store.give_back(claim)
        except StoreError as exc:
            log.warning("round_not_given_back", call_id=claim.call_id, error=str(exc))
            return
        if given:
            log.info("round_given_back", call_id=claim.call_id, reason="client left claiming")


Claim = SuspendedCall | None
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Failed:
    error: Exception


async def _outcome(step: Coroutine[Any, Any, T]) -> T | _Failed:
    try:
        return await step
    except Exception as exc:  # noqa: BLE001 - handed to the request that awaits it
        return _Failed(exc)


def _itself(claim: Claim) -> Claim:
    return claim


def _unless_pushed(result: tuple[Claim, bool | None]) -> Claim:
    claim, pushed = result
    return None if pushed else claim


class _Refusals(ErrorWatch):
    """Logs, counts and records in the audit trail a refused `requestState`."""

    __slots__ = ("metrics", "upstream", "trail", "call_id", "method", "target")

    def __init__(
        self,
        metrics: Metrics,
        upstream: str,
        trail: CallTrail,
        call_id: str | None,
        method: str,
        target: str | None,
    ) -> None:
        self.metrics = metrics
        self.upstream = upstream
        self.trail = trail
        self.call_id = call_id
        self.method = method
        self.target = target

    def seen(self, error: BaseException) -> None:
        if isinstance(error, InvalidRequestState):
            log.warning("request_state_refused", reason=error.reason, upstream=self.upstream)
            self.metrics.state_refusals.labels(error.reason).inc()
            self.trail.refused(self.upstream, error.reason, self.call_id, self.method, self.target)
