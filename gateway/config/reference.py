"""The configuration reference (docs/configuration.md), written from the dataclasses.

    python -m gateway.config.reference > docs/configuration.md

Every key comes from a field of the tree under `GatewayConfig`: its YAML path, its
type, its default (the dataclass's own) and its meaning, the field's docstring (the
string written on the line after it, as Sphinx and PEP 257 read attribute
docstrings). A field spelt otherwise in YAML says so in its metadata:

    keys: tuple[bytes, ...] = field(default=(), metadata={"yaml": "keys_file", "type": "path"})

`{"yaml": None}` leaves a field out (it is not read from the file), `"default"` names a
default that is not a value (a random name), `"type"` makes a field that holds a
dataclass one key (a file of API keys), and `"kind"` says what else a section may be
written as (`{"kind": "section, or a string: its support"}`). A field without a docstring stops the
generation, naming it; `tests/test_config_reference.py` fails when the file and the
dataclasses differ and says to run the command above.

Reads source files, writes nothing; imports no I/O layer.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import sys
import textwrap
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from gateway.config.loader import (
    ENV_KEYS,
    ENV_KEYS_FILE,
    ENV_LOG_FORMAT,
    ENV_LOG_LEVEL,
    ENV_REPLICA_ID,
    ENV_STORE_URL,
)
from gateway.config.model import GatewayConfig

COMMAND = "python -m gateway.config.reference > docs/configuration.md"


class UndocumentedField(Exception):
    """A configuration field has no docstring: the reference cannot say what it means."""


@dataclasses.dataclass(frozen=True, slots=True)
class Key:
    """One row of the reference."""

    key: str  # the YAML key inside its section, e.g. `max_sessions` or `inputs[]`
    type: str
    default: str
    meaning: str


@dataclasses.dataclass(slots=True)
class ReferenceTable:
    """One table of the reference: the keys of one mapping of the file."""

    path: str  # `upstreams[].pool`; "" for the top level
    title: str
    keys: list[Key] = dataclasses.field(default_factory=list)


def attribute_docs(cls: type[Any]) -> dict[str, str]:
    """The docstring of each field of `cls`: the string literal right after it."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for statement, following in zip(body, body[1:], strict=False):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[statement.target.id] = " ".join(following.value.value.split())
    return docs


def _dataclass_in(hint: Any) -> type[Any] | None:
    """The dataclass a field holds (itself, optional, in a tuple or as a mapping's value)."""
    for arg in (hint, *typing.get_args(hint)):
        if isinstance(arg, type) and dataclasses.is_dataclass(arg):
            return arg
    return None


def _type_name(hint: Any) -> str:
    """A field's type as the YAML file writes it."""
    origin = typing.get_origin(hint)
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if origin in (types.UnionType, typing.Union):
        return " or ".join(_type_name(a) for a in args)
    if origin in (tuple, frozenset, list, set):
        return f"list of {_type_name(args[0])}s"
    if origin is Mapping or origin is dict:
        return f"mapping of {_type_name(args[1])}s"
    if origin is re.Pattern:
        return "regular expression"
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if hint in names:
        return names[hint]
    return getattr(hint, "__name__", str(hint))


def _default(field: dataclasses.Field[Any]) -> str:
    """A field's default as YAML would write it, or `required`."""
    if "default" in field.metadata:
        return str(field.metadata["default"])
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "required"
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple | frozenset | list):
        return "[]" if not value else repr(list(value))
    if isinstance(value, Mapping):
        return "{}" if not value else repr(dict(value))
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _table_key(name: str, field: dataclasses.Field[Any], hint: Any) -> tuple[str, str]:
    """How the file spells a field (its YAML key) and its type there."""
    key = field.metadata.get("yaml", name)
    kind = field.metadata.get("type") or _type_name(hint)
    return key, kind


def _anchor(path: str) -> str:
    """The anchor GitHub gives the heading of the section at `path`."""
    return re.sub(r"[^a-z0-9_ -]", "", path.lower()).replace(" ", "-")


