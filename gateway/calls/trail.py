"""What the audit trail records of a 2026 client's calls, from what the call core knows.

The call core tells it each fact once, where that fact happens: a call begins
(`begin`: `call.started` for a new call; nothing for a call taken over, or run again by
a replay), a round is asked (`asked`, once the round is minted: parked, a replay-mode
round, a URL round), a round's answers reach the call (`answered`: the retry that
claimed it, the takeover that continues it, the replay that runs it again), a call ends
(`ended`, from the lifecycle's one place for endings, but for a replay-mode round's stop
and a call handed over, which go on elsewhere), a call is lost with its owner (`lost`),
a retry's `requestState` is refused (`refused`).

A call's id in the trail (`Traced.id`) is its own, kept by its record across takeovers;
a replay-mode round's state carries it to the next run, and a call replayed after its
owner died runs again under its record's id, so every event of one call shares it.
Who a call is for is the request's (`gateway.audit.trail.acting`), else what the call
remembers from the last request it served here (a deadline, a forwarded retry).

It never raises and never waits: without a trail (`Audit.on` false) it does nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from gateway import logging as log_context
from gateway.audit.trail import OFF, Audit, acting
from gateway.calls.live import LiveCall, Traced
from gateway.clock import Clock
from gateway.errors import CallLost, RpcError
from gateway.protocol import state
from gateway.protocol.audit import (
    AuditOutcome,
    CallEnded,
    CallStarted,
    Era,
    Refusal,
    RequestRefused,
    RoundAnswered,
    RoundAsked,
    answer_of,
    method_of,
    question_of,
)
from gateway.protocol.call import Trigger
from gateway.protocol.record import SuspendedCall

#: How a call ends, by what ended it (a failure may say more: `ended`'s `error`).
_OUTCOMES = {
    Trigger.COMPLETE: AuditOutcome.COMPLETE,
    Trigger.FAIL: AuditOutcome.ERROR,
    Trigger.EXPIRE: AuditOutcome.EXPIRED,
    Trigger.CANCEL: AuditOutcome.CANCELLED,
}
#: The code of a failure whose error is not at hand (the gateway's own, or a deadline's).
INTERNAL_ERROR = -32603
#: Rounds remembered as maybe answered by a dead replica (each is gone once gone on).
MAYBE_ANSWERED_KEPT = 1024


class CallTrail:
    def __init__(self, audit: Audit = OFF, clock: Clock | None = None) -> None:
        self.audit = audit
        self.on = audit.on
        self.clock = clock
        # Rounds whose answers a replica that died may have recorded already (it claimed
        # the round, or read its forward): not recorded again here (at most once).
        self._maybe_answered: OrderedDict[tuple[str, int], None] = OrderedDict()

    def maybe_answered(self, call_id: str, round_: int) -> None:
        """Round `round_` of `call_id` went to a replica that died resuming it: its answers
        may be in the trail already, and are not recorded when this replica goes on."""
        if not self.on:
            return
        self._maybe_answered[(call_id, round_)] = None
        while len(self._maybe_answered) > MAYBE_ANSWERED_KEPT:
            self._maybe_answered.popitem(last=False)

    def begin(
        self, call: LiveCall, arguments: Any = None, *, trail_id: str | None = None, new: bool
    ) -> None:
        """The call runs here now, as `trail_id` in the trail (its own id by default);
        `new`: it is a new call (else taken over, or run again)."""
        if not self.on:
            return
        call.trail = Traced(
            id=trail_id or state.first_id(call.id),
            who=acting(),
            request_id=log_context.bound("request_id"),
        )
        if new:
            self.audit.emit(CallStarted(**self._of(call), arguments=arguments))

    def asked(self, call: LiveCall, requests: Mapping[str, Any], round_: int) -> None:
        """The call asks its client `requests` (`inputRequests`) in round `round_`."""
        if not self.on:
            return
        questions = tuple(
            question_of(key, str(asked.get("method")), asked.get("params"))
            for key, asked in requests.items()
        )
        self.audit.emit(RoundAsked(**self._of(call), round=round_, questions=questions))

    def answered(
        self,
        call: LiveCall,
        round_: int,
        responses: Mapping[str, Any],
        methods: Mapping[str, str] | None = None,
    ) -> None:
        """Round `round_`'s answers reached the call: `responses` by key, the question's
        method for each (`methods`; else told from the answer's shape: a replay's
        state carries no question)."""
        if not self.on or not responses:
            return
        traced = call.trail
        key = (traced.id if traced is not None else state.first_id(call.id), round_)
        if self._maybe_answered and key in self._maybe_answered:
            del self._maybe_answered[key]
            return
        answers = tuple(
            answer_of(key, (methods or {}).get(key) or method_of(answer), answer)
            for key, answer in sorted(responses.items())
            if methods is None or key in methods
        )
        if answers:
            self.audit.emit(RoundAnswered(**self._of(call), round=round_, answers=answers))

    def ended(
        self,
        call: LiveCall,
        trigger: Trigger,
        error: BaseException | None = None,
        result: dict[str, Any] | None = None,
    ) -> None:
        """The call ended here by `trigger` (complete, fail, expire or cancel)."""
        if not self.on or (result is not None and result.get("resultType") == "input_required"):
            return  # (a URL round: the tool refused until visited; its retry runs it again)
        outcome, code = _OUTCOMES[trigger], None
        if isinstance(error, CallLost):
            outcome = AuditOutcome.LOST  # its upstream call is gone for good
        elif trigger is Trigger.FAIL or (trigger is Trigger.COMPLETE and error is not None):
            outcome = AuditOutcome.ERROR
            # As its client is told (an upstream's code, translated, is no class's).
            code = error.error_object()["code"] if isinstance(error, RpcError) else INTERNAL_ERROR
        is_error = None
        if result is not None and call.machine.method == "tools/call":
            is_error = bool(result.get("isError"))
        duration = 0.0 if self.clock is None else self.clock.monotonic() - call.started
        self.audit.emit(
            CallEnded(
                **self._of(call),
                outcome=outcome,
                duration_ms=round(duration * 1000),
                rounds=call.machine.round,
                error_code=code,
                is_error=is_error,
                error_message=_message(error),
                result=result,
            )
        )

    def lost(self, record: SuspendedCall) -> None:
        """A call whose owner is gone, neither taken over nor replayed: its retry was told
        it is lost (the replica that ends it holds none of it but its record)."""
        if not self.on:
            return
        self.audit.emit(
            CallEnded(
                principal=acting(),
                request_id=log_context.bound("request_id"),
                call_id=state.first_id(record.call_id),
                era=Era.MODERN,
                upstream=record.upstream,
                method=record.method,
                target=record.target,
                outcome=AuditOutcome.LOST,
                duration_ms=_since(record, self.clock),
                rounds=record.round,
            )
        )

    def refused(
        self, upstream: str, reason: str, call_id: str | None, method: str, target: str | None
    ) -> None:
        """A retry's `requestState` refused, with the reason its client is not told."""
        if not self.on:
            return
        self.audit.emit(
            RequestRefused(
                principal=acting(),
                request_id=log_context.bound("request_id"),
                refusal=Refusal.REQUEST_STATE,
                reason=reason,
                era=Era.MODERN,
                upstream=upstream,
                method=method,
                target=target,
                call_id=call_id,
                status=400,
            )
        )

    def _of(self, call: LiveCall) -> dict[str, Any]:
        """What every event of `call` carries; who it is for, the request's if one is
        being served (and remembered), else the call's."""
        traced = call.trail
        if traced is None:  # begun before the trail was on: none of its events is written
            traced = call.trail = Traced(id=state.first_id(call.id), who=None, request_id=None)
        now, request_id = acting(), log_context.bound("request_id")
        if now is not None:
            traced.who = now
        if request_id is not None:
            traced.request_id = request_id
        return {
            "principal": traced.who,
            "request_id": traced.request_id,
            "call_id": traced.id,
            "era": Era.MODERN,
            "upstream": call.upstream.name,
            "method": call.machine.method,
            "target": call.target,
        }


def _message(error: BaseException | None) -> str | None:
    if isinstance(error, RpcError):
        return error.message
    return None if error is None else type(error).__name__


def _since(record: SuspendedCall, clock: Clock | None) -> int:
    """From the lost round's parking, where the record says."""
    if clock is None or not record.created_ms:
        return 0
    return max(0, clock.wall_ms() - record.created_ms)
