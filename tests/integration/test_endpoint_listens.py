"""`subscriptions/listen` on an endpoint of two real mcp 1.x servers that tell of changes:
one listen is acknowledged with what some server accepted (a resource URI subscribed at
the server that lists it, and at no other), a tool list change a call of each server
caused reaches the one stream (the merged list then shows the new tool under its
server's prefix), an update of the subscribed resource arrives with its URI as given,
and a listen of a server that tells nothing with one that does hears the latter."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.peers.tooling import LegacyServer
from tests.support.inprocess import Gateway
from tests.support.listens import SUBSCRIPTION_ID, call, listening
from tests.support.wire import rpc

pytestmark = pytest.mark.peers

ACKNOWLEDGED = "notifications/subscriptions/acknowledged"
TOOLS_CHANGED = {
    "jsonrpc": "2.0",
    "method": "notifications/tools/list_changed",
    "params": {"_meta": {SUBSCRIPTION_ID: "l-1"}},
}


@pytest.fixture(scope="module")
def notes() -> Iterator[LegacyServer]:
    server = LegacyServer(notifying=True)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tickets() -> Iterator[LegacyServer]:
    server = LegacyServer(notifying=True)
    yield server
    server.stop()


async def joined(make_gateway: Any, notes_url: str, tickets_url: str) -> Gateway:
    """Both on /mcp, prefixed; notes shows only its templates' resources, so that
    `static://hello` (both servers have it) is tickets' alone."""
    gw: Gateway = await make_gateway(
        notes_url,
        upstream={"name": "notes", "expose": {"resources": {"allow": ["profile://*"]}}},
        upstreams_extra=[{"name": "tickets", "url": tickets_url}],
        endpoints=[{"path": "/mcp", "upstreams": ["notes", "tickets"]}],
    )
    return gw


async def test_one_listen_hears_the_changes_of_both_servers_and_its_resource_updates(
    make_gateway: Any, notes: LegacyServer, tickets: LegacyServer
) -> None:
    gw = await joined(make_gateway, notes.url, tickets.url)
    asked = {
        "toolsListChanged": True,
        "promptsListChanged": True,  # neither server tells of prompt changes
        "resourceSubscriptions": ["static://hello", "nowhere://x"],  # the second nobody's
    }
    added_n, added_t = f"n{uuid.uuid4().hex[:8]}", f"t{uuid.uuid4().hex[:8]}"
    async with listening(gw, asked) as stream:
        ack = await stream.next()
        assert ack == {
            "jsonrpc": "2.0",
            "method": ACKNOWLEDGED,
            "params": {
                "_meta": {SUBSCRIPTION_ID: "l-1"},
                "notifications": {
                    "toolsListChanged": True,
                    "resourceSubscriptions": ["static://hello"],
                },
            },
        }
        # mcp 1.x tells a change to the session whose call made it: each server's reaches
        # the one stream.
        assert await call(gw, "notes_add_tool", {"name": added_n}) == f"added {added_n}"
        assert await stream.next() == TOOLS_CHANGED
        assert await call(gw, "tickets_add_tool", {"name": added_t}) == f"added {added_t}"
        assert await stream.next() == TOOLS_CHANGED
        # Only the listen's own session with tickets subscribed (notes was never asked).
        assert await call(gw, "tickets_touch", {"uri": "static://hello"}) == "told 1"
        assert await call(gw, "notes_touch", {"uri": "static://hello"}) == "told 0"
        assert await stream.next() == {
            "jsonrpc": "2.0",
            "method": "notifications/resources/updated",
            "params": {"_meta": {SUBSCRIPTION_ID: "l-1"}, "uri": "static://hello"},
        }
    _, listed, _ = await gw.post(rpc("tools/list"))
    shown = {t["name"] for t in listed["result"]["tools"]}
    assert {f"notes_{added_n}", f"tickets_{added_t}"} <= shown  # each list fetched again
    _, discovered, _ = await gw.post(rpc("server/discover"))
    capabilities = discovered["result"]["capabilities"]
    assert capabilities["tools"] == {"listChanged": True}
    assert capabilities["resources"] == {"listChanged": True, "subscribe": True}


async def test_a_server_that_tells_nothing_leaves_the_listen_to_the_one_that_does(
    make_gateway: Any, legacy: LegacyServer, tickets: LegacyServer
) -> None:
    """The plain test server (notes here) declares no change notifications: the listen
    is acknowledged with tickets' part and goes on with it."""
    gw = await joined(make_gateway, legacy.url, tickets.url)
    async with listening(gw, {"toolsListChanged": True}) as stream:
        assert (await stream.next())["params"]["notifications"] == {"toolsListChanged": True}
        added = f"t{uuid.uuid4().hex[:8]}"
        assert await call(gw, "tickets_add_tool", {"name": added}) == f"added {added}"
        assert await stream.next() == TOOLS_CHANGED
