"""The stored record's life as a table: every row taken, every guard refusing, every event
that has no row from a state changing nothing. Pure: no store, no clock, no loop."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.protocol import record as life
from gateway.protocol.record import (
    GRACE_MS,
    Claim,
    Event,
    Forget,
    GiveBack,
    Guard,
    Lapse,
    Park,
    Restore,
    State,
    Steal,
    SuspendedCall,
    Take,
    state_of,
    step,
)

DEADLINE = 1_000_000


def parked(round_: int = 1, owner: str = "a") -> SuspendedCall:
    return SuspendedCall(
        call_id="c1",
        round=round_,
        status=life.PARKED,
        owner=owner,
        upstream="up",
        method="tools/call",
        target="greet",
        principal="alice",
        digest="d",
        upstream_request_id=3,
        session_id="s1",
        protocol_version="2025-11-25",
        caps="ef",
        last_event_id="e1",
        pending=[],
        deadline_ms=DEADLINE,
        created_ms=0,
    )


def resuming(claimer: str = "b", attempt: str = "t1", owner: str = "a") -> SuspendedCall:
    return parked(owner=owner).claimed(claimer, attempt)


# (name, record before, event, what the record is after)
TAKEN: list[tuple[str, SuspendedCall | None, Event, SuspendedCall | None]] = [
    ("park the first round", None, Park(parked()), parked()),
    ("park over a parked record", parked(), Park(parked(2)), parked(2)),
    ("park the next round of a resumed one", resuming(), Park(parked(2)), parked(2)),
    ("claim a parked round", parked(), Claim(1, "b", "t1"), resuming()),
    ("the same claim run again", resuming(), Claim(1, "b", "t1"), resuming()),
    ("steal from a dead claimer", resuming(), Steal(1, "b", "c", "t2"), resuming("c", "t2")),
    (
        "the same steal run again",
        resuming("c", "t2"),
        Steal(1, "b", "c", "t2"),
        resuming("c", "t2"),
    ),
    (
        "take the call over",
        resuming("b", "t1"),
        Take(resuming("b", "t1"), "b"),
        resuming("b", "t1", owner="b"),
    ),
    ("give a claim back", resuming(), GiveBack(resuming()), parked()),
    (
        "give back a takeover's claim, untaken",
        resuming(owner="b"),
        GiveBack(resuming(owner="a"), untake=True),
        parked(owner="a"),
    ),
    (
        "give back a takeover's claim, owner kept",
        resuming(owner="b"),
        GiveBack(resuming(owner="a")),
        parked(owner="b"),
    ),
    ("restore a record the store lost", None, Restore(parked()), parked()),
    ("forget a parked record", parked(), Forget(), None),
    ("forget a resuming record", resuming(), Forget(), None),
    ("forget what is gone already", None, Forget(), None),
    ("a parked record lapses", parked(), Lapse(DEADLINE + GRACE_MS), None),
    ("a resuming record lapses", resuming(), Lapse(DEADLINE + GRACE_MS), None),
]


@pytest.mark.parametrize(
    ("before", "event", "after"), [c[1:] for c in TAKEN], ids=[c[0] for c in TAKEN]
)
def test_each_row_moves_the_record_as_the_table_says(
    before: SuspendedCall | None, event: Event, after: SuspendedCall | None
) -> None:
    done = step(before, event)
    assert done.done and done.record == after
    if after is not None:
        assert (done.record.claimer, done.record.attempt) == (after.claimer, after.attempt)
    row = next(r for r in life.TABLE if r.event is type(event) and state_of(before) in r.before)
    assert state_of(done.record) is row.after


# (name, record before, event, the guard that refuses it)
REFUSED: list[tuple[str, SuspendedCall | None, Event, Guard]] = [
    ("a replica that lost the call parks nothing", None, Park(parked(), owner=False), Guard.OWNER),
    ("a principal at its cap parks nothing", None, Park(parked(), held=False), Guard.HELD),
    ("a claim of another round", parked(2), Claim(1, "b", "t1"), Guard.ROUND),
    ("a round is claimed once", resuming("b", "t1"), Claim(1, "c", "t2"), Guard.OWN_ATTEMPT),
    ("a steal of another round", resuming(), Steal(2, "b", "c", "t2"), Guard.ROUND),
    (
        "a steal from a claimer not named dead",
        resuming("b", "t1"),
        Steal(1, "x", "c", "t2"),
        Guard.CLAIMED_BY_DEAD,
    ),
    (
        "a steal from a claimer that lives",
        resuming("b", "t1"),
        Steal(1, "b", "c", "t2", dead_confirmed=False),
        Guard.DEAD,
    ),
    (
        "a take by a claim that lost the round",
        resuming("c", "t2"),
        Take(resuming(), "b"),
        Guard.CLAIM_HOLDS,
    ),
    (
        "a take by an earlier claim of the same replica",
        resuming("b", "t2"),
        Take(resuming("b", "t1"), "b"),
        Guard.CLAIM_HOLDS,
    ),
    (
        "a give-back by a claim that lost the round",
        resuming("c", "t2"),
        GiveBack(resuming()),
        Guard.CLAIM_HOLDS,
    ),
    (
        "a give-back of a round that moved on",
        replace(resuming(), round=2),
        GiveBack(resuming()),
        Guard.CLAIM_HOLDS,
    ),
    (
        "a restore by a replica that lost the call",
        None,
        Restore(parked(), owner=False),
        Guard.OWNER,
    ),
    ("a record within its grace stays", parked(), Lapse(DEADLINE + GRACE_MS - 1), Guard.LAPSED),
]


@pytest.mark.parametrize(
    ("before", "event", "guard"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED]
)
def test_each_guard_refusing_leaves_the_record_as_it_was(
    before: SuspendedCall | None, event: Event, guard: Guard
) -> None:
    done = step(before, event)
    assert not done.done and done.refused is guard and done.record is before


def test_every_guard_of_the_table_is_seen_refusing() -> None:
    in_table = {g for row in life.TABLE for g in row.guards}
    assert in_table == set(Guard)
    assert {c[3] for c in REFUSED} == in_table


ABSENT, PARKED_, RESUMING_ = None, parked(), resuming()
NO_ROW: list[tuple[str, SuspendedCall | None, Event]] = [
    ("no claim of a record that is gone", ABSENT, Claim(1, "b", "t1")),
    ("no steal of a record that is gone", ABSENT, Steal(1, "b", "c", "t2")),
    ("no steal of a round nobody claimed", PARKED_, Steal(1, "b", "c", "t2")),
    ("no take of a record that is gone", ABSENT, Take(resuming(), "b")),
    ("no take of a round nobody claimed", PARKED_, Take(resuming(), "b")),
    ("no give-back of a record that is gone", ABSENT, GiveBack(resuming())),
    ("no give-back of a round nobody claimed", PARKED_, GiveBack(resuming())),
    ("no restore over a parked record", PARKED_, Restore(parked(2))),
    ("no restore over a resuming record", RESUMING_, Restore(parked(2))),
    ("nothing lapses that is gone", ABSENT, Lapse(DEADLINE + GRACE_MS)),
]


@pytest.mark.parametrize(("before", "event"), [c[1:] for c in NO_ROW], ids=[c[0] for c in NO_ROW])
def test_an_event_without_a_row_from_the_state_changes_nothing(
    before: SuspendedCall | None, event: Event
) -> None:
    done = step(before, event)
    assert not done.done and done.no_row and done.record is before


def test_every_event_from_every_state_is_tried_above() -> None:
    """The cases above leave no (event, state) pair untried: the table is whole."""
    kinds = {Park, Claim, Steal, Take, GiveBack, Restore, Forget, Lapse}
    tried = {(type(c[2]), state_of(c[1])) for c in [*TAKEN, *REFUSED, *NO_ROW]}
    assert tried == {(kind, state) for kind in kinds for state in State}
