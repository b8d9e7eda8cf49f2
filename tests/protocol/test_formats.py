"""The formats of shared data, sans-IO: which version a replica writes for the fleet it
sees, which it reads, and the previous release's exact bytes read by this one."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from gateway.errors import StoreError
from gateway.fleet import messages
from gateway.fleet.ledger import entry_field, read_entry
from gateway.protocol import formats
from gateway.protocol.formats import LEVEL, PREVIOUS, FleetLevel, Kind
from gateway.protocol.record import SuspendedCall

# What 0.1.0 (tests/rollout/PREVIOUS_RELEASE) wrote, byte for byte (tests/rollout checks
# the live release against these forms).
RECORD_0_1_0 = (
    '{"call_id":"c1","round":2,"status":"parked","owner":"a~1","upstream":"legacy",'
    '"method":"tools/call","target":"greet","principal":"anonymous","digest":"dddddddd",'
    '"upstream_request_id":3,"session_id":"s1","protocol_version":"2025-11-25","caps":"e",'
    '"last_event_id":null,"pending":[{"key":"name","id":3,"method":"elicitation/create",'
    '"params":{"version":2}}],"journal":[],"deadline_ms":1000,"created_ms":0,"version":1,'
    '"claimer":""}'
)
CANCEL_0_1_0 = '{"op":"cancel","call":"c1","reply":"k"}'
BEAT_0_1_0 = "1733450000000 9f2c4e1a"
LEDGER_ENTRY_0_1_0 = '["legacy", "s1"]'


def test_every_kind_is_written_in_the_previous_version_at_the_previous_level() -> None:
    for kind in Kind:
        if not formats.known(kind, PREVIOUS):  # came with this release
            assert kind in (Kind.TASK, Kind.LEGACY_QUESTION, Kind.GATEWAY_QUESTION)
            continue
        assert formats.written(kind, PREVIOUS) == 1, kind
        assert formats.readable(kind) == {1, formats.written(kind, LEVEL)}, kind


def test_a_level_outside_those_known_is_written_as_the_nearest_known() -> None:
    assert formats.written(Kind.MESSAGE, 0) == 1
    assert formats.written(Kind.MESSAGE, LEVEL + 1) == formats.written(Kind.MESSAGE, LEVEL)


def test_a_kind_unknown_at_a_level_is_refused_for_writing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new record type (tasks, say): one line in VERSIONS, None where it is unknown."""
    monkeypatch.setitem(formats.VERSIONS, Kind.RECORD, {PREVIOUS: None, LEVEL: 1})
    assert not formats.known(Kind.RECORD, PREVIOUS) and formats.known(Kind.RECORD, LEVEL)
    with pytest.raises(ValueError):
        formats.written(Kind.RECORD, PREVIOUS)
    assert formats.written(Kind.RECORD, LEVEL) == 1
    assert formats.readable(Kind.RECORD) == {1}
    fleet = FleetLevel(settle_s=0.0)
    fleet.observe([PREVIOUS, LEVEL], 0.0)
    assert not fleet.known(Kind.RECORD)  # a replica of the previous level lives: held back
    fleet.observe([LEVEL], 1.0)
    assert fleet.known(Kind.RECORD) and fleet.version(Kind.RECORD) == 1


# -- the version inside an object --------------------------------------------------------

STAMPS = [
    # kind, version, the member that says it (absent: None)
    (Kind.RECORD, 1, 1),
    (Kind.RECORD, 2, 2),
    (Kind.MESSAGE, 1, None),
    (Kind.MESSAGE, 2, 2),
    (Kind.REQUEST_STATE, 1, None),
    (Kind.REQUEST_STATE, 2, 2),
    (Kind.LEGACY_SESSION, 1, 1),
    (Kind.LEGACY_SESSION, 2, 2),
    (Kind.GATEWAY_QUESTION, 1, 1),
]


@pytest.mark.parametrize(("kind", "version", "mark"), STAMPS)
def test_an_object_carries_its_version_as_its_kind_does_and_reads_back(
    kind: Kind, version: int, mark: int | None
) -> None:
    name = formats.MARKS[kind][0]
    data = formats.stamped(kind, {"a": 1, name: 99}, version)
    assert data.get(name) == mark
    assert formats.unstamped(kind, data) == (version, {"a": 1})


@pytest.mark.parametrize("mark", [3, 0, -1, "2", True, None, 2.0, [2]])
def test_a_version_not_read_here_is_refused(mark: Any) -> None:
    for kind in (Kind.RECORD, Kind.MESSAGE, Kind.REQUEST_STATE, Kind.LEGACY_SESSION):
        name = formats.MARKS[kind][0]
        with pytest.raises(ValueError):
            formats.unstamped(kind, {"a": 1, name: mark})


def test_a_kind_versioned_from_the_start_is_refused_without_its_version() -> None:
    with pytest.raises(ValueError):
        formats.unstamped(Kind.RECORD, {"a": 1})
    with pytest.raises(ValueError):
        formats.unstamped(Kind.LEGACY_SESSION, {"a": 1})


# -- the previous release's bytes --------------------------------------------------------


def test_a_record_of_the_previous_release_reads_and_is_written_back_byte_for_byte() -> None:
    read = SuspendedCall.from_json(RECORD_0_1_0)
    assert (read.version, read.call_id, read.pending[0]["params"]) == (1, "c1", {"version": 2})
    assert read.to_json() == RECORD_0_1_0  # written in the version it was read in
    assert read.to_json(1) == RECORD_0_1_0
    current = json.loads(read.to_json(2))
    assert current == {**json.loads(RECORD_0_1_0), "version": 2}
    again = SuspendedCall.from_json(read.to_json(2))
    assert (again.version, replace(again, version=1)) == (2, read)


