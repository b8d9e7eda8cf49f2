"""The legacy GET streams open on this replica: counted, capped, ended on drain.

A 2025 client holds its session's standalone stream (GET) for as long as the session
lives; each holds an upstream connection. They are counted per principal and in all
on this replica (`legacy.max_streams_per_principal`, `legacy.max_streams`); past either
a GET is refused (429, 503). When the replica drains or stops, every stream it holds
ends cleanly and none is opened any more (503): the clients reconnect through another
replica, with `Last-Event-ID` where the upstream gave event ids.

Nothing here reads requests or talks to upstreams; it only keeps the count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from gateway.errors import CapacityExceeded, Draining, LimitExceeded
from gateway.quota import Quota

#: The reason a stream's relay is stopped with when the replica drains.
DRAINED = "drained"


class StreamsFull(CapacityExceeded):
    reason = "legacy.max_streams"
    default_message = "Too many GET streams are open on this replica; retry later"


class PrincipalStreaming(LimitExceeded):
    """This caller holds as many GET streams as it may; others are still served."""

    http_status = 429
    reason = "legacy.max_streams_per_principal"
    default_message = "Too many GET streams of this caller are open"


StopStream = Callable[[str], None]


class Streams:
    def __init__(self, max_streams: int, max_per_principal: int) -> None:
        self.quota = Quota(
            max_streams, max_per_principal, full=StreamsFull, busy=PrincipalStreaming
        )
        self.draining = False
        self._open: dict[int, StopStream] = {}
        self._next = 0

    def __len__(self) -> int:
        return len(self._open)

    @contextmanager
    def opened(self, principal: str, stop: StopStream) -> Iterator[None]:
        """Count one stream of `principal` while the block runs; `stop` ends it on drain.

        Raises:
            Draining (503), StreamsFull (503), PrincipalStreaming (429)
        """
        if self.draining:
            raise Draining("This replica is draining; open the stream again")
        with self.quota.held(principal):
            key, self._next = self._next, self._next + 1
            self._open[key] = stop
            try:
                yield
            finally:
                del self._open[key]

    def end_all(self) -> None:
        """The replica drains or stops: every stream ends, and none opens any more."""
        self.draining = True
        for stop in list(self._open.values()):
            stop(DRAINED)
