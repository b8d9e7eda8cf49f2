"""An endpoint of several upstreams at the HTTP tier, in process: two Streamable HTTP
servers the test plays (`StreamableServer`) behind one path. Its tools are listed with
their prefixes and the cache hints combined, a call reaches its own server by its own
name, `server/discover` names both, a server that cannot be reached fails the list
under `on_upstream_down: fail`, and 2025 clients are refused clearly."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from gateway.app import build_app
from gateway.protocol.inbound import SERVER_INFO_KEY
from gateway.web.serving import serve
from tests.support.inprocess import Gateway, gateway_config
from tests.support.legacy_wire import initialize, send
from tests.support.streamable import StreamableServer
from tests.support.wire import rpc

DONE = {"content": [{"type": "text", "text": "done"}], "isError": False}


def server(*tools: str) -> StreamableServer:
    results = {"tools/list": {"tools": [{"name": t, "inputSchema": {}} for t in tools]}}
    return StreamableServer({**results, "tools/call": DONE})


@pytest.fixture
async def servers() -> AsyncIterator[tuple[StreamableServer, StreamableServer]]:
    notes, tickets = await server("search", "add").start(), await server("search").start()
    yield notes, tickets
    await notes.stop()
    await tickets.stop()


async def endpoint(
    notes: StreamableServer, tickets: StreamableServer, ttl_s: float = 5, **joined: Any
) -> AsyncIterator[Gateway]:
    """A gateway serving both on /mcp; `ttl_s`: how long tickets' catalog keeps a list."""
    config = gateway_config(
        notes.url,
        upstream={"name": "notes", "cache": {"scope": "public"}},
        upstreams_extra=[
            {
                "name": "tickets",
                "url": tickets.url,
                "catalog": {"ttl_s": ttl_s},
                "cache": {"scope": "private"},
            }
        ],
        endpoints=[{"path": "/mcp", "upstreams": ["notes", "tickets"], **joined}],
    )
    front = await serve(build_app(config), "127.0.0.1", 0, idle_timeout_s=75)
    http = aiohttp.ClientSession()
    try:
        yield Gateway(front, http, notes.url)
    finally:
        await http.close()
        await front.close()


@pytest.fixture
async def gateway(servers: tuple[StreamableServer, StreamableServer]) -> AsyncIterator[Gateway]:
    async for gw in endpoint(*servers):
        yield gw


def calls(upstream: StreamableServer) -> list[str]:
    return [m["params"]["name"] for m in upstream.received if m.get("method") == "tools/call"]


async def test_the_tools_of_both_are_listed_prefixed_with_the_cache_hints_combined(
    gateway: Gateway,
) -> None:
    status, reply, _ = await gateway.post(rpc("tools/list"))
    assert status == 200, reply
    result = reply["result"]
    assert [t["name"] for t in result["tools"]] == ["notes_search", "notes_add", "tickets_search"]
    assert 0 < result["ttlMs"] <= 5000  # tickets' catalog keeps its list 5 s
    assert result["cacheScope"] == "private"  # tickets' is
    assert result["_meta"][SERVER_INFO_KEY]["name"] == "notes+tickets"


async def test_a_call_reaches_its_own_server_by_its_own_name(
    gateway: Gateway, servers: tuple[StreamableServer, StreamableServer]
) -> None:
    notes, tickets = servers
    for name in ("tickets_search", "notes_add"):
        status, reply, _ = await gateway.post(rpc("tools/call", {"name": name, "arguments": {}}))
        assert status == 200 and reply["result"]["content"][0]["text"] == "done", reply
    assert (calls(notes), calls(tickets)) == (["add"], ["search"])
    status, reply, _ = await gateway.post(rpc("tools/call", {"name": "search", "arguments": {}}))
    assert status == 400 and reply["error"]["code"] == -32602  # no prefix: no upstream's
    assert (calls(notes), calls(tickets)) == (["add"], ["search"])


async def test_discover_names_both_upstreams_and_offers_2026_only(gateway: Gateway) -> None:
    status, reply, _ = await gateway.post(rpc("server/discover"))
    assert status == 200, reply
    result = reply["result"]
    assert result["supportedVersions"] == ["2026-07-28"]
    assert result["_meta"][SERVER_INFO_KEY]["title"] == "notes, tickets (mrtr-gateway /mcp)"
    assert result["capabilities"]["tools"] == {}  # neither tells of changes


async def test_under_fail_a_server_that_cannot_be_reached_fails_the_list(
    servers: tuple[StreamableServer, StreamableServer],
) -> None:
    notes, tickets = servers
    async for gw in endpoint(notes, tickets, on_upstream_down="fail"):
        await tickets.stop()
        status, reply, _ = await gw.post(rpc("prompts/list"))  # not yet in the catalog
        assert status == 502 and reply["error"]["code"] == -32603, reply


async def test_a_2025_client_is_told_it_is_not_yet_served_here(gateway: Gateway) -> None:
    opened = await send(gateway.http, gateway.url, initialize())
    assert opened.status == 400
    assert "not yet served on an endpoint of several upstreams" in opened.last["error"]["message"]
    async with gateway.http.delete(gateway.url, headers={"Mcp-Session-Id": "x"}) as deleted:
        assert deleted.status == 405 and deleted.headers["Allow"] == "POST"


async def test_a_completion_goes_to_the_server_of_its_prompt_by_its_own_name(
    gateway: Gateway, servers: tuple[StreamableServer, StreamableServer]
) -> None:
    notes, tickets = servers
    ref = {"type": "ref/prompt", "name": "tickets_interview"}
    asked = {"ref": ref, "argument": {"name": "topic", "value": "a"}}
    status, reply, _ = await gateway.post(rpc("completion/complete", asked))
    assert status == 200, reply
    (sent,) = [m for m in tickets.received if m.get("method") == "completion/complete"]
    assert sent["params"]["ref"] == {"type": "ref/prompt", "name": "interview"}
    assert not [m for m in notes.received if m.get("method") == "completion/complete"]


async def test_with_bare_names_a_down_servers_shared_name_stays_served_by_neither(
    servers: tuple[StreamableServer, StreamableServer],
) -> None:
    notes, tickets = servers
    async for gw in endpoint(notes, tickets, ttl_s=0.001, prefix="none"):
        _, reply, _ = await gw.post(rpc("tools/list"))
        assert [t["name"] for t in reply["result"]["tools"]] == ["add"]  # search: both's
        await tickets.stop()
        _, reply, _ = await gw.post(rpc("tools/list"))
        assert [t["name"] for t in reply["result"]["tools"]] == ["add"]
        assert reply["result"]["ttlMs"] == 0
        status, reply, _ = await gw.post(rpc("tools/call", {"name": "search", "arguments": {}}))
        assert status == 400 and reply["error"]["code"] == -32602  # not notes' alone now
        status, reply, _ = await gw.post(rpc("tools/call", {"name": "add", "arguments": {}}))
        assert status == 200 and reply["result"]["content"][0]["text"] == "done"
    assert calls(notes) == ["add"]


async def test_a_resource_no_server_lists_is_not_found_with_its_uri(gateway: Gateway) -> None:
    """As 2026-07-28 asks of a resource not found (SEP-2164): -32602, the URI in `data`."""
    uri = "test://nonexistent"
    status, reply, _ = await gateway.post(rpc("resources/read", {"uri": uri}))
    assert status == 400, reply
    assert reply["error"]["code"] == -32602 and reply["error"]["data"] == {"uri": uri}
