"""`immutable`: a dataclass frozen to the type checker, and plain at run time.

The values a request makes as it goes (its envelope, a stream's events, a round's
context, a retry's claims, a suspended call's record) are never changed once made: each
step makes a new one. A frozen dataclass would refuse a change at run time too, at a
price paid on every value made: its `__init__` sets each field through
`object.__setattr__`, on Python 3.11 about fourteen times what a plain field costs (a
21-field record, 2.5 µs against 0.17 µs; two dozen such values are made per round trip).

`immutable` makes a slotted dataclass whose fields are set plainly, and tells the type
checker (`typing.dataclass_transform(frozen_default=True)`) that it is frozen: mypy
(strict, run by `scripts/lint`) refuses any assignment to a field, where a frozen
dataclass would have refused it when it ran. Equality and hashing are a frozen
dataclass's (`eq`, and a hash of the fields that compare: `unsafe_hash`), and
`dataclasses.replace` makes a changed copy of one as of the other.

Values made once, at start-up (the configuration, the tables), stay frozen dataclasses:
a change refused as it happens costs them nothing per request.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform, overload

_T = TypeVar("_T")


@overload
def immutable(cls: type[_T], /) -> type[_T]: ...


@overload
def immutable(*, kw_only: bool = False) -> Callable[[type[_T]], type[_T]]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def immutable(cls: type[_T] | None = None, /, *, kw_only: bool = False) -> Any:
    """A slotted dataclass of `cls`, frozen to the type checker (the module docstring);
    `kw_only`: its fields are given by name only."""

    def make(cls: type[_T]) -> type[_T]:
        return dataclasses.dataclass(slots=True, kw_only=kw_only, unsafe_hash=True)(cls)

    return make if cls is None else make(cls)
