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
        # Per bucket, oldest given back first; buckets emptied are dropped (callers come
        # and go: nothing is kept per caller once it holds no idle session).
        self._lists: dict[Bucket, list[PooledSession]] = {}
        self._per_caller: Counter[str] = Counter()

    def __len__(self) -> int:
        return sum(len(idle) for idle in self._lists.values())

    def __iter__(self) -> Iterator[PooledSession]:
        for idle in self._lists.values():
            yield from idle

    def count(self, bucket: Bucket) -> int:
        return len(self._lists.get(bucket, ()))

    def held_by(self, principal: str) -> int:
        """Idle sessions bound to `principal`, of any capability set."""
        return self._per_caller[principal]

    def callers(self) -> Counter[str]:
        """Idle sessions per caller holding any."""
        return Counter(self._per_caller)

    def put(self, session: PooledSession) -> None:
        """Keep a session no call holds (its `last_used` stamped by the caller)."""
        self._lists.setdefault(bucket_of(session), []).append(session)
        if session.principal is not None:
            self._per_caller[session.principal] += 1

    def take(self, bucket: Bucket) -> PooledSession | None:
        """The most recently given back session of `bucket`, no longer idle."""
        idle = self._lists.get(bucket)
        if not idle:
            return None
        return self._removed(bucket, -1)

    def peek(self, bucket: Bucket) -> PooledSession | None:
        """The most recently given back session of `bucket`, left idle."""
        idle = self._lists.get(bucket)
        return idle[-1] if idle else None

    def remove(self, session: PooledSession) -> bool:
        """Whether `session` was idle (it is not any more)."""
        bucket = bucket_of(session)
        idle = self._lists.get(bucket)
        if not idle or session not in idle:
            return False
        self._removed(bucket, idle.index(session))
        return True

    def oldest(self, principal: str | None = None) -> PooledSession | None:
        """The least recently used idle session (of `principal`'s, when named), no longer
        idle; None when there is none."""
        candidates = [
            (idle[0].last_used, bucket)
            for bucket, idle in self._lists.items()
            if principal is None or bucket[0] == principal
        ]
        if not candidates:
            return None
        _, bucket = min(candidates, key=lambda candidate: candidate[0])
        return self._removed(bucket, 0)

    def stale(self, before: float, keep_unbound: int) -> list[PooledSession]:
        """Sessions idle since before `before`, or dead, no longer idle; each unbound
        bucket keeps `keep_unbound` of them (the reserve opened ahead)."""
        gone: list[PooledSession] = []
        for bucket, idle in list(self._lists.items()):
            keep: list[PooledSession] = []
            for session in idle:
                spared = bucket[0] is None and len(keep) < keep_unbound
                if session.alive and (session.last_used >= before or spared):
                    keep.append(session)
                else:
                    gone.append(session)
            self._replace(bucket, keep)
        return gone

    def clear(self) -> list[PooledSession]:
        """Every idle session, none idle after."""
        gone = list(self)
        self._lists.clear()
        self._per_caller.clear()
        return gone

    def _removed(self, bucket: Bucket, index: int) -> PooledSession:
        idle = self._lists[bucket]
        session = idle.pop(index)
        if not idle:
            del self._lists[bucket]
        if bucket[0] is not None:
            self._per_caller[bucket[0]] -= 1
            if not self._per_caller[bucket[0]]:
                del self._per_caller[bucket[0]]
        return session

    def _replace(self, bucket: Bucket, keep: list[PooledSession]) -> None:
        before = len(self._lists[bucket])
        if keep:
            self._lists[bucket] = keep
        else:
            del self._lists[bucket]
        principal = bucket[0]
        if principal is not None and before != len(keep):
            self._per_caller[principal] -= before - len(keep)
            if not self._per_caller[principal]:
                del self._per_caller[principal]
