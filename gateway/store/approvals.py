"""Where approvals are marked: used (an approval's answer is taken once, fleet-wide), and
remembered (`approval_ttl_s`: a caller's approval of a tool covers its next calls for a
while). In this process (one replica) or in Redis, shared by the fleet.

Each mark is a small JSON object versioned as the formats registry says
(`Kind.APPROVAL`) and expires by itself: a used approval's mark when its state would have
expired anyway, a remembered one after the ttl.
"""

from __future__ import annotations

import json
import secrets
from functools import partial
from typing import Protocol

from gateway.clock import Clock, SystemClock
from gateway.protocol import formats
from gateway.protocol.formats import Kind
from gateway.store.redis_client import text
from gateway.store.versioned import VersionedOnRedis


class ApprovalStore(Protocol):
    async def use(self, approval: str, until_ms: int) -> bool:
        """Mark approval `approval` used (its mark kept until wall time `until_ms`): True
        the first time, False for any use after. Raises: StoreError."""
        ...

    async def remember(self, key: str, ttl_s: float) -> None:
        """Remember an approval under `key` for `ttl_s`. Raises: StoreError."""
        ...

    async def remembered(self, key: str) -> bool:
        """Whether an approval is remembered under `key`. Raises: StoreError."""
        ...


def _mark(what: str, at_ms: int, version: int) -> str:
    data = {"what": what, "at": at_ms, "by": secrets.token_hex(8)}
    return json.dumps(formats.stamped(Kind.APPROVAL, data, version), separators=(",", ":"))


def _readable(raw: str) -> bool:
    """Whether a mark is one this release reads (one it does not is no approval)."""
    try:
        loaded = json.loads(raw)
        formats.unstamped(Kind.APPROVAL, loaded)
    except (ValueError, TypeError, AttributeError):
        return False
    return True


class MemoryApprovals:
    """One replica's marks, lost when it stops (an approval used before a restart has
    expired with the restart's keys or not: its state still opens only once here)."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or SystemClock()
        self._used: dict[str, int] = {}  # approval id: until (wall ms)
        self._remembered: dict[str, float] = {}  # key: until (monotonic s)

    async def use(self, approval: str, until_ms: int) -> bool:
        now = self.clock.wall_ms()
        for gone in [a for a, until in self._used.items() if until <= now]:
            del self._used[gone]
        if approval in self._used:
            return False
        self._used[approval] = until_ms
        return True

    async def remember(self, key: str, ttl_s: float) -> None:
        self._remembered[key] = self.clock.monotonic() + ttl_s

    async def remembered(self, key: str) -> bool:
        until = self._remembered.get(key)
        if until is None:
            return False
        if until <= self.clock.monotonic():
            del self._remembered[key]
            return False
        return True


class RedisApprovals(VersionedOnRedis):
    """`<prefix>approval:used:<id>` and `<prefix>approval:ok:<key>`, each expiring."""

    kind = Kind.APPROVAL

    async def use(self, approval: str, until_ms: int) -> bool:
        key = f"{self.prefix}approval:used:{approval}"
        ttl_ms = max(1, until_ms - self.clock.wall_ms())
        mark = _mark("used", self.clock.wall_ms(), self.version())
        # SET NX may be sent twice (a reply lost, `ride_out`): the mark is this use's own,
        # so finding it after a refusal means the first send took it.
        taken = await self._run(partial(self.client.set, key, mark, nx=True, px=ttl_ms))
        if taken:
            return True
        found = await self._run(partial(self.client.get, key))
        return found is not None and text(found) == mark

    async def remember(self, key: str, ttl_s: float) -> None:
        mark = _mark("remembered", self.clock.wall_ms(), self.version())
        ttl_ms = max(1, round(ttl_s * 1000))
        where = f"{self.prefix}approval:ok:{key}"
        await self._run(partial(self.client.set, where, mark, px=ttl_ms))

    async def remembered(self, key: str) -> bool:
        found = await self._run(partial(self.client.get, f"{self.prefix}approval:ok:{key}"))
        return found is not None and _readable(text(found))
