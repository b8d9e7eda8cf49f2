"""Retries sent again: a resumed round's outcome is kept, so the same retry gets it again.

On a fleet a client's retry may reach a replica that claims the round, forwards it to
the call's owner and dies before relaying the answer; the owner resumed the call all
the same. The client sends the retry again, and finds the round resumed: without the
outcome kept here, that call would be lost although it went on. Whoever resumes a
round (the owner, a takeover) keeps its outcome in the very write that ends the round,
the next round's record or the deletion of a completed call (`to_keep`, `Kept`), so no
replica killed in between can leave a round resumed without its outcome. Any replica
answers the retry sent again with it (`answered_before`). The retry passed
`Admission.open` first: same principal, same request, state not expired. Outcomes over
`REMEMBERED_BYTES` are not kept.

A replica alone keeps none (`NoOutcomes`): nobody else claims its rounds, so no reply can
be lost on its way between two replicas (`gateway.calls.replicas`).
"""

from __future__ import annotations

from typing import Any, Protocol

import structlog

from gateway.errors import StoreError
from gateway.observability import Metrics
from gateway.protocol import jsonrpc
from gateway.store.base import Kept, SuspendedCallStore

log = structlog.get_logger("gateway.calls")

#: The largest outcome kept for a retry sent again.
REMEMBERED_BYTES = 64 * 1024


class Outcomes(Protocol):
    """The outcomes of resumed rounds, kept for a retry sent again, or not at all."""

    def kept(self, result: dict[str, Any], round_: int | None) -> Kept | None:
        """What to keep of `result`, the outcome of round `round_` resumed here (None: no
        round was), with the write that ends that round; None to keep nothing."""
        ...

    async def keep_replayed(self, call_id: str, round_: int, result: dict[str, Any]) -> None:
        """Keep the outcome of a round resumed by replaying its call, which ran under a new
        call id: a retry sent again names the old one (whose record is forgotten)."""
        ...

    async def answered_before(self, call_id: str, round_: int) -> dict[str, Any] | None:
        """The outcome of a round resumed already, or None when none is kept."""
        ...


class StoredOutcomes:
    """Outcomes kept in the store for `ttl_s` (as long as a state may live): on a fleet."""

    def __init__(self, *, store: SuspendedCallStore, metrics: Metrics, ttl_s: float) -> None:
        self.store = store
        self.metrics = metrics
        self.ttl_s = ttl_s

    def kept(self, result: dict[str, Any], round_: int | None) -> Kept | None:
        return to_keep(result, round_, self.ttl_s)

    async def keep_replayed(self, call_id: str, round_: int, result: dict[str, Any]) -> None:
        kept = to_keep(result, round_, self.ttl_s)
        if kept is None:
            return
        try:
            await self.store.delete(call_id, kept)
        except StoreError as exc:
            log.warning("outcome_not_kept", error=str(exc))

    async def answered_before(self, call_id: str, round_: int) -> dict[str, Any] | None:
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


class NoOutcomes:
    """No outcome kept, none looked for: on a replica alone."""

    def kept(self, result: dict[str, Any], round_: int | None) -> Kept | None:
        return None

    async def keep_replayed(self, call_id: str, round_: int, result: dict[str, Any]) -> None:
        return None

    async def answered_before(self, call_id: str, round_: int) -> dict[str, Any] | None:
        return None


def to_keep(result: dict[str, Any], round_: int | None, ttl_s: float) -> Kept | None:
    """The outcome of a round resumed here (`round_`), to keep with the write that ends
    it, for as long as its state may live; None when no round was resumed here or the
    outcome is too large to keep."""
    if round_ is None:
        return None
    text = jsonrpc.dumps(result)
    if len(text) > REMEMBERED_BYTES:
        return None
    return Kept(round_, text, int(ttl_s * 1000))
