"""`endpoints[]`: several upstreams on one path, read and checked; which path serves each
upstream, and the prefix each is shown with."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import EndpointConfig, parse_config
from gateway.errors import ConfigError

NOTES = {"name": "notes", "url": "http://127.0.0.1:1/mcp"}
TICKETS = {"name": "tickets", "url": "http://127.0.0.1:2/mcp"}
JOINED = {"path": "/mcp", "upstreams": ["notes", "tickets"]}


def config(*endpoints: dict[str, Any], upstreams: list[dict[str, Any]] | None = None) -> Any:
    data = {"upstreams": upstreams or [NOTES, TICKETS], "endpoints": list(endpoints)}
    return parse_config(data, env={})


def test_an_endpoint_serves_its_upstreams_on_its_path_each_prefixed_by_default() -> None:
    loaded = config({**JOINED, "path": "/tools"})
    (endpoint,) = loaded.endpoints
    assert endpoint == EndpointConfig(path="/tools", upstreams=("notes", "tickets"))
    assert endpoint.prefixed and endpoint.on_upstream_down == "omit"
    notes, tickets = loaded.upstreams
    assert (notes.path, tickets.path) == ("/tools", "/tools")
    assert (notes.prefix, tickets.prefix) == ("notes_", "tickets_")
    assert notes.exposure.upstream_name("tools/call", "notes_search") == "search"
    assert loaded.routes() == [("/tools", (notes, tickets), endpoint)]


def test_prefix_none_and_another_separator_are_as_written() -> None:
    bare = config({**JOINED, "prefix": "none"})
    assert [u.prefix for u in bare.upstreams] == ["", ""]
    dashed = config({**JOINED, "separator": "--"})
    assert [u.prefix for u in dashed.upstreams] == ["notes--", "tickets--"]


def test_one_upstream_on_an_endpoint_is_unprefixed_unless_prefix_always_is_written() -> None:
    alone = config({"path": "/notes", "upstreams": ["notes"]})
    notes, tickets = alone.upstreams
    assert (notes.path, notes.prefix) == ("/notes", "")
    assert not alone.endpoints[0].several
    assert [r[0] for r in alone.routes()] == ["/notes", "/mcp"]  # tickets alone on its own
    always = config({"path": "/notes", "upstreams": ["notes"], "prefix": "always"})
    assert always.upstreams[0].prefix == "notes_"


def test_without_endpoints_every_upstream_is_served_on_its_own_path_as_before() -> None:
    loaded = config(upstreams=[NOTES, {**TICKETS, "path": "/tickets"}])
    assert loaded.endpoints == ()
    assert [(p, [u.name for u in ups], e) for p, ups, e in loaded.routes()] == [
        ("/mcp", ["notes"], None),
        ("/tickets", ["tickets"], None),
    ]


@pytest.mark.parametrize(
    ("endpoints", "upstreams", "message"),
    [
        (
            [{**JOINED, "upstreams": ["notes", "wiki"]}],
            None,
            r"endpoints\[0\].upstreams: no upstream is named 'wiki'",
        ),
        ([{**JOINED, "upstreams": []}], None, r"endpoints\[0\].upstreams: a list of the upstreams"),
        (
            [{**JOINED, "upstreams": ["notes", "notes"]}],
            None,
            r"endpoints\[0\].upstreams: an upstream is named twice",
        ),
        (
            [{"upstreams": ["notes"]}],
            None,
            r"endpoints\[0\].path: the gateway path serving it is required",
        ),
        (
            [JOINED, {"path": "/other", "upstreams": ["tickets"]}],
            None,
            r"endpoints\[1\].upstreams: 'tickets' is served by endpoints\[0\] already",
        ),
        (
            [{"path": "/mcp", "upstreams": ["notes"]}],
            None,
            r"upstreams\[1\].path: '/mcp' is served by endpoints\[0\]; give it another path",
        ),
        (
            [{"path": "/a", "upstreams": ["notes"]}, {"path": "/a", "upstreams": ["tickets"]}],
            None,
            r"endpoints\[1\].path: '/a' is served by endpoints\[0\]",
        ),
        (
            [{**JOINED, "prefix": "sometimes"}],
            None,
            r"endpoints\[0\].prefix: must be always or none",
        ),
        ([{**JOINED, "separator": "/"}], None, r"endpoints\[0\].separator: 1 to 8 of letters"),
        ([{**JOINED, "separator": ""}], None, r"endpoints\[0\].separator: 1 to 8 of letters"),
        (
            [{**JOINED, "on_upstream_down": "retry"}],
            None,
            r"endpoints\[0\].on_upstream_down: must be omit or fail",
        ),
        ([{**JOINED, "prefixes": "x"}], None, r"endpoints\[0\].prefixes: unknown key"),
        (
            [{"path": "/mcp", "upstreams": ["a", "a_b"]}],
            [{**NOTES, "name": "a"}, {**TICKETS, "name": "a_b"}],
            r"endpoints\[0\].upstreams: the prefix 'a_b_' begins with 'a_'",
        ),
        (
            [JOINED],
            [NOTES, {**TICKETS, "path": "/tickets"}],
            r"upstreams\[1\].path: tickets is served on endpoints\[0\].path \(/mcp\); remove",
        ),
        (
            [JOINED],
            [NOTES, {**TICKETS, "catalog": {"ttl_s": 0}}],
            r"upstreams\[1\].catalog.ttl_s: tickets is on an endpoint of several upstreams",
        ),
    ],
)
def test_a_mistaken_endpoint_is_refused_by_its_key_path(
    endpoints: list[dict[str, Any]], upstreams: list[dict[str, Any]] | None, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        config(*endpoints, upstreams=upstreams)
