"""A call's life on this replica, in one place: every change of its phase, and all that
its ending requires.

The sans-IO `CallMachine` says which phase follows which, and what an ending requires
(`gateway.protocol.call.ENDINGS`: release the server's questions, cancel the call
upstream, reuse, close or discard its session, forget its record); `Lifecycle` fires
the machine and carries that out, keeping the registry's counts in step. The rest of
the call core asks it: a call begins (`begin`), parks (`suspend`, then `parked`), is
resumed (`resume`), and ends: completed, failed, ended for a reason, stopped (a
replay-mode round) or handed over. Its deadline (`_expire`) and the loss of its stream
(`_stream_lost`) are decided here too, and the registry of the calls held here is
kept (`Registry`: parked counts, lost streams, idle for a drain).

On a fleet, a replica cut off from Redis past its lease may be judged dead, and another
may take its calls over while it still holds them: it must then say nothing upstream for
them and write nothing of theirs (the record's `owner` guard). A call parked or started
within the current lease term cannot have been taken; after a break of the lease the
store says. Such a call is handed over: let go of without a word, its record untouched.

An ending that must wait (a message upstream, the store) runs in a task of its own,
shielded: a client request cancelled meanwhile never leaves a call half-ended. This
module does no routing and mints no rounds.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import structlog

from gateway import clock as clocks
from gateway.aio import spawn
from gateway.calls.live import LiveCall
from gateway.calls.outcomes import Outcomes
from gateway.calls.trail import CallTrail
from gateway.clock import Clock, Later
from gateway.config import LimitsConfig, UpstreamConfig
from gateway.errors import CallLost, LeaseLost, RoundInProgress, StoreError, UpstreamError
from gateway.observability import Metrics
from gateway.protocol.call import (
    FINAL_PHASES,
    CallMachine,
    Ending,
    Phase,
    SessionFate,
    Trigger,
)
from gateway.protocol.state import RequestDigest
from gateway.store.base import Kept, Reply, SuspendedCallStore
from gateway.upstream.held import is_question
from gateway.upstream.port import Inbox, StreamCursor, UpstreamPool, UpstreamSession

log = structlog.get_logger("gateway.calls")

# The members every call reads, as module constants: on Python 3.11 a member read off its
# enum class goes through the class's `__getattr__` hook (ten times a global's read).
_SUSPENDED, _RUNNING = Phase.SUSPENDED, Phase.RUNNING
_SUSPEND, _RESUME, _COMPLETE = Trigger.SUSPEND, Trigger.RESUME, Trigger.COMPLETE
_REUSE, _CLOSE, _DISCARD = SessionFate.REUSE, SessionFate.CLOSE, SessionFate.DISCARD

#: How long a parked call whose round another request claimed may wait to be resumed.
CLAIM_GRACE_S = 30.0


class Registry(Mapping[str, LiveCall]):
    """The live calls of this replica by id, how many are parked (in total and per
    principal) and which lost their stream; a read-only mapping to everyone else. Only
    `Lifecycle` changes it, as it changes the calls' phases, so the counts never drift
    from the phases."""

    def __init__(self) -> None:
        self._calls: dict[str, LiveCall] = {}
        self.parked = 0
        self._parked_by: Counter[str] = Counter()
        self._lost: set[str] = set()  # parked calls whose upstream stream is gone
        # Set while no call here could still complete (none, or only lost ones): a drain
        # waits for it.
        self.idle = asyncio.Event()
        self.idle.set()

    def __getitem__(self, call_id: str) -> LiveCall:
        return self._calls[call_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._calls)

    def __len__(self) -> int:
        return len(self._calls)

    def add(self, call: LiveCall) -> None:
        self._calls[call.id] = call
        self.idle.clear()

    def remove(self, call: LiveCall) -> None:
        """Forget the call; `settled` once its ending is complete."""
        self._calls.pop(call.id, None)
        self._lost.discard(call.id)

    def settled(self) -> None:
        """An ending is complete: with no call left that could complete, the replica is
        idle (drain waits on it)."""
        self._check_idle()

    @property
    def lost(self) -> int:
        """Parked calls here whose upstream stream is gone."""
        return len(self._lost)

    def is_lost(self, call: LiveCall) -> bool:
        return call.id in self._lost

    def mark_lost(self, call: LiveCall) -> None:
        """A parked call that lost its stream can never complete: a drain does not wait
        for it."""
        self._lost.add(call.id)
        self._check_idle()

    def _check_idle(self) -> None:
        if self._calls.keys() <= self._lost:
            self.idle.set()

    def parked_for(self, principal: str) -> int:
        return self._parked_by[principal]

    @property
    def principals_parked(self) -> dict[str, int]:
        return dict(self._parked_by)

    def moved(self, call: LiveCall, before: Phase) -> None:
        """The call moved from `before` to its phase now: the parked counts follow."""
        if before is _SUSPENDED:
            self.parked -= 1
            self._parked_by[call.principal] -= 1
            if self._parked_by[call.principal] <= 0:
                del self._parked_by[call.principal]
        if call.machine.phase is _SUSPENDED:
            self.parked += 1
            self._parked_by[call.principal] += 1


class Lifecycle:
    def __init__(
        self,
        *,
        store: SuspendedCallStore,
        metrics: Metrics,
        clock: Clock,
        limits: LimitsConfig,
        owner: str,
        lease_term: Callable[[], int | None],
        outcomes: Outcomes,
        trail: CallTrail | None = None,
    ) -> None:
        self.calls = Registry()
        self.store = store
        self.metrics = metrics
        self.clock = clock
        self.limits = limits
        self.owner = owner  # this replica, as records name it
        # This replica's lease term (`Bus.lease_term`): None while it is lost.
        self.lease_term = lease_term
        # What is kept of a resumed round's outcome (on a fleet; nothing alone).
        self.outcomes = outcomes
        # What the audit trail records of calls: their endings are told it here.
        self.trail = trail or CallTrail()

    # -- beginnings ----------------------------------------------------------------------

    def begin(
        self,
        upstream: UpstreamConfig,
        pool: UpstreamPool,
        session: UpstreamSession,
        machine: CallMachine,
        principal: str,
        digest: RequestDigest,
        target: str | None,
        cursor: StreamCursor | None = None,
    ) -> LiveCall:
        """A call this replica now owns (started, replayed or taken over here): registered,
        its session's messages coming to its inbox. The caller starts its stream."""
        call = LiveCall(
            machine=machine,
            upstream=upstream,
            pool=pool,
            session=session,
            inbox=Inbox(),
            cursor=cursor or StreamCursor(),
            principal=principal,
            digest=digest,
            target=target,
            started=self.clock.monotonic(),
        )
        self._stamp(call)
        session.attach(call.inbox)
        self.calls.add(call)
        return call

    # -- between rounds -------------------------------------------------------------------

    async def suspend(self, call: LiveCall) -> None:
        """The call asks the client: it is suspended (its round is minted next).

        Raises:
            LeaseLost: another replica took the call over while this one, cut off, served
                the round; it was handed over, and the next round is the new owner's.
        """
        if self._doubtful(call) and await self._taken_over(call):
            raise LeaseLost()
        self._fire(call, _SUSPEND)
        call.stored = False
        self._stamp(call)

    def parked(self, call: LiveCall) -> None:
        """Its record is written (`call.parked_ms`): the deadline is armed, and the loss of
        its stream watched."""
        call.stored = True
        call.inbox.on_end = lambda error: self._stream_lost(call, error)
        if (error := call.inbox.ended()) is not None:
            self._stream_lost(call, error)
        round_, clock = call.machine.round, self.clock
        deadline = call.parked_ms[1]
        call.expiry = Later(
            clock,
            clock.monotonic() + max(0.0, (deadline - clock.wall_ms()) / 1000),
            lambda: self._expire(call, round_),
            name=f"call-expiry-{call.id}",
        )

    async def resume(self, call: LiveCall, round_: int) -> None:
        """Resume a call parked here, whose round `round_` a retry has claimed.

        Raises:
            CallLost: it ended (e.g. expired) while the retry was claiming it.
            RoundInProgress: the round is being resumed here already (an earlier sending
                of the retry, whose claimer died, reached this replica first).
        """
        phase = call.machine.phase
        if phase in FINAL_PHASES:
            raise CallLost()
        if phase is not _SUSPENDED or call.machine.round != round_:
            raise RoundInProgress()
        self._fire(call, _RESUME)
        call.resumed = round_
        if call.expiry is not None:
            try:
                await call.expiry.cancel()  # waits while a deadline's expiry runs
            except asyncio.CancelledError:
                # The client left while it waited: as in a round, the call ends (it is
                # resumed already, so no retry and no deadline would end it).
                self.end_soon(call, Trigger.CANCEL, "client disconnected")
                raise

    # -- endings ----------------------------------------------------------------------------

    async def complete(
        self,
        call: LiveCall,
        result: dict[str, Any] | None = None,
        error: BaseException | None = None,
    ) -> None:
        """The upstream answered the call: its session goes back for reuse.

        `result` is the client's answer: on a fleet it is kept as the resumed round's
        outcome with the deletion of the call's record (`gateway.calls.outcomes`), and a
        forwarded retry's reply goes with that write where the store can push it.
        `error`, instead: the upstream's answer was an error, as its client is told.
        """
        if self._doubtful(call) and await self._taken_over(call):
            return  # its record is the new owner's; the upstream call is over anyway
        ending = self._ending(call, _COMPLETE)
        self.trail.ended(call, _COMPLETE, error, result)
        if call.in_store:
            kept = reply = None
            if result is not None:
                kept = self.outcomes.kept(result, call.resumed)
            if result is not None and call.reply_with is not None:
                reply = call.reply_with(result)
            done = spawn(self._close_out(call, ending, kept, reply), name=f"call-done-{call.id}")
            await asyncio.shield(done)
        else:  # nothing to await (a call that never parked): no task for it
            self._release(call, ending.session)
            self._settle(call)
        self.metrics.call_endings.labels(ending.phase).inc()
        self.metrics.rounds_per_call.observe(call.machine.round)

    async def fail(self, call: LiveCall, reason: str, error: BaseException | None = None) -> None:
        """A round failed (the upstream, a timeout, a gateway error: `error`, as its client
        is told): the call ends, unless it ended already or is parked (its deadline or
        retry ends that)."""
        if call.phase is _RUNNING:
            await self.end(call, Trigger.FAIL, reason, error)

    async def end(
        self,
        call: LiveCall,
        trigger: Trigger,
        reason: str,
        error: BaseException | None = None,
    ) -> None:
        """Give the call up (`trigger`: fail, expire or cancel; `error`, what its client
        is told): the server's questions released, the call cancelled upstream, its
        session closed, its record forgotten. Does nothing for a call that has ended
        already, or that another replica holds now (handed over instead)."""
        if call.phase in FINAL_PHASES or (self._doubtful(call) and await self._taken_over(call)):
            return
        ending = self._ending(call, trigger, reason)
        self.trail.ended(call, trigger, error)
        wind_up = spawn(self._wind_up(call, ending, reason), name=f"call-end-{call.id}")
        await asyncio.shield(wind_up)

    def end_soon(
        self, call: LiveCall, trigger: Trigger, reason: str, error: BaseException | None = None
    ) -> None:
        """`end`, from a task that is being cancelled and must not wait for it."""
        if call.phase not in FINAL_PHASES:
            spawn(self.end(call, trigger, reason, error), name=f"call-cancel-{call.id}")

    async def stop(self, call: LiveCall, reason: str) -> None:
        """A replay-mode round: the run stops where it asks (its questions unanswered, the
        call cancelled upstream); the retry runs the call again with the journal."""
        ending = self._ending(call, Trigger.STOP, reason)
        wind_up = spawn(self._wind_up(call, ending, reason), name=f"call-stop-{call.id}")
        await asyncio.shield(wind_up)

    async def hand_over(self, call: LiveCall, reason: str) -> None:
        """Let go of a call another replica owns now (it took the call over): nothing is
        said upstream, the session is not ended there, the record is not touched."""
        if call.phase in FINAL_PHASES:
            return
        ending = self._ending(call, Trigger.HAND_OVER)
        try:
            if call.expiry is not None:
                await call.expiry.cancel()  # not if it is what hands the call over
            self._release(call, ending.session)
            await _stop_pump(call)
        finally:
            self._settle(call)
        self.metrics.call_endings.labels(ending.phase).inc()
        log.info("call_handed_over", reason=reason, rounds=call.machine.round)

    async def close(self) -> None:
        """Shut down: every live call is cancelled upstream."""
        for call in list(self.calls.values()):
            await self.end(call, Trigger.CANCEL, "gateway shutting down")

    def _fire(self, call: LiveCall, trigger: Trigger, reason: str = "") -> Ending | None:
        """Move the call's phase (the one place), keeping the registry's counts in step;
        what its ending requires when the phase it reaches is final."""
        machine = call.machine
        before = machine.phase
        ending = machine.fire(trigger, reason)
        self.calls.moved(call, before)
        return ending

    def _ending(self, call: LiveCall, trigger: Trigger, reason: str = "") -> Ending:
        """`_fire` a trigger that ends the call."""
        ending = self._fire(call, trigger, reason)
        assert ending is not None, f"{trigger} does not end a call"
        return ending

    async def _wind_up(self, call: LiveCall, ending: Ending, reason: str) -> None:
        try:
            if call.expiry is not None:
                await call.expiry.cancel()  # not if it is what ends the call
            for message in ending.messages:
                try:
                    await call.session.send(message)
                except UpstreamError as exc:
                    log.info("upstream_cancel_failed", error=str(exc))
                    break
        finally:
            await self._close_out(call, ending)
        if not ending.counted:  # a replay-mode round ends its run by design, not the call
            log.debug(f"call_{ending.phase}", reason=reason, rounds=call.machine.round)
            return
        self.metrics.call_endings.labels(ending.phase).inc()
        log.info(f"call_{ending.phase}", reason=reason, rounds=call.machine.round)

    async def _close_out(
        self, call: LiveCall, ending: Ending, kept: Kept | None = None, reply: Reply | None = None
    ) -> None:
        """Forget the call here, give its session back as the ending says, and forget its
        record as it says; nothing before the release awaits. `call.ended` is set once
        everything is done, the store record included."""
        self._release(call, ending.session)
        try:
            if ending.session is not _REUSE:
                await _stop_pump(call)
            # else: the stream's rest is read to its end so its connection is reused
            if ending.forget_record and call.in_store:
                try:  # the record and the principal's hold, in one round trip
                    call.replied = await self.store.forget(call.id, call.principal, kept, reply)
                except StoreError as exc:
                    log.warning("store_forget_failed", error=str(exc))
        finally:
            self._settle(call)

    def _release(self, call: LiveCall, fate: SessionFate) -> None:
        """Out of the registry, and its session back to its pool."""
        self.calls.remove(call)
        _return_session(call, fate)

    def _settle(self, call: LiveCall) -> None:
        self.calls.settled()
        call.ended.set()

    # -- the deadline and a lost stream ---------------------------------------------------

    async def _expire(self, call: LiveCall, round_: int) -> None:
        """The deadline of `round_` passed: end the call unless a retry has it."""
        if not _waits_in(call, round_):
            return
        try:
            if await self.store.claim(call.id, round_, self.owner) is None:
                # A retry claimed the round first and normally resumes it at once (which
                # cancels this task). If nothing has resumed it after a grace period, the
                # claimer failed on the way (e.g. its client left, or a forward was lost)
                # or took the call over (this replica was cut off, judged dead).
                await clocks.sleep(self.clock, min(self.limits.hold_timeout_s, CLAIM_GRACE_S))
                if not _waits_in(call, round_):
                    return
                if not await self._still_owned(call):
                    await self.hand_over(call, "another replica holds the call")
                    return
                log.warning("claimed_round_never_resumed", round=round_)
        except StoreError as exc:
            log.warning("store_claim_failed", error=str(exc))
            if not self._surely_owned(call):
                # Another replica may have taken it over: say nothing upstream.
                await self.hand_over(call, "its ownership cannot be checked")
                return
            # Nobody can have taken it over: it ends, and the server's handler with it.
        if call.phase is _SUSPENDED:
            await self.end(call, Trigger.EXPIRE, "suspension deadline passed")

    def _stream_lost(self, call: LiveCall, error: Exception) -> None:
        """A parked call's stream ended (its upstream lost, past any reconnection): it can
        never complete; only its retry (told so, `CallLost`) or its deadline ends it, and
        a drain does not wait for it. Its session is given back at once, so its slot of
        `max_sessions` serves new calls."""
        if call.id not in self.calls or self.calls.is_lost(call):
            return
        self.calls.mark_lost(call)
        spawn(self._release_lost(call), name=f"call-lost-{call.id}")
        log.info(
            "parked_call_lost",
            call_id=call.id,
            upstream=call.upstream.name,
            error=str(error),
            detail="its retry is told the call is gone; a drain does not wait for it",
        )

    async def _release_lost(self, call: LiveCall) -> None:
        """The lost call's session is ended upstream only while the store names this
        replica the call's owner: another may have taken the call over and hold it now."""
        try:
            mine = await self._still_owned(call)
        except StoreError as exc:
            log.warning("ownership_check_failed", call_id=call.id, error=str(exc))
            mine = False
        _return_session(call, _CLOSE if mine else _DISCARD)

    # -- the fleet: ownership, a lease regained, a store that lost its data ---------------

    async def hand_over_lost(self) -> None:
        """After a time without the lease: let go, quietly, of every parked call whose
        record names another owner now or is gone (taken over and finished)."""
        # A call still being parked (its record not yet written) is not judged: it was
        # not parked while the lease was lost.
        parked = [c for c in self.calls.values() if c.phase is _SUSPENDED and c.stored]
        for call in parked:
            try:
                if call.stateless or await self._still_owned(call):
                    continue
            except StoreError as exc:
                log.warning("ownership_check_failed", call_id=call.id, error=str(exc))
                continue
            await self.hand_over(call, "taken over while this replica was cut off")

    async def restore(self) -> None:
        """The store lost its data: write back the record of every call parked here, so
        its retry resumes it. A call whose record cannot come back is ended at once
        (cancelled upstream), never left parked until its deadline."""
        self.metrics.store_data_losses.inc()
        parked = [c for c in self.calls.values() if c.phase is _SUSPENDED]
        restored = 0
        for call in parked:
            if call.stateless or call.phase is not _SUSPENDED:
                continue
            deadline = call.parked_ms[1]
            try:
                restored += await self.store.restore(call.record(self.owner), deadline)
            except StoreError as exc:
                log.warning("call_record_lost", call_id=call.id, error=str(exc))
                await self.end(call, Trigger.FAIL, "its record was lost with the store")
        log.info("call_records_restored", restored=restored, parked=len(parked))

    def _stamp(self, call: LiveCall) -> None:
        """The call starts here or parks now: within this lease term, nobody else can
        take it."""
        call.lease_term = self.lease_term()

    def _surely_owned(self, call: LiveCall) -> bool:
        """Whether no other replica can have taken `call` over, by this replica's lease
        alone (with no store to ask): held without a break since the call last parked (or
        started, replayed or was taken over here)."""
        term = self.lease_term()  # alone, one term for good: nobody else serves its calls
        return term is not None and term == call.lease_term

    async def _still_owned(self, call: LiveCall) -> bool:
        """Whether the store still names this replica the call's owner. Raises: StoreError."""
        record = await self.store.get(call.id)
        return record is not None and record.owner == self.owner

    def _doubtful(self, call: LiveCall) -> bool:
        """Whether `_taken_over` must ask the store: a call resumed or taken over here,
        whose stamp this replica's lease no longer vouches for. A call in its first run
        here has no record another replica could have claimed (a parked call's own ways
        out check for themselves). A test, so a call owned throughout awaits nothing."""
        return call.resumed is not None and not call.stateless and not self._surely_owned(call)

    async def _taken_over(self, call: LiveCall) -> bool:
        """Whether `call`, `_doubtful`, is not this replica's to end or park: taken over
        while this replica was cut off (handed over, then), or ended while the store was
        asked. A record that names another owner, a record that is gone and a store that
        cannot say all count as taken: a record can be gone while a new owner still runs
        the call (the store lost its data, which writes back parked calls only, or the
        record's grace ran out mid-round), and saying nothing cannot harm another's call,
        where a cancellation would end it."""
        try:
            lost = not await self._still_owned(call)
        except StoreError as exc:
            log.warning("ownership_check_failed", call_id=call.id, error=str(exc))
            lost = True
        if not lost:
            return call.phase in FINAL_PHASES
        await self.hand_over(call, "taken over while this replica served it")
        return True


