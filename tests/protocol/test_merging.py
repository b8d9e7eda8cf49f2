"""An endpoint's lists and `server/discover` merged from its upstreams', and which
upstream serves a name or a URI, sans-IO."""

from __future__ import annotations

import pytest

from gateway.protocol.inbound import SERVER_INFO_KEY
from gateway.protocol.merging import (
    combined_cache,
    endpoint_info,
    merged_discover,
    merged_list,
    owners,
    template_matches,
)

INFO = endpoint_info("/mcp", ["notes", "tickets"], "0.2.0")


def test_lists_are_joined_in_the_endpoints_order_and_a_shared_name_is_left_out() -> None:
    notes = {"tools": [{"name": "search"}, {"name": "add_note"}], "ttlMs": 5000}
    tickets = {"tools": [{"name": "search"}, {"name": "open"}], "ttlMs": 900}
    merged, dropped = merged_list("tools/list", {"notes": notes, "tickets": tickets}, INFO)
    assert [t["name"] for t in merged["tools"]] == ["add_note", "open"]
    assert dropped == {"search"}
    assert (merged["ttlMs"], merged["cacheScope"]) == (900, "private")
    assert merged["resultType"] == "complete"
    assert merged["_meta"][SERVER_INFO_KEY]["name"] == "notes+tickets"


def test_a_name_an_absent_upstream_last_listed_stays_shared() -> None:
    notes = {"tools": [{"name": "search"}, {"name": "add_note"}]}
    tickets_before = {"tools": [{"name": "search"}]}
    merged, dropped = merged_list("tools/list", {"notes": notes}, INFO, [tickets_before])
    assert [t["name"] for t in merged["tools"]] == ["add_note"] and dropped == {"search"}


@pytest.mark.parametrize(
    ("parts", "hints"),
    [
        (
            [{"ttlMs": 100, "cacheScope": "public"}, {"ttlMs": 50, "cacheScope": "public"}],
            (50, "public"),
        ),
        (
            [{"ttlMs": 100, "cacheScope": "public"}, {"ttlMs": 500, "cacheScope": "private"}],
            (100, "private"),
        ),
        ([{"ttlMs": 100, "cacheScope": "public"}, {}], (0, "private")),  # a part without hints
        ([], (0, "private")),
    ],
)
def test_cache_hints_combine_to_the_shortest_and_private_if_any_part_is(
    parts: list[dict[str, object]], hints: tuple[int, str]
) -> None:
    combined = combined_cache(parts)
    assert (combined["ttlMs"], combined["cacheScope"]) == hints


def test_the_owner_of_a_name_or_uri_is_each_upstream_that_lists_it() -> None:
    listed = {
        "notes": {"resources": [{"uri": "note://1"}, {"uri": "shared://x"}]},
        "tickets": {"resources": [{"uri": "ticket://9"}, {"uri": "shared://x"}]},
    }
    assert owners("resources/list", "note://1", listed) == ["notes"]
    assert owners("resources/list", "shared://x", listed) == ["notes", "tickets"]
    assert owners("resources/list", "none://", listed) == []
    templates = {
        "notes": {"resourceTemplates": [{"uriTemplate": "note://{id}"}]},
        "tickets": {"resourceTemplates": [{"uriTemplate": "ticket://{project}/{id}"}]},
    }
    assert owners("resources/templates/list", "ticket://ops/7", templates) == ["tickets"]
    assert owners("resources/templates/list", "note://7", templates) == ["notes"]


@pytest.mark.parametrize(
    ("template", "uri", "matches"),
    [
        ("note://{id}", "note://7", True),
        ("note://{id}", "note://a/b", False),  # a simple expression: one segment
        ("file:///{+path}", "file:///a/b/c", True),
        ("search://q{?term,page}", "search://q?term=x&page=2", True),
        ("note://{id}.txt", "note://7.md", False),
    ],
)
def test_a_uri_matches_a_template_it_is_an_expansion_of(
    template: str, uri: str, matches: bool
) -> None:
    assert template_matches(template, uri) is matches


def test_discover_keeps_the_shared_revisions_every_capability_and_each_upstreams_words() -> None:
    notes = {
        "supportedVersions": ["2026-07-28"],
        "capabilities": {"tools": {"listChanged": True}, "prompts": {}},
        "instructions": "Notes first.",
        "ttlMs": 0,
        "cacheScope": "private",
    }
    tickets = {
        "supportedVersions": ["2026-07-28", "2025-11-25"],
        "capabilities": {"tools": {}, "resources": {"subscribe": True}, "completions": {}},
        "ttlMs": 0,
        "cacheScope": "private",
    }
    merged = merged_discover({"notes": notes, "tickets": tickets}, INFO)
    assert merged["supportedVersions"] == ["2026-07-28"]
    assert merged["capabilities"] == {
        "tools": {"listChanged": True},  # a listen of the endpoint delivers notes' changes
        "prompts": {},
        "resources": {"subscribe": True},  # and tickets' resource updates
        "completions": {},
    }
    assert merged["instructions"] == "notes: Notes first."
    assert merged["_meta"][SERVER_INFO_KEY] == {
        "name": "notes+tickets",
        "title": "notes, tickets (mrtr-gateway /mcp)",
        "version": "0.2.0",
    }