def _walk(
    cls: type[Any], path: str, title: str, seen: dict[type[Any], str]
) -> Iterator[ReferenceTable]:
    """The section of dataclass `cls` at `path`, then those of the dataclasses it holds
    (each once: where it comes again, its row names the section that has its keys)."""
    docs = attribute_docs(cls)
    hints = typing.get_type_hints(cls)
    section = ReferenceTable(path, title)
    nested: list[tuple[type[Any], str, str]] = []
    for field in dataclasses.fields(cls):
        if field.metadata.get("yaml", field.name) is None:
            continue
        if field.name not in docs:
            raise UndocumentedField(
                f"{cls.__module__}.{cls.__qualname__}.{field.name} has no docstring: write "
                'what it means as a string on the line after it ("""..."""), then run: '
                f"{COMMAND}"
            )
        hint = hints[field.name]
        key, kind = _table_key(field.name, field, hint)
        inner = _dataclass_in(hint) if "type" not in field.metadata else None
        if inner is None:
            section.keys.append(Key(key, kind, _default(field), docs[field.name]))
            continue
        origin = typing.get_origin(hint)
        if origin is Mapping or origin is dict:
            entry = field.metadata.get("entry", "<name>")
            key, kind = f"{key}.{entry}", f"mapping of {entry[1:-1]}s to sections"
        elif origin is tuple:
            key, kind = f"{key}[]", "list of sections"
        else:
            kind = "section"
        kind = field.metadata.get("kind", kind)  # a section also written another way
        default = "none" if field.default is None else "—"
        where = f"{path}.{key}" if path else key
        if inner in seen:
            meaning = (
                f"{docs[field.name]} Its keys are those of "
                f"[`{seen[inner]}`](#{_anchor(seen[inner])})."
            )
        else:
            seen[inner] = where
            meaning = f"{docs[field.name]} Its keys: [`{where}`](#{_anchor(where)})."
            nested.append((inner, where, docs[field.name]))
        section.keys.append(Key(key, kind, default, meaning))
    yield section
    for inner, where, doc in nested:
        yield from _walk(inner, where, doc, seen)


def sections() -> list[ReferenceTable]:
    """Every section of the file, the top level first, then in the dataclasses' order."""
    return list(_walk(GatewayConfig, "", "The top level of the file.", {GatewayConfig: ""}))


_PREAMBLE = f"""\
# Configuration reference

<!-- Generated from the dataclasses of gateway/config/ by `{COMMAND}`.
     Do not edit by hand: write a field's meaning as its docstring and run the command. -->

The gateway reads one YAML file (`mrtr-gateway serve --config FILE`); `mrtr-gateway
check-config FILE` validates it and names every mistake by its key path, with the key
meant where one is misspelt. Every key below may be left out but those marked
*required*. Durations are in seconds (`_s`) or milliseconds (`_ms`), sizes in bytes.
A file's relative paths are read from the file's folder.

Precedence, highest first: **command-line flag > environment variable > file > default**.

| environment variable (set and not empty) | wins over |
|---|---|
| `{ENV_KEYS}` | sealing keys: comma-separated, the first seals, all open |
| `{ENV_KEYS_FILE}` | `sealing.keys_file` |
| `{ENV_STORE_URL}` | `store.url` |
| `{ENV_LOG_LEVEL}`, `{ENV_LOG_FORMAT}` | `logging.level`, `logging.format` |
| `{ENV_REPLICA_ID}` | `replica_id` |
| `MRTR_GATEWAY_EVENT_LOOP` | (no key) `auto` (uvloop where installed), `uvloop` or `asyncio` |

Command-line flags of `serve`: `--host`, `--port`, `--store` and `--keys-file` override
`listen.host`, `listen.port`, `store.url` and `sealing.keys_file` (`--keys-file` is
relative to the working directory). Without a file, `--upstream URL [--transport sse]`
or `--upstream-command 'COMMAND ARGS'` with `[--path /mcp]` serve one upstream.

Sealing keys never go in the file: `mrtr-gateway keygen` prints one, and
[operations.md](operations.md) says how to rotate them without dropping parked calls.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    """The whole reference, as Markdown."""
    out = [_PREAMBLE]
    for section in sections():
        heading = f"`{section.path}`" if section.path else "Top level"
        out.append(f"\n## {heading}\n\n{section.title}\n")
        out.append("| key | type | default | meaning |\n|---|---|---|---|")
        for key in section.keys:
            plain = key.default == "—" or key.default.startswith("required")
            default = key.default if plain else f"`{key.default}`"
            out.append(f"| `{key.key}` | {key.type} | {_cell(default)} | {_cell(key.meaning)} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
