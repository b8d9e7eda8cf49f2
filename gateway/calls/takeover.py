"""Taking over the call of a replica that is gone, where the upstream allows it.

`continue_call` adopts the upstream session the record names, resumes the call's
stream with GET + Last-Event-ID where it stopped, and delivers the retry's answers
once the resumed stream is live; `cancel_stranded` cancels upstream a call that
cannot be continued, so the server's handler does not wait for ever. `Routing`
(`gateway.calls.routing`) decides when either applies.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

import structlog

from gateway import clock as clocks
from gateway.aio import spawn
from gateway.calls.lifecycle import Lifecycle
from gateway.calls.runner import Notifier, Runner
from gateway.clock import Clock
from gateway.config import UpstreamConfig
from gateway.errors import (
    CallLost,
    CapacityExceeded,
    RoundInProgress,
    StoreError,
    TakeoverUnavailable,
    UpstreamError,
)
from gateway.observability import Metrics
from gateway.protocol import jsonrpc, state
from gateway.protocol.call import CallMachine, Pending, Trigger
from gateway.protocol.capabilities import ClientCaps
from gateway.protocol.inbound import FrontRequest
from gateway.protocol.versions import Version
from gateway.store.base import SuspendedCall, SuspendedCallStore
from gateway.upstream.port import SessionExpired, StreamCursor, TaskPump, UpstreamPool

log = structlog.get_logger("gateway.calls")

#: How long a takeover waits for the resumed stream to be live before it answers anyway
#: (a server that sends no priming event, or a slow one).
RESUME_LIVE_S = 2.0


class Takeover:
    def __init__(
        self,
        *,
        lifecycle: Lifecycle,
        pools: Mapping[str, UpstreamPool],
        runner: Runner,
        store: SuspendedCallStore,
        clock: Clock,
        metrics: Metrics,
        replica_id: str,
    ) -> None:
        self.lifecycle = lifecycle
        self.pools = pools
        self.runner = runner  # drives the call once it is this replica's
        self.store = store
        self.clock = clock
        self.metrics = metrics
        self.replica_id = replica_id

    async def continue_call(
        self, upstream: UpstreamConfig, record: SuspendedCall, front: FrontRequest, notify: Notifier
    ) -> dict[str, Any]:
        """Continue the dead owner's upstream call from where its stream stopped.

        Until the record names this replica, every way out but SessionExpired gives the
        round back, so that the same retry sent again finds the call as it was.

        Raises:
            SessionExpired: the upstream forgot the session; nothing was sent.
            TakeoverUnavailable: the upstream cannot be reached now (503, retry).
            CapacityExceeded: the pool is full (503, retry).
            StoreError: the store failed as the call was taken.
            CallLost: the record went as the call was taken.
        """
        assert record.session_id is not None
        pool = self.pools[upstream.name]
        try:
            session = await pool.adopt(
                ClientCaps.from_key(record.caps),
                record.principal,
                record.session_id,
                Version(record.protocol_version),
            )
        except SessionExpired:
            raise  # the call cannot be continued: `Routing` replays or gives it up
        except UpstreamError as exc:
            await self._give_back_whatever(record)
            log.info("takeover_deferred", error=exc.message)
            raise TakeoverUnavailable() from exc
        except BaseException:  # the pool is full, the client left, a record unreadable
            await self._give_back_whatever(record)
            raise
        # The record names this replica from now on: its previous owner, if it was only
        # cut off, learns from it that the call is not its own any more. Until the call
        # runs here, a way out lets go of the session (the call is still the upstream's)
        # and parks the round again naming the owner it had, as `take` may have reached
        # the store though it failed.
        try:
            if not await self.store.take(record, self.replica_id):
                if await self.store.get(record.call_id) is None:
                    raise CallLost()  # the record is gone: it ended or lapsed meanwhile
                # Its owner lived and ended the round meanwhile (the round's outcome is
                # kept): the retry sent again is answered with it.
                raise RoundInProgress()
            machine = self._machine(upstream, record)
        except BaseException:
            pool.discard(session)
            await self._give_back_whatever(record, untake=True)
            raise
        cursor = StreamCursor(last_id=record.last_event_id, live=asyncio.Event())
        call = self.lifecycle.begin(
            upstream,
            pool,
            session,
            machine,
            record.principal,
            state.RequestDigest.known(record.digest),
            record.target,
            cursor,
        )
        call.resumed = record.round
        self.lifecycle.trail.begin(call, new=False)
        resumed = session.pump_resumed(record.upstream_request_id, call.inbox, cursor)
        call.pump = TaskPump(spawn(resumed, name=f"call-pump-{record.call_id}"))
        try:
            await self._until_live(cursor)
        except asyncio.CancelledError:  # the client went away: as in a round, end the call
            self.lifecycle.end_soon(call, Trigger.CANCEL, "client disconnected")
            raise
        log.info("call_taken_over", previous_owner=record.owner, round=record.round)
        self.metrics.handoffs.labels("taken_over").inc()
        responses = front.params.get("inputResponses") or {}
        asked = {key: p.method for key, p in machine.pending.items() if key in responses}
        self.lifecycle.trail.answered(call, record.round, responses, asked)
        answers = machine.deliver(responses)
        return await self.runner.drive(call, front, notify, answers)

    @staticmethod
    def _machine(upstream: UpstreamConfig, record: SuspendedCall) -> CallMachine:
        pending = [Pending.from_record(p) for p in record.pending]
        return CallMachine(
            call_id=record.call_id,
            method=record.method,
            upstream_id=record.upstream_request_id,
            progress_token=f"mrtr-{record.call_id}",
            rules=upstream.rules_for(record.method, record.target),
            round=record.round,
            pending={p.key: p for p in pending},
            journal=list(record.journal),
        )

    async def give_back(self, record: SuspendedCall, *, untake: bool = False) -> None:
        """Park again a round this replica claimed and nobody resumed, best effort; with
        `untake`, naming the owner the record named when it was claimed."""
        try:
            await self.store.give_back(record, untake=untake)
        except StoreError as exc:
            log.warning("round_not_given_back", error=str(exc))

    async def _give_back_whatever(self, record: SuspendedCall, *, untake: bool = False) -> None:
        """`give_back` on a way out, which may be the request's cancellation: in a task of
        its own that a second cancellation does not stop, awaited where it can be."""
        giving = spawn(self.give_back(record, untake=untake), name=f"give-back-{record.call_id}")
        await asyncio.shield(giving)

    async def _until_live(self, cursor: StreamCursor) -> None:
        """Until the resumed stream carries the call's new events, bounded: mcp 1.x attaches
        a resumed stream to its call only after replaying what was missed, so an answer
        sent before then would have the call's result stored, but sent on no stream."""
        assert cursor.live is not None
        with contextlib.suppress(TimeoutError):
            async with clocks.timeout(self.clock, RESUME_LIVE_S):
                await cursor.live.wait()

    async def cancel_stranded(self, upstream: UpstreamConfig, record: SuspendedCall) -> None:
        """Cancel a lost call upstream on its session, where the session can be reached."""
        if not record.session_id:
            return
        pool = self.pools[upstream.name]
        caps = ClientCaps.from_key(record.caps)
        try:
            session = await pool.adopt(
                caps, record.principal, record.session_id, Version(record.protocol_version)
            )
        except (UpstreamError, CapacityExceeded) as exc:
            log.info("stranded_call_not_cancelled", error=exc.message)
            return
        cancelled = jsonrpc.notification(
            "notifications/cancelled",
            {"requestId": record.upstream_request_id, "reason": "its gateway replica stopped"},
        )
        try:
            await session.send(cancelled)
            log.info("stranded_call_cancelled", owner=record.owner)
        except UpstreamError as exc:
            log.info("stranded_call_not_cancelled", error=exc.message)
        finally:
            pool.release(session, reuse=False)
