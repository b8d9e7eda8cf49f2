"""Retries whose call this replica does not hold, and the owning side of a forward.

Receiving side (`elsewhere`), in this order:
1. the owner is alive: forward the retry to its inbox and relay what comes back
   (notifications, then the next `input_required` or the final result);
2. the owner is gone and the upstream gave SSE event ids: take the call over
   (adopt the upstream session, resume its stream, deliver the answers, continue);
3. the owner is gone and the operator marked the tool `replay_safe`: run the call
   again, answering its questions from the journal kept in the record;
4. otherwise: a clear error that the call was lost and may be started again.
A tool that is not replay-safe never runs a second time.

Owning side (`serve_message`): what other replicas push into this replica's inbox about
its calls. The replicas talk through a `Bus` (`gateway.fleet.port`; Redis lists in
production, `gateway.fleet.redis_bus`), in the messages of `gateway.fleet.messages`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import structlog

from gateway import logging as log_context
from gateway.aio import spawn
from gateway.calls.forwarding import Forward
from gateway.calls.lifecycle import Lifecycle
from gateway.calls.outcomes import Outcomes
from gateway.calls.runner import Notifier, Runner
from gateway.calls.takeover import Takeover
from gateway.clock import Clock
from gateway.config import LimitsConfig, UpstreamConfig
from gateway.errors import (
    CallLost,
    LeaseLost,
    RelayedError,
    RoundInProgress,
    RpcError,
    StoreError,
    UpstreamError,
)
from gateway.fleet import messages
from gateway.fleet.port import Bus
from gateway.observability import Metrics
from gateway.protocol import state
from gateway.protocol.call import CallMachine
from gateway.protocol.formats import Kind
from gateway.protocol.inbound import FrontRequest
from gateway.protocol.served import ServedReplies
from gateway.store.base import Reply, SuspendedCall, SuspendedCallStore
from gateway.tracing import TRACING
from gateway.upstream.port import SessionExpired, UpstreamPool

log = structlog.get_logger("gateway.calls")

LOST = "the replica that held this call stopped; start the request again without requestState"
#: How long a receiving replica waits for a forwarded round beyond the owner's hold timeout.
FORWARD_SLACK_S = 5.0
#: The reasons of an owner's refusal that leave the round as it was (nothing delivered).
UNTOUCHED = frozenset({LeaseLost.reason, RoundInProgress.reason})


class Routing:
    def __init__(
        self,
        *,
        bus: Bus,
        lifecycle: Lifecycle,
        pools: Mapping[str, UpstreamPool],
        runner: Runner,
        outcomes: Outcomes,
        store: SuspendedCallStore,
        clock: Clock,
        limits: LimitsConfig,
        metrics: Metrics,
    ) -> None:
        self.bus = bus
        self.runner = runner
        self.calls = lifecycle.calls
        self.trail = lifecycle.trail  # a call lost with its owner is recorded here
        self.store = store
        self.clock = clock
        self.limits = limits
        self.metrics = metrics
        self._served: dict[str, asyncio.Task[Any]] = {}
        # The reply keys of forwards served to their end, and when: a message taken up
        # again (`RedisBus`: its removal from the taken list failed) is not served twice.
        self._finished = ServedReplies(bus.reply_ttl_ms / 1000)
        self.outcomes = outcomes
        self.takeover = Takeover(
            lifecycle=lifecycle,
            pools=pools,
            runner=runner,
            store=store,
            clock=clock,
            metrics=metrics,
            replica_id=bus.replica_id,
        )

    # -- receiving side ----------------------------------------------------------------

    @contextmanager
    def forwarding(self, front: FrontRequest) -> Iterator[Forward]:
        """A retry's way to the replica holding its call, made before its round is claimed
        so that the claim can carry it (`Admission.claim`); `elsewhere` sends it on. If
        the client leaves meanwhile, the owner is told, so it does not go on for nobody."""
        forward = Forward(self.bus, front)
        try:
            yield forward
        except asyncio.CancelledError:
            self._abandon(forward)
            raise
        finally:
            forward.close()

    async def elsewhere(
        self,
        upstream: UpstreamConfig,
        record: SuspendedCall,
        front: FrontRequest,
        notify: Notifier,
        forward: Forward | None = None,
    ) -> dict[str, Any]:
        """Serve a claimed retry whose call this replica does not hold (`forward` is the
        one its claim was given, if it was).

        Raises:
            RpcError: CallLost when neither the owner, takeover nor replay can serve it.
        """
        if record.owner != self.bus.replica_id:
            if forward is None:
                with self.forwarding(front) as made:
                    forwarded = await self._forward(record, made, notify)
            else:
                forwarded = await self._forward(record, forward, notify)
            if forwarded is not None:
                return forwarded
        log.warning("call_owner_lost", owner=record.owner, round=record.round)
        return await self._owner_lost(upstream, record, front, notify)

    async def _owner_lost(
        self, upstream: UpstreamConfig, record: SuspendedCall, front: FrontRequest, notify: Notifier
    ) -> dict[str, Any]:
        """Serve a claimed retry whose owner is gone: take the call over where the upstream
        allows it, else replay a replay-safe tool; else it is lost, and its stranded
        upstream call is cancelled.

        Raises:
            CallLost
        """
        if record.session_id and record.last_event_id:
            try:
                with TRACING.span("mcp takeover", attributes={"mcp.previous_owner": record.owner}):
                    return await self.takeover.continue_call(upstream, record, front, notify)
            except SessionExpired:
                log.info("takeover_impossible", reason="upstream session gone")
        await self._forget(record)
        if upstream.target(record.method, record.target).replay_safe:
            responses = front.params.get("inputResponses") or {}
            log.info("call_replayed", journal=len(record.journal))
            self.metrics.handoffs.labels("replayed").inc()
            result = await self.runner.start(
                upstream,
                front,
                record.principal,
                state.RequestDigest.known(record.digest),
                notify,
                known=CallMachine.known_answers(record.journal, responses),
                round_=record.round,
                call_id=state.rerun_id(record.call_id),  # the same call, run again
            )
            await self.outcomes.keep_replayed(record.call_id, record.round, result)
            return result
        await self.takeover.cancel_stranded(upstream, record)
        self.trail.lost(record)
        self.metrics.handoffs.labels("lost").inc()
        raise CallLost(f"The call was lost: {LOST}")

    async def _forward(
        self, record: SuspendedCall, forward: Forward, notify: Notifier
    ) -> dict[str, Any] | None:
        """The owner's outcome of the retry; None when the owner is gone (nothing sent)."""
        payload = forward.payload(record)
        with forward.span():
            return await self._forward_traced(record, forward, payload, notify)

    async def _forward_traced(
        self, record: SuspendedCall, forward: Forward, payload: str, notify: Notifier
    ) -> dict[str, Any] | None:
        reply = forward.reply
        # Pushed with the claim, or here in one round trip; a missing heartbeat gets the
        # patience of `alive` (after a Redis restart the owners beat again within a beat).
        try:
            delivered = forward.delivered
            if delivered is None:
                delivered = await self.bus.deliver(record.owner, payload)
            if not delivered and await self.bus.alive(record.owner):
                delivered = await self.bus.deliver(record.owner, payload)
        except StoreError:
            await self.give_back(record)  # nobody has it: the next retry may claim it
            raise
        if not delivered:
            forward.not_sent()
            return None
        log.info("retry_forwarded", owner=record.owner)
        self.metrics.handoffs.labels("forwarded").inc()
        started = self.clock.monotonic()
        forward.relaying = True
        try:
            return await self._relay(record, reply, payload, notify)
        finally:
            self.metrics.forward_seconds.observe(self.clock.monotonic() - started)

    async def _relay(
        self, record: SuspendedCall, reply: str, sent: str, notify: Notifier
    ) -> dict[str, Any] | None:
        """The owner's outcome; None when the owner died before it answered."""
        give_up = self.clock.monotonic() + self.limits.hold_timeout_s + FORWARD_SLACK_S
        try:
            while True:
                try:
                    payload = await self.bus.receive(reply)
                except StoreError:
                    # Unread by the owner, the forward is taken back and the round given
                    # back for the client's next retry; read, the owner is resuming it.
                    if await self._retract_quietly(record.owner, sent):
                        await self.give_back(record)
                    raise
                if payload is None:
                    if not await self.bus.alive(record.owner):
                        # Unread, it is taken back; read, the owner died resuming it. Either
                        # way nobody else resumes this round: this replica holds its claim.
                        retracted = await self.bus.retract(record.owner, sent)
                        log.warning("forward_owner_died", owner=record.owner, read=not retracted)
                        if not retracted:  # it was resuming the round: may have said so
                            self.trail.maybe_answered(state.first_id(record.call_id), record.round)
                        return None
                    if self.clock.monotonic() > give_up:
                        raise UpstreamError("the replica holding this call did not answer in time")
                    continue
                try:
                    event = messages.decode(payload)
                except ValueError as exc:  # none this release reads: never half-read
                    raise UpstreamError(f"a fleet reply not read here: {exc}") from exc
                if isinstance(event, messages.Notify):
                    await notify(event.notification)
                elif isinstance(event, messages.Outcome):
                    return event.result
                elif isinstance(event, messages.Failure):
                    if (event.error.get("data") or {}).get("reason") in UNTOUCHED:
                        # The owner refused it untouched: the round goes back to parked,
                        # so the client's next retry finds it once the owner is back (or
                        # once the owner resumed the round, which keeps its outcome).
                        await self.give_back(record)
                    raise RelayedError(event.error, event.status)
                else:
                    raise UpstreamError(f"unexpected fleet reply {type(event).__name__}")
        except asyncio.CancelledError:
            cancel = messages.Cancel(call=record.call_id, reply=reply)
            spawn(self._send_quietly(record.owner, cancel), name="fleet-cancel")
            raise

    def _abandon(self, forward: Forward) -> None:
        """The client left while its retry was on its way (before the relay, which tells
        the owner itself): the owner is told, so it does not resume the round for nobody."""
        left = forward.left()
        if left is not None:
            spawn(self._send_quietly(*left), name="fleet-cancel")

    async def _retract_quietly(self, owner: str, sent: str) -> bool:
        try:
            return await self.bus.retract(owner, sent)
        except StoreError:
            return False

    async def give_back(self, record: SuspendedCall) -> None:
        """Park again a round this replica claimed and nobody resumed, best effort."""
        await self.takeover.give_back(record)

    async def _send_quietly(self, owner: str, message: messages.Message) -> None:
        try:
            await self.bus.send(owner, messages.encode(message, self._version()))
        except StoreError as exc:
            log.warning("fleet_cancel_failed", error=str(exc))

    async def _forget(self, record: SuspendedCall) -> None:
        """Forget a call whose owner is gone, and free its place among its principal's
        parked calls (else its replay, or the fresh start a lost call's client is told
        to make, would be refused by its own old place until the deadline)."""
        try:
            await self.store.forget(record.call_id, record.principal)
        except StoreError as exc:
            log.warning("store_delete_failed", error=str(exc))

    # -- owning side -------------------------------------------------------------------

    async def serve_message(self, message: messages.Message) -> None:
        """Handle one decoded message of this replica's inbox (about a call)."""
        if isinstance(message, messages.Cancel):
            task = self._served.pop(message.reply, None)
            if task is not None:
                task.cancel()  # the client went away at the receiving replica
            return
        if not isinstance(message, messages.Resume):
            log.warning("fleet_unexpected_message", kind=type(message).__name__)
            return
        if message.reply in self._served or message.reply in self._finished:
            return  # the same message again (a push retried after a dropped connection)
        current = asyncio.current_task()
        assert current is not None
        self._served[message.reply] = current
        reply = message.reply
        try:
            with TRACING.span("mcp serve forwarded", parent=message.trace, kind="server"):
                result, replied = await self._serve_resume(message)
            if not replied:  # else it went with the write that forgot the call
                await self.bus.reply(
                    reply, messages.encode(messages.Outcome(result), self._version())
                )
        except RpcError as exc:
            failure = messages.Failure(exc.error_object(), exc.status)
            await self._reply_quietly(reply, failure)
        except asyncio.CancelledError:
            log.info("forwarded_retry_cancelled")
        finally:
            self._served.pop(reply, None)
            self._remember(reply)

    def _remember(self, reply: str) -> None:
        """Keep `reply` as served for as long as its reply list lives."""
        self._finished.add(reply, self.clock.monotonic())

    async def _serve_resume(self, message: messages.Resume) -> tuple[dict[str, Any], bool]:
        """The forwarded round's outcome, and whether its reply has been pushed already."""
        front = message.front()
        call = self.calls.get(message.call)
        if call is None:
            raise CallLost()
        if not self.bus.holds_lease():
            raise LeaseLost()
        log_context.bind(call_id=call.id, round=call.machine.round)
        reply = message.reply

        async def notify(notification: dict[str, Any]) -> None:
            await self.bus.reply(
                reply, messages.encode(messages.Notify(notification), self._version())
            )

        version, ttl_ms = self._version(), self.bus.reply_ttl_ms

        def outcome(result: dict[str, Any]) -> Reply:
            """The round's result, pushed on the reply list with the write that ends it."""
            return Reply(reply, messages.encode(messages.Outcome(result), version), ttl_ms)

        call.reply_with = outcome
        call.replied = False
        try:
            return await self.runner.resume(call, front, notify, message.round), call.replied
        finally:
            call.reply_with = None

    def _version(self) -> int:
        """The version of a message every live replica reads."""
        return self.bus.level.version(Kind.MESSAGE)

    async def _reply_quietly(self, reply: str, message: messages.Message) -> None:
        try:
            await self.bus.reply(reply, messages.encode(message, self._version()))
        except StoreError as exc:
            log.warning("fleet_reply_failed", error=str(exc))
