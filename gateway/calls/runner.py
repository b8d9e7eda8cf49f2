"""Running a call on an upstream session: start, resume, and the read loop.

A call takes a session of its own from the pool, sends the legacy request, and
reads what the server says in the order it says it. The sans-IO `CallMachine`
decides what each message means; this module does the I/O it asks for: relay a
notification to the client, answer the server, gather a question's siblings
(`Pace` says whether to wait `limits.coalesce_ms` for them or only for what is
already buffered), hand the call to `Suspender` when the round closes, finish it
when the server answers. Every round is bounded by
`limits.hold_timeout_s` (a task's, which no client holds, by the task's TTL); a client
that goes away cancels its call upstream.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

import structlog

from gateway import clock as clocks
from gateway import logging as log_context
from gateway.calls.lifecycle import Lifecycle
from gateway.calls.live import LiveCall
from gateway.calls.pace import Pace, Target
from gateway.calls.suspension import Suspender, server_info
from gateway.clock import Clock
from gateway.config import REPLAY, LimitsConfig, UpstreamConfig
from gateway.errors import (
    CallLost,
    GatewayError,
    MissingClientCapability,
    UpstreamError,
    UpstreamTimeout,
)
from gateway.observability import Metrics
from gateway.protocol import jsonrpc, state, translate
from gateway.protocol.call import (
    AnswerUpstream,
    Asked,
    CallMachine,
    Finished,
    ListChanged,
    Refused,
    RelayToClient,
    RoundContext,
    Trigger,
)
from gateway.protocol.inbound import FrontRequest
from gateway.tracing import TRACING
from gateway.upstream.port import Inbox, StreamEnd, UpstreamPool

log = structlog.get_logger("gateway.calls")

Notifier = Callable[[dict[str, Any]], Awaitable[None]]


class Runner:
    def __init__(
        self,
        *,
        lifecycle: Lifecycle,
        pools: Mapping[str, UpstreamPool],
        suspender: Suspender,
        clock: Clock,
        limits: LimitsConfig,
        metrics: Metrics,
        on_change: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        self.lifecycle = lifecycle
        # Told of a list change a call's session carried, with the call's upstream's name
        # (`gateway.listens.Listens.publish`).
        self.on_change = on_change
        self.pools = pools
        self.suspender = suspender
        self.clock = clock
        self.limits = limits
        self.metrics = metrics
        self.pace = Pace(limits.coalesce_ms / 1000)

    async def start(
        self,
        upstream: UpstreamConfig,
        front: FrontRequest,
        principal: str,
        digest: state.RequestDigest,
        notify: Notifier,
        *,
        known: dict[str, list[Any]],
        round_: int = 0,
        call_id: str | None = None,
        trail_id: str | None = None,
    ) -> dict[str, Any]:
        """Run the legacy call from the beginning, answering `known` questions itself.

        A call run again (`round_` past 0) is not a new call: a replay-mode round's retry
        (`trail_id`, its id in the audit trail) or a replay of a call whose owner died
        (`call_id`, its own); its retry's answers are the round's."""
        pool = self.pools[upstream.name]
        session = await pool.acquire(front.envelope.capabilities, principal)
        again = call_id is not None or trail_id is not None
        call_id = call_id or state.new_call_id()
        settings = upstream.target(front.method, front.target)
        machine = CallMachine(
            call_id=call_id,
            method=front.method,
            upstream_id=session.next_id(),
            progress_token=f"mrtr-{call_id}",
            rules=settings.inputs + upstream.inputs,  # `upstream.rules_for`, looked up once
            presupplied=known,
            round=round_,
        )
        message = jsonrpc.request(
            machine.upstream_id,
            front.method,
            translate.upstream_params(front, machine.progress_token),
        )
        call = self.lifecycle.begin(
            upstream, pool, session, machine, principal, digest, front.target
        )
        call.stateless = settings.mode == REPLAY
        trail = self.lifecycle.trail
        trail.begin(call, front.params.get("arguments"), trail_id=trail_id, new=not again)
        if again:
            trail.answered(call, round_, front.params.get("inputResponses") or {})
        log_context.bind(call_id=call_id)
        log.debug(
            "call_started",
            upstream=upstream.name,
            method=front.method,
            target=front.target,
            replayed_answers=sum(map(len, known.values())),
        )
        if session.held.items and (held := session.held.take()):
            # The server asked the session's caller something while no call of theirs ran
            # (roots at session start): asked first, the call's request sent once they are
            # answered, so that the server serves it knowing the answers.
            log.debug("held_questions_asked", methods=[q.get("method") for q in held])
            for question in held:
                call.inbox.put_nowait(question)
            call.deferred = message
            return await self.drive(call, front, notify)
        return await self.drive(call, front, notify, request=message)

    async def resume(
        self, call: LiveCall, front: FrontRequest, notify: Notifier, round_: int
    ) -> dict[str, Any]:
        """Continue a call parked here, whose round `round_` this retry has claimed.

        Raises:
            CallLost: it ended (e.g. expired) while the retry was claiming it.
            RoundInProgress: the round is being resumed here already (an earlier sending
                of the retry, whose claimer died, reached this replica first).
            RpcError: as `drive`.
        """
        started = self.clock.monotonic()
        try:
            await self.lifecycle.resume(call, round_)
            if _question_waits(call.inbox):
                self.pace.sibling_late(_target(call))
            responses = front.params.get("inputResponses") or {}
            answered = sorted(set(responses) & set(call.machine.pending))
            trail = self.lifecycle.trail
            if trail.on:  # the answers picked out only for a trail that records them
                trail.answered(
                    call,
                    round_,
                    {key: responses[key] for key in answered},
                    {key: call.machine.pending[key].method for key in answered},
                )
            log_context.bind(answered=answered)
            log.debug("call_resumed", round=call.machine.round, answered=answered)
            try:
                answers = call.machine.deliver(responses)
            except Exception:
                # A defect, not the client's: the call must not stay resumed for nobody
                # (no deadline, its round claimed), so it ends here, upstream too.
                await self.lifecycle.fail(call, "answers not deliverable")
                raise
            for key, problem in call.machine.refusals().items():
                log.info("form_answer_refused", key=key, problem=problem)
            return await self.drive(call, front, notify, answers)
        finally:
            self.metrics.resume_seconds.labels(call.upstream.name).observe(
                self.clock.monotonic() - started
            )

    def drive(
        self,
        call: LiveCall,
        front: FrontRequest,
        notify: Notifier,
        answers: list[AnswerUpstream] | None = None,
        *,
        request: dict[str, Any] | None = None,
    ) -> Awaitable[dict[str, Any]]:
        """Deliver this round's answers (or send the call's `request`, in its first round)
        and read until the call finishes or asks again: the round's coroutine, to await.
        (The round's own, not one of ours around it: a frame fewer to resume at every
        wake of the round.)

        Raises:
            RpcError: every failure, with its wire mapping; the call has ended unless
            it is parked.
        """
        if TRACING.enabled:
            return self._traced_round(call, front, notify, answers or [], request)
        # No span, nor a do-nothing context entered and left every round.
        return self._round(call, front, notify, answers or [], request)

    async def _traced_round(
        self,
        call: LiveCall,
        front: FrontRequest,
        notify: Notifier,
        answers: list[AnswerUpstream],
        request: dict[str, Any] | None,
    ) -> dict[str, Any]:
        with _round_span(call):
            return await self._round(call, front, notify, answers, request)

    async def _round(
        self,
        call: LiveCall,
        front: FrontRequest,
        notify: Notifier,
        answers: list[AnswerUpstream],
        request: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        started = self.clock.monotonic()
        outcome = "error"
        call.machine.serve(round_context(front))
        hold_s = self.limits.hold_timeout_s
        if front.envelope.tasks:  # a task's call (no client holds it): its TTL bounds it
            policy = call.upstream.target(call.machine.method, call.target).task
            hold_s = policy.ttl_s if policy.enabled else hold_s
        try:
            async with clocks.timeout(self.clock, hold_s):
                if request is not None:  # within the round's bounds: the head may be slow
                    call.pump = await call.session.start(
                        request, call.inbox, call.cursor, front.trace
                    )
                for answer in answers:
                    await call.session.send(answer.message())
                result = await self._read(call, notify, front)
            outcome = str(result.get("resultType", "complete"))
            return result
        except asyncio.CancelledError:
            # The client went away mid-round: cancellation on the 2026 wire. A call caught
            # suspending (its state never reached the client) can never be resumed either.
            self.lifecycle.end_soon(call, Trigger.CANCEL, "client disconnected")
            raise
        except TimeoutError:
            self.metrics.upstream_errors.labels(call.upstream.name, UpstreamTimeout.kind).inc()
            timeout = UpstreamTimeout(f"the upstream did not answer within {hold_s:g} s")
            await self.lifecycle.fail(call, "hold timeout", timeout)
            raise timeout from None
        except UpstreamError as exc:
            self.metrics.upstream_errors.labels(call.upstream.name, exc.kind).inc()
            if not call.machine.round:
                await self.lifecycle.fail(call, type(exc).__name__, exc)
                raise
            # It had already asked the client: say plainly that this call is gone.
            lost = CallLost(
                f"The upstream call was lost ({exc.message}); "
                "start the request again without requestState"
            )
            await self.lifecycle.fail(call, type(exc).__name__, lost)
            raise lost from exc
        except GatewayError as exc:
            await self.lifecycle.fail(call, type(exc).__name__, exc)
            raise
        except Exception:
            # A defect of the gateway's own (the middleware answers 500): the call must not
            # stay held for nobody, its session taken and its server's handler waiting.
            await self.lifecycle.fail(call, "gateway error")
            raise
        finally:
            self.metrics.round_seconds.labels(call.upstream.name, outcome).observe(
                self.clock.monotonic() - started
            )

    async def _read(self, call: LiveCall, notify: Notifier, front: FrontRequest) -> dict[str, Any]:
        machine = call.machine
        target = _target(call)
        grace = self.pace.grace_s(target)
        asked = 0
        # Answers still missing after a retry: ask again once the window closes.
        closes_at = self.clock.monotonic() + self.pace.window_s if machine.pending else None
        while True:
            if call.deferred is not None and not machine.pending:
                if not _question_waits(call.inbox):
                    await self._send_deferred(call, front)
            if asked and not grace and await _settled(call.inbox):
                self.pace.round_closed(target, asked)
                return await self.suspender.suspend(call)
            try:
                if closes_at is None:  # nothing to wait for but the call: no timer to arm
                    item = await call.inbox.get()
                else:
                    async with clocks.deadline(self.clock, closes_at):
                        item = await call.inbox.get()
            except TimeoutError:
                if asked:
                    self.pace.round_closed(target, asked)
                return await self.suspender.suspend(call)
            if isinstance(item, StreamEnd):
                raise item.error
            for action in machine.receive(item):
                if isinstance(action, RelayToClient):
                    await notify(action.notification)
                elif isinstance(action, AnswerUpstream):
                    await call.session.send(action.message())
                elif isinstance(action, Asked):
                    asked += 1
                    closes_at = self.clock.monotonic() + grace
                elif isinstance(action, Refused):
                    refused = MissingClientCapability(action.required)
                    await self.lifecycle.end(call, Trigger.FAIL, "capability not declared", refused)
                    raise refused
                elif isinstance(action, Finished):
                    return await self._finish(call, action)
                elif isinstance(action, ListChanged) and self.on_change is not None:
                    self.on_change(call.upstream.name, action.notification)

    async def _send_deferred(self, call: LiveCall, front: FrontRequest) -> None:
        """The questions held for the call's caller are answered (or withdrawn): the
        call's own request goes upstream now."""
        request, call.deferred = call.deferred, None
        assert request is not None
        call.pump = await call.session.start(request, call.inbox, call.cursor, front.trace)

    async def _finish(self, call: LiveCall, finished: Finished) -> dict[str, Any]:
        machine = call.machine
        log_context.bind(rounds=machine.round)
        log.debug(
            "call_completed",
            rounds=machine.round,
            outcome="error" if finished.error is not None else "result",
            duration_ms=round((self.clock.monotonic() - call.started) * 1000),
        )
        try:
            result = self._answer(call, finished)
        except GatewayError as exc:
            await self.lifecycle.complete(call, error=exc)
            raise
        await self.lifecycle.complete(call, result)  # on a fleet, kept as the round's outcome
        return result

    def _answer(self, call: LiveCall, finished: Finished) -> dict[str, Any]:
        """The client's answer to the call the upstream finished.

        Raises:
            RpcError: the upstream's error, translated.
        """
        machine = call.machine
        if finished.error is not None:
            urls = translate.url_elicitations(finished.error)
            if urls is not None:
                return self.suspender.url_round(call, urls)
            raise translate.translate_error(finished.error)
        return translate.decorate_result(
            machine.method,
            finished.result or {},
            server_info=server_info(call),
            cache=call.upstream.cache,
            cacheable=machine.round == 0,
        )


