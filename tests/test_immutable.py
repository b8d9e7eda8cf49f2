"""`gateway.immutable.immutable`: frozen to the type checker, a frozen dataclass's equality and
hash, and fields set plainly at run time."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

from mypy import api as mypy

from gateway.immutable import immutable
from gateway.protocol.record import SuspendedCall
from gateway.protocol.sse import LargeEvent, SseEvent


@immutable(kw_only=True)
class Point:
    x: int
    y: int = 0
    note: str = dataclasses.field(default="", compare=False)


def test_an_immutable_compares_and_hashes_as_a_frozen_dataclass_would() -> None:
    a, b = Point(x=1, y=2, note="first"), Point(x=1, y=2, note="second")
    assert a == b and hash(a) == hash(b)  # `note` does not compare
    assert Point(x=1) != Point(x=2) and {a: 1}[b] == 1
    moved = dataclasses.replace(a, y=3)
    assert (moved.x, moved.y, a.y) == (1, 3, 2)
    assert not hasattr(a, "__dict__")  # slotted: no field beyond those declared


def test_the_type_checker_refuses_a_change_to_an_immutable(tmp_path: Path) -> None:
    """What a frozen dataclass refused when it ran, mypy refuses before (`scripts/lint`)."""
    source = tmp_path / "use.py"
    source.write_text(
        textwrap.dedent(
            """
            from gateway.immutable import immutable

            @immutable
            class Pair:
                left: int
                right: int

            pair = Pair(1, 2)
            pair.left = 3
            """
        )
    )
    out, _, status = mypy.run(
        ["--strict", "--no-incremental", "--follow-imports=silent", str(source)]
    )
    assert status == 1 and 'Property "left" defined in "Pair" is read-only' in out, out


def test_the_values_a_request_makes_are_immutables() -> None:
    """Made per request: their fields set plainly (the hot path), changed only by copy."""
    for made in (SuspendedCall, SseEvent, LargeEvent):
        assert made.__setattr__ is object.__setattr__  # a frozen dataclass's refuses
        assert made.__hash__ is not None and "__slots__" in vars(made)
