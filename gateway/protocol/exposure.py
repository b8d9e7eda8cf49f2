"""What clients see of a legacy server's tools, prompts and resources: the operator's
exposure rules, sans-IO.

Each list has globs (`allow`, default every name; `deny`, which wins): a tool or prompt
by its name, a resource by its URI, a resource template by its `uriTemplate`. A tool may
be shown under another name, title or description (`Shown`): clients see and call it by
that name only, and the upstream always gets its own. Whatever is hidden is absent from
every list and unknown everywhere it could be reached; the old name of a renamed tool
is hidden likewise.

On an endpoint of several upstreams that prefixes (`endpoints[].prefix: always`), every
tool and prompt is shown with the upstream's `prefix` before the name it is otherwise
shown by (its own, or the one it is renamed to): `notes_search`. A name without the
prefix is unknown; resource URIs are never prefixed.

Pure: the rules are data given by the configuration; results are dicts in and out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from types import MappingProxyType
from typing import Any

from gateway.protocol.lists import field_of
from gateway.protocol.methods import LISTS, NAME_FIELD


@dataclass(frozen=True, slots=True)
class Globs:
    """Which names (or URIs) of one list are shown: those matching an `allow` glob and
    no `deny` glob (`fnmatch`'s `*`, `?` and `[...]`, case-sensitive)."""

    allow: tuple[str, ...] = ("*",)
    deny: tuple[str, ...] = ()

    def admits(self, name: str) -> bool:
        return any(fnmatchcase(name, g) for g in self.allow) and not any(
            fnmatchcase(name, g) for g in self.deny
        )

    @property
    def everything(self) -> bool:
        return not self.deny and "*" in self.allow


ALL = Globs()


@dataclass(frozen=True, slots=True)
class Shown:
    """How one tool is shown to clients instead of as the server gives it (None: as given)."""

    name: str | None = None
    title: str | None = None
    description: str | None = None


_NOTHING_SHOWN: Mapping[str, Shown] = MappingProxyType({})

#: Which list (and its globs) a method is about: the `Exposure` field.
_KIND = {
    "tools/list": "tools",
    "tools/call": "tools",
    "prompts/list": "prompts",
    "prompts/get": "prompts",
    "resources/list": "resources",
    "resources/templates/list": "resources",
    "resources/read": "resources",
}


#: The requests and lists whose names carry an upstream's prefix (never a URI).
_PREFIXED = frozenset({"tools/call", "prompts/get"})
_PREFIXED_LISTS = frozenset({"tools/list", "prompts/list"})


@dataclass(frozen=True, slots=True)
class Exposure:
    """One upstream's rules. `shown` is keyed by the server's own tool names."""

    tools: Globs = ALL
    prompts: Globs = ALL
    resources: Globs = ALL
    shown: Mapping[str, Shown] = field(default_factory=lambda: _NOTHING_SHOWN)
    #: Before every tool and prompt name clients see (`notes_`); "" for none.
    prefix: str = ""
    # Exposed name -> the server's own, for the tools shown under another name.
    _upstream: Mapping[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        renamed = {s.name: own for own, s in self.shown.items() if s.name and s.name != own}
        object.__setattr__(self, "_upstream", MappingProxyType(renamed))

    @property
    def everything(self) -> bool:
        """Whether the rules show everything as the server gives it (nothing to do)."""
        return (
            self.tools.everything
            and self.prompts.everything
            and self.resources.everything
            and not self.shown
            and not self.prefix
        )

    def globs(self, method: str) -> Globs:
        kind = _KIND.get(method)
        return getattr(self, kind) if kind is not None else ALL

    # -- names on the way in ---------------------------------------------------------------

    def upstream_name(self, method: str, name: str) -> str | None:
        """The server's own name (or URI) of what a client asks for by `name` in a request
        of `method` (`tools/call`, `prompts/get`, `resources/read`); None when it is hidden:
        the client must get exactly what an unknown name gets."""
        if self.prefix and method in _PREFIXED:
            if not name.startswith(self.prefix):
                return None
            name = name[len(self.prefix) :]
        if method == "tools/call":
            own = self._upstream.get(name, name)
            shown = self.shown.get(own)
            if own == name and shown is not None and shown.name and shown.name != own:
                return None  # a renamed tool answers to its new name only
            return own if self.tools.admits(own) else None
        return name if self.globs(method).admits(name) else None

    def shows(self, method: str, own: str) -> bool:
        """Whether what the server calls `own` (a name, a URI) is shown to clients."""
        return self.globs(method).admits(own)

    def exposed_name(self, own: str) -> str:
        """The name clients see a tool of the server's by."""
        shown = self.shown.get(own)
        return self.prefix + (shown.name if shown is not None and shown.name else own)

    # -- lists on the way out --------------------------------------------------------------

    def view(self, method: str, result: dict[str, Any]) -> dict[str, Any]:
        """A `method` list's result as clients see it: hidden entries left out, tools
        shown as the rules say. The result itself when nothing changes."""
        listed = LISTS.get(method)
        if listed is None or self.everything:
            return result
        entries = result.get(listed.member)
        if not isinstance(entries, list):
            return result
        globs = self.globs(method)
        kept: list[Any] = []
        for entry in entries:
            own = field_of(entry, listed.field)
            if own is None or not globs.admits(own):
                continue
            if method == "tools/list" and self._upstream.get(own, own) != own:
                continue  # the server's own tool of a name another is shown under
            if method == "tools/list" and own in self.shown:
                entry = _shown_as(entry, self.shown[own])
            if self.prefix and method in _PREFIXED_LISTS and isinstance(entry, dict):
                entry = {**entry, "name": self.prefix + entry["name"]}
            kept.append(entry)
        return {**result, listed.member: kept}

    def hides_any(self) -> bool:
        """Whether some name could be hidden (a call must then be checked)."""
        return not self.everything


def _shown_as(entry: dict[str, Any], shown: Shown) -> dict[str, Any]:
    entry = dict(entry)
    if shown.name:
        entry["name"] = shown.name
    if shown.title is not None:
        entry["title"] = shown.title
        annotations = entry.get("annotations")
        if isinstance(annotations, dict) and "title" in annotations:
            entry["annotations"] = {**annotations, "title": shown.title}
    if shown.description is not None:
        entry["description"] = shown.description
    return entry


def target_field(method: str) -> str | None:
    """The params member naming what a request is about (`name` or `uri`)."""
    return NAME_FIELD.get(method)


EVERYTHING = Exposure()
