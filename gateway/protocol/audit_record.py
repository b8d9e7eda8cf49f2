"""How an audit event is written, sans-IO: its id (`fact_id` for a fact any replica may
record, `EventIds` for the rest), its time (`IsoTimes`), the JSON object every sink carries
(`record`, schema `gateway.protocol.audit.SCHEMA`) and how a reader takes one back
(`read`). The events themselves are `gateway.protocol.audit`'s.

Pure: no I/O, no clock (the time is handed in).
"""

from __future__ import annotations

import datetime
import hashlib
import secrets
from typing import Any

from gateway.protocol import formats
from gateway.protocol.audit import SCHEMA, AuditEvent
from gateway.protocol.audit_content import NO_CONTENT, ContentPolicy
from gateway.protocol.formats import Kind


def fact_id(fact: str) -> str:
    """The id of the event that records `fact` (`AuditEvent.fact`), whoever writes it:
    32 hex digits. Two replicas that record one fact (the first died before the fleet
    knew it had) write one id, which a consumer keeps once."""
    return hashlib.blake2b(fact.encode(), digest_size=16).hexdigest()


class EventIds:
    """Ids of events that record no fact another replica could record again, unique
    across the fleet and sorted by time: 32 hex digits, the time in milliseconds (12),
    this process's own random tag (10, drawn once: 40 bits), and a count (10), so that two
    processes share no id and one process never repeats one. Drawing random bits per
    event would cost a system call each."""

    __slots__ = ("_tag", "_count")

    def __init__(self, tag: str | None = None) -> None:
        self._tag = tag if tag is not None else secrets.token_hex(5)
        self._count = 0

    def next(self, wall_ms: int) -> str:
        self._count = (self._count + 1) & 0xFF_FFFF_FFFF
        return f"{wall_ms & 0xFFFF_FFFF_FFFF:012x}{self._tag}{self._count:010x}"


class IsoTimes:
    """Wall times in milliseconds as ISO 8601 in UTC, `2026-10-01T12:00:00.123Z`; the
    date and time of the second written once a second (a calendar computed per event
    would cost more than the rest of the event)."""

    __slots__ = ("_second", "_text")

    def __init__(self) -> None:
        self._second = -1
        self._text = ""

    def of(self, wall_ms: int) -> str:
        second, ms = divmod(wall_ms, 1000)
        if second != self._second:
            moment = datetime.datetime.fromtimestamp(second, datetime.UTC)
            self._second, self._text = second, moment.strftime("%Y-%m-%dT%H:%M:%S")
        return f"{self._text}.{ms:03d}Z"


def iso_time(wall_ms: int) -> str:
    """`wall_ms` as ISO 8601 in UTC to the millisecond: `2026-10-01T12:00:00.123Z`."""
    return IsoTimes().of(wall_ms)


#: Where an event carries its version (the formats' mark of `Kind.AUDIT_EVENT`).
_MARK = formats.MARKS[Kind.AUDIT_EVENT][0]


def record(
    event: AuditEvent,
    *,
    event_id: str,
    wall_ms: int,
    replica: str,
    policy: ContentPolicy = NO_CONTENT,
    time: str | None = None,
) -> dict[str, Any]:
    """The event as written: its version, id, kind, time (`time`, else `wall_ms` written
    out), replica and principal first, then its own members (content as `policy` keeps
    it)."""
    principal = event.principal
    out: dict[str, Any] = {
        _MARK: SCHEMA,
        "id": event_id,
        "kind": event.kind.value,
        "time": time if time is not None else iso_time(wall_ms),
        "replica": replica,
        "principal": None if principal is None else principal.to_json(),
    }
    if event.request_id is not None:
        out["request_id"] = event.request_id
    out.update(event.members(policy))
    return out


def read(data: Any) -> dict[str, Any]:
    """An event as a reader takes it (`audit tail`): a JSON object of a version this
    release reads, without its version member.

    Raises:
        ValueError: not an event, or of a version not read here.
    """
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
        raise ValueError("not an audit event")
    _, rest = formats.unstamped(Kind.AUDIT_EVENT, data)
    return rest
