"""The sessions of one upstream that no call holds, per caller and capability set: the
pool's bookkeeping for them, sans-IO.

A legacy server keeps state per session, so a session serves one caller (principal)
from its first call to its end: idle sessions are kept in *buckets* of one caller and
one declared-capability set, and a call only ever takes one of its own bucket. A
session opened ahead, before any caller (`gateway.upstream.pool`'s reserve), is in the
unbound bucket of its capability set until a caller takes it and it becomes theirs.

Within a bucket the most recently given back is taken first (its connection and the
server's caches are warm); across buckets the least recently used is closed first
when room is needed, and a caller keeps at most a bound of idle sessions, its least
recently used closed beyond it.

`SessionPool` (`gateway.upstream.pool`) opens and closes them; this module only keeps
lists. No I/O, no clock (times are given).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from gateway.upstream.port import PooledSession

#: Whose sessions and for which capability set: (principal, or None for sessions bound
#: to nobody yet, or shared by every caller; `ClientCaps.key`).
Bucket = tuple[str | None, str]


def bucket_of(session: PooledSession) -> Bucket:
    return (session.principal, session.caps.key)


class IdleSessions:
    def __init__(self) -> None:
        # Per bucket, oldest given back first. A bucket emptied stays until `stale` drops
        # it (the periodic look): a caller's calls back to back reuse it, and callers who
        # come and go leave nothing behind past that look.
        self._lists: dict[Bucket, list[PooledSession]] = {}

    def __len__(self) -> int:
        return sum(len(idle) for idle in self._lists.values())

    def __iter__(self) -> Iterator[PooledSession]:
        for idle in self._lists.values():
            yield from idle

    def count(self, bucket: Bucket) -> int:
        idle = self._lists.get(bucket)
        return len(idle) if idle is not None else 0

    def callers(self) -> Counter[str]:
        """Idle sessions per caller holding any."""
        held: Counter[str] = Counter()
        for (principal, _), idle in self._lists.items():
            if principal is not None and idle:
                held[principal] += len(idle)
        return held

    def put(self, session: PooledSession) -> None:
        """Keep a session no call holds (its `last_used` stamped by the caller)."""
        bucket = (session.principal, session.caps.key)
        idle = self._lists.get(bucket)
        if idle is None:
            self._lists[bucket] = [session]
        else:
            idle.append(session)

    def take(self, bucket: Bucket) -> PooledSession | None:
        """The most recently given back session of `bucket`, no longer idle."""
        idle = self._lists.get(bucket)
        return idle.pop() if idle else None

    def peek(self, bucket: Bucket) -> PooledSession | None:
        """The most recently given back session of `bucket`, left idle."""
        idle = self._lists.get(bucket)
        return idle[-1] if idle else None

    def remove(self, session: PooledSession) -> bool:
        """Whether `session` was idle (it is not any more)."""
        idle = self._lists.get(bucket_of(session))
        if not idle or session not in idle:
            return False
        idle.remove(session)
        return True

    def oldest(self, principal: str | None = None) -> PooledSession | None:
        """The least recently used idle session (of `principal`'s, when named), no longer
        idle; None when there is none."""
        candidates = [
            (idle[0].last_used, bucket)
            for bucket, idle in self._lists.items()
            if idle and (principal is None or bucket[0] == principal)
        ]
        if not candidates:
            return None
        _, bucket = min(candidates, key=lambda candidate: candidate[0])
        return self._lists[bucket].pop(0)

    def stale(self, before: float, keep_unbound: int) -> list[PooledSession]:
        """Sessions idle since before `before`, or dead, no longer idle; each unbound
        bucket keeps `keep_unbound` of them (the reserve opened ahead). Empty buckets go."""
        gone: list[PooledSession] = []
        for bucket, idle in list(self._lists.items()):
            keep: list[PooledSession] = []
            for session in idle:
                spared = bucket[0] is None and len(keep) < keep_unbound
                if session.alive and (session.last_used >= before or spared):
                    keep.append(session)
                else:
                    gone.append(session)
            if keep:
                self._lists[bucket] = keep
            else:
                del self._lists[bucket]
        return gone

    def clear(self) -> list[PooledSession]:
        """Every idle session, none idle after."""
        gone = list(self)
        self._lists.clear()
        return gone
