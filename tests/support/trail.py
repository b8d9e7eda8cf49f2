"""The audit trail's guarantees, checked on what the sinks hold (the chaos run's join, and
the tests that drive calls through a gateway with a trail).

`read_sinks` reads a file sink (JSON lines), a log stream (its `audit` lines) and a Redis
stream's entries into events by sink; `problems` joins them and names each broken
promise (docs/operations.md, "The audit trail"):

- within one sink, no event id twice, and across sinks one id is one event; but for one
  fact recorded by two replicas (`around_a_crash`: the first died before the fleet knew
  it had, the other went on with the call), which a consumer keeps once by its id;
- a call that ended has exactly one `call.started` and exactly one `call.ended`, and none
  has two of either;
- a round is asked once at most, answered once at most, and only once it was asked;
- a call that completed after `rounds` rounds was asked rounds 1 to `rounds`, each once.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Event = Mapping[str, Any]


def from_lines(lines: Iterable[str | bytes]) -> list[Event]:
    """The events of a file sink (a JSON object a line; a line cut short is left out)."""
    found = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and "kind" in event:
            found.append(event)
    return found


def from_log(lines: Iterable[str | bytes]) -> list[Event]:
    """The events of a log stream in JSON lines: each `audit` line's `audit` member."""
    found = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("event") == "audit":
            found.append(record["audit"])
    return found


def from_stream(entries: Iterable[tuple[Any, Mapping[Any, Any]]]) -> list[Event]:
    """The events of a Redis stream's entries (`XRANGE` as redis-py returns it)."""
    return [json.loads(fields.get(b"event", fields.get("event"))) for _, fields in entries]


def _fact(event: Event) -> tuple[Any, ...]:
    """What an event records, whoever wrote it and when."""
    return tuple(event.get(k) for k in ("kind", "call_id", "round", "outcome", "task_id"))


def problems(sinks: Mapping[str, Sequence[Event]]) -> list[str]:
    """Every broken promise of the trail held by `sinks` (events by sink name)."""
    found: list[str] = []
    events: dict[str, Event] = {}
    for sink, held in sinks.items():
        by_id: dict[str, list[Event]] = defaultdict(list)
        for event in held:
            by_id[event["id"]].append(event)
        twice = sorted(i for i, copies in by_id.items() if not _one_event(copies))
        if twice:
            found.append(f"{sink}: event ids written twice: {twice[:5]} ({len(twice)})")
        for event in held:
            known = events.setdefault(event["id"], event)
            if known is not event and known != event and not _one_event([known, event]):
                found.append(f"event {event['id']}: not the same in every sink")
    calls: dict[str, list[Event]] = defaultdict(list)
    for event in events.values():
        if event.get("call_id") and str(event["kind"]).startswith(("call.", "round.")):
            calls[event["call_id"]].append(event)
    for call_id, held in sorted(calls.items()):
        found.extend(f"call {call_id}: {p}" for p in _call_problems(held))
    return found


def _one_event(copies: Sequence[Event]) -> bool:
    """Whether `copies` (of one id) are one event: the same object, or one fact recorded
    by replicas of their own (one died before the fleet knew it had recorded it, and
    another went on with the call: a consumer keeps it once), or a call's end recorded
    again as `lost` by another replica (a failover lost the write that told the fleet
    it had ended, and the client was told it was lost: docs/operations.md)."""
    first = copies[0]
    if all(c == first for c in copies[1:]):
        return len(copies) == 1 or len({c.get("replica") for c in copies}) == len(copies)
    replicas = [c.get("replica") for c in copies]
    if len(set(replicas)) != len(replicas):
        return False
    if len({_fact(c) for c in copies}) == 1:
        return True
    return _lost_again(copies)


def _lost_again(copies: Sequence[Event]) -> bool:
    """Whether `copies` are one call's end, recorded once as it ended and again as `lost`."""
    if any(c.get("kind") != "call.ended" for c in copies):
        return False
    ended = [c for c in copies if c.get("outcome") != "lost"]
    return len(ended) == 1 and len({_fact({**c, "outcome": None}) for c in copies}) == 1


def around_a_crash(sinks: Mapping[str, Sequence[Event]]) -> int:
    """How many facts more than one replica recorded (kept once by id)."""
    writers: dict[str, set[Any]] = defaultdict(set)
    for held in sinks.values():
        for event in held:
            writers[event["id"]].add(event.get("replica"))
    return sum(1 for replicas in writers.values() if len(replicas) > 1)


def _call_problems(held: Sequence[Event]) -> list[str]:
    kinds = Counter(e["kind"] for e in held)
    found = []
    if kinds["call.started"] > 1 or kinds["call.ended"] > 1:
        found.append(f"started {kinds['call.started']} times, ended {kinds['call.ended']} times")
    elif kinds["call.ended"] and not kinds["call.started"]:
        found.append("ended, never started")
    asked = Counter(e["round"] for e in held if e["kind"] == "round.asked")
    answered = Counter(e["round"] for e in held if e["kind"] == "round.answered")
    found += [f"round {r} asked {n} times" for r, n in sorted(asked.items()) if n > 1]
    found += [f"round {r} answered {n} times" for r, n in sorted(answered.items()) if n > 1]
    found += [f"round {r} answered, never asked" for r in sorted(set(answered) - set(asked))]
    ended = [e for e in held if e["kind"] == "call.ended"]
    if len(ended) == 1 and ended[0].get("outcome") == "complete":
        rounds = ended[0].get("rounds", 0)
        if set(asked) != set(range(1, rounds + 1)):
            found.append(f"completed after {rounds} rounds, asked rounds {sorted(asked)}")
    return found


def completed(sinks: Mapping[str, Sequence[Event]]) -> dict[str, Event]:
    """The `call.ended` event of each call that completed, by call id."""
    return {
        e["call_id"]: e
        for held in sinks.values()
        for e in held
        if e["kind"] == "call.ended" and e.get("outcome") == "complete"
    }
