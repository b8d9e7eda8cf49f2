"""A YAML mapping read with its key path: typed reads, and no unknown key passes.

Every error names the key path (`upstreams[0].pool.max_sessions`) so the operator
knows where to look.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Collection, Iterator
from typing import Any, TypeVar

from gateway.errors import ConfigError

T = TypeVar("T")

_SCALARS = (str, int, float, bool)


def _scalar_fields(cls: type[Any]) -> dict[str, type[Any]]:
    """The fields of dataclass `cls` that hold a str, int, float or bool, with that type."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if hints[f.name] in _SCALARS}


class Section:
    """A mapping read with its key path, so every error can say where it is.

    Every key read through it (`get`, `raw`, `section`, `items`, `scalars`) counts as
    known; `done()` refuses the others, naming the first by its key path.
    """

    def __init__(self, data: Any, path: str) -> None:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(
                f"{path or 'the file'}: expected a mapping, got {type(data).__name__}"
            )
        self._data: dict[Any, Any] = data
        self.path = path
        self._seen: set[str] = set()

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def get(self, key: str, kind: type[T]) -> T | None:
        """The value checked against `kind`, or None when absent or null (the default applies).

        An int is accepted where a float is expected; a bool is never a number.
        """
        self._seen.add(key)
        value = self._data.get(key)
        if value is None:
            return None
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind in (int, float) and isinstance(value, bool)):
            raise ConfigError(
                f"{self.at(key)}: expected {kind.__name__}, got {type(value).__name__} {value!r}"
            )
        return value

    def scalars(self, cls: type[Any], *, zero_ok: Collection[str] = ()) -> dict[str, Any]:
        """The keys given for the str, int, float and bool fields of dataclass `cls`.

        Keys left out are left out of the result too, so `cls(**result)` takes the
        dataclass's own defaults. Numbers must be greater than 0, or 0 or more for
        the fields named in `zero_ok`.
        """
        values: dict[str, Any] = {}
        for name, kind in _scalar_fields(cls).items():
            value = self.get(name, kind)
            if value is None:
                continue
            if kind in (int, float):
                if name in zero_ok and value < 0:
                    raise ConfigError(f"{self.at(name)}: must be 0 or more, got {value!r}")
                if name not in zero_ok and value <= 0:
                    raise ConfigError(f"{self.at(name)}: must be greater than 0, got {value!r}")
            values[name] = value
        return values

    def has_any(self) -> bool:
        """Whether the section holds any key at all (an absent section holds none)."""
        return bool(self._data)

    def has(self, key: str) -> bool:
        """Whether the key is written at all (it still counts as unknown until read)."""
        return key in self._data

    def raw(self, key: str) -> Any:
        """The value as decoded, unchecked, for the caller to validate; None when absent."""
        self._seen.add(key)
        return self._data.get(key)

    def section(self, key: str) -> Section:
        return Section(self.raw(key), self.at(key))

    def items(self) -> Iterator[tuple[str, Any]]:
        """Every key with its raw value, each counting as known. Keys must be strings."""
        for key, value in self._data.items():
            if not isinstance(key, str):
                raise ConfigError(
                    f"{self.at(str(key))}: expected a name (a string), got "
                    f"{type(key).__name__} {key!r}; quote it, e.g. '{key}'"
                )
            self._seen.add(key)
            yield key, value

    def done(self) -> None:
        unknown = sorted(set(self._data) - self._seen, key=str)
        if unknown:
            raise ConfigError(
                f"{self.at(str(unknown[0]))}: unknown key; "
                "check the spelling against the config reference"
            )
