"""Retries that reach a replica other than their call's owner, and calls whose owner died.

Receiving side, in this order:
1. the owner is alive: forward the retry to its inbox and relay what comes back
   (notifications, then the next `input_required` or the final result);
2. the owner is gone and the upstream gave SSE event ids: take the call over
   (adopt the upstream session, GET + Last-Event-ID, deliver the answers, continue);
3. the owner is gone and the operator marked the tool `replay_safe`: run the call
   again, answering its questions from the journal kept in the record;
4. otherwise: a clear error that the call was lost and may be started again.
A tool that is not replay-safe never runs a second time.

Owning side: `serve` handles what other replicas push into this replica's inbox.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import structlog

from gateway.aio import spawn
from gateway.bridge import Bridge, Notify
from gateway.config import UpstreamConfig
from gateway.errors import CallLost, RelayedError, RpcError, StoreError, UpstreamError
from gateway.fleet import Fleet
from gateway.live import LiveCall
from gateway.protocol.call import CallMachine, Pending, Phase
from gateway.protocol.capabilities import ClientCaps
from gateway.protocol.inbound import PROTOCOL_VERSION_KEY, FrontRequest, read_envelope
from gateway.protocol.versions import Version
from gateway.store.base import SuspendedCall
from gateway.upstream.session import SessionExpired, StreamCursor

log = structlog.get_logger("gateway.handoff")

LOST = "the replica that held this call stopped; start the request again without requestState"


class FleetHandoff:
    def __init__(self, bridge: Bridge, fleet: Fleet) -> None:
        self.bridge = bridge
        self.fleet = fleet
        self._served: dict[str, asyncio.Task[Any]] = {}

    # -- receiving side ----------------------------------------------------------------

    async def elsewhere(
        self, upstream: UpstreamConfig, record: SuspendedCall, front: FrontRequest, notify: Notify
    ) -> dict[str, Any]:
        if record.owner != self.bridge.replica_id and await self.fleet.alive(record.owner):
            return await self._forward(record, front, notify)
        log.warning("call_owner_lost", owner=record.owner, round=record.round)
        if record.session_id and record.last_event_id:
            try:
                return await self._take_over(upstream, record, front, notify)
            except SessionExpired:
                log.info("takeover_impossible", reason="upstream session gone")
        await self._forget(record)
        if upstream.target(record.method, record.target).replay_safe:
            responses = front.params.get("inputResponses") or {}
            log.info("call_replayed", journal=len(record.journal))
            return await self.bridge.start(
                upstream,
                front,
                record.principal,
                record.digest,
                notify,
                known=CallMachine.known_answers(record.journal, responses),
                round_=record.round,
            )
        raise CallLost(f"The call was lost: {LOST}")

    async def _forward(
        self, record: SuspendedCall, front: FrontRequest, notify: Notify
    ) -> dict[str, Any]:
        reply = self.fleet.new_reply_key()
        request = {"id": front.id, "method": front.method, "params": front.params}
        await self.fleet.send(
            record.owner,
            {
                "op": "resume",
                "call": record.call_id,
                "round": record.round,
                "request": request,
                "reply": reply,
            },
        )
        log.info("retry_forwarded", owner=record.owner)
        started = time.perf_counter()
        try:
            return await self._relay(record, reply, notify)
        finally:
            self.bridge.metrics.forward_seconds.observe(time.perf_counter() - started)

    async def _relay(self, record: SuspendedCall, reply: str, notify: Notify) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.bridge.limits.hold_timeout_s + 5
        try:
            while True:
                event = await self.fleet.receive(reply)
                if event is None:
                    if not await self.fleet.alive(record.owner):
                        raise CallLost(f"The call was lost while resuming: {LOST}")
                    if loop.time() > give_up:
                        raise UpstreamError("the replica holding this call did not answer in time")
                    continue
                if "notify" in event:
                    await notify(event["notify"])
                elif "result" in event:
                    result: dict[str, Any] = event["result"]
                    return result
                else:
                    raise RelayedError(event["error"], int(event["status"]))
        except asyncio.CancelledError:
            cancel = {"op": "cancel", "call": record.call_id, "reply": reply}
            spawn(self._send_quietly(record.owner, cancel), name="fleet-cancel")
            raise

    async def _send_quietly(self, owner: str, message: dict[str, Any]) -> None:
        try:
            await self.fleet.send(owner, message)
        except StoreError as exc:
            log.warning("fleet_cancel_failed", error=str(exc))

    async def _take_over(
        self, upstream: UpstreamConfig, record: SuspendedCall, front: FrontRequest, notify: Notify
    ) -> dict[str, Any]:
        """Continue the dead owner's upstream call from where its stream stopped.

        Raises:
            SessionExpired: the upstream forgot the session; nothing was sent.
        """
        assert record.session_id is not None
        bridge = self.bridge
        pool = bridge.pools[upstream.name]
        session = await pool.adopt(
            ClientCaps.from_key(record.caps), record.session_id, Version(record.protocol_version)
        )
        pending = [Pending.from_record(p) for p in record.pending]
        machine = CallMachine(
            call_id=record.call_id,
            method=record.method,
            upstream_id=record.upstream_request_id,
            progress_token=f"mrtr-{record.call_id}",
            rules=upstream.rules_for(record.method, record.target),
            round=record.round,
            pending={p.key: p for p in pending},
            journal=list(record.journal),
        )
        cursor = StreamCursor(last_id=record.last_event_id)
        call: LiveCall = bridge.launch(
            upstream, pool, session, machine, record.principal, record.digest, record.target, cursor
        )
        call.pump = spawn(
            session.pump_resumed(record.upstream_request_id, call.inbox, cursor),
            name=f"call-pump-{record.call_id}",
        )
        log.info("call_taken_over", previous_owner=record.owner, round=record.round)
        answers = machine.deliver(front.params.get("inputResponses") or {})
        return await bridge.drive(call, front, notify, answers)

    async def _forget(self, record: SuspendedCall) -> None:
        try:
            await self.bridge.store.delete(record.call_id)
        except StoreError as exc:
            log.warning("store_delete_failed", error=str(exc))

    # -- owning side -------------------------------------------------------------------

    async def serve(self, message: dict[str, Any]) -> None:
        """Handle one message another replica pushed into this replica's inbox."""
        reply = str(message.get("reply", ""))
        if message.get("op") == "cancel":
            task = self._served.pop(reply, None)
            if task is not None:
                task.cancel()  # the client went away at the receiving replica
            return
        if message.get("op") != "resume":
            log.warning("fleet_unknown_message", op=message.get("op"))
            return
        current = asyncio.current_task()
        assert current is not None
        self._served[reply] = current
        try:
            result = await self._serve_resume(message, reply)
            await self.fleet.reply(reply, {"result": result})
        except RpcError as exc:
            await self._reply_quietly(reply, {"error": exc.error_object(), "status": exc.status})
        except asyncio.CancelledError:
            log.info("forwarded_retry_cancelled")
        finally:
            self._served.pop(reply, None)

    async def _serve_resume(self, message: dict[str, Any], reply: str) -> dict[str, Any]:
        request = message["request"]
        params = request["params"]
        meta = params["_meta"]
        version = Version.parse(meta.get(PROTOCOL_VERSION_KEY))
        assert version is not None
        front = FrontRequest(
            id=request["id"],
            method=request["method"],
            params=params,
            envelope=read_envelope(version, meta),
        )
        call = self.bridge.calls.get(message["call"])
        if (
            call is None
            or call.machine.phase is not Phase.SUSPENDED
            or call.machine.round != message["round"]
        ):
            raise CallLost()
        structlog.contextvars.bind_contextvars(call_id=call.id, round=call.machine.round)

        async def notify(notification: dict[str, Any]) -> None:
            await self.fleet.reply(reply, {"notify": notification})

        return await self.bridge.resume(call, front, notify)

    async def _reply_quietly(self, reply: str, message: dict[str, Any]) -> None:
        try:
            await self.fleet.reply(reply, message)
        except StoreError as exc:
            log.warning("fleet_reply_failed", error=str(exc))
