"""An endpoint of several upstreams, sans-IO: its lists and its `server/discover` merged
from each upstream's, and which upstream serves a name or a URI.

Names (tools, prompts) and URIs (resources, templates) are told apart by the catalog's
lists as clients see them (each upstream's exposure rules, and its prefix, applied): a
name or URI listed by two upstreams is served by neither, left out of the merged list
and unknown to a call, so a call never reaches a server it was not meant for; an
upstream that cannot be asked keeps its names by its last list. Cache
hints combine to the shortest `ttlMs`, `private` if any part is.

Pure: results are dicts in and out; nothing is awaited.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from gateway.protocol.inbound import SERVER_INFO_KEY
from gateway.protocol.lists import field_of
from gateway.protocol.methods import LISTS


def entries(method: str, result: Mapping[str, Any]) -> list[Any]:
    """The entries of a `method` list's result (none when malformed)."""
    got = result.get(LISTS[method].member)
    return got if isinstance(got, list) else []


def shared(method: str, results: Iterable[Mapping[str, Any]]) -> set[str]:
    """The names (or URIs) more than one of `results` lists."""
    field = LISTS[method].field
    counts: Counter[str] = Counter()
    for result in results:
        counts.update({n for e in entries(method, result) if (n := field_of(e, field))})
    return {name for name, count in counts.items() if count > 1}


def merged_list(
    method: str,
    results: Mapping[str, Mapping[str, Any]],
    server_info: dict[str, Any],
    absent: Iterable[Mapping[str, Any]] = (),
) -> tuple[dict[str, Any], set[str]]:
    """One list from each upstream's result (by upstream, in the endpoint's order), and
    the names left out because two upstreams list them; `absent`: the last lists of the
    upstreams left out (they could not be asked), whose names still count as theirs, so
    that a name they share is not served by another while they are down. Cache hints:
    the shortest `ttlMs`, `private` if any part is (none of `results`: nothing to cache)."""
    field, member = LISTS[method].field, LISTS[method].member
    dropped = shared(method, [*results.values(), *absent])
    kept = [
        e
        for result in results.values()
        for e in entries(method, result)
        if field_of(e, field) not in dropped
    ]
    merged: dict[str, Any] = {member: kept, "resultType": "complete"}
    merged.update(combined_cache(results.values()))
    merged["_meta"] = {SERVER_INFO_KEY: server_info}
    return merged, dropped


#: What only a 2026 result carries (`legacy_result` leaves it out).
_MODERN_ONLY = ("resultType", "ttlMs", "cacheScope")


def legacy_result(result: Mapping[str, Any]) -> dict[str, Any]:
    """A merged result as a 2025 client gets it: without the members only 2026 results
    carry, nor the endpoint's `serverInfo` in `_meta` (a 2025 client had it at
    `initialize`)."""
    out = {k: v for k, v in result.items() if k not in _MODERN_ONLY}
    meta = out.get("_meta")
    if isinstance(meta, dict):
        meta = {k: v for k, v in meta.items() if k != SERVER_INFO_KEY}
        if meta:
            out["_meta"] = meta
        else:
            del out["_meta"]
    return out


