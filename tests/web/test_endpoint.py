"""An endpoint of several upstreams at the HTTP tier, in process: two Streamable HTTP
servers the test plays (`StreamableServer`) behind one path. Its tools are listed with
their prefixes and the cache hints combined, a call reaches its own server by its own
name, `server/discover` names both, a server that cannot be reached fails the list
under `on_upstream_down: fail`. A 2025 client holds one session with each server's behind
it: its calls reach their server, a server's question and event ids are marked with their
upstream and its answer goes back to that server with its own id, and the GET stream
merges both servers' streams."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import StreamReader

from gateway.aio import spawn
from gateway.app import build_app
from gateway.protocol import sse
from gateway.protocol.inbound import SERVER_INFO_KEY
from gateway.web.serving import serve
from tests.support.inprocess import Gateway, gateway_config
from tests.support.legacy_wire import HEADERS, call, initialize, request, send
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


async def next_event(content: StreamReader) -> sse.SseEvent:
    """The next SSE event with data on a response's body."""
    parser = sse.Parser()
    while True:
        line = await asyncio.wait_for(content.readline(), 10)
        assert line, "the stream ended"
        for event in parser.feed(line):
            if event.data:
                return event


def resumed_at(upstream: StreamableServer, client: str) -> list[str | None]:
    """The `Last-Event-ID` of each GET of `client`'s session at `upstream`, in order."""
    own = upstream.session_of(client)
    return [last for got, last in zip(upstream.gets, upstream.resumed, strict=True) if got == own]


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


async def test_discover_names_both_upstreams_and_offers_both_eras(gateway: Gateway) -> None:
    status, reply, _ = await gateway.post(rpc("server/discover"))
    assert status == 200, reply
    result = reply["result"]
    assert result["supportedVersions"][0] == "2026-07-28"
    assert "2025-11-25" in result["supportedVersions"]  # its legacy lane serves 2025 clients
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


async def test_a_2025_client_holds_one_session_with_each_servers_behind_it(
    gateway: Gateway, servers: tuple[StreamableServer, StreamableServer]
) -> None:
    notes, tickets = servers
    opened = await send(gateway.http, gateway.url, initialize(capabilities={"elicitation": {}}))
    assert opened.status == 200, opened.last
    session = opened.headers["Mcp-Session-Id"]
    assert session.startswith("le1.")  # the gateway's: no server's own id is shown
    result = opened.last["result"]
    assert result["serverInfo"]["name"] == "notes+tickets"
    assert result["protocolVersion"] == "2025-11-25"
    # Each server opened a session of the client's own (beside the gateway's), at once.
    assert notes.session_of("pytest-legacy") and tickets.session_of("pytest-legacy")
    listed = await send(gateway.http, gateway.url, request("tools/list"), session=session)
    assert [t["name"] for t in listed.last["result"]["tools"]] == [
        "notes_search",
        "notes_add",
        "tickets_search",
    ]
    assert "resultType" not in listed.last["result"]  # a 2025 result
    called = await send(gateway.http, gateway.url, call("tickets_search"), session=session)
    assert called.last["result"] == DONE
    (sent,) = [m for m in tickets.received if m.get("method") == "tools/call"]
    assert sent["params"]["name"] == "search"
    assert not [m for m in notes.received if m.get("method") == "tools/call"]


async def test_a_servers_question_and_its_events_are_marked_and_its_answer_goes_back_to_it(
    servers: tuple[StreamableServer, StreamableServer],
) -> None:
    notes, tickets = servers
    tickets.streamed = frozenset({"tools/call", "GET"})
    notes.streamed = frozenset({"GET"})
    async for gw in endpoint(notes, tickets):
        session = (await send(gw.http, gw.url, initialize())).headers["Mcp-Session-Id"]
        headers = {**HEADERS, "Mcp-Session-Id": session}
        # The stream's head comes with its first event: the POST is sent, then spoken on.
        posting = spawn(
            gw.http.post(gw.url, json=call("tickets_search"), headers=headers), name="posting"
        )
        stream = await tickets.next_stream("tools/call")
        asked = {"jsonrpc": "2.0", "id": 7, "method": "elicitation/create", "params": {}}
        await stream.send(asked, event_id="e1")
        async with await posting as posted:
            event = await next_event(posted.content)
            assert event.id == "tickets/e1"
            relayed = json.loads(event.data)
            assert relayed["id"] != 7 and relayed["method"] == "elicitation/create"
            answer = {"jsonrpc": "2.0", "id": relayed["id"], "result": {"action": "cancel"}}
            back = await send(gw.http, gw.url, answer, session=session)
            assert back.status == 202
            (given,) = [m for m in tickets.received if "result" in m]
            assert given["id"] == 7  # the server's own id again
            assert not [m for m in notes.received if "result" in m]
            await stream.respond(DONE)
            done = json.loads((await next_event(posted.content)).data)
            assert done == {"jsonrpc": "2.0", "id": 1, "result": DONE}
        # The GET stream: both servers' events on one, each marked; resumed at one server.
        get_headers = {"Accept": "text/event-stream", "Mcp-Session-Id": session}
        async with gw.http.get(gw.url, headers=get_headers) as got:
            assert got.status == 200
            on_notes = await notes.next_stream("GET", session=notes.session_of("pytest-legacy"))
            on_tickets = await tickets.next_stream(
                "GET", session=tickets.session_of("pytest-legacy")
            )
            changed = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
            await on_notes.send(changed, event_id="n1")
            roots = {"jsonrpc": "2.0", "id": 3, "method": "roots/list"}
            await on_tickets.send(roots, event_id="t1")
            seen = [await next_event(got.content) for _ in range(2)]
            by_id = {e.id: json.loads(e.data) for e in seen}
            assert by_id["notes/n1"] == changed
            assert by_id["tickets/t1"]["method"] == "roots/list"
            assert by_id["tickets/t1"]["id"] != 3
            on_notes.end()
            on_tickets.end()
        resumed = {**get_headers, "Last-Event-ID": "notes/n1"}
        async with gw.http.get(gw.url, headers=resumed) as again:
            assert again.status == 200
            (await notes.next_stream("GET", session=notes.session_of("pytest-legacy"))).end()
        # An event id no server of the session gave: both streams anew, not a 404.
        unknown = {**get_headers, "Last-Event-ID": "nobody/7"}
        async with gw.http.get(gw.url, headers=unknown) as anew:
            assert anew.status == 200
            for upstream in (notes, tickets):
                own = upstream.session_of("pytest-legacy")
                (await upstream.next_stream("GET", session=own)).end()
        # The client's GETs at each server: both, the one resumed from its id, both again.
        assert resumed_at(notes, "pytest-legacy") == [None, "n1", None]
        assert resumed_at(tickets, "pytest-legacy") == [None, None]


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
