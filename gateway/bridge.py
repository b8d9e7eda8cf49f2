"""One bridged call's life: start, suspend, resume, finish, expire.

A `tools/call`, `prompts/get` or `resources/read` takes a pooled upstream session
for itself, sends the legacy request, and reads what the server says. When the
server asks the client something (elicitation, sampling, roots), the bridge
waits a short coalescing window for siblings, parks the call (store record +
sealed `requestState`) and answers `input_required`; the upstream stream stays
open in this process. The retry is verified, claimed atomically (a round
resumes at most once), its answers go upstream, and reading continues. A call
nobody resumes is abandoned at its deadline; a client that disconnects cancels
its call upstream.

Tools in `mode: replay` park nothing: the journal of answers rides in the sealed
state and every retry runs the call afresh. A retry that reaches another replica
than the call's owner is handed over by `gateway.handoff`.

Protocol decisions live in `gateway.protocol.call.CallMachine`; this module only
does the I/O around it.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import structlog

from gateway.aio import cancel_and_wait, spawn
from gateway.config import REPLAY, GatewayConfig, UpstreamConfig
from gateway.errors import (
    CallLost,
    CapacityExceeded,
    GatewayError,
    InvalidRequestState,
    MissingClientCapability,
    StoreError,
    UpstreamError,
    UpstreamTimeout,
)
from gateway.live import (
    LiveCall,
    input_required_result,
    parked_record,
    round_context,
    sealed_state,
    server_info,
)
from gateway.observability import Metrics
from gateway.protocol import jsonrpc, keys, state, translate
from gateway.protocol.call import (
    FINAL_PHASES,
    Answer,
    Asked,
    CallMachine,
    Finished,
    Pending,
    Phase,
    Refused,
    Relay,
    Trigger,
    check_answers,
)
from gateway.protocol.inbound import FrontRequest
from gateway.store.base import PARKED, SuspendedCall, SuspendedCallStore
from gateway.upstream.pool import SessionPool
from gateway.upstream.session import Inbox, LegacySession, StreamCursor, StreamEnd

log = structlog.get_logger("gateway.bridge")

Notify = Callable[[dict[str, Any]], Awaitable[None]]

#: How long a parked call whose round another request claimed may wait to be resumed.
CLAIM_GRACE_S = 30.0


def now_ms() -> int:
    return int(time.time() * 1000)


class Bridge:
    def __init__(
        self,
        config: GatewayConfig,
        store: SuspendedCallStore,
        codec: state.StateCodec,
        pools: dict[str, SessionPool],
        metrics: Metrics | None = None,
    ) -> None:
        self.metrics = metrics or Metrics()
        self.config = config
        self.limits = config.limits
        self.store = store
        self.codec = codec
        self.pools = pools
        self.calls: dict[str, LiveCall] = {}
        self.parked = 0
        self._parked_by_principal: Counter[str] = Counter()
        self.draining = False
        self._idle = asyncio.Event()
        self._idle.set()
        # Set by gateway.handoff when the store is shared: (record, front, notify) -> result.
        self.handoff: Handoff | None = None

    @property
    def replica_id(self) -> str:
        return self.config.replica_id

    def _fire(self, call: LiveCall, trigger: Trigger) -> None:
        """Move the call's phase, keeping the parked-call counts in step."""
        before = call.machine.phase
        after = call.machine.fire(trigger)
        if before is Phase.SUSPENDED:
            self.parked -= 1
            self._parked_by_principal[call.principal] -= 1
            if self._parked_by_principal[call.principal] <= 0:
                del self._parked_by_principal[call.principal]
        if after is Phase.SUSPENDED:
            self.parked += 1
            self._parked_by_principal[call.principal] += 1

    def audience(self, upstream: UpstreamConfig) -> str:
        return f"{self.config.sealing.audience}|{upstream.name}"

    # -- entry -------------------------------------------------------------------------

    async def handle(
        self, upstream: UpstreamConfig, front: FrontRequest, principal: str, notify: Notify
    ) -> dict[str, Any]:
        """Serve one interruptible request; return its 2026 result.

        Raises:
            RpcError: every failure, with its wire mapping.
        """
        digest = state.request_digest(front.method, front.target, front.params.get("arguments"))
        token = front.params.get("requestState")
        responses = front.params.get("inputResponses") or {}
        if token is None:
            if self.draining:
                raise CapacityExceeded(
                    "this replica is draining; send the request again", reason="draining"
                )
            known = {key: [answer] for key, answer in responses.items()}
            return await self.start(upstream, front, principal, digest, notify, known=known)
        claims = self._open(upstream, token, principal, digest)
        if claims.mode == REPLAY:
            known = CallMachine.known_answers(claims.journal, responses)
            return await self.start(
                upstream, front, principal, digest, notify, known=known, round_=claims.round
            )
        record = await self._claim(upstream, claims, responses)
        call = self.calls.get(record.call_id)
        if call is not None:
            return await self.resume(call, front, notify)
        if self.handoff is None:
            raise CallLost()
        return await self.handoff.elsewhere(upstream, record, front, notify)

    def _open(
        self, upstream: UpstreamConfig, token: str, principal: str, digest: str
    ) -> state.Claims:
        try:
            claims = state.open_claims(
                self.codec,
                token,
                now_ms=now_ms(),
                principal=principal,
                digest=digest,
                audience=self.audience(upstream),
            )
        except InvalidRequestState as exc:
            log.warning("request_state_refused", reason=exc.reason, upstream=upstream.name)
            self.metrics.state_refusals.labels(exc.reason).inc()
            raise
        structlog.contextvars.bind_contextvars(call_id=claims.call, round=claims.round)
        return claims

    async def _claim(
        self, upstream: UpstreamConfig, claims: state.Claims, responses: Any
    ) -> SuspendedCall:
        """The parked record, claimed for this retry; bad answers are refused first.

        Raises:
            InvalidRequestState, InvalidParams, StoreError
        """
        try:
            record = await self.store.get(claims.call)
            if record is None:
                raise InvalidRequestState("no live call (finished, expired or never parked)")
            if record.round != claims.round or record.status != PARKED:
                raise InvalidRequestState("round already resumed (replay)")
            check_answers([Pending.from_record(p) for p in record.pending], responses)
            claimed = await self.store.claim(claims.call, claims.round)
            if claimed is None:
                raise InvalidRequestState("round already resumed (replay)")
        except InvalidRequestState as exc:
            log.warning("request_state_refused", reason=exc.reason, upstream=upstream.name)
            self.metrics.state_refusals.labels(exc.reason).inc()
            raise
        return claimed

    # -- starting and resuming ---------------------------------------------------------

    async def start(
        self,
        upstream: UpstreamConfig,
        front: FrontRequest,
        principal: str,
        digest: str,
        notify: Notify,
        *,
        known: dict[str, list[Any]],
        round_: int = 0,
    ) -> dict[str, Any]:
        """Run the legacy call from the beginning, answering `known` questions itself."""
        pool = self.pools[upstream.name]
        session = await pool.acquire(front.envelope.capabilities)
        call_id = state.new_call_id()
        machine = CallMachine(
            call_id=call_id,
            method=front.method,
            upstream_id=session.next_id(),
            progress_token=f"mrtr-{call_id}",
            rules=upstream.rules_for(front.method, front.target),
            presupplied=known,
            round=round_,
        )
        message = jsonrpc.request(
            machine.upstream_id,
            front.method,
            translate.upstream_params(front, machine.progress_token),
        )
        call = self.launch(upstream, pool, session, machine, principal, digest, front.target)
        call.stateless = upstream.target(front.method, front.target).mode == REPLAY
        call.pump = spawn(
            session.pump(message, call.inbox, call.cursor, front.trace), name=f"call-pump-{call_id}"
        )
        structlog.contextvars.bind_contextvars(call_id=call_id)
        log.info(
            "call_started",
            upstream=upstream.name,
            method=front.method,
            target=front.target,
            replayed_answers=sum(len(v) for v in known.values()),
        )
        return await self.drive(call, front, notify)

    def launch(
        self,
        upstream: UpstreamConfig,
        pool: SessionPool,
        session: LegacySession,
        machine: CallMachine,
        principal: str,
        digest: str,
        target: str | None,
        cursor: StreamCursor | None = None,
    ) -> LiveCall:
        """Register a call this replica now owns; the caller starts its pump."""
        inbox: Inbox = asyncio.Queue()
        session.attach(inbox)
        call = LiveCall(
            machine=machine,
            upstream=upstream,
            pool=pool,
            session=session,
            inbox=inbox,
            cursor=cursor or StreamCursor(),
            principal=principal,
            digest=digest,
            target=target,
        )
        self.calls[call.id] = call
        self._idle.clear()
        return call

    async def resume(self, call: LiveCall, front: FrontRequest, notify: Notify) -> dict[str, Any]:
        """Continue a call parked here, whose round this retry has claimed."""
        started = time.perf_counter()
        try:
            return await self._resume(call, front, notify)
        finally:
            self.metrics.resume_seconds.labels(call.upstream.name).observe(
                time.perf_counter() - started
            )

    async def _resume(self, call: LiveCall, front: FrontRequest, notify: Notify) -> dict[str, Any]:
        machine = call.machine
        if machine.phase is not Phase.SUSPENDED:  # it expired while this retry was claiming
            raise CallLost()
        self._fire(call, Trigger.RESUME)
        await cancel_and_wait(call.expiry)
        responses = front.params.get("inputResponses") or {}
        log.info(
            "call_resumed",
            round=machine.round,
            answered=sorted(set(responses) & set(machine.pending)),
        )
        return await self.drive(call, front, notify, machine.deliver(responses))

    # -- the read loop -----------------------------------------------------------------

    async def drive(
        self,
        call: LiveCall,
        front: FrontRequest,
        notify: Notify,
        answers: list[Answer] | None = None,
    ) -> dict[str, Any]:
        """Deliver this round's answers and read until the call finishes or asks again."""
        started = time.perf_counter()
        outcome = "error"
        try:
            result = await self._drive(call, front, notify, answers)
            outcome = str(result.get("resultType", "complete"))
            return result
        finally:
            self.metrics.round_seconds.labels(call.upstream.name, outcome).observe(
                time.perf_counter() - started
            )

    async def _drive(
        self,
        call: LiveCall,
        front: FrontRequest,
        notify: Notify,
        answers: list[Answer] | None,
    ) -> dict[str, Any]:
        call.machine.serve(round_context(front))
        try:
            async with asyncio.timeout(self.limits.hold_timeout_s):
                for answer in answers or []:
                    await self._send(call, answer)
                return await self._run(call, notify)
        except asyncio.CancelledError:
            # The client went away mid-round: cancellation on the 2026 wire. A call caught
            # suspending (its state never reached the client) can never be resumed either.
            if call.machine.phase not in FINAL_PHASES:
                spawn(
                    self._end(call, Trigger.CANCEL, "client disconnected"),
                    name=f"call-cancel-{call.id}",
                )
            raise
        except TimeoutError:
            await self._end(call, Trigger.FAIL, "hold timeout")
            raise UpstreamTimeout(
                f"the upstream did not answer within {self.limits.hold_timeout_s:g} s"
            ) from None
        except UpstreamError as exc:
            if call.machine.phase is Phase.RUNNING:
                await self._end(call, Trigger.FAIL, type(exc).__name__)
            if call.machine.round:
                # It had already asked the client: say plainly that this call is gone.
                raise CallLost(
                    f"The upstream call was lost ({exc.message}); "
                    "start the request again without requestState"
                ) from exc
            raise
        except GatewayError as exc:
            if call.machine.phase is Phase.RUNNING:
                await self._end(call, Trigger.FAIL, type(exc).__name__)
            raise

    async def _run(self, call: LiveCall, notify: Notify) -> dict[str, Any]:
        machine = call.machine
        window = self.limits.coalesce_ms / 1000
        loop = asyncio.get_running_loop()
        # Answers still missing after a retry: ask again once the window closes.
        closes_at = loop.time() + window if machine.pending else None
        while True:
            try:
                async with asyncio.timeout_at(closes_at):
                    item = await call.inbox.get()
            except TimeoutError:
                return await self._suspend(call)
            if isinstance(item, StreamEnd):
                raise item.error
            for action in machine.receive(item):
                if isinstance(action, Relay):
                    await notify(action.notification)
                elif isinstance(action, Answer):
                    await self._send(call, action)
                elif isinstance(action, Asked):
                    closes_at = loop.time() + window
                elif isinstance(action, Refused):
                    await self._end(call, Trigger.FAIL, "capability not declared")
                    raise MissingClientCapability(action.required)
                elif isinstance(action, Finished):
                    return await self._finish(call, action)

    async def _send(self, call: LiveCall, answer: Answer) -> None:
        await call.session.send(answer.message())

    async def _finish(self, call: LiveCall, finished: Finished) -> dict[str, Any]:
        machine = call.machine
        self._fire(call, Trigger.COMPLETE)
        await asyncio.shield(spawn(self._cleanup(call, reuse=True), name=f"call-done-{call.id}"))
        self.metrics.call_endings.labels(machine.phase.value).inc()
        self.metrics.rounds_per_call.observe(machine.round)
        log.info(
            "call_completed",
            rounds=machine.round,
            outcome="error" if finished.error is not None else "result",
            duration_ms=round((time.monotonic() - call.started) * 1000),
        )
        if finished.error is not None:
            urls = translate.url_elicitations(finished.error)
            if urls is not None:
                return self._url_round(call, urls)
            raise translate.translate_error(finished.error)
        return translate.decorate_result(
            machine.method,
            finished.result or {},
            server_info=server_info(call),
            cache=call.upstream.cache,
            cacheable=machine.round == 0,
        )

    def _url_round(self, call: LiveCall, urls: list[dict[str, Any]]) -> dict[str, Any]:
        """A legacy `-32042` (visit these URLs, then try again) as an `input_required` round.

        The tool did not run; nothing is parked. The retry runs the request again, as the
        legacy client would have, with the answers so far journaled in the sealed state.
        """
        machine = call.machine
        if not machine.ctx.caps.elicitation_url:
            raise MissingClientCapability({"elicitation": {"url": {}}})
        if machine.round >= self.limits.max_rounds:
            raise CapacityExceeded(
                f"the call needed more than {self.limits.max_rounds} rounds",
                status=400,
                reason="max_rounds",
            )
        requests: dict[str, Any] = {}
        for params in urls:
            key = keys.assign_key("elicitation/create", params, machine.rules, requests)
            requests[key] = {"method": "elicitation/create", "params": params}
        issued = now_ms()
        claims = state.Claims(
            call=call.id,
            round=machine.round + 1,
            principal=call.principal,
            digest=call.digest,
            audience=self.audience(call.upstream),
            issued_ms=issued,
            expires_ms=issued + int(self.limits.suspension_ttl_s * 1000),
            mode=REPLAY,
            journal=list(machine.journal),
        )
        log.info("call_needs_url_elicitation", asked=sorted(requests))
        result = input_required_result(call, state.seal_claims(self.codec, claims))
        result["inputRequests"] = requests
        return result

    # -- suspension --------------------------------------------------------------------

    async def _suspend(self, call: LiveCall) -> dict[str, Any]:
        machine = call.machine
        if machine.round >= self.limits.max_rounds:
            await self._end(call, Trigger.FAIL, "too many rounds")
            raise CapacityExceeded(
                f"the call needed more than {self.limits.max_rounds} rounds",
                status=400,
                reason="max_rounds",
            )
        if call.stateless:
            return await self._suspend_stateless(call)
        if self.parked >= self.limits.max_parked_calls:
            await self._end(call, Trigger.FAIL, "gateway parked-call limit")
            raise CapacityExceeded(reason="max_parked_calls")
        if self._parked_by_principal[call.principal] >= self.limits.max_parked_per_principal:
            await self._end(call, Trigger.FAIL, "principal parked-call limit")
            raise CapacityExceeded(
                "too many calls of this caller are waiting for input",
                status=429,
                reason="max_parked_per_principal",
            )
        self._fire(call, Trigger.SUSPEND)
        issued = now_ms()
        deadline = issued + int(self.limits.suspension_ttl_s * 1000)
        try:
            await self.store.park(parked_record(call, self.replica_id, issued, deadline))
        except StoreError:
            await self._end(call, Trigger.FAIL, "store unavailable")
            raise
        token = sealed_state(
            self.codec, call, self.audience(call.upstream), issued, deadline, mode="park"
        )
        call.expiry = spawn(
            self._expire_at(call, machine.round, deadline), name=f"call-expiry-{call.id}"
        )
        log.info("call_suspended", round=machine.round, asked=sorted(machine.pending))
        return input_required_result(call, token)

    async def _suspend_stateless(self, call: LiveCall) -> dict[str, Any]:
        """Replay mode: nothing is parked; the journal goes into the sealed state."""
        machine = call.machine
        issued = now_ms()
        deadline = issued + int(self.limits.suspension_ttl_s * 1000)
        asked = sorted(machine.pending)
        result_pending = machine.input_required()
        self._fire(call, Trigger.SUSPEND)
        token = sealed_state(
            self.codec, call, self.audience(call.upstream), issued, deadline, mode=REPLAY
        )
        # The questions are not answered: cancelling the call stops the server's handler
        # where it waits, before anything after the question runs.
        await self._end(call, Trigger.CANCEL, "replay-mode round", release_questions=False)
        if len(token) > self.limits.max_state_bytes:
            raise CapacityExceeded(
                f"the answers of this call no longer fit in requestState "
                f"({len(token)} > {self.limits.max_state_bytes} bytes)",
                status=400,
                reason="max_state_bytes",
            )
        log.info("call_suspended", round=machine.round, asked=asked, mode=REPLAY)
        result = input_required_result(call, token)
        result["inputRequests"] = result_pending
        return result

    async def _expire_at(self, call: LiveCall, round_: int, deadline_ms: int) -> None:
        await asyncio.sleep(max(0.0, (deadline_ms - now_ms()) / 1000))
        if call.machine.phase is not Phase.SUSPENDED or call.machine.round != round_:
            return
        try:
            if await self.store.claim(call.id, round_) is None:
                # A retry claimed the round first and normally resumes it at once (which
                # cancels this task). If nothing has resumed it after a grace period, the
                # claimer failed on the way (e.g. its client left, or a forward was lost).
                await asyncio.sleep(min(self.limits.hold_timeout_s, CLAIM_GRACE_S))
                if call.machine.phase is not Phase.SUSPENDED or call.machine.round != round_:
                    return
                log.warning("claimed_round_never_resumed", round=round_)
        except StoreError as exc:
            log.warning("store_claim_failed", error=str(exc))  # the deadline passed regardless
        if call.machine.phase is Phase.SUSPENDED:
            await self._end(call, Trigger.EXPIRE, "suspension deadline passed")

    # -- endings -----------------------------------------------------------------------

    async def _end(
        self, call: LiveCall, trigger: Trigger, reason: str, *, release_questions: bool = True
    ) -> None:
        """Give the call up: release the server's questions, cancel the call upstream."""
        machine = call.machine
        if machine.phase in FINAL_PHASES:
            return
        self._fire(call, trigger)
        expiry = call.expiry if call.expiry is not asyncio.current_task() else None
        # The ending runs in a task of its own: a client request cancelled meanwhile must
        # not leave the call half-ended (registered, holding its session and its reader).
        ending = spawn(
            self._wind_up(call, reason, release_questions, expiry), name=f"call-end-{call.id}"
        )
        await asyncio.shield(ending)

    async def _wind_up(
        self,
        call: LiveCall,
        reason: str,
        release_questions: bool,
        expiry: asyncio.Task[None] | None,
    ) -> None:
        machine = call.machine
        try:
            await cancel_and_wait(expiry)
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
            self.metrics.call_endings.labels(machine.phase.value).inc()
        log.info(f"call_{machine.phase.value}", reason=reason, rounds=machine.round)

    async def _cleanup(self, call: LiveCall, *, reuse: bool) -> None:
        """Forget the call and give its session back; nothing before the release awaits.

        `call.ended` is set once everything is done, the store record included.
        """
        self.calls.pop(call.id, None)
        call.pool.release(call.session, reuse=reuse and call.inbox.empty())
        try:
            if not reuse:
                await cancel_and_wait(call.pump)
            # else: the pump reads the end of the finished stream so its connection is reused
            if call.machine.round and not call.stateless:
                try:
                    await self.store.delete(call.id)
                except StoreError as exc:
                    log.warning("store_delete_failed", error=str(exc))
        finally:
            if not self.calls:
                self._idle.set()
            call.ended.set()

    async def drain(self, timeout_s: float) -> None:
        """No new calls; retries of the calls held here are served until they end or time is up."""
        self.draining = True
        log.info("drain_started", calls=len(self.calls), timeout_s=timeout_s)
        try:
            async with asyncio.timeout(timeout_s):
                await self._idle.wait()
            log.info("drain_finished")
        except TimeoutError:
            log.warning("drain_timeout", calls=len(self.calls))
        await self.close()

    async def close(self) -> None:
        """Shut down: every live call is cancelled upstream."""
        for call in list(self.calls.values()):
            await self._end(call, Trigger.CANCEL, "gateway shutting down")


class Handoff(Protocol):
    """What to do with a retry whose call is not held here (see `gateway.handoff`)."""

    async def elsewhere(
        self, upstream: UpstreamConfig, record: SuspendedCall, front: FrontRequest, notify: Notify
    ) -> dict[str, Any]: ...
