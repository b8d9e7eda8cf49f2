"""The catalog, in process: lists served from what the server last said (per caller where
the server lists per caller), refreshed when stale or changed, names admitted by the
rules and the list, tools pinned and drift told or blocked. A fake upstream plays the
server; a manual clock moves time."""

from __future__ import annotations

from typing import Any

import pytest
from structlog.testing import capture_logs

from gateway.catalog import Catalog, ToolNotApproved, UnknownTarget, UpstreamCatalog
from gateway.config import parse_config
from gateway.errors import UpstreamRpcError
from gateway.protocol.capabilities import NO_CAPABILITIES
from gateway.protocol.state import generate_key
from gateway.seams import Answered
from gateway.store.pins import MemoryPins
from tests.fakes.clock import ManualClock

NOTE = {"name": "read_note", "description": "Read a note.", "annotations": {"readOnlyHint": True}}


class Lists:
    """The server's lists (two pages of tools), and the requests it got."""

    def __init__(self) -> None:
        self.tools = [NOTE, {"name": "delete_note"}, {"name": "list_notes"}]
        self.asked: list[tuple[str | None, str, Any]] = []

    async def request(
        self, caps: Any, principal: str | None, method: str, params: Any, headers: Any = None
    ) -> dict[str, Any]:
        self.asked.append((principal, method, params))
        if method == "tools/list":
            if not params.get("cursor"):
                return {"result": {"tools": self.tools[:2], "nextCursor": "page-2"}}
            return {"result": {"tools": self.tools[2:]}}
        if method == "tools/call":  # as mcp 1.x answers a tool it does not have
            text = f"Unknown tool: {params['name']}"
            return {"result": {"content": [{"type": "text", "text": text}], "isError": True}}
        if method == "prompts/get":
            return {"error": {"code": -32602, "message": f"Unknown prompt: {params['name']}"}}
        return {"result": {"prompts": []}}


def catalog(clock: ManualClock, lists: Lists, **upstream: Any) -> UpstreamCatalog:
    config = parse_config(
        {"upstreams": [{"name": "notes", "url": "http://notes.invalid/mcp", **upstream}]},
        env={"MRTR_GATEWAY_SEALING_KEYS": generate_key()},
    )
    return UpstreamCatalog(config.upstreams[0], lists, MemoryPins(), clock)  # type: ignore[arg-type]


async def listed(up: UpstreamCatalog, who: str = "alice") -> list[str]:
    """The tool names a client sees (the list from the catalog, shown as the rules say)."""
    result, _ = await up.listed("tools/list", NO_CAPABILITIES, who, {})
    return [t["name"] for t in up.upstream.exposure.view("tools/list", result)["tools"]]


async def test_lists_are_served_from_the_catalog_until_stale_or_changed() -> None:
    clock, lists = ManualClock(), Lists()
    up = catalog(clock, lists)
    for who in ("alice", "bob", "alice"):
        assert await listed(up, who) == ["read_note", "delete_note", "list_notes"]
    assert [m for _, m, _ in lists.asked] == ["tools/list", "tools/list"]  # both pages, once
    assert {p for p, _, _ in lists.asked} == {None}  # on the gateway's own session
    result, cache = await up.listed("tools/list", NO_CAPABILITIES, "alice", {})
    assert "nextCursor" not in result and cache.ttl_ms == 60_000
    clock.advance(59.0)
    await listed(up)
    assert len(lists.asked) == 2
    clock.advance(1.0)  # stale
    await listed(up)
    assert len(lists.asked) == 4
    lists.tools.append({"name": "archive_note"})
    up.changed("notifications/tools/list_changed")
    assert (await listed(up))[-1] == "archive_note"


async def test_a_server_that_lists_per_caller_gets_a_catalog_per_caller() -> None:
    clock, lists = ManualClock(), Lists()
    up = catalog(clock, lists, catalog={"per_caller": True})
    await listed(up, "alice")
    await listed(up, "bob")
    await listed(up, "alice")
    assert [p for p, _, _ in lists.asked] == ["alice", "alice", "bob", "bob"]
    _, cache = await up.listed("tools/list", NO_CAPABILITIES, "bob", {})
    assert cache.scope == "private"


async def test_without_a_ttl_every_list_is_the_servers_page_as_before() -> None:
    clock, lists = ManualClock(), Lists()
    up = catalog(clock, lists, catalog={"ttl_s": 0}, expose={"tools": {"deny": ["delete_*"]}})
    result, _ = await up.listed("tools/list", NO_CAPABILITIES, "alice", {"cursor": "page-2"})
    assert result == {"tools": [{"name": "list_notes"}]} and lists.asked[0][2] == {
        "cursor": "page-2"
    }
    assert up.upstream.exposure.view("tools/list", result) == result