def _round_span(call: LiveCall) -> AbstractContextManager[object]:
    """The span of one round of `call` (tracing on)."""
    return TRACING.span(
        "mcp round", attributes={"mcp.call": call.id, "mcp.round": call.machine.round}
    )


def round_context(front: FrontRequest) -> RoundContext:
    envelope = front.envelope
    return RoundContext(
        caps=envelope.capabilities,
        progress_token=envelope.progress_token,
        log_level=envelope.log_level,
    )


#: Event-loop turns a closing round yields, so that what the upstream has already
#: delivered to this process (a socket read, a parsed event) reaches the inbox.
SETTLE_TURNS = 3


async def _settled(inbox: Inbox) -> bool:
    """Whether nothing more is buffered for the call: the inbox stays empty while the
    loop runs its ready callbacks a few times (a turn, not a timed wait)."""
    for _ in range(SETTLE_TURNS):
        if not inbox.empty():
            return False
        await asyncio.sleep(0)
    return inbox.empty()


def _question_waits(inbox: Inbox) -> bool:
    """Whether a server request waits in the inbox (it came while the call was parked, or
    was held for the call before it started)."""
    return any(isinstance(i, dict) and "method" in i and "id" in i for i in inbox.waiting())


def _target(call: LiveCall) -> Target:
    return (call.upstream.name, call.machine.method, call.target)
