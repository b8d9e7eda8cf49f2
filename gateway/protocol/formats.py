"""The formats of what replicas share, sans-IO: which version of each kind of datum a
replica reads, which it writes, and how the fleet's oldest release decides it.

During a rolling upgrade (or a rollback) replicas of two releases share one Redis and
answer each other's retries. Each release has a format level (`LEVEL`); at each level,
every kind of shared datum (`Kind`) is written in one version (`VERSIONS`). A replica
reads what its own level and the level before it write, and writes what every live
replica reads: the oldest level among the heartbeats (`FleetLevel`). The previous
release (level 1, 0.1.0) wrote no version into most of its data: its version is 1.

The level written rises only after the fleet has been all of this release for a while
(`FleetLevel.settle_s`): a rollback within that time finds nothing the previous release
cannot read. It falls at once when a replica of the previous release beats again. An
operator may pin it (`fleet.format_level`) to keep a rollback possible for longer.

Adding a kind (a task record, say): a `Kind`, its line in `VERSIONS`, and for a JSON
object its mark in `MARKS`; its writer writes `stamped(kind, data, level.version(kind))`
and its reader reads `unstamped(kind, data)`. A kind that replicas of the previous level
would read but do not know is `None` at that level: `written` refuses it while one of them
lives (`FleetLevel.known`), and its caller holds the feature back until then. A kind they
never read (they know none of its keys) gets its version at every level.

The heartbeat is versioned apart (`beat_value`, `read_beat`): written the same whatever the
fleet's level, since the previous release reads this one's. Not versioned, being no form
of the gateway's own: a resumed round's kept outcome (an MCP result, as its client gets
it), a principal's parked calls (call ids), the list-change counts (integers), the
store's epoch, the roll call (replica ids), locks and marks.

No I/O here: the bus feeds the heartbeats in, the codecs ask.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

#: This release's format level (0.2.0).
LEVEL = 2
#: The level of the previous release (0.1.0): the oldest this release reads, and writes
#: while a replica of it lives.
PREVIOUS = 1


class Kind(StrEnum):
    RECORD = "record"  # a parked call's record (`gateway.protocol.record`)
    MESSAGE = "message"  # a message about a call or a task (`gateway.fleet.messages`)
    LANE_MESSAGE = "lane message"  # one about a replica-bound legacy session (same module)
    SESSION_ENTRY = "session entry"  # a ledger entry (`gateway.fleet.ledger`)
    REQUEST_STATE = "requestState"  # a sealed requestState's claims (`gateway.protocol.state`)
    LEGACY_SESSION = "legacy session"  # a sealed legacy session id (`legacy_session`)
    TASK = "task"  # a task's sealed record (`gateway.tasks`, `gateway.protocol.tasks`)
    PIN = "pin"  # a tool's pin (`gateway.store.pins`)
    AUDIT_EVENT = "audit event"  # an event of the audit trail (`gateway.protocol.audit`)
    LEGACY_QUESTION = "legacy question id"  # a tagged question id (`legacy_questions`)
    APPROVAL_STATE = "approval state"  # an approval round's sealed claims (`protocol.approval`)
    APPROVAL = "approval"  # an approval used, or remembered (`gateway.store.approvals`)
    GATEWAY_QUESTION = "gateway question"  # the gateway's own question to a 2025 client
    ENDPOINT_SESSION = "endpoint session"  # a 2025 session id on an endpoint (`endpoint_session`)
    ENDPOINT_REQUEST_ID = "endpoint request id"  # a server's request id marked with its upstream
    ENDED_SESSION = "ended session"  # the end of an endpoint's 2025 session (`store.ended`)


#: The version of each kind written at each level; None: that level does not know the kind.
#: Level 2 changes no field's meaning: it marks with its version every datum that had none,
#: so that the next release can change one and be told apart. A legacy session id carried
#: its version from the start (`"v": 1`); level 2 adds a claim to it (version 2).
VERSIONS: dict[Kind, dict[int, int | None]] = {
    Kind.RECORD: {1: 1, 2: 2},
    Kind.MESSAGE: {1: 1, 2: 2},
    Kind.SESSION_ENTRY: {1: 1, 2: 2},
    Kind.REQUEST_STATE: {1: 1, 2: 2},
    # Version 2 adds what the client declared at `initialize` (`"k"`), for the gateway's
    # own questions to it (`Kind.GATEWAY_QUESTION`). Level 1 refuses a claim it does not
    # know (404: the client starts over), so version 1 is written while a replica of it
    # lives; a version 1 id opens here as a client that declared nothing.
    Kind.LEGACY_SESSION: {1: 1, 2: 2},
    # Tasks came with level 2. A replica of level 1 answers `tasks/*` with -32601: while one
    # lives, no call becomes a task (`gateway.tasks` holds the feature back).
    Kind.TASK: {1: None, 2: 1},
    # The legacy lane's forwarding came with level 2, and is sent to no replica of level 1:
    # it goes only to a replica-bound session's owner, and level 1 never held one (it
    # served no stdio or HTTP+SSE session to 2025 clients, and refused, 404, a session id
    # naming another replica). A kind they never read: its version at every level.
    Kind.LANE_MESSAGE: {1: 1, 2: 1},
    # Pins came with level 2; level 1 never reads them (it has no catalog): a kind they never
    # read, its version at every level.
    Kind.PIN: {1: 1, 2: 1},
    # The audit trail came with level 2. No replica reads an audit event (its readers are
    # `mrtr-gateway audit tail` and the operator's SIEM), and level 1 never wrote one: a
    # kind they never read, its version at every level. Its version is its schema's
    # (`gateway.protocol.audit.SCHEMA`): raise it when a field changes meaning.
    Kind.AUDIT_EVENT: {1: 1, 2: 1},
    # A question a 2025 client is asked within a call, its id tagged with the call (for
    # the audit trail), came with level 2: its answer may reach any replica, and one of
    # level 1 would pass the tagged id on to the server, which would not know it. Held
    # back while a replica of level 1 lives (the lane then relays ids as they came).
    Kind.LEGACY_QUESTION: {1: None, 2: 1},
    # Approvals came with level 2, and level 1 reads none of them: an approval round's
    # state has a prefix of its own, which level 1 refuses as any foreign requestState (the
    # client is told its state is invalid, and nothing runs), and the marks of approvals
    # used or remembered are keys it never reads. Kinds they never read: their version at
    # every level.
    Kind.APPROVAL_STATE: {1: 1, 2: 1},
    Kind.APPROVAL: {1: 1, 2: 1},
    # The gateway's own question to a 2025 client (`gateway.protocol.legacy_asking`: its
    # id names the replica waiting for it) and the client's answer passed to that replica
    # (`gateway.fleet.messages.ClientAnswer`) came with level 2: a replica of level 1 would
    # pass the answer on to the server. Nothing is asked while one lives.
    Kind.GATEWAY_QUESTION: {1: None, 2: 1},
    # A 2025 client's session on an endpoint of several upstreams, and the ids of its
    # servers' requests marked with their upstream (`gateway.protocol.endpoint_session`),
    # came with level 2, as did the marks of such sessions ended (`gateway.store.ended`).
    # Level 1 never served an endpoint (its configuration has none), so it never meets
    # them: kinds they never read, their version at every level.
    Kind.ENDPOINT_SESSION: {1: 1, 2: 1},
    Kind.ENDPOINT_REQUEST_ID: {1: 1, 2: 1},
    Kind.ENDED_SESSION: {1: 1, 2: 1},
}


def written(kind: Kind, level: int) -> int:
    """The version of `kind` a replica writes at `level` (clamped to the levels known).

    Raises:
        ValueError: `kind` is unknown at that level (a feature the fleet's oldest
            release lacks: the caller must not write it yet).
    """
    version = VERSIONS[kind][min(max(level, PREVIOUS), LEVEL)]
    if version is None:
        raise ValueError(f"a {kind} is unknown to format level {level}")
    return version


def readable(kind: Kind) -> frozenset[int]:
    """The versions of `kind` this release reads: its own level's and the previous one's."""
    return frozenset(
        v for level, v in VERSIONS[kind].items() if v is not None and level >= PREVIOUS
    )


def reads(kind: Kind, version: int) -> bool:
    """Whether `version` is one of `readable(kind)` (asked at every datum read: no set
    built, no generator run, for it)."""
    for level, v in VERSIONS[kind].items():
        if v == version and level >= PREVIOUS:
            return True
    return False


def known(kind: Kind, level: int) -> bool:
    """Whether `kind` may be written while replicas of `level` live: they know it, or
    never read it (see `VERSIONS`)."""
    return VERSIONS[kind].get(level) is not None


# -- the version inside a JSON object ----------------------------------------------------

#: Where a kind written as a JSON object carries its version: the member's name, and the
#: first version that carries it (before it, the version is told by its absence).
MARKS: dict[Kind, tuple[str, int]] = {
    Kind.RECORD: ("version", 1),
    Kind.MESSAGE: ("v", 2),
    Kind.REQUEST_STATE: ("v", 2),
    Kind.LEGACY_SESSION: ("v", 1),
    Kind.TASK: ("v", 1),
    Kind.LANE_MESSAGE: ("v", 1),
    Kind.PIN: ("v", 1),
    Kind.AUDIT_EVENT: ("v", 1),
    Kind.APPROVAL_STATE: ("v", 1),
    Kind.APPROVAL: ("v", 1),
    Kind.GATEWAY_QUESTION: ("v", 1),
    Kind.ENDPOINT_SESSION: ("v", 1),
    Kind.ENDED_SESSION: ("v", 1),
}


def stamped(kind: Kind, data: dict[str, Any], version: int) -> dict[str, Any]:
    """`data` as written in `version` of `kind`: with its version member, or without one
    where that version carried none."""
    name, since = MARKS[kind]
    if version >= since:
        return {**data, name: version}  # where the member was, if it was
    return {k: v for k, v in data.items() if k != name}


def unstamped(kind: Kind, data: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The version `data` (a JSON object of `kind`) was written in, and its members
    without the version's.

    Raises:
        ValueError: a version this release does not read (or a mark of the wrong type).
    """
    name, since = MARKS[kind]
    rest = dict(data)  # a copy in C, then the mark taken out (no comprehension per member)
    if name not in rest:
        version = 1 if since > 1 else None
    else:
        mark = rest.pop(name)
        ok = isinstance(mark, int) and not isinstance(mark, bool) and mark >= since
        version = mark if ok else None
    if version is None or not reads(kind, version):
        raise ValueError(f"a {kind} of version {data.get(name)!r} is not read here")
    return version, rest