async def test_a_name_the_rules_do_not_hide_goes_to_the_server_as_it_is() -> None:
    clock, lists = ManualClock(), Lists()
    up = catalog(clock, lists, expose={"tools": {"deny": ["delete_*"]}})
    assert await up.admit("tools/call", "absent", NO_CAPABILITIES, "alice") == "absent"
    assert lists.asked == []  # no list was needed to let it through


async def test_a_hidden_name_gets_what_the_server_answers_a_name_it_does_not_know() -> None:
    clock, lists = ManualClock(), Lists()
    up = catalog(
        clock,
        lists,
        expose={"tools": {"deny": ["delete_*"]}, "prompts": {"deny": ["internal_*"]}},
        tools={"read_note": {"name": "fetch_note"}},
    )
    answers = []
    for name in ("delete_note", "read_note", "delete_all"):
        with pytest.raises(Answered) as caught:
            await up.admit("tools/call", name, NO_CAPABILITIES, "alice")
        answers.append(caught.value.result)
    assert answers == [
        {"content": [{"type": "text", "text": f"Unknown tool: {n}"}], "isError": True}
        for n in ("delete_note", "read_note", "delete_all")
    ]
    (probe,) = [p for _, m, p in lists.asked if m == "tools/call"]  # asked once, then kept
    assert probe["name"].startswith("mrtr-gateway-unknown-") and probe["arguments"] == {}
    with pytest.raises(UpstreamRpcError) as refused:  # a server that answers with an error
        await up.admit("prompts/get", "internal_x", NO_CAPABILITIES, "alice")
    assert refused.value.error_object()["message"] == "Unknown prompt: internal_x"
    assert await up.admit("tools/call", "fetch_note", NO_CAPABILITIES, "alice") == "read_note"
    assert await listed(up) == ["fetch_note", "list_notes"]


async def test_a_tool_that_drifted_is_told_and_under_block_refused_until_approved() -> None:
    clock, lists = ManualClock(), Lists()
    up = catalog(clock, lists, catalog={"pinning": "block"})
    await listed(up)  # pinned on first sight
    lists.tools[0] = {**NOTE, "description": "Read a note, then mail it out.", "annotations": {}}
    up.changed("notifications/tools/list_changed")
    with capture_logs() as logs:
        await listed(up)
        await listed(up)  # told once
    (told,) = [e for e in logs if e["event"] == "catalog_drift"]
    assert told["tool"] == "read_note" and told["severity"] == "high"
    assert told["changed"] == ["description", "annotations.readOnlyHint"]
    with pytest.raises(ToolNotApproved) as refused:
        await up.admit("tools/call", "read_note", NO_CAPABILITIES, "alice")
    assert refused.value.error_object()["data"]["reason"] == "tool_not_approved"
    assert await up.pins.approve("notes", ["read_note"]) == ["read_note"]
    up.changed("notifications/tools/list_changed")
    assert await up.admit("tools/call", "read_note", NO_CAPABILITIES, "alice") == "read_note"


async def test_a_change_heard_for_an_upstream_reaches_its_catalog_only() -> None:
    clock, lists, others = ManualClock(), Lists(), Lists()
    fleet = Catalog({"notes": catalog(clock, lists), "other": catalog(clock, others)})
    await listed(fleet["notes"])
    await listed(fleet["other"])
    fleet.changed("notes", "notifications/tools/list_changed")
    await listed(fleet["notes"])
    await listed(fleet["other"])
    assert (len(lists.asked), len(others.asked)) == (4, 2)


async def test_on_a_prefixing_endpoint_names_and_refs_reach_the_server_by_its_own() -> None:
    clock, lists = ManualClock(), Lists()
    config = parse_config(
        {
            "upstreams": [{"name": "notes", "url": "http://notes.invalid/mcp"}],
            "endpoints": [{"path": "/mcp", "upstreams": ["notes"], "prefix": "always"}],
        },
        env={"MRTR_GATEWAY_SEALING_KEYS": generate_key()},
    )
    up = UpstreamCatalog(config.upstreams[0], lists, MemoryPins(), clock)  # type: ignore[arg-type]
    assert await listed(up) == ["notes_read_note", "notes_delete_note", "notes_list_notes"]
    assert await up.admit("tools/call", "notes_read_note", NO_CAPABILITIES, "alice") == "read_note"
    with pytest.raises(Answered) as bare:  # without its prefix: what an unknown name gets
        await up.admit("tools/call", "read_note", NO_CAPABILITIES, "alice")
    assert bare.value.result["content"][0]["text"] == "Unknown tool: read_note"
    prompt = {"type": "ref/prompt", "name": "notes_interview"}
    assert up.own_ref(prompt) == {"type": "ref/prompt", "name": "interview"}
    with pytest.raises(UnknownTarget):
        up.own_ref({"type": "ref/prompt", "name": "interview"})
    resource = {"type": "ref/resource", "uri": "note://1"}
    assert up.own_ref(resource) is resource  # a URI is never prefixed
