"""The embedded suspended-call store: a dict in this process, for one replica.

Good for a laptop and a single replica; records die with the process. The
claim is atomic because nothing here awaits between the check and the update.
"""

from __future__ import annotations

import secrets
from dataclasses import replace

from gateway.clock import Clock, SystemClock
from gateway.store.base import (
    GRACE_MS,
    PARKED,
    RESUMING,
    Delivery,
    Kept,
    Reply,
    SuspendedCall,
)


class MemoryStore:
    in_process = True  # no operation waits: none is cut short by a cancellation

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or SystemClock()
        self._records: dict[str, SuspendedCall] = {}
        self._outcomes: dict[tuple[str, int], tuple[bytes, int]] = {}
        self._held: dict[str, dict[str, int]] = {}  # principal -> call -> until (wall ms)

    def _live(self, call_id: str) -> SuspendedCall | None:
        record = self._records.get(call_id)
        if record is not None and record.deadline_ms + GRACE_MS <= self.clock.wall_ms():
            del self._records[call_id]
            return None
        return record

    async def park(self, record: SuspendedCall) -> None:
        self._records[record.call_id] = record

    async def get(self, call_id: str) -> SuspendedCall | None:
        record = self._live(call_id)
        if record is not None and record.attempt:  # a claim's token is its claimer's alone
            return replace(record, attempt="")
        return record

    async def claim(self, call_id: str, round_: int, claimer: str = "") -> SuspendedCall | None:
        record = self._live(call_id)
        if record is None or record.status != PARKED or record.round != round_:
            return None
        claimed = record.claimed(claimer, secrets.token_hex(8))
        self._records[call_id] = claimed
        return claimed

    async def claim_delivering(
        self, call_id: str, round_: int, claimer: str, delivery: Delivery
    ) -> tuple[SuspendedCall | None, bool | None]:
        return await self.claim(call_id, round_, claimer), None  # one replica: no inboxes

    async def steal(
        self, call_id: str, round_: int, dead: str, claimer: str
    ) -> SuspendedCall | None:
        record = self._live(call_id)
        if record is None or record.status != RESUMING or record.round != round_:
            return None
        if record.claimer != dead:
            return None
        stolen = record.claimed(claimer, secrets.token_hex(8))
        self._records[call_id] = stolen
        return stolen

    async def delete(self, call_id: str, kept: Kept | None = None) -> None:
        self._records.pop(call_id, None)
        if kept is not None:
            self._keep(call_id, kept.round, kept.outcome, kept.ttl_ms)

    async def forget(
        self, call_id: str, principal: str, kept: Kept | None = None, reply: Reply | None = None
    ) -> bool:
        await self.delete(call_id, kept)
        await self.unhold(principal, call_id)
        return False  # one replica: no fleet's replies here

    async def hold(self, principal: str, call_id: str, until_ms: int, cap: int) -> bool:
        now = self.clock.wall_ms()
        held = {c: t for c, t in self._held.get(principal, {}).items() if t > now}
        if call_id not in held and len(held) >= cap:
            self._held[principal] = held
            return False
        held[call_id] = until_ms
        self._held[principal] = held
        return True

    async def park_held(
        self, record: SuspendedCall, until_ms: int, cap: int, kept: Kept | None = None
    ) -> bool:
        if not await self.hold(record.principal, record.call_id, until_ms, cap):
            return False
        await self.park(record)
        if kept is not None:
            self._keep(record.call_id, kept.round, kept.outcome, kept.ttl_ms)
        return True

    def _keep(self, call_id: str, round_: int, outcome: bytes, ttl_ms: int) -> None:
        now = self.clock.wall_ms()
        if len(self._outcomes) > 10_000:
            self._outcomes = {k: v for k, v in self._outcomes.items() if v[1] > now}
        self._outcomes[call_id, round_] = (outcome, now + ttl_ms)

    async def recall(self, call_id: str, round_: int) -> bytes | None:
        outcome, until = self._outcomes.get((call_id, round_), (b"", 0))
        return outcome if until > self.clock.wall_ms() else None

    def _while_claimed(self, claim: SuspendedCall) -> SuspendedCall | None:
        """The record, while that very claim (round, claimer, attempt) holds its round."""
        record = self._live(claim.call_id)
        if record is None or record.status != RESUMING or record.round != claim.round:
            return None
        if (record.claimer, record.attempt) != (claim.claimer, claim.attempt):
            return None
        return record

    async def unclaim(self, claim: SuspendedCall, *, untake: bool = False) -> bool:
        record = self._while_claimed(claim)
        if record is None:
            return False
        owner = claim.owner if untake else record.owner
        parked = replace(record, status=PARKED, claimer="", attempt="", owner=owner)
        self._records[claim.call_id] = parked
        return True

    async def take(self, record: SuspendedCall, owner: str) -> bool:
        current = self._while_claimed(record)
        if current is None:
            return False
        self._records[record.call_id] = replace(current, owner=owner)
        return True

    async def restore(self, record: SuspendedCall, until_ms: int) -> bool:
        if self._live(record.call_id) is not None:
            return False
        await self.hold(record.principal, record.call_id, until_ms, cap=1 << 30)
        await self.park(record)
        return True

    async def unhold(self, principal: str, call_id: str) -> None:
        held = self._held.get(principal)
        if held is not None:
            held.pop(call_id, None)
            if not held:
                del self._held[principal]

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        self._records.clear()

    def __len__(self) -> int:
        return len(self._records)
