"""A parked call's stored record and its life, sans-IO: the transition table every store
follows.

A record names one parked legacy call: who owns its upstream stream, which round it waits
in, what it asked, and the bindings a retry must match. It is versioned JSON, so replicas
of different releases can share a store: a reader takes the versions `gateway.protocol.formats`
says it reads and refuses any other; a writer writes the version the fleet reads.

Its life, one row per event (`TABLE`; drawn in docs/operations.md):

    event      from              to         guards
    park       any               parked     owner*, held
    claim      parked            resuming   round
    claim      resuming          resuming   round, own attempt   (the same claim run again)
    steal      resuming          resuming   round, own attempt   (the same steal run again)
    steal      resuming          resuming   round, claimed by the dead, dead*
    take       resuming          resuming   claim holds          (owner := the taker)
    give back  resuming          parked     claim holds          (owner kept, or restored)
    restore    absent            parked     owner*
    forget     absent, parked,   absent     -
               resuming
    lapse      parked, resuming  absent     lapsed               (deadline + GRACE_MS)

A guard marked * is the acting replica's to check before it asks the store (it needs the
fleet: a heartbeat, a lease); the store checks the others in the same atomic step as the
write. Where two rows leave one state for one event, the first whose guards all hold is
taken. An event with no row from the record's state, or whose guards fail, changes nothing.
`step` carries out the table; `gateway.store.memory` is `step` on a dict, and the Redis
store's scripts (`gateway.store.redis_scripts`) do the same (tests/store runs the table's
rows against both). No I/O here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from enum import StrEnum
from typing import Any, NamedTuple

from gateway.errors import StoreError
from gateway.immutable import immutable
from gateway.protocol import formats
from gateway.protocol.formats import Kind

#: The version this release writes once the whole fleet reads it (`formats.VERSIONS`).
RECORD_VERSION = formats.written(Kind.RECORD, formats.LEVEL)

PARKED = "parked"
RESUMING = "resuming"

#: How long a store keeps a record past its deadline, so the owner can still claim
#: it to abandon the call; retries after the deadline are refused by the sealed expiry.
GRACE_MS = 60_000


@immutable(kw_only=True)
class SuspendedCall:
    call_id: str
    round: int
    status: str
    owner: str
    upstream: str
    method: str
    target: str | None
    principal: str
    digest: str
    upstream_request_id: str | int
    session_id: str | None
    protocol_version: str  # what the upstream session negotiated
    caps: str  # the capability set the session declared (ClientCaps.key)
    last_event_id: str | None  # of the call's stream: another replica resumes after it
    pending: list[dict[str, Any]]
    journal: list[dict[str, Any]] = field(default_factory=list)
    deadline_ms: int
    created_ms: int
    version: int = RECORD_VERSION
    claimer: str = ""  # the replica whose retry claimed the round (while resuming)
    # Which claim this copy is of (the store's token for it): a claim given back names
    # it, so a give-back run twice (its reply lost with a connection) cannot give back a
    # later claim of the same replica. Never written into the record's json.
    attempt: str = field(default="", compare=False)

    def to_json(self, version: int | None = None) -> str:
        """The record as stored, in `version` (by default the one it was read in or made
        with). Versions 1 and 2 hold the same fields: 2 tells a reader it is 2."""
        data = asdict(self)
        del data["attempt"]
        stored = formats.stamped(Kind.RECORD, data, version or self.version)
        return json.dumps(stored, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> SuspendedCall:
        """Raises: StoreError when the record is unreadable or of a version not read here."""
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise ValueError("a record is a JSON object")
            try:
                version, fields_ = formats.unstamped(Kind.RECORD, data)
            except ValueError as exc:
                raise StoreError(
                    f"suspended-call record version {data.get('version')!r} is unknown"
                ) from exc
            return cls(**fields_, version=version)
        except (ValueError, TypeError, AttributeError) as exc:
            raise StoreError("unreadable suspended-call record") from exc

    def claimed(self, by: str = "", attempt: str = "") -> SuspendedCall:
        # Made at every claim: the fields read by name, not by `dataclasses.replace`,
        # which looks at each field's definition first (a third of what a claim cost).
        values = {name: getattr(self, name) for name in _FIELD_NAMES}
        values.update(status=RESUMING, claimer=by, attempt=attempt)
        return SuspendedCall(**values)


#: A record's fields, in order (every one set by `__init__`).
_FIELD_NAMES = tuple(f.name for f in fields(SuspendedCall))


class State(StrEnum):
    ABSENT = "absent"
    PARKED = PARKED
    RESUMING = RESUMING


def state_of(record: SuspendedCall | None) -> State:
    return State.ABSENT if record is None else _STATES[record.status]


_STATES = {PARKED: State.PARKED, RESUMING: State.RESUMING}


def lapsed(record: SuspendedCall, now_ms: int) -> bool:
    """Whether a record has outlived its deadline and grace (the `lapsed` guard)."""
    return record.deadline_ms + GRACE_MS <= now_ms


class Guard(StrEnum):
    OWNER = "owner"  # the acting replica still owns the call (lease unbroken, or the store says)
    HELD = "held"  # the principal is below its cap of parked calls (fleet-wide)
    ROUND = "round"  # the record waits in the round the retry's requestState names
    OWN_ATTEMPT = "own attempt"  # the resuming round is this very claim's (a re-run)
    CLAIMED_BY_DEAD = "claimed by the dead"  # the round's claimer is the replica named dead
    DEAD = "dead"  # that claimer has no heartbeat: it died resuming the round
    CLAIM_HOLDS = "claim holds"  # round, claimer and attempt are still the given claim's
    LAPSED = "lapsed"  # GRACE_MS past the record's deadline


#: Guards the acting replica checks before it asks the store (the rest the store checks).
REPLICA_GUARDS = frozenset({Guard.OWNER, Guard.DEAD})


# -- events: what happens to a record, with what its guards and its effect read --------
#
# An event and a step's outcome (`Step`) are named tuples, not frozen dataclasses: one is
# made at every store operation, and on Python 3.11 a frozen dataclass is built through an
# `object.__setattr__` call per field (a `Park` or a `Step` took twice as long to make).


class Park(NamedTuple):
    """The owner writes the round its call now waits in (the first, or the next)."""

    record: SuspendedCall
    held: bool = True  # the principal's hold was taken (below its cap)
    owner: bool = True  # the replica still owns the call


class Claim(NamedTuple):
    """A retry claims the round its requestState names: it resumes at most once."""

    round: int
    claimer: str
    attempt: str


class Steal(NamedTuple):
    """A retry sent again claims a round whose claimer died resuming it."""

    round: int
    dead: str
    claimer: str
    attempt: str
    dead_confirmed: bool = True  # `dead` has no heartbeat (the replica looked)


class Take(NamedTuple):
    """A takeover: the claimer continues the call of a dead owner and owns it from now."""

    claim: SuspendedCall  # the claim the takeover was given
    owner: str


class GiveBack(NamedTuple):
    """A claim nobody resumed is parked again for the client's next retry; `untake` names
    the owner the record had when it was claimed (a takeover that failed after `Take`)."""

    claim: SuspendedCall
    untake: bool = False


class Restore(NamedTuple):
    """The store lost its data: the owner writes back the record of a call it still holds."""

    record: SuspendedCall
    owner: bool = True


class Forget(NamedTuple):
    """The call ended (or its owner is gone and the call was given up)."""


class Lapse(NamedTuple):
    """The store's clock: a record lives until `GRACE_MS` past its deadline."""

    now_ms: int


