"""Reading `endpoints[]`: several upstreams served on one path, each entry checked (its
path, its upstreams named once, its prefix, separator and failure mode).

Which path then serves each upstream, and the prefix each is shown with, is
`gateway.config.paths`'.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.config.section import Section
from gateway.errors import ConfigError

PREFIX_ALWAYS = "always"  # `endpoints[].prefix`: `<upstream><separator><name>`
PREFIX_NONE = "none"  # bare names; a name two upstreams share is served by neither
PREFIXES = (PREFIX_ALWAYS, PREFIX_NONE)
DOWN_OMIT = "omit"  # `endpoints[].on_upstream_down`: a list is served without it
DOWN_FAIL = "fail"  # the list fails
ON_DOWN = (DOWN_OMIT, DOWN_FAIL)


@dataclass(frozen=True, slots=True, kw_only=True)
class EndpointConfig:
    """Several upstreams served on one path: a client of either era sees one server, its
    lists merged and each call sent to the upstream whose name it calls. Each upstream keeps
    its own settings (transport, pool, credentials, tools, exposure rules); its own
    `path` is left out (it is served here)."""

    path: str = field(default="", metadata={"default": "required"})
    """The gateway path serving the endpoint, e.g. `/mcp`."""
    upstreams: tuple[str, ...] = field(default=(), metadata={"default": "required"})
    """The upstreams served on it, by name (each on one endpoint at most)."""
    prefix: str = field(default="", metadata={"default": "always (none with one upstream)"})
    """`always`: clients see each tool and prompt as `<upstream><separator><name>`;
    `none`: as the servers name them, a name two upstreams share served by neither
    (`endpoint_name_shared` in the log). Left out: `always` with several upstreams,
    `none` with one (as that upstream is served on a path of its own). Write it when an
    endpoint may grow: names change when a prefix comes or goes."""
    separator: str = "_"
    """Between the upstream's name and a tool's or prompt's own: 1 to 8 of letters,
    digits, `_`, `-` and `.` (what a tool name may hold)."""
    on_upstream_down: str = DOWN_OMIT
    """`omit`: a list is served without an upstream that cannot be reached (`ttlMs: 0`,
    `endpoint_upstream_omitted` in the log), and its calls fail with 502; `fail`: the
    list fails too."""

    @property
    def prefixed(self) -> bool:
        return self.prefix == PREFIX_ALWAYS or (not self.prefix and len(self.upstreams) > 1)

    @property
    def several(self) -> bool:
        """Whether it serves more than one upstream (a single one is served as on a path
        of its own, prefixed if `prefix: always` says so)."""
        return len(self.upstreams) > 1


#: A separator is what a tool name may hold (the spec: letters, digits, `_`, `-`, `.`).
_SEPARATOR = re.compile(r"^[A-Za-z0-9_.-]{1,8}$")


Indexed = list[tuple[int, EndpointConfig]]


def parse_endpoints(root: Section, names: Mapping[str, int]) -> Indexed:
    """The `endpoints[]` entries that could be read, with their index, naming the
    upstreams `names` holds (by name, with their index); the mistakes are kept in the
    reading's problems.
    """
    problems = root.problems
    assert problems is not None
    items = root.get("endpoints", list) or []
    endpoints: Indexed = []
    for index, item in enumerate(items):
        at = f"endpoints[{index}]"
        read = problems.attempt(functools.partial(_endpoint, root, item, at, names))
        if read is not None:
            endpoints.append((index, read))
    problems.attempt(lambda: _each_upstream_once(endpoints))
    return endpoints


def _endpoint(root: Section, item: Any, at: str, names: Mapping[str, int]) -> EndpointConfig:
    sec = root.child(item, at)
    values = sec.scalars(EndpointConfig)
    members = sec.raw("upstreams")
    sec.done()
    path = values.get("path", "")
    if not path.startswith("/"):
        raise ConfigError(f"{sec.at('path')}: the gateway path serving it is required, e.g. /mcp")
    if not isinstance(members, list) or not members or not all(isinstance(m, str) for m in members):
        raise ConfigError(
            f"{sec.at('upstreams')}: a list of the upstreams it serves, by name, e.g. "
            "[notes, tickets]"
        )
    for member in members:
        if member not in names:
            raise ConfigError(
                f"{sec.at('upstreams')}: no upstream is named {member!r} "
                f"(upstreams: {', '.join(sorted(names)) or 'none read'})"
            )
    if len(set(members)) != len(members):
        raise ConfigError(f"{sec.at('upstreams')}: an upstream is named twice")
    endpoint = EndpointConfig(**values, upstreams=tuple(members))
    if endpoint.prefix and endpoint.prefix not in PREFIXES:
        raise ConfigError(f"{sec.at('prefix')}: must be {' or '.join(PREFIXES)}")
    if not _SEPARATOR.match(endpoint.separator):
        raise ConfigError(
            f"{sec.at('separator')}: 1 to 8 of letters, digits, '_', '-' or '.' (what a "
            "tool name may hold), e.g. '_'"
        )
    if endpoint.on_upstream_down not in ON_DOWN:
        raise ConfigError(f"{sec.at('on_upstream_down')}: must be {' or '.join(ON_DOWN)}")
    if endpoint.prefixed:
        prefixes = sorted(m + endpoint.separator for m in members)
        for shorter, longer in zip(prefixes, prefixes[1:], strict=False):
            if longer.startswith(shorter):
                raise ConfigError(
                    f"{sec.at('upstreams')}: the prefix {longer!r} begins with {shorter!r}: "
                    "a name could belong to either upstream; rename one, or choose another "
                    "separator"
                )
    return endpoint


def _each_upstream_once(endpoints: Indexed) -> None:
    on: dict[str, int] = {}
    for index, endpoint in endpoints:
        for member in endpoint.upstreams:
            if member in on:
                raise ConfigError(
                    f"endpoints[{index}].upstreams: {member!r} is served by "
                    f"endpoints[{on[member]}] already; an upstream is on one endpoint at most"
                )
            on[member] = index