def combined_cache(results: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """`ttlMs` and `cacheScope` of a result made of `results`: the shortest, and
    `private` unless every part is `public`."""
    ttls, scopes = [], []
    for result in results:
        ttl = result.get("ttlMs")
        ttls.append(ttl if isinstance(ttl, int) and not isinstance(ttl, bool) else 0)
        scopes.append(result.get("cacheScope"))
    public = bool(scopes) and all(s == "public" for s in scopes)
    return {"ttlMs": min(ttls, default=0), "cacheScope": "public" if public else "private"}


def owners(method: str, target: str, listed: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The upstreams whose `method` list (as clients see it) holds `target`, a name or a
    URI; for `resources/templates/list`, those with a template `target` matches."""
    field = LISTS[method].field
    found = []
    for upstream, result in listed.items():
        for entry in entries(method, result):
            value = field_of(entry, field)
            if value is None:
                continue
            if value == target or (
                method == "resources/templates/list" and template_matches(value, target)
            ):
                found.append(upstream)
                break
    return found


_EXPRESSION = re.compile(r"\{([+#./;?&]?)[^}]*\}")


def template_matches(template: str, uri: str) -> bool:
    """Whether `uri` is one expansion of the RFC 6570 URI template `template` (a simple
    expression matches one path segment or more of unreserved characters; `+` and `#`
    expressions anything; a query expression the rest)."""
    pattern, last = [], 0
    for found in _EXPRESSION.finditer(template):
        pattern.append(re.escape(template[last : found.start()]))
        operator = found.group(1)
        pattern.append(".*" if operator in ("+", "#", "?", "&") else "[^/?#]*")
        last = found.end()
    pattern.append(re.escape(template[last:]))
    return re.fullmatch("".join(pattern), uri) is not None


def merged_discover(
    results: Mapping[str, Mapping[str, Any]], server_info: dict[str, Any]
) -> dict[str, Any]:
    """`server/discover` of an endpoint from each upstream's: the revisions every one
    supports, every capability any declares (a capability's own flags merged: change
    notifications and resource subscriptions where any upstream's listen delivers them),
    the instructions of each under its upstream's name, the cache hints combined."""
    versions: list[str] | None = None
    for result in results.values():
        supported = result.get("supportedVersions")
        supported = supported if isinstance(supported, list) else []
        versions = supported if versions is None else [v for v in versions if v in supported]
    capabilities = _capabilities(results)
    instructions = _instructions(results)
    merged: dict[str, Any] = {
        "supportedVersions": versions or [],
        "capabilities": capabilities,
        "resultType": "complete",
    }
    if instructions:
        merged["instructions"] = "\n\n".join(instructions)
    merged.update(combined_cache(results.values()))
    merged["_meta"] = {SERVER_INFO_KEY: server_info}
    return merged


def merged_initialize(
    results: Mapping[str, Mapping[str, Any]], server_info: dict[str, Any]
) -> dict[str, Any]:
    """A 2025 client's `initialize` result on an endpoint, from each upstream's (each
    opened a session of the client's): the oldest revision any agreed to (what every one
    speaks), every capability any declares (a capability's own flags merged), the
    endpoint's `serverInfo`, the instructions of each under its upstream's name."""
    agreed = [v for r in results.values() if isinstance(v := r.get("protocolVersion"), str)]
    merged: dict[str, Any] = {
        "protocolVersion": min(agreed) if agreed else "",
        "capabilities": _capabilities(results),
        "serverInfo": server_info,
    }
    instructions = _instructions(results)
    if instructions:
        merged["instructions"] = "\n\n".join(instructions)
    return merged


def _capabilities(results: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Every capability any of `results` declares, a capability's own flags merged."""
    capabilities: dict[str, Any] = {}
    for result in results.values():
        caps = result.get("capabilities")
        for name, value in (caps if isinstance(caps, dict) else {}).items():
            before = capabilities.get(name)
            if isinstance(before, dict) and isinstance(value, dict):
                capabilities[name] = {**before, **value}
            else:
                capabilities.setdefault(name, value)
    return capabilities


def _instructions(results: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Each upstream's instructions, under its name."""
    said = ((upstream, r.get("instructions")) for upstream, r in results.items())
    return [f"{upstream}: {text}" for upstream, text in said if isinstance(text, str) and text]


def endpoint_info(path: str, upstreams: Iterable[str], version: str) -> dict[str, Any]:
    """The `serverInfo` of an endpoint: the upstreams it serves, named."""
    names = list(upstreams)
    return {
        "name": "+".join(names),
        "title": f"{', '.join(names)} (mrtr-gateway {path})",
        "version": version,
    }