Event = Park | Claim | Steal | Take | GiveBack | Restore | Forget | Lapse


# Each guard, asked of the record as it is (None: absent) and the event.
_GUARDS: dict[Guard, Callable[[Any, Any], bool]] = {
    Guard.OWNER: lambda record, event: bool(event.owner),
    Guard.HELD: lambda record, event: bool(event.held),
    Guard.ROUND: lambda record, event: record.round == event.round,
    Guard.OWN_ATTEMPT: lambda record, event: (
        (record.claimer, record.attempt) == (event.claimer, event.attempt)
    ),
    Guard.CLAIMED_BY_DEAD: lambda record, event: record.claimer == event.dead,
    Guard.DEAD: lambda record, event: bool(event.dead_confirmed),
    Guard.CLAIM_HOLDS: lambda record, event: _claim_holds(record, event.claim),
    Guard.LAPSED: lambda record, event: lapsed(record, event.now_ms),
}


def _claim_holds(record: SuspendedCall, claim: SuspendedCall) -> bool:
    return (record.round, record.claimer, record.attempt) == (
        claim.round,
        claim.claimer,
        claim.attempt,
    )


def _given_back(record: SuspendedCall, event: GiveBack) -> SuspendedCall:
    owner = event.claim.owner if event.untake else record.owner
    return replace(record, status=PARKED, claimer="", attempt="", owner=owner)


