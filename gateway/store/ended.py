"""Where the ends of 2025 sessions on endpoints of several upstreams are marked.

Such a session is its sealed id alone (`gateway.protocol.endpoint_session`), and some of
its requests (`ping`, the merged lists) reach no server's session: once the client has
ended it (DELETE), its id must still get 404 everywhere, on every replica. Its end is
marked here, under a keyed digest of its id (never the id), until the id would have
expired anyway. In this process (one replica) or in Redis, shared by the fleet.

A mark is a small JSON object versioned as the formats registry says
(`Kind.ENDED_SESSION`); one this release does not read counts as an end (fail closed: a
session is never revived by a mark it cannot read).
"""

from __future__ import annotations

import json
from functools import partial
from typing import Protocol

from gateway.clock import Clock, SystemClock
from gateway.protocol import formats
from gateway.protocol.formats import Kind
from gateway.store.versioned import VersionedOnRedis


class EndedSessions(Protocol):
    async def end(self, session: str, until_ms: int) -> None:
        """Mark the session of digest `session` ended, until wall time `until_ms`.
        Raises: StoreError."""
        ...

    async def ended(self, session: str) -> bool:
        """Whether the session of digest `session` has been ended. Raises: StoreError."""
        ...


def _mark(at_ms: int, version: int) -> str:
    data = {"at": at_ms}
    return json.dumps(formats.stamped(Kind.ENDED_SESSION, data, version), separators=(",", ":"))


class MemoryEndedSessions:
    """One replica's marks (a replica alone: its sessions' ids open under its keys only)."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or SystemClock()
        self._ended: dict[str, int] = {}  # digest: until (wall ms)

    async def end(self, session: str, until_ms: int) -> None:
        now = self.clock.wall_ms()
        for gone in [s for s, until in self._ended.items() if until <= now]:
            del self._ended[gone]
        self._ended[session] = until_ms

    async def ended(self, session: str) -> bool:
        until = self._ended.get(session)
        return until is not None and until > self.clock.wall_ms()


class RedisEndedSessions(VersionedOnRedis):
    """`<prefix>endpoint-session:ended:<digest>`, expiring with the session's id."""

    kind = Kind.ENDED_SESSION

    def _key(self, session: str) -> str:
        return f"{self.prefix}endpoint-session:ended:{session}"

    async def end(self, session: str, until_ms: int) -> None:
        now = self.clock.wall_ms()
        mark = _mark(now, self.version())
        ttl_ms = max(1, until_ms - now)
        await self._run(partial(self.client.set, self._key(session), mark, px=ttl_ms))

    async def ended(self, session: str) -> bool:
        return bool(await self._run(partial(self.client.exists, self._key(session))))
