"""Which path serves each upstream: an upstream named by an endpoint is served on the
endpoint's path, its entry given that path and, on an endpoint that prefixes, its prefix
(`UpstreamConfig.prefix`), so everything that reads an upstream's path or shown names
reads what clients see; and every path is served once, by an upstream on no endpoint or
by one endpoint.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gateway.config.endpoints import Indexed
from gateway.config.model import UpstreamConfig
from gateway.config.section import Problems, Section
from gateway.errors import ConfigError

Entries = list[tuple[int, UpstreamConfig]]


def served_paths(root: Section, entries: Entries, endpoints: Indexed) -> Entries:
    """The upstreams' entries with each endpoint member's path and prefix set; the
    mistakes (a member's own path, a path served twice) kept in the reading's problems."""
    problems = root.problems
    assert problems is not None
    entries = _served_on_endpoints(root, entries, endpoints, problems)
    problems.attempt(lambda: _paths_once(entries, endpoints))
    return entries


def _served_on_endpoints(
    root: Section,
    entries: Entries,
    endpoints: Indexed,
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


def _paths_once(entries: Entries, endpoints: Indexed) -> None:
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