# -- the heartbeat's value ---------------------------------------------------------------
#
# The previous release writes "<wall ms> <epoch>" (version 1) and reads only what follows
# the first space (the epoch). This one writes "<wall ms>/<level> <epoch>" (version 2): the
# previous release still reads the epoch, and a beat without a level is the previous
# release's.


def beat_value(wall_ms: int, epoch: str, level: int = LEVEL) -> str:
    return f"{wall_ms}/{level} {epoch}"


@dataclass(frozen=True, slots=True)
class Beat:
    wall_ms: int | None  # None: unreadable
    level: int
    epoch: str


def read_beat(value: str) -> Beat:
    """A heartbeat's value, of any release: an unreadable level reads as the previous
    release's (the safe side: the fleet then writes what that release reads)."""
    head, _, epoch = value.partition(" ")
    stamp, slash, level_text = head.partition("/")
    wall_ms = int(stamp) if stamp.isdigit() else None
    level = int(level_text) if slash and level_text.isdigit() else PREVIOUS
    return Beat(wall_ms, max(level, PREVIOUS), epoch)


# -- the fleet's level -------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class FleetLevel:
    """The format level this replica writes, from the levels of the live heartbeats.

    Until it has looked at the fleet, and while any live replica is older, it writes the
    oldest level; it moves to `LEVEL` once every live replica has been of `LEVEL` for
    `settle_s` (a rollback within that time loses nothing). `pin`, when set, is the most
    it writes (the operator keeping a rollback possible).
    """

    settle_s: float
    pin: int = 0  # 0: follow the fleet
    level: int = PREVIOUS
    oldest: int = PREVIOUS  # the oldest level seen at the last look
    _current_since: float | None = field(default=None, repr=False)

    def observe(self, levels: Iterable[int], now_s: float) -> int:
        """Take in the levels of the live heartbeats (this replica's own among them) seen
        at monotonic time `now_s`; returns the level to write from now on."""
        oldest = min((max(level, PREVIOUS) for level in levels), default=LEVEL)
        self.oldest = min(oldest, LEVEL)
        if self.oldest < LEVEL:
            self._current_since = None
            self.level = self.oldest
        else:
            if self._current_since is None:
                self._current_since = now_s
            if now_s - self._current_since >= self.settle_s:
                self.level = LEVEL
        if self.pin:
            self.level = min(self.level, self.pin)
        return self.level

    def version(self, kind: Kind) -> int:
        """The version of `kind` to write now.

        Raises:
            ValueError: `kind` is unknown at the level written now (see `known`).
        """
        return written(kind, self.level)

    def known(self, kind: Kind) -> bool:
        """Whether `kind` may be written now: every live replica knows it."""
        return known(kind, self.level)

    def served(self, kind: Kind) -> bool:
        """Whether every live replica knows `kind` (the oldest level at the last look):
        a feature that comes with it (tasks) may be offered. Unlike writing a datum the
        previous release also reads, this waits for no settling: after a rollback the
        feature is gone whatever was written."""
        return known(kind, self.oldest)


def single(pin: int = 0) -> FleetLevel:
    """The level of a replica alone (no shared store): nobody else reads what it writes."""
    alone = FleetLevel(settle_s=0.0, pin=pin)
    alone.observe([LEVEL], 0.0)
    return alone
