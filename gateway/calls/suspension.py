"""A call that asks the client something: its round is minted here, and only here.

Three kinds of round, one minting path (`_mint`) and one round cap:
- park: the call waits in this process, its record in the store, and the sealed
  `requestState` names it; at the deadline nobody resumed, it is abandoned;
- replay (a tool in `mode: replay`): nothing is parked, the journal of answers
  rides in the sealed state, and the run is stopped where it waits;
- URL (a legacy `-32042`): the tool refused until the user visits some URLs; the
  retry runs the request again, as a legacy client would have.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from gateway import logging as log_context
from gateway.calls.lifecycle import Lifecycle
from gateway.calls.live import LiveCall
from gateway.calls.outcomes import Outcomes
from gateway.clock import Clock
from gateway.config import PARK, REPLAY, LimitsConfig, UpstreamConfig
from gateway.errors import (
    GatewayFull,
    MissingClientCapability,
    PrincipalBusy,
    StateTooLarge,
    StoreError,
    TooManyRounds,
)
from gateway.protocol import keys, state
from gateway.protocol.call import Trigger
from gateway.protocol.formats import FleetLevel, Kind
from gateway.protocol.inbound import SERVER_INFO_KEY
from gateway.store.base import SuspendedCallStore

log = structlog.get_logger("gateway.calls")

Withdraw = Callable[[str, str | None], Awaitable[None]]  # (upstream, session id)
#: Parks a call's record (the store's step, given) with whatever else must be done before
#: its client is answered; whether the record was parked (within its principal's cap).
ParkStep = Callable[[Awaitable[bool], LiveCall], Awaitable[bool]]


async def park_only(parking: Awaitable[bool], call: LiveCall) -> bool:
    """Nothing but the record: on a replica alone (no ledger of sessions)."""
    return await parking


def withdrawing(withdraw: Withdraw) -> ParkStep:
    """The record parked while the call's session is taken off the ledger of those a
    survivor may end should this replica die (`gateway.fleet.ledger`): both before the
    client is answered, in one wait. Either failing fails the park."""

    async def park(parking: Awaitable[bool], call: LiveCall) -> bool:
        taken_off = withdraw(call.upstream.name, call.session.id)
        both = await asyncio.gather(parking, taken_off, return_exceptions=True)
        for failed in both:
            if isinstance(failed, BaseException):
                raise failed
        return bool(both[0])

    return park


class Suspender:
    def __init__(
        self,
        *,
        lifecycle: Lifecycle,
        store: SuspendedCallStore,
        codec: state.StateCodec,
        audience: Callable[[UpstreamConfig], str],
        clock: Clock,
        limits: LimitsConfig,
        outcomes: Outcomes,
        level: FleetLevel,
        park: ParkStep = park_only,
    ) -> None:
        self.lifecycle = lifecycle
        # Which version of a requestState's claims every live replica opens.
        self.level = level
        self.store = store
        self.codec = codec
        self.audience = audience  # what every state minted for an upstream is bound to
        self.clock = clock
        self.limits = limits
        # On a fleet, a resumed round's outcome is parked with the next round's record.
        self.outcomes = outcomes
        # On a fleet, a session a call parks on is taken off the ledger as it parks.
        self.park = park

    async def suspend(self, call: LiveCall) -> dict[str, Any]:
        """Answer `input_required` for what the call asks now.

        Raises:
            TooManyRounds, GatewayFull, PrincipalBusy (fleet-wide), StoreError,
            StateTooLarge, LeaseLost
        """
        try:
            self._check_rounds(call)
            if not call.stateless:
                self._check_capacity()
        except (TooManyRounds, GatewayFull) as exc:
            await self.lifecycle.end(call, Trigger.FAIL, exc.reason, exc)
            raise
        if call.stateless:
            return await self._replay_round(call)
        return await self._park(call)

    def url_round(self, call: LiveCall, urls: list[dict[str, Any]]) -> dict[str, Any]:
        """A legacy `-32042` (visit these URLs, then try again) as an `input_required` round.

        The tool did not run; nothing is parked. The retry runs the request again, with
        the answers so far journaled in the sealed state.

        Raises:
            MissingClientCapability, TooManyRounds
        """
        machine = call.machine
        if not machine.ctx.caps.elicitation_url:
            raise MissingClientCapability({"elicitation": {"url": {}}})
        self._check_rounds(call)
        requests: dict[str, Any] = {}
        for params in urls:
            key = keys.assign_key("elicitation/create", params, machine.rules, requests)
            requests[key] = {"method": "elicitation/create", "params": params}
        token, _, _ = self._mint(call, round_=machine.round + 1, mode=REPLAY)
        self.lifecycle.trail.asked(call, requests, machine.round + 1)
        log.info("call_needs_url_elicitation", asked=sorted(requests))
        return input_required(call, token, requests)

    # -- rounds --------------------------------------------------------------------------

    def _check_rounds(self, call: LiveCall) -> None:
        if call.machine.round >= self.limits.max_rounds:
            raise TooManyRounds(f"the call needed more than {self.limits.max_rounds} rounds")

    def _check_capacity(self) -> None:
        if self.lifecycle.calls.parked >= self.limits.max_parked_calls:
            raise GatewayFull()

    def _mint(self, call: LiveCall, *, round_: int, mode: str) -> tuple[str, int, int]:
        """The sealed `requestState` of a round, with its issue time and deadline (wall ms)."""
        issued = self.clock.wall_ms()
        deadline = issued + int(self.limits.suspension_ttl_s * 1000)
        # A replay-mode round names the call as the trail knows it: its next run is the
        # same call (nothing is parked under its id).
        trail = call.trail.id if mode == REPLAY and call.trail is not None else call.id
        claims = state.Claims(
            call=trail,
            round=round_,
            principal=call.principal,
            digest=call.digest.value,
            audience=self.audience(call.upstream),
            issued_ms=issued,
            expires_ms=deadline,
            mode=mode,
            journal=list(call.machine.journal) if mode == REPLAY else [],
            owner=self.lifecycle.owner if mode == PARK else "",
        )
        version = self.level.version(Kind.REQUEST_STATE)
        return state.seal_claims(self.codec, claims, version), issued, deadline

    async def _park(self, call: LiveCall) -> dict[str, Any]:
        machine = call.machine
        until = self.clock.wall_ms() + int(self.limits.suspension_ttl_s * 1000)
        cap = self.limits.max_parked_per_principal
        await self.lifecycle.suspend(call)
        token, issued, deadline = self._mint(call, round_=machine.round, mode=PARK)
        call.parked_ms = (issued, deadline)
        result = input_required(call, token, machine.input_required())
        kept = self.outcomes.kept(result, call.resumed)
        # Recorded before the store can tell anyone of the round (its kept outcome may
        # answer a retry sent again should this replica die now): a round that fails to
        # park is recorded asked, then its call's end.
        self.lifecycle.trail.asked(call, result["inputRequests"], machine.round)
        try:
            # Counted in the store, so the cap holds across the whole fleet.
            parking = self.store.park_held(call.record(self.lifecycle.owner), until, cap, kept)
            held = await self.park(parking, call)
        except StoreError as exc:
            await self.lifecycle.end(call, Trigger.FAIL, "store unavailable", exc)
            raise
        if not held:
            busy = PrincipalBusy()
            await self.lifecycle.end(call, Trigger.FAIL, PrincipalBusy.reason, busy)
            raise busy
        self.lifecycle.parked(call)
        asked = sorted(machine.pending)
        log_context.bind(round=machine.round, asked=asked)
        log.debug("call_suspended", round=machine.round, asked=asked)
        return result

    async def _replay_round(self, call: LiveCall) -> dict[str, Any]:
        machine = call.machine
        asked = machine.input_required()
        await self.lifecycle.stop(call, "replay-mode round")
        token, _, _ = self._mint(call, round_=machine.round, mode=REPLAY)
        if len(token) > self.limits.max_state_bytes:
            raise StateTooLarge(
                f"the answers of this call no longer fit in requestState "
                f"({len(token)} > {self.limits.max_state_bytes} bytes)"
            )
        self.lifecycle.trail.asked(call, asked, machine.round)
        log_context.bind(round=machine.round, asked=sorted(asked))
        log.debug("call_suspended", round=machine.round, asked=sorted(asked), mode=REPLAY)
        return input_required(call, token, asked)


def input_required(call: LiveCall, token: str, requests: dict[str, Any]) -> dict[str, Any]:
    """The `input_required` result asking `requests`, naming the round with `token`."""
    result: dict[str, Any] = {
        "resultType": "input_required",
        "inputRequests": requests,
        "requestState": token,
    }
    info = server_info(call)
    if info is not None:
        result["_meta"] = {SERVER_INFO_KEY: info}
    return result


def server_info(call: LiveCall) -> dict[str, Any] | None:
    info = call.session.info or call.pool.info
    return info.server_info if info is not None else None