def test_a_record_of_an_unknown_version_is_a_store_error() -> None:
    for version in (0, 3, "1"):
        text = json.dumps({**json.loads(RECORD_0_1_0), "version": version})
        with pytest.raises(StoreError):
            SuspendedCall.from_json(text)


def test_a_message_of_the_previous_release_reads_and_is_written_as_it_was() -> None:
    cancel = messages.decode(CANCEL_0_1_0)
    assert cancel == messages.Cancel(call="c1", reply="k")
    assert messages.encode(cancel, 1) == CANCEL_0_1_0
    assert json.loads(messages.encode(cancel)) == {**json.loads(CANCEL_0_1_0), "v": 2}
    with pytest.raises(ValueError):
        messages.decode('{"op":"cancel","call":"c1","reply":"k","v":3}')


def test_a_heartbeat_of_either_release_reads_with_its_level_and_epoch() -> None:
    assert formats.read_beat(BEAT_0_1_0) == formats.Beat(1733450000000, PREVIOUS, "9f2c4e1a")
    mine = formats.beat_value(1733450000000, "9f2c4e1a")
    # What the previous release reads of it: what follows the first space.
    assert mine.partition(" ")[2] == "9f2c4e1a"
    assert formats.read_beat(mine) == formats.Beat(1733450000000, LEVEL, "9f2c4e1a")
    assert formats.read_beat("1733450000000/2 ") == formats.Beat(1733450000000, 2, "")
    # Unreadable levels count as the previous release's: the fleet writes what it reads.
    for odd in ("1/x e", "1/ e", "", "1/0 e", "1/-2 e"):
        assert formats.read_beat(odd).level == PREVIOUS, odd


def test_a_ledger_entry_of_either_version_names_its_session() -> None:
    assert read_entry(LEDGER_ENTRY_0_1_0) == ("legacy", "s1")
    assert entry_field("legacy", "s1", 1) == LEDGER_ENTRY_0_1_0
    assert read_entry(entry_field("legacy", "s1", 2)) == ("legacy", "s1")
    for odd in ('[3, "legacy", "s1"]', '[1, "legacy", "s1"]', '["legacy"]', '{"u": 1}', "[1, 2]"):
        with pytest.raises(ValueError):
            read_entry(odd)


# -- the fleet's level: a script ---------------------------------------------------------


def test_the_fleet_moves_on_only_once_all_of_it_has_been_current_for_the_settle_time() -> None:
    fleet = FleetLevel(settle_s=10.0)
    assert fleet.level == PREVIOUS  # before it has looked: what anyone reads
    assert fleet.observe([PREVIOUS, LEVEL], 0.0) == PREVIOUS  # a 0.1.0 replica lives
    assert fleet.observe([LEVEL, LEVEL], 5.0) == PREVIOUS  # the last one left: settling
    assert fleet.observe([LEVEL], 14.9) == PREVIOUS
    assert fleet.observe([LEVEL], 15.0) == LEVEL  # moved on
    assert fleet.version(Kind.MESSAGE) == 2
    assert fleet.observe([LEVEL, PREVIOUS], 16.0) == PREVIOUS  # a rollback: back at once
    assert fleet.version(Kind.MESSAGE) == 1
    assert fleet.observe([LEVEL], 17.0) == PREVIOUS  # settling again, from the start
    assert fleet.observe([LEVEL], 27.0) == LEVEL


def test_a_pinned_fleet_never_writes_past_its_pin() -> None:
    fleet = FleetLevel(settle_s=0.0, pin=PREVIOUS)
    assert fleet.observe([LEVEL], 0.0) == PREVIOUS
    assert fleet.observe([LEVEL], 1000.0) == PREVIOUS
    assert fleet.version(Kind.REQUEST_STATE) == 1


def test_levels_newer_than_this_release_write_this_releases_formats() -> None:
    fleet = FleetLevel(settle_s=0.0)
    assert fleet.observe([LEVEL + 1, LEVEL], 0.0) == LEVEL
    assert fleet.observe([], 1.0) == LEVEL  # nobody seen (its own beat not yet landed)


def test_a_replica_alone_writes_its_own_formats_unless_pinned() -> None:
    assert formats.single().level == LEVEL
    assert formats.single(PREVIOUS).level == PREVIOUS


def test_a_task_is_unknown_to_the_previous_release_and_versioned_in_this_one() -> None:
    assert not formats.known(Kind.TASK, PREVIOUS) and formats.known(Kind.TASK, LEVEL)
    with pytest.raises(ValueError):
        formats.written(Kind.TASK, PREVIOUS)
    level = formats.FleetLevel(settle_s=60.0)
    level.observe([PREVIOUS, LEVEL], 0.0)  # a replica of the previous release beats
    assert not level.known(Kind.TASK) and not level.served(Kind.TASK)
    level.observe([LEVEL, LEVEL], 1.0)  # all of this release: tasks are served at once,
    assert level.served(Kind.TASK) and not level.known(Kind.TASK)  # written once settled
    level.observe([LEVEL, LEVEL], 61.0)
    assert level.known(Kind.TASK)
    record = formats.stamped(Kind.TASK, {"id": "t1"}, level.version(Kind.TASK))
    assert record == {"id": "t1", "v": 1}
    assert formats.unstamped(Kind.TASK, record) == (1, {"id": "t1"})
    with pytest.raises(ValueError):
        formats.unstamped(Kind.TASK, {"id": "t1"})  # no version: not a task this release wrote
