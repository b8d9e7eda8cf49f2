"""The embedded suspended-call store: a dict in this process, for one replica.

Good for a laptop and a single replica; records die with the process. The
claim is atomic because nothing here awaits between the check and the update.
"""

from __future__ import annotations

from gateway.clock import Clock, SystemClock
from gateway.store.base import GRACE_MS, PARKED, SuspendedCall


class MemoryStore:
    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or SystemClock()
        self._records: dict[str, SuspendedCall] = {}

    def _live(self, call_id: str) -> SuspendedCall | None:
        record = self._records.get(call_id)
        if record is not None and record.deadline_ms + GRACE_MS <= self.clock.wall_ms():
            del self._records[call_id]
            return None
        return record

    async def park(self, record: SuspendedCall) -> None:
        self._records[record.call_id] = record

    async def get(self, call_id: str) -> SuspendedCall | None:
        return self._live(call_id)

    async def claim(self, call_id: str, round_: int) -> SuspendedCall | None:
        record = self._live(call_id)
        if record is None or record.status != PARKED or record.round != round_:
            return None
        claimed = record.claimed()
        self._records[call_id] = claimed
        return claimed

    async def delete(self, call_id: str) -> None:
        self._records.pop(call_id, None)

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        self._records.clear()

    def __len__(self) -> int:
        return len(self._records)
