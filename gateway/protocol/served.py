"""The reply lists a replica has served to their end, remembered for as long as a reply
list lives on the fleet bus: a message taken up again (its removal from the bus's taken
list failed, or a stop came before its exchange) is not served twice. Sans-IO: the caller
gives the time (monotonic seconds)."""

from __future__ import annotations


class ServedReplies:
    def __init__(self, ttl_s: float) -> None:
        """`ttl_s`: how long a reply list lives (`RedisBus.reply_ttl_ms`)."""
        self.ttl_s = ttl_s
        self._at: dict[str, float] = {}  # by when each was added: oldest first

    def __contains__(self, reply: object) -> bool:
        return reply in self._at

    def add(self, reply: str, now: float) -> None:
        """`reply` served (or not to be served) as of `now`; those older than a reply
        list's life are forgotten."""
        at, horizon = self._at, now - self.ttl_s
        while at and next(iter(at.values())) < horizon:
            del at[next(iter(at))]
        at[reply] = now
