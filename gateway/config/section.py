"""A YAML mapping read with its key path: typed reads, and no unknown key passes.

Every error names the key path (`upstreams[0].pool.max_sessions`) so the operator
knows where to look. A reading of a whole file gathers its mistakes in `Problems`
rather than stopping at the first: a wrong type, a number out of range, an unknown
key (with the known key it most resembles), and whatever a section's own checks
raise, each once per key path.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import typing
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any, TypeVar

from gateway.errors import ConfigError

T = TypeVar("T")

_SCALARS = (str, int, float, bool)
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _scalar_fields(cls: type[Any]) -> dict[str, type[Any]]:
    """The fields of dataclass `cls` that hold a str, int, float or bool, with that type."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if hints[f.name] in _SCALARS}


def _natural(problem: str) -> list[Any]:
    """A problem's sort key: by key path, `upstreams[10]` after `upstreams[9]`."""
    path = problem.split(": ", 1)[0]
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path)]


class Problems:
    """The mistakes of one reading, each a line that starts with its key path; only the
    first of a key path is kept (what follows from it would only repeat it)."""

    def __init__(self) -> None:
        self._found: dict[str, str] = {}

    def add(self, message: str) -> None:
        self._found.setdefault(message.split(": ", 1)[0], message)

    def attempt(self, read: Callable[[], T]) -> T | None:
        """`read()`, or None when it raised ConfigError, whose mistakes are kept."""
        try:
            return read()
        except ConfigError as exc:
            for problem in exc.problems:
                self.add(problem)
            return None

    def check(self) -> None:
        """Raises: ConfigError holding every mistake, by key path, if there is any."""
        if self._found:
            raise ConfigError.of(tuple(sorted(self._found.values(), key=_natural)))


def expand_env(value: str, where: str, env: Mapping[str, str]) -> str:
    """`value` with each `${NAME}` replaced by that environment variable.

    Raises:
        ConfigError: a variable named is not set.
    """

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in env:
            raise ConfigError(f"{where}: environment variable {name} is not set")
        return env[name]

    return _ENV_REF.sub(sub, value)


def did_you_mean(word: str, known: Collection[str]) -> str:
    """`; did you mean X?` for the known name `word` most resembles, or nothing."""
    close = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


class Section:
    """A mapping read with its key path, so every error can say where it is.

    Every key read through it (`get`, `raw`, `section`, `items`, `scalars`) counts as
    known; `done()` refuses the others by key path, suggesting the known key each most
    resembles. With `problems`, a wrong type, a number out of range and an unknown key
    are kept there and reading goes on (the default stands in); without, the first
    raises ConfigError. Sections opened from it (`section`, `child`) share them.
    """

    def __init__(self, data: Any, path: str, problems: Problems | None = None) -> None:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(
                f"{path or 'the file'}: expected a mapping, got {type(data).__name__}"
            )
        self._data: dict[Any, Any] = data
        self.path = path
        self.problems = problems
        self._seen: set[str] = set()

    def mistake(self, message: str) -> None:
        """Keep `message` (a mistake, starting with its key path), or raise it without
        `problems`."""
        if self.problems is None:
            raise ConfigError(message)
        self.problems.add(message)

    def child(self, data: Any, path: str) -> Section:
        """A mapping found inside this one (a list's item), sharing its problems.

        Raises:
            ConfigError: `data` is not a mapping.
        """
        return Section(data, path, self.problems)

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
            self.mistake(
                f"{self.at(key)}: expected {kind.__name__}, got {type(value).__name__} {value!r}"
            )
            return None
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
                    self.mistake(f"{self.at(name)}: must be 0 or more, got {value!r}")
                    continue
                if name not in zero_ok and value <= 0:
                    self.mistake(f"{self.at(name)}: must be greater than 0, got {value!r}")
                    continue
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
        """The mapping at `key` (an empty one when absent).

        Raises:
            ConfigError: the value is not a mapping.
        """
        return Section(self.raw(key), self.at(key), self.problems)

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
        """Refuse every key not read (each by its key path, with the nearest known key)."""
        for key in sorted(set(self._data) - self._seen, key=str):
            hint = did_you_mean(str(key), self._seen) or (
                "; see the configuration reference, docs/configuration.md"
            )
            self.mistake(f"{self.at(str(key))}: unknown key{hint}")
