"""The embedded suspended-call store: a dict in this process, for one replica.

Good for a laptop and a single replica; records die with the process. Every change of a
record is `gateway.protocol.record.step` applied to the dict: the record's transition
table, carried out as it is written. Each is atomic because nothing here awaits between
the check and the update.
"""

from __future__ import annotations

import secrets
from dataclasses import replace

from gateway.clock import Clock, SystemClock
from gateway.protocol import record as life
from gateway.store.base import Delivery, Kept, Reply, SuspendedCall

#: The one `Forget` there is (it has no fields): not made again at every call's end.
_FORGET = life.Forget()


class MemoryStore:
    in_process = True  # no operation waits: none is cut short by a cancellation

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or SystemClock()
        self._records: dict[str, SuspendedCall] = {}
        self._outcomes: dict[tuple[str, int], tuple[bytes, int]] = {}
        self._held: dict[str, dict[str, int]] = {}  # principal -> call -> until (wall ms)

    def _live(self, call_id: str) -> SuspendedCall | None:
        """The call's record, unless it lapsed (the table's `lapse`, as the store's clock
        makes it: then it is gone)."""
        record = self._records.get(call_id)
        if record is not None and life.lapsed(record, self.clock.wall_ms()):
            del self._records[call_id]
            return None
        return record

    def _apply(
        self, call_id: str, event: life.Event, record: SuspendedCall | None = None
    ) -> life.Step:
        """`event` on the call's record (`record`, when it was just looked up), as the
        table says; written if it was done."""
        done = life.step(record if record is not None else self._live(call_id), event)
        if done.done:
            if done.record is None:
                self._records.pop(call_id, None)
            else:
                self._records[call_id] = done.record
        return done

    async def park(self, record: SuspendedCall) -> None:
        self._apply(record.call_id, life.Park(record))

    async def get(self, call_id: str) -> SuspendedCall | None:
        record = self._live(call_id)
        if record is not None and record.attempt:  # a claim's token is its claimer's alone
            return replace(record, attempt="")
        return record

    async def claim(self, call_id: str, round_: int, claimer: str = "") -> SuspendedCall | None:
        record = self._live(call_id)
        if record is None or record.status != life.PARKED:
            return None  # a claim run again is a network's doing: none in this process
        done = self._apply(call_id, life.Claim(round_, claimer, secrets.token_hex(8)), record)
        return done.record if done.done else None

    async def claim_delivering(
        self, call_id: str, round_: int, claimer: str, delivery: Delivery
    ) -> tuple[SuspendedCall | None, bool | None]:
        return await self.claim(call_id, round_, claimer), None  # one replica: no inboxes

    async def steal(
        self, call_id: str, round_: int, dead: str, claimer: str
    ) -> SuspendedCall | None:
        steal = life.Steal(round_, dead, claimer, secrets.token_hex(8))
        done = self._apply(call_id, steal)
        return done.record if done.done else None

    async def delete(self, call_id: str, kept: Kept | None = None) -> None:
        self._apply(call_id, _FORGET)
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
            return False  # the table's `held` guard: nothing parked
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

    async def give_back(self, claim: SuspendedCall, *, untake: bool = False) -> bool:
        return self._apply(claim.call_id, life.GiveBack(claim, untake)).done

    async def take(self, record: SuspendedCall, owner: str) -> bool:
        return self._apply(record.call_id, life.Take(record, owner)).done

    async def restore(self, record: SuspendedCall, until_ms: int) -> bool:
        if not self._apply(record.call_id, life.Restore(record)).done:
            return False
        await self.hold(record.principal, record.call_id, until_ms, cap=1 << 30)
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
