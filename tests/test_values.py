"""`quick_init`: a frozen dataclass with the faster `__init__` behaves as the stock one."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any

import pytest

from gateway.values import quick_init


def pair() -> tuple[type[Any], type[Any]]:
    """The same class twice: as `@dataclass` made it, and with `quick_init`."""

    def make() -> type[Any]:
        @dataclass(frozen=True, slots=True)
        class Sample:
            a: int
            b: str = "b"
            c: list[int] = field(default_factory=list)
            d: str | None = field(init=False, repr=False, compare=False)
            e: int = field(init=False, default=5)
            f: dict[str, int] = field(init=False, default_factory=dict)
            g: int = field(kw_only=True, default=7)
            h: str = field(kw_only=True)

            def __post_init__(self) -> None:
                object.__setattr__(self, "d", f"{self.a}{self.b}")

        return Sample

    return make(), quick_init(make())


def test_the_same_fields_defaults_and_post_init() -> None:
    stock, quick = pair()
    shape = [
        (p.name, p.kind, p.default is inspect.Parameter.empty)
        for p in inspect.signature(stock.__init__).parameters.values()
    ]
    assert [
        (p.name, p.kind, p.default is inspect.Parameter.empty)
        for p in inspect.signature(quick.__init__).parameters.values()
    ] == shape
    for args, kwargs in (
        ((1,), {"h": "x"}),
        ((1, "z", [3]), {"g": 2, "h": "y"}),
        ((), {"a": 4, "b": "w", "c": [9], "h": "v"}),
    ):
        made, expected = quick(*args, **kwargs), stock(*args, **kwargs)
        assert {f.name: getattr(made, f.name) for f in dataclasses.fields(made)} == {
            f.name: getattr(expected, f.name) for f in dataclasses.fields(expected)
        }
        assert repr(made).replace(quick.__qualname__, "") == repr(expected).replace(
            stock.__qualname__, ""
        )
        assert dataclasses.replace(made, a=8).a == 8
    assert quick(1, h="x") == quick(1, h="x")
    assert quick(1, h="x") != quick(2, h="x")


def test_factories_run_for_each_object() -> None:
    _, quick = pair()
    one, two = quick(1, h="x"), quick(1, h="x")
    assert one.c == [] and one.c is not two.c
    assert one.f == {} and one.f is not two.f


def test_still_frozen_and_its_arguments_still_checked() -> None:
    stock, quick = pair()
    made = quick(1, h="x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.a = 2
    for cls in (stock, quick):
        with pytest.raises(TypeError):
            cls(h="x")  # a is required
        with pytest.raises(TypeError):
            cls(1, "b", [], 3, h="x")  # g is keyword-only
        with pytest.raises(TypeError):
            cls(1, h="x", zz=1)


def test_hashable_when_its_fields_are() -> None:
    @quick_init
    @dataclass(frozen=True, slots=True)
    class Point:
        x: int
        y: int = 0

    assert hash(Point(1, 2)) == hash(Point(1, 2)) and {Point(1): "p"}[Point(1, 0)] == "p"
    assert Point.__init__.__qualname__.endswith("Point.__init__")


def test_refuses_what_it_cannot_speed_up() -> None:
    @dataclass(slots=True)
    class Mutable:
        x: int

    @dataclass(frozen=True)
    class Unslotted:
        x: int

    for cls in (Mutable, Unslotted, int):
        with pytest.raises(TypeError, match="not a frozen dataclass with slots"):
            quick_init(cls)
