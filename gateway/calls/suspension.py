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

from gateway import clock as clocks
from gateway import logging as log_context
from gateway.aio import spawn
from gateway.calls.admission import Admission
from gateway.calls.endings import Endings
from gateway.calls.live import LiveCall, Registry
from gateway.calls.outcomes import to_keep
from gateway.calls.ownership import Ownership
from gateway.clock import Clock
from gateway.config import PARK, REPLAY, LimitsConfig
from gateway.errors import (
    GatewayFull,
    LeaseLost,
    MissingClientCapability,
    PrincipalBusy,
    StateTooLarge,
    StoreError,
    TooManyRounds,
)
from gateway.protocol import keys, state
from gateway.protocol.call import Phase, Trigger
from gateway.protocol.inbound import SERVER_INFO_KEY
from gateway.store.base import PARKED, SuspendedCall, SuspendedCallStore

log = structlog.get_logger("gateway.calls")

Withdraw = Callable[[str, str | None], Awaitable[None]]  # (upstream, session id)

#: How long a parked call whose round another request claimed may wait to be resumed.
CLAIM_GRACE_S = 30.0


class Suspender:
    def __init__(
        self,
        *,
        registry: Registry,
        store: SuspendedCallStore,
        admission: Admission,
        endings: Endings,
        clock: Clock,
        limits: LimitsConfig,
        replica_id: str,
        keeps_outcomes: bool = False,
        withdraw: Withdraw | None = None,
        ownership: Ownership | None = None,
    ) -> None:
        # Whether this replica may still act for a call (on a fleet, another may have
        # taken it over while this one was cut off).
        self.ownership = ownership or Ownership(store, replica_id)
        # On a fleet, a resumed round's outcome is parked with the next round's record.
        self.keeps_outcomes = keeps_outcomes
        # On a fleet, a session a call parks on is taken off the list of those a survivor
        # may end should this replica die (`gateway.fleet.ledger`).
        self.withdraw = withdraw
        self.registry = registry
        self.store = store
        self.admission = admission
        self.endings = endings
        self.clock = clock
        self.limits = limits
        self.replica_id = replica_id

    async def suspend(self, call: LiveCall) -> dict[str, Any]:
        """Answer `input_required` for what the call asks now.

        Raises:
            TooManyRounds, GatewayFull, PrincipalBusy (fleet-wide), StoreError, StateTooLarge
        """
        try:
            self._check_rounds(call)
            if not call.stateless:
                self._check_capacity(call)
        except (TooManyRounds, GatewayFull) as exc:
            await self.endings.end(call, Trigger.FAIL, exc.reason)
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
        log.info("call_needs_url_elicitation", asked=sorted(requests))
        return input_required(call, token, requests)

    # -- rounds --------------------------------------------------------------------------

    def _check_rounds(self, call: LiveCall) -> None:
        if call.machine.round >= self.limits.max_rounds:
            raise TooManyRounds(f"the call needed more than {self.limits.max_rounds} rounds")

    def _check_capacity(self, call: LiveCall) -> None:
        if self.registry.parked >= self.limits.max_parked_calls:
            raise GatewayFull()

    def _mint(self, call: LiveCall, *, round_: int, mode: str) -> tuple[str, int, int]:
        """The sealed `requestState` of a round, with its issue time and deadline (wall ms)."""
        issued = self.clock.wall_ms()
        deadline = issued + int(self.limits.suspension_ttl_s * 1000)
        claims = state.Claims(
            call=call.id,
            round=round_,
            principal=call.principal,
            digest=call.digest.value,
            audience=self.admission.audience(call.upstream),
            issued_ms=issued,
            expires_ms=deadline,
            mode=mode,
            journal=list(call.machine.journal) if mode == REPLAY else [],
        )
        return state.seal_claims(self.admission.codec, claims), issued, deadline

    async def _park(self, call: LiveCall) -> dict[str, Any]:
        machine = call.machine
        until = self.clock.wall_ms() + int(self.limits.suspension_ttl_s * 1000)
        cap = self.limits.max_parked_per_principal
        if self.endings.doubtful(call) and await self.endings.taken_over(call):
            # Taken over while this replica, cut off, served the round: the next round is
            # the new owner's to park, and the client's to ask of it.
            raise LeaseLost()
        self.registry.fire(call, Trigger.SUSPEND)
        token, issued, deadline = self._mint(call, round_=machine.round, mode=PARK)
        call.parked_ms, call.stored = (issued, deadline), False
        self.ownership.stamp(call)
        result = input_required(call, token, machine.input_required())
        kept = None
        if self.keeps_outcomes:
            kept = to_keep(result, call.resumed, self.limits.suspension_ttl_s)
        try:
            # Counted in the store, so the cap holds across the whole fleet.
            record = self._record(call, issued, deadline)
            parking = self.store.park_held(record, until, cap, kept)
            if self.withdraw is None:
                held = await parking
            else:  # both before the client is answered, in one wait
                withdrawing = self.withdraw(call.upstream.name, call.session.id)
                both = await asyncio.gather(parking, withdrawing, return_exceptions=True)
                for failed in both:
                    if isinstance(failed, BaseException):
                        raise failed
                held = bool(both[0])
        except StoreError:
            await self.endings.end(call, Trigger.FAIL, "store unavailable")
            raise
        if not held:
            await self.endings.end(call, Trigger.FAIL, PrincipalBusy.reason)
            raise PrincipalBusy()
        call.stored = True
        self.registry.watch(call, self._lost)
        round_, clock = machine.round, self.clock
        call.expiry = clocks.Later(
            clock,
            clock.monotonic() + max(0.0, (deadline - clock.wall_ms()) / 1000),
            lambda: self._expired(call, round_),
            name=f"call-expiry-{call.id}",
        )
        asked = sorted(machine.pending)
        log_context.bind(round=machine.round, asked=asked)
        log.debug("call_suspended", round=machine.round, asked=asked)
        return result

    async def _replay_round(self, call: LiveCall) -> dict[str, Any]:
        machine = call.machine
        asked = machine.input_required()
        self.registry.fire(call, Trigger.SUSPEND)
        token, _, _ = self._mint(call, round_=machine.round, mode=REPLAY)
        # The questions stay unanswered: cancelling the call stops the server's handler
        # where it waits, before anything after the question runs.
        await self.endings.end(call, Trigger.CANCEL, "replay-mode round", release_questions=False)
        if len(token) > self.limits.max_state_bytes:
            raise StateTooLarge(
                f"the answers of this call no longer fit in requestState "
                f"({len(token)} > {self.limits.max_state_bytes} bytes)"
            )
        log_context.bind(round=machine.round, asked=sorted(asked))
        log.debug("call_suspended", round=machine.round, asked=sorted(asked), mode=REPLAY)
        return input_required(call, token, asked)

    async def restore(self) -> None:
        """The store lost its data: write back the record of every call parked here, so
        its retry resumes it. A call whose record cannot come back is ended at once
        (cancelled upstream), never left parked until its deadline."""
        parked = [c for c in self.registry.values() if c.phase is Phase.SUSPENDED]
        restored = 0
        for call in parked:
            if call.stateless or call.phase is not Phase.SUSPENDED:
                continue
            issued, deadline = call.parked_ms
            try:
                restored += await self.store.restore(self._record(call, issued, deadline), deadline)
            except StoreError as exc:
                log.warning("call_record_lost", call_id=call.id, error=str(exc))
                await self.endings.end(call, Trigger.FAIL, "its record was lost with the store")
        log.info("call_records_restored", restored=restored, parked=len(parked))

    def _record(self, call: LiveCall, issued: int, deadline: int) -> SuspendedCall:
        machine = call.machine
        return SuspendedCall(
            call_id=call.id,
            round=machine.round,
            status=PARKED,
            owner=self.replica_id,
            upstream=call.upstream.name,
            method=machine.method,
            target=call.target,
            principal=call.principal,
            digest=call.digest.value,
            upstream_request_id=machine.upstream_id,
            session_id=call.session.id,
            protocol_version=call.session.version.value,
            caps=call.session.caps.key,
            last_event_id=call.cursor.last_id,
            pending=[p.to_record() for p in machine.pending.values()],
            journal=list(machine.journal),
            deadline_ms=deadline,
            created_ms=issued,
        )

    # -- the deadline --------------------------------------------------------------------

    async def _expired(self, call: LiveCall, round_: int) -> None:
        """The deadline of `round_` passed: abandon the call unless a retry has it."""
        clock = self.clock
        if not _waits_in(call, round_):
            return
        try:
            if await self.store.claim(call.id, round_, self.replica_id) is None:
                # A retry claimed the round first and normally resumes it at once (which
                # cancels this task). If nothing has resumed it after a grace period, the
                # claimer failed on the way (e.g. its client left, or a forward was lost)
                # or took the call over (this replica was cut off, judged dead).
                await clocks.sleep(clock, min(self.limits.hold_timeout_s, CLAIM_GRACE_S))
                if not _waits_in(call, round_):
                    return
                if not await self.ownership.still(call):
                    await self.endings.abandon(call, "another replica holds the call")
                    return
                log.warning("claimed_round_never_resumed", round=round_)
        except StoreError as exc:
            log.warning("store_claim_failed", error=str(exc))
            if not self.ownership.surely(call):
                # Another replica may have taken it over: say nothing upstream.
                await self.endings.abandon(call, "its ownership cannot be checked")
                return
            # Nobody can have taken it over: it ends, and the server's handler with it.
        if call.phase is Phase.SUSPENDED:
            await self.endings.end(call, Trigger.EXPIRE, "suspension deadline passed")

    def _lost(self, call: LiveCall) -> None:
        spawn(self._let_go_lost(call), name=f"call-lost-{call.id}")

    async def _let_go_lost(self, call: LiveCall) -> None:
        """A parked call lost its stream: its session is given back now, so its slot of
        `max_sessions` serves new calls; the call stays until its retry (told it is lost)
        or its deadline. The session is ended upstream only while the store names this
        replica the call's owner: another may have taken the call over and hold it now."""
        try:
            mine = await self.ownership.still(call)
        except StoreError as exc:
            log.warning("ownership_check_failed", call_id=call.id, error=str(exc))
            mine = False
        self.endings.release_lost(call, end=mine)

    async def hand_over_lost(self) -> None:
        """After a time without the lease: let go, quietly, of every parked call whose
        record names another owner now or is gone (taken over and finished)."""
        # A call still being parked (its record not yet written) is not judged: it was
        # not parked while the lease was lost.
        parked = [c for c in self.registry.values() if c.phase is Phase.SUSPENDED and c.stored]
        for call in parked:
            try:
                if call.stateless or await self.ownership.still(call):
                    continue
            except StoreError as exc:
                log.warning("ownership_check_failed", call_id=call.id, error=str(exc))
                continue
            await self.endings.abandon(call, "taken over while this replica was cut off")


def _waits_in(call: LiveCall, round_: int) -> bool:
    return call.phase is Phase.SUSPENDED and call.machine.round == round_


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