def _waits_in(call: LiveCall, round_: int) -> bool:
    return call.phase is _SUSPENDED and call.machine.round == round_


def _return_session(call: LiveCall, fate: SessionFate) -> None:
    """The call's session back to its pool, once (the one place): at the call's end, or
    earlier when its stream was lost while it was parked."""
    if call.session_released:
        return
    call.session_released = True
    call.session.detach(call.inbox)
    if fate is _DISCARD:
        call.pool.discard(call.session)
        return
    reuse = fate is _REUSE and (
        # A call that left nothing open and unread (the common end) hands nothing back.
        (not call.machine.pending and call.inbox.empty()) or _hand_back_questions(call)
    )
    call.pool.release(call.session, reuse=reuse)


def _hand_back_questions(call: LiveCall) -> bool:
    """The questions the server asked as the call ended (after it, or just before its
    result) go back to its session, held for its caller's next call; whether the session
    may be reused: nothing else waits unread in the call's inbox (a stream's end does)."""
    questions = [p.message() for p in call.machine.pending.values()]
    call.machine.pending.clear()
    clean = True
    for item in call.inbox.waiting():
        if isinstance(item, dict) and is_question(item):
            questions.append(item)
        else:
            clean = False  # unread, as of old: the session is not known to be clean
    for question in questions:
        call.session.held.hold(question)
    return clean


async def _stop_pump(call: LiveCall) -> None:
    if call.pump is not None:
        await call.pump.stop()
