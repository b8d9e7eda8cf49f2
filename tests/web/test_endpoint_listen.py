"""`subscriptions/listen` on an endpoint of several upstreams, in process: two Streamable
HTTP servers the test plays (`StreamableServer`) behind one path, each declaring part of
what a listen may ask. One listen subscribes through each: the acknowledgement holds only
what some server accepted (each resource URI asked of the server that lists it), the list
changes of both and a resource update of the second reach the one stream, `server/discover`
advertises what the two deliver together, a server that cannot be reached is left out
(`omit`) or fails the listen (`fail`), and a malformed filter is refused (-32602)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from gateway.app import COMPONENTS, build_app
from gateway.web.serving import serve
from tests.support.inprocess import Gateway, gateway_config
from tests.support.listens import SUBSCRIPTION_ID, listening
from tests.support.streamable import StreamableServer
from tests.support.wire import rpc

ACKNOWLEDGED = "notifications/subscriptions/acknowledged"


def server(uri: str, capabilities: dict[str, Any]) -> StreamableServer:
    """A server listing one resource, holding GET streams (the test speaks on them)."""
    results = {"resources/list": {"resources": [{"uri": uri, "name": uri}]}}
    return StreamableServer(results, streamed={"GET"}, capabilities=capabilities)


@pytest.fixture
async def servers() -> AsyncIterator[tuple[StreamableServer, StreamableServer]]:
    """notes tells of tool list changes; tickets of prompt list changes and of updates of
    subscribed resources. Neither tells of resource list changes."""
    notes = await server("note://a", {"tools": {"listChanged": True}, "resources": {}}).start()
    tickets = await server(
        "ticket://1",
        {"tools": {}, "prompts": {"listChanged": True}, "resources": {"subscribe": True}},
    ).start()
    yield notes, tickets
    await notes.stop()
    await tickets.stop()


async def endpoint(notes_url: str, tickets_url: str, **joined: Any) -> AsyncIterator[Gateway]:
    config = gateway_config(
        notes_url,
        upstream={"name": "notes"},
        upstreams_extra=[{"name": "tickets", "url": tickets_url}],
        endpoints=[{"path": "/mcp", "upstreams": ["notes", "tickets"], **joined}],
    )
    front = await serve(build_app(config), "127.0.0.1", 0, idle_timeout_s=75)
    http = aiohttp.ClientSession()
    try:
        yield Gateway(front, http, notes_url)
    finally:
        await http.close()
        await front.close()


@pytest.fixture
async def gateway(servers: tuple[StreamableServer, StreamableServer]) -> AsyncIterator[Gateway]:
    notes, tickets = servers
    async for gw in endpoint(notes.url, tickets.url):
        yield gw


def subscribed(upstream: StreamableServer) -> list[str]:
    got = upstream.received
    return [m["params"]["uri"] for m in got if m.get("method") == "resources/subscribe"]


async def test_one_listen_hears_both_servers_and_is_acknowledged_with_what_some_accepted(
    gateway: Gateway, servers: tuple[StreamableServer, StreamableServer]
) -> None:
    notes, tickets = servers
    asked = {
        "toolsListChanged": True,  # notes tells
        "promptsListChanged": True,  # tickets tells
        "resourcesListChanged": True,  # neither tells
        "resourceSubscriptions": ["ticket://1", "note://a", "nowhere://x"],
    }
    async with listening(gateway, asked, rid=7) as stream:
        ack = await stream.next()
        assert ack == {
            "jsonrpc": "2.0",
            "method": ACKNOWLEDGED,
            "params": {
                "_meta": {SUBSCRIPTION_ID: 7},
                "notifications": {
                    "toolsListChanged": True,
                    "promptsListChanged": True,
                    # note://a: notes declares no subscriptions; nowhere://x: nobody's
                    "resourceSubscriptions": ["ticket://1"],
                },
            },
        }
        # Each URI asked of the server that lists it, and of no other.
        assert (subscribed(notes), subscribed(tickets)) == ([], ["ticket://1"])
        listens = gateway.app[COMPONENTS].listens
        assert len(listens) == 1  # one listen, however many servers it hears
        listens.publish("notes", {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        assert await stream.next() == {
            "jsonrpc": "2.0",
            "method": "notifications/tools/list_changed",
            "params": {"_meta": {SUBSCRIPTION_ID: 7}},
        }
        listens.publish(
            "tickets", {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"}
        )
        assert (await stream.next())["method"] == "notifications/prompts/list_changed"
        # An update of the subscribed resource, said on tickets' sessions' GET streams
        # (only the listen's own session relays it), reaches the stream as given.
        update = {
            "jsonrpc": "2.0",
            "method": "notifications/resources/updated",
            "params": {"uri": "ticket://1"},
        }
        for held in [s for s in tickets.streams if s.method == "GET"]:
            await held.send(update)
        assert await stream.next() == {
            "jsonrpc": "2.0",
            "method": "notifications/resources/updated",
            "params": {"_meta": {SUBSCRIPTION_ID: 7}, "uri": "ticket://1"},
        }
    async with asyncio.timeout(5):
        while len(listens):  # the client left: every member's listen ended
            await asyncio.sleep(0.01)
    _, discovered, _ = await gateway.post(rpc("server/discover"))
    capabilities = discovered["result"]["capabilities"]
    assert capabilities["tools"] == {"listChanged": True}
    assert capabilities["prompts"] == {"listChanged": True}
    assert capabilities["resources"] == {"subscribe": True}


async def test_a_listen_of_what_nobody_tells_is_acknowledged_empty_and_ends(
    gateway: Gateway,
) -> None:
    async with listening(gateway, {"resourcesListChanged": True}) as stream:
        ack = await stream.next()
        end = await stream.next()
        assert await stream.next() is None
    assert ack["params"]["notifications"] == {}
    assert end["result"] == {"resultType": "complete", "_meta": {SUBSCRIPTION_ID: "l-1"}}


async def test_a_server_that_cannot_be_reached_is_left_out_or_fails_the_listen(
    servers: tuple[StreamableServer, StreamableServer],
) -> None:
    notes, tickets = servers
    gone = tickets.url
    await tickets.stop()
    asked = {"toolsListChanged": True, "promptsListChanged": True}
    async for gw in endpoint(notes.url, gone):  # omit, the default
        async with listening(gw, asked) as stream:
            ack = await stream.next()
        assert ack["params"]["notifications"] == {"toolsListChanged": True}
    async for gw in endpoint(notes.url, gone, on_upstream_down="fail"):
        status, reply, _ = await gw.post(rpc("subscriptions/listen", {"notifications": asked}))
        assert status == 502 and reply["error"]["code"] == -32603, reply
        assert len(gw.app[COMPONENTS].listens) == 0


@pytest.mark.parametrize(
    "notifications",
    [{"toolsListChanged": "yes"}, {"resourceSubscriptions": "note://a"}, "all"],
)
async def test_a_malformed_filter_is_refused_as_invalid_params(
    gateway: Gateway, notifications: Any
) -> None:
    status, reply, _ = await gateway.post(
        rpc("subscriptions/listen", {"notifications": notifications})
    )
    assert status == 400 and reply["error"]["code"] == -32602, reply
