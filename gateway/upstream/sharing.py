"""Sessions that carry several calls at once: the pool's bookkeeping for them, sans-IO.

With `pool.calls_per_session` above 1 (Streamable HTTP only), an interruptible call
joins a session other calls of its caller already use while it has room (a session
serves one caller: calls are counted per bucket, `gateway.upstream.idle`), the most
recently filled first, so calls pack onto few sessions and a parked call costs the server a
call rather than a session. A session that can no longer be used, or whose call
failed, *retires*: its other calls go on, no new one joins, and it closes when the
last leaves. The calls of one session taken over from another replica share one
session object here; such a session, and one whose call another replica took over,
is never ended upstream, since other replicas may still carry calls of its own.

A session being opened already has room: calls that find no session with room
join one that is opening (`Opening`) rather than each opening its own, so a burst
opens about one session per `calls_per_session` calls.

`SessionPool` (`gateway.upstream.pool`) does the opening and closing; this module
only counts. No I/O, no clock.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable

from gateway.upstream.idle import Bucket, bucket_of
from gateway.upstream.port import PooledSession


class Opening:
    """A session being opened that calls count on already: `ready` gives it once it is
    open (counted for them), or None if it failed to open."""

    __slots__ = ("bucket", "calls", "ready")

    def __init__(self, bucket: Bucket, calls: int) -> None:
        self.bucket = bucket
        self.calls = calls  # its opener's own call (1), or none when opened ahead (0)
        self.ready: asyncio.Future[PooledSession | None] = (
            asyncio.get_running_loop().create_future()
        )


class Sharing:
    def __init__(self, per_session: int, usable: Callable[[PooledSession], bool]) -> None:
        self.per_session = per_session
        self._usable = usable
        self._calls: dict[PooledSession, int] = {}  # the calls each session carries
        self._roomy: defaultdict[Bucket, list[PooledSession]] = defaultdict(list)
        self._retiring: set[PooledSession] = set()
        self._adopted: dict[str, PooledSession] = {}  # taken over here, by session id
        self._kept_upstream: set[PooledSession] = set()
        self._opening: defaultdict[Bucket, list[Opening]] = defaultdict(list)

    def __contains__(self, session: PooledSession) -> bool:
        """Whether the session carries calls under this bookkeeping."""
        return session in self._calls

    def calls(self, session: PooledSession) -> int:
        return self._calls.get(session, 0)

    def sessions(self) -> list[PooledSession]:
        return list(self._calls)

    def spare(self, bucket: Bucket) -> int:
        """Calls the sessions of a capability set, open or opening, can still take."""
        room = sum(self.per_session - self._calls[s] for s in self._roomy[bucket])
        return room + sum(self.per_session - o.calls for o in self._opening[bucket])

    # -- sessions being opened -----------------------------------------------------------

    def begin(self, bucket: Bucket, *, calls: int) -> Opening:
        """A session of `bucket` is being opened, with `calls` counting on it already."""
        opening = Opening(bucket, calls)
        self._opening[bucket].append(opening)
        return opening

    def joinable(self, bucket: Bucket) -> Opening | None:
        """A session being opened with room for one more call (now counted), or None."""
        for opening in self._opening[bucket]:
            if opening.calls < self.per_session:
                opening.calls += 1
                return opening
        return None

    def gave_up(self, opening: Opening) -> None:
        """A call stopped waiting for the session before it opened."""
        opening.calls -= 1

    def opened(self, opening: Opening, session: PooledSession) -> bool:
        """The session is open: it carries the calls that counted on it, whom `ready`
        wakes; False when none did (it is the pool's to keep idle, or to close: the pool
        is closing and forgot what was opening)."""
        if opening not in self._opening[opening.bucket]:
            return False
        self._opening[opening.bucket].remove(opening)
        if opening.calls:
            self._calls[session] = opening.calls
            if opening.calls < self.per_session:
                self._roomy[opening.bucket].append(session)
        opening.ready.set_result(session)
        return bool(opening.calls)

    def failed(self, opening: Opening) -> None:
        """The session did not open: those waiting for it get None (they open their own)."""
        if opening in self._opening[opening.bucket]:
            self._opening[opening.bucket].remove(opening)
        if not opening.ready.done():
            opening.ready.set_result(None)

    # -- sessions carrying calls ---------------------------------------------------------

    def join(self, bucket: Bucket) -> PooledSession | None:
        """A session with room for one more call (now counted), or None."""
        roomy = self._roomy[bucket]
        while roomy:
            session = roomy[-1]
            if not self._usable(session):
                roomy.pop()
                self._retiring.add(session)
                continue
            self._calls[session] += 1
            if self._calls[session] >= self.per_session:
                roomy.pop()
            return session
        return None

    def carry(self, session: PooledSession) -> None:
        """A session (idle or new) takes its first call; others may join it."""
        self._calls[session] = 1
        self._roomy[bucket_of(session)].append(session)

    def adopted(self, session_id: str) -> PooledSession | None:
        """The session of this id taken over here, now carrying one more call; or None."""
        session = self._adopted.get(session_id)
        if session is None or not session.alive or session not in self._calls:
            return None
        self._calls[session] += 1
        return session

    def adopt(self, session_id: str, session: PooledSession) -> None:
        """A session taken over here for a call: it takes only the calls taken over."""
        self._calls[session] = 1
        self._adopted[session_id] = session
        self._retiring.add(session)
        self._kept_upstream.add(session)

    def kept_upstream(self, session: PooledSession) -> bool:
        """Whether the session must not be ended upstream (other replicas may use it)."""
        return session in self._kept_upstream

    def handed_over(self, session: PooledSession) -> None:
        """One of the session's calls went to another replica: the session lives on there."""
        self._kept_upstream.add(session)

    def leave(self, session: PooledSession, *, reuse: bool) -> bool:
        """One call fewer on the session (`reuse`: the call ended cleanly); True when it
        was the last one, and the session is no longer counted here."""
        roomy = self._roomy[bucket_of(session)]
        if not (reuse and self._usable(session)):
            self._retiring.add(session)
        left = self._calls[session] - 1
        if left:
            self._calls[session] = left
            if session in self._retiring:
                if session in roomy:
                    roomy.remove(session)
            elif session not in roomy:
                roomy.append(session)
            return False
        del self._calls[session]
        if session in roomy:
            roomy.remove(session)
        return True

    def let_go(self, session: PooledSession) -> tuple[bool, bool]:
        """After its last call left: whether the session may be kept for more calls, and
        whether to end it upstream once it is closed."""
        retired = session in self._retiring
        self._retiring.discard(session)
        if session.id is not None and self._adopted.get(session.id) is session:
            del self._adopted[session.id]
        kept_upstream = session in self._kept_upstream
        self._kept_upstream.discard(session)
        return not retired, not kept_upstream

    def clear(self) -> None:
        self._calls.clear()
        self._roomy.clear()
        self._retiring.clear()
        self._adopted.clear()
        self._kept_upstream.clear()
        for openings in self._opening.values():
            for opening in openings:
                if not opening.ready.done():
                    opening.ready.set_result(None)
        self._opening.clear()
