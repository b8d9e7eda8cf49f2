"""Every way a call ends, and what is owed when it does.

A call that completes gives its session back for reuse. A call given up
(failed, expired, cancelled, or a replay-mode round that stops its run) first
answers the server's open questions (elicitation `cancel`, others an error), then
cancels the call upstream (`notifications/cancelled`), closes its session and
forgets its store record. An ending runs in a task of its own, shielded: a
client request cancelled meanwhile never leaves a call half-ended.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from gateway.aio import spawn
from gateway.calls.live import LiveCall, Registry
from gateway.calls.outcomes import to_keep
from gateway.calls.ownership import Ownership
from gateway.clock import Later
from gateway.errors import StoreError, UpstreamError
from gateway.observability import Metrics
from gateway.protocol import jsonrpc
from gateway.protocol.call import FINAL_PHASES, Trigger
from gateway.store.base import Kept, Reply, SuspendedCallStore

log = structlog.get_logger("gateway.calls")


class Endings:
    def __init__(
        self,
        registry: Registry,
        store: SuspendedCallStore,
        metrics: Metrics,
        *,
        outcomes_ttl_s: float | None = None,
        ownership: Ownership | None = None,
    ) -> None:
        self.registry = registry
        self.store = store
        self.metrics = metrics
        # Whether this replica may still act for a call: one taken over while this
        # replica was cut off is let go of without a word (`abandon`), whatever ends it.
        self.ownership = ownership
        # On a fleet, how long a resumed round's outcome is kept (None: not kept).
        self.outcomes_ttl_s = outcomes_ttl_s

    async def complete(self, call: LiveCall, result: dict[str, Any] | None = None) -> None:
        """The upstream answered the call: DONE, and its session goes back for reuse.

        `result` is the client's answer: on a fleet it is kept as the resumed round's
        outcome with the deletion of the call's record (`gateway.calls.outcomes`).
        """
        if self.doubtful(call) and await self.taken_over(call):
            return  # its record is the new owner's; the upstream call is over anyway
        self.registry.fire(call, Trigger.COMPLETE)
        if _in_store(call):
            kept = reply = None
            if result is not None and self.outcomes_ttl_s is not None:
                kept = to_keep(result, call.resumed, self.outcomes_ttl_s)
            if result is not None and call.reply_with is not None:
                reply = call.reply_with(result)
            cleanup = spawn(
                self._cleanup(call, reuse=True, kept=kept, reply=reply), name=f"call-done-{call.id}"
            )
            await asyncio.shield(cleanup)
        else:  # nothing to await (a call that never parked): no task for it
            self._let_go(call, reuse=True)
            self._settle(call)
        self.metrics.call_endings.labels(call.phase).inc()
        self.metrics.rounds_per_call.observe(call.machine.round)

    async def end(
        self, call: LiveCall, trigger: Trigger, reason: str, *, release_questions: bool = True
    ) -> None:
        """Give the call up: release the server's questions, cancel the call upstream.

        Does nothing for a call that has ended already.
        """
        if call.phase in FINAL_PHASES or (self.doubtful(call) and await self.taken_over(call)):
            return  # ended already, or another replica's now
        self.registry.fire(call, trigger)
        ending = spawn(
            self._wind_up(call, reason, release_questions, call.expiry), name=f"call-end-{call.id}"
        )
        await asyncio.shield(ending)

    async def abandon(self, call: LiveCall, reason: str) -> None:
        """Let go of a call another replica owns now (it took the call over): nothing is
        said upstream, the session is not ended there, the record is not touched."""
        if call.phase in FINAL_PHASES:
            return
        self.registry.fire(call, Trigger.CANCEL)
        try:
            if call.expiry is not None:
                await call.expiry.cancel()  # not if it is what abandons the call
            self.registry.remove(call)
            _give_back(call, reuse=None)
            await _stop_pump(call)
        finally:
            self._settle(call)
        self.metrics.call_endings.labels("handed_over").inc()
        log.info("call_handed_over", reason=reason, rounds=call.machine.round)

    def doubtful(self, call: LiveCall) -> bool:
        """Whether `taken_over` must ask the store (`Ownership.doubtful`); a test, so the
        path of a call owned throughout awaits nothing."""
        return self.ownership is not None and self.ownership.doubtful(call)

    async def taken_over(self, call: LiveCall) -> bool:
        """Whether `call`, `doubtful`, is not this replica's to end or park: taken over
        while this replica was cut off (let go of, then), or ended while the store was
        asked."""
        assert self.ownership is not None
        if not await self.ownership.lost(call):
            return call.phase in FINAL_PHASES
        await self.abandon(call, "taken over while this replica served it")
        return True

    def release_lost(self, call: LiveCall, *, end: bool) -> None:
        """A parked call lost its stream: its session is given back now (closed, and
        ended upstream when `end`, else let go quietly), once."""
        _give_back(call, reuse=False if end else None)

    def end_soon(self, call: LiveCall, trigger: Trigger, reason: str) -> None:
        """`end`, from a task that is being cancelled and must not wait for it."""
        if call.phase not in FINAL_PHASES:
            spawn(self.end(call, trigger, reason), name=f"call-cancel-{call.id}")

    async def _wind_up(
        self,
        call: LiveCall,
        reason: str,
        release_questions: bool,
        expiry: Later | None,
    ) -> None:
        machine = call.machine
        try:
            if expiry is not None:
                await expiry.cancel()  # not if it is what ends the call
            cancelled = jsonrpc.notification(
                "notifications/cancelled", {"requestId": machine.upstream_id, "reason": reason}
            )
            answers = machine.abandon_answers() if release_questions else []
            for message in [a.message() for a in answers] + [cancelled]:
                try:
                    await call.session.send(message)
                except UpstreamError as exc:
                    log.info("upstream_cancel_failed", error=str(exc))
                    break
        finally:
            await self._cleanup(call, reuse=False)
        if release_questions:  # a replay-mode round ends its run by design, not the call
            self.metrics.call_endings.labels(machine.phase).inc()
        log.info(f"call_{machine.phase}", reason=reason, rounds=machine.round)

    async def _cleanup(
        self, call: LiveCall, *, reuse: bool, kept: Kept | None = None, reply: Reply | None = None
    ) -> None:
        """Forget the call and give its session back; nothing before the release awaits.

        `call.ended` is set once everything is done, the store record included.
        """
        self._let_go(call, reuse=reuse)
        try:
            if not reuse:
                await _stop_pump(call)
            # else: the stream's rest is read to its end so its connection is reused
            if _in_store(call):
                try:  # the record and the principal's hold, in one round trip
                    call.replied = await self.store.forget(call.id, call.principal, kept, reply)
                except StoreError as exc:
                    log.warning("store_forget_failed", error=str(exc))
        finally:
            self._settle(call)

    def _let_go(self, call: LiveCall, *, reuse: bool) -> None:
        self.registry.remove(call)
        _give_back(call, reuse=reuse and call.inbox.empty())

    def _settle(self, call: LiveCall) -> None:
        self.registry.settled()
        call.ended.set()


def _give_back(call: LiveCall, *, reuse: bool | None) -> None:
    """The call's session back to its pool, once: kept for reuse or closed (`reuse`), or
    discarded (None: another replica holds it now)."""
    if call.session_released:
        return
    call.session_released = True
    call.session.detach(call.inbox)
    if reuse is None:
        call.pool.discard(call.session)
    else:
        call.pool.release(call.session, reuse=reuse)


def _in_store(call: LiveCall) -> bool:
    """Whether the call has a record (and a hold) in the store to forget when it ends."""
    return bool(call.machine.round) and not call.stateless


async def _stop_pump(call: LiveCall) -> None:
    if call.pump is not None:
        await call.pump.stop()
