"""Reading `endpoints[]`: several upstreams served on one path, and which path serves
each upstream.

An upstream named by an endpoint is served on the endpoint's path: its entry is given
that path and, on an endpoint that prefixes, its prefix (`UpstreamConfig.prefix`), so
everything that reads an upstream's path or shown names reads what clients see. The
paths of upstreams on no endpoint, and of the endpoints, are each served once.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

from gateway.config.model import (
    ON_DOWN,
    PREFIXES,
    EndpointConfig,
    UpstreamConfig,
)
from gateway.config.section import Problems, Section
from gateway.errors import ConfigError

#: A separator is what a tool name may hold (the spec: letters, digits, `_`, `-`, `.`).
_SEPARATOR = re.compile(r"^[A-Za-z0-9_.-]{1,8}$")

Entries = list[tuple[int, UpstreamConfig]]


def parse_endpoints(root: Section, entries: Entries) -> tuple[tuple[EndpointConfig, ...], Entries]:
    """The `endpoints[]` entries that could be read, and the upstreams' entries with each
    member's path and prefix set; the mistakes are kept in the reading's problems, and
    every path checked to be served once.
    """
    problems = root.problems
    assert problems is not None
    items = root.get("endpoints", list) or []
    names = {u.name: i for i, u in entries}
    endpoints: list[tuple[int, EndpointConfig]] = []
    for index, item in enumerate(items):
        at = f"endpoints[{index}]"
        read = problems.attempt(functools.partial(_endpoint, root, item, at, names))
        if read is not None:
            endpoints.append((index, read))
    problems.attempt(lambda: _each_upstream_once(endpoints))
    entries = _served_on_endpoints(root, entries, endpoints, problems)
    problems.attempt(lambda: _paths_once(entries, endpoints))
    return tuple(e for _, e in endpoints), entries


def _endpoint(root: Section, item: Any, at: str, names: dict[str, int]) -> EndpointConfig:
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


def _each_upstream_once(endpoints: list[tuple[int, EndpointConfig]]) -> None:
    on: dict[str, int] = {}
    for index, endpoint in endpoints:
        for member in endpoint.upstreams:
            if member in on:
                raise ConfigError(
                    f"endpoints[{index}].upstreams: {member!r} is served by "
                    f"endpoints[{on[member]}] already; an upstream is on one endpoint at most"
                )
            on[member] = index


def _served_on_endpoints(
    root: Section,
    entries: Entries,
    endpoints: list[tuple[int, EndpointConfig]],
    problems: Problems,
) -> Entries:
    """Each member's entry with its endpoint's path and prefix. A member that writes a
    path of its own other than its endpoint's is a mistake (it would not be served)."""
    items = root.raw("upstreams")
    on = {m: (i, e) for i, e in endpoints for m in e.upstreams}
    served = []
    for index, upstream in entries:
        found = on.get(upstream.name)
        if found is None:
            served.append((index, upstream))
            continue
        where, endpoint = found
        item: Any = items[index] if isinstance(items, list) else None
        if isinstance(item, dict) and "path" in item and item["path"] != endpoint.path:
            problems.add(
                f"upstreams[{index}].path: {upstream.name} is served on "
                f"endpoints[{where}].path ({endpoint.path}); remove its own path"
            )
        if endpoint.several and upstream.catalog.ttl_s <= 0:
            problems.add(
                f"upstreams[{index}].catalog.ttl_s: {upstream.name} is on an endpoint of "
                "several upstreams, whose lists are merged from the catalog; give it a ttl_s "
                "above 0"
            )
        prefix = upstream.name + endpoint.separator if endpoint.prefixed else ""
        served.append((index, dataclasses.replace(upstream, path=endpoint.path, prefix=prefix)))
    return served


def _paths_once(entries: Entries, endpoints: list[tuple[int, EndpointConfig]]) -> None:
    """Every path served once: by an upstream on no endpoint, or by one endpoint.

    Raises:
        ConfigError: naming the second.
    """
    members = {m for _, e in endpoints for m in e.upstreams}
    seen: dict[str, str] = {}
    for index, endpoint in endpoints:
        if endpoint.path in seen:
            raise ConfigError(
                f"endpoints[{index}].path: {endpoint.path!r} is served by {seen[endpoint.path]}"
            )
        seen[endpoint.path] = f"endpoints[{index}]"
    for index, upstream in entries:
        if upstream.name in members:
            continue
        if upstream.path in seen:
            raise ConfigError(
                f"upstreams[{index}].path: {upstream.path!r} is served by {seen[upstream.path]}; "
                "give it another path, or name it in that endpoint's upstreams"
            )
        seen[upstream.path] = f"upstreams[{index}]"
