"""Retries sent again: a resumed round's outcome is kept, so the same retry gets it again.

On a fleet a client's retry may reach a replica that claims the round, forwards it to
the call's owner and dies before relaying the answer; the owner resumed the call all
the same. The client sends the retry again, and finds the round resumed: without the
outcome kept here, that call would be lost although it went on. The owner keeps it
(`remember`) before it replies; any replica answers the retry sent again with it
(`answered_before`). The retry passed `Admission.open` first: same principal, same
request, state not expired. Outcomes over `REMEMBERED_BYTES` are not kept.
"""

from __future__ import annotations

from typing import Any

import structlog

from gateway.config import LimitsConfig
from gateway.errors import StoreError
from gateway.observability import Metrics
from gateway.protocol import jsonrpc
from gateway.store.base import SuspendedCallStore

log = structlog.get_logger("gateway.calls")

#: The largest outcome kept for a retry sent again.
REMEMBERED_BYTES = 64 * 1024


class Outcomes:
    def __init__(
        self, *, store: SuspendedCallStore, limits: LimitsConfig, metrics: Metrics
    ) -> None:
        self.store = store
        self.limits = limits
        self.metrics = metrics

    async def remember(self, call_id: str, round_: int, result: dict[str, Any]) -> None:
        """Keep the outcome of a round this replica resumed (the owner, a takeover or a
        replay: whoever resumes it, once)."""
        text = jsonrpc.dumps(result)
        if len(text) > REMEMBERED_BYTES:
            return
        ttl_ms = int(self.limits.suspension_ttl_s * 1000)  # as long as its state may live
        try:
            await self.store.remember(call_id, round_, text, ttl_ms)
        except StoreError as exc:
            log.warning("outcome_not_remembered", error=str(exc))

    async def answered_before(self, call_id: str, round_: int) -> dict[str, Any] | None:
        """The outcome of a round resumed already, or None when none is kept."""
        try:
            remembered = await self.store.recall(call_id, round_)
        except StoreError:
            return None
        if remembered is None:
            return None
        log.info("retry_answered_again", round=round_)
        self.metrics.handoffs.labels("answered_again").inc()
        result: dict[str, Any] = jsonrpc.loads(remembered)
        return result