# The record after each event, its guards passed (None: absent). Every event but `Park`,
# `Restore`, `Forget` and `Lapse` has rows from a record only.
_EFFECTS: dict[type[Event], Callable[[Any, Any], SuspendedCall | None]] = {
    Park: lambda record, event: event.record,
    Restore: lambda record, event: event.record,
    Forget: lambda record, event: None,
    Lapse: lambda record, event: None,
    Claim: lambda record, event: record.claimed(event.claimer, event.attempt),
    Steal: lambda record, event: record.claimed(event.claimer, event.attempt),
    Take: lambda record, event: replace(record, owner=event.owner),
    GiveBack: _given_back,
}


@dataclass(frozen=True, slots=True)
class Row:
    event: type[Event]
    before: frozenset[State]
    after: State
    guards: tuple[Guard, ...]
    # What `step` runs, looked up once here rather than at every step: each guard with
    # its check, and the event's effect.
    checks: tuple[tuple[Guard, Callable[[Any, Any], bool]], ...] = field(
        init=False, repr=False, compare=False
    )
    effect: Callable[[Any, Any], SuspendedCall | None] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "checks", tuple((g, _GUARDS[g]) for g in self.guards))
        object.__setattr__(self, "effect", _EFFECTS[self.event])


def _row(event: type[Event], before: str, after: State, *guards: Guard) -> Row:
    return Row(event, frozenset(State(s) for s in before.split()), after, guards)


TABLE: tuple[Row, ...] = (
    _row(Park, "absent parked resuming", State.PARKED, Guard.OWNER, Guard.HELD),
    _row(Claim, "parked", State.RESUMING, Guard.ROUND),
    _row(Claim, "resuming", State.RESUMING, Guard.ROUND, Guard.OWN_ATTEMPT),
    _row(Steal, "resuming", State.RESUMING, Guard.ROUND, Guard.OWN_ATTEMPT),
    _row(Steal, "resuming", State.RESUMING, Guard.ROUND, Guard.CLAIMED_BY_DEAD, Guard.DEAD),
    _row(Take, "resuming", State.RESUMING, Guard.CLAIM_HOLDS),
    _row(GiveBack, "resuming", State.PARKED, Guard.CLAIM_HOLDS),
    _row(Restore, "absent", State.PARKED, Guard.OWNER),
    _row(Forget, "absent parked resuming", State.ABSENT),
    _row(Lapse, "parked resuming", State.ABSENT, Guard.LAPSED),
)


def _index(table: tuple[Row, ...]) -> dict[tuple[type[Event], str], list[Row]]:
    """The rows by event and state, the state as a record's `status` names it (a plain
    string: no `State` member is read off its class at each step)."""
    rows: dict[tuple[type[Event], str], list[Row]] = {}
    for row in table:
        for state in sorted(row.before):
            rows.setdefault((row.event, state.value), []).append(row)
    return rows


_ROWS = _index(TABLE)
_ABSENT = State.ABSENT.value


class Step(NamedTuple):
    """What an event did: the record after it (`done`), or why nothing changed."""

    record: SuspendedCall | None
    done: bool = True
    refused: Guard | None = None
    no_row: bool = False  # the event has no row from the record's state


def step(record: SuspendedCall | None, event: Event) -> Step:
    """`event` applied to `record` (None: absent) as the table says; when no row's guards
    all hold, the first guard that failed in the last row tried says why."""
    rows = _ROWS.get((type(event), _ABSENT if record is None else record.status))
    if rows is None:
        return Step(record, done=False, no_row=True)
    refused: Guard | None = None
    for row in rows:
        for guard, holds in row.checks:
            if not holds(record, event):
                refused = guard
                break
        else:
            return Step(row.effect(record, event))
    return Step(record, done=False, refused=refused)
