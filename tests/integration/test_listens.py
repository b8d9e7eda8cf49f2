"""`subscriptions/listen` in front of a real mcp 1.x server that tells of changes: the
acknowledgement, a list change a call caused, updates of subscribed resources, the ends
(drained, cut short) and the limits; one run by the real mcp 2.x client."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.aio import spawn
from tests.peers.tooling import LegacyServer, legacy_stdio_command
from tests.support.cases import drive
from tests.support.listens import SUBSCRIPTION_ID, call, listening
from tests.support.wire import rpc

pytestmark = pytest.mark.peers


@pytest.fixture(scope="module")
def notifying() -> Iterator[LegacyServer]:
    server = LegacyServer(notifying=True)
    yield server
    server.stop()


@pytest.fixture
def restartable() -> Iterator[LegacyServer]:
    server = LegacyServer(notifying=True)
    yield server
    server.stop()


async def test_a_listen_is_acknowledged_with_what_the_server_can_honour(
    make_gateway, notifying: LegacyServer
) -> None:
    gateway = await make_gateway(notifying.url)
    asked = {
        "toolsListChanged": True,
        "promptsListChanged": True,  # the server declares no prompts.listChanged
        "resourceSubscriptions": ["static://hello", "forbidden://secret"],  # the second refused
    }
    async with listening(gateway, asked) as stream:
        ack = await stream.next()
    assert ack == {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {
            "_meta": {SUBSCRIPTION_ID: "l-1"},
            "notifications": {
                "toolsListChanged": True,
                "resourceSubscriptions": ["static://hello"],
            },
        },
    }
    _, discovered, _ = await gateway.post(rpc("server/discover"))
    capabilities = discovered["result"]["capabilities"]
    assert capabilities["tools"] == {"listChanged": True}
    assert capabilities["resources"] == {"listChanged": True, "subscribe": True}


async def test_a_listen_hears_of_a_tool_list_change_that_a_call_caused(
    make_gateway, notifying: LegacyServer
) -> None:
    """mcp 1.x tells the change only to the session whose call made it: the gateway
    hands it from that call's session to the listens of the upstream."""
    gateway = await make_gateway(notifying.url)
    async with listening(gateway, {"toolsListChanged": True}, rid=42) as stream:
        assert (await stream.next())["method"] == "notifications/subscriptions/acknowledged"
        assert await call(gateway, "add_tool", {"name": "brand_new"}) == "added brand_new"
        change = await stream.next()
    assert change == {
        "jsonrpc": "2.0",
        "method": "notifications/tools/list_changed",
        "params": {"_meta": {SUBSCRIPTION_ID: 42}},
    }


async def test_a_listen_hears_updates_of_the_resources_it_subscribed_to(
    make_gateway, notifying: LegacyServer
) -> None:
    gateway = await make_gateway(notifying.url)
    async with listening(gateway, {"resourceSubscriptions": ["static://hello"]}) as stream:
        assert (await stream.next())["params"]["notifications"] == {
            "resourceSubscriptions": ["static://hello"]
        }
        # The server knows the listen's own session as the resource's one subscriber.
        assert await call(gateway, "touch", {"uri": "static://hello"}) == "told 1"
        update = await stream.next()
    assert update == {
        "jsonrpc": "2.0",
        "method": "notifications/resources/updated",
        "params": {"_meta": {SUBSCRIPTION_ID: "l-1"}, "uri": "static://hello"},
    }


async def test_a_listen_of_a_server_that_tells_nothing_honours_nothing(
    make_gateway, legacy: LegacyServer
) -> None:
    """The plain test server (FastMCP) declares no listChanged and no subscribe."""
    gateway = await make_gateway(legacy.url)
    asked = {"toolsListChanged": True, "resourceSubscriptions": ["static://hello"]}
    async with listening(gateway, asked) as stream:
        ack = await stream.next()
        end = await stream.next()  # nothing can come: it ends at once, gracefully
        assert await stream.next() is None
    assert ack["params"]["notifications"] == {}
    assert end["result"] == {"resultType": "complete", "_meta": {SUBSCRIPTION_ID: "l-1"}}
    _, discovered, _ = await gateway.post(rpc("server/discover"))
    assert "listChanged" not in discovered["result"]["capabilities"]["tools"]


async def test_draining_ends_a_listen_with_its_complete_result(
    make_gateway, notifying: LegacyServer
) -> None:
    gateway = await make_gateway(notifying.url)
    async with listening(gateway, {"toolsListChanged": True}) as stream:
        await stream.next()  # acknowledged: it is open
        drain = spawn(gateway.bridge.drain(5), name="drain")
        end = await stream.next()
        assert await stream.next() is None  # nothing follows the result
    await drain
    assert end == {
        "jsonrpc": "2.0",
        "id": "l-1",
        "result": {"resultType": "complete", "_meta": {SUBSCRIPTION_ID: "l-1"}},
    }
    status, reply, resp = await gateway.post(rpc("subscriptions/listen", {"notifications": {}}))
    assert status == 503 and reply["error"]["data"] == {"reason": "draining"}
    assert resp.headers["Retry-After"] == "1"


async def test_a_listen_whose_session_the_server_forgets_is_cut_short(
    make_gateway, restartable: LegacyServer
) -> None:
    """The server restarts: the listen's subscriptions are gone with its session, so the
    stream ends without a result, which tells the client to listen again."""
    gateway = await make_gateway(restartable.url)
    async with listening(gateway, {"resourceSubscriptions": ["static://hello"]}) as stream:
        await stream.next()
        await asyncio.to_thread(restartable.restart)  # the gateway's loop goes on
        assert await stream.next(timeout=15) is None


async def test_a_listen_of_lists_hears_of_a_server_restart_that_answers_the_same(
    make_gateway, restartable: LegacyServer
) -> None:
    """The restarted server says the same in `initialize`, but the tools added at run time
    are gone: the pool's session it forgot (a 404 on its GET stream) tells the listen."""
    gateway = await make_gateway(restartable.url)
    async with listening(gateway, {"toolsListChanged": True}) as stream:
        await stream.next()
        assert await call(gateway, "add_tool", {"name": "gone_after"}) == "added gone_after"
        assert (await stream.next())["method"] == "notifications/tools/list_changed"
        await asyncio.to_thread(restartable.restart)  # the gateway's loop goes on
        change = await stream.next(timeout=15)
        assert change == {
            "jsonrpc": "2.0",
            "method": "notifications/tools/list_changed",
            "params": {"_meta": {SUBSCRIPTION_ID: "l-1"}},
        }
    _, listed, _ = await gateway.post(rpc("tools/list"))
    assert "gone_after" not in {tool["name"] for tool in listed["result"]["tools"]}


async def test_listens_beyond_the_limit_are_refused_and_none_while_it_is_zero(
    make_gateway, notifying: LegacyServer
) -> None:
    gateway = await make_gateway(notifying.url, limits={"max_listens": 1})
    async with listening(gateway, {"toolsListChanged": True}) as stream:
        await stream.next()
        status, reply, resp = await gateway.post(
            rpc("subscriptions/listen", {"notifications": {}}, rid=2)
        )
        assert status == 503 and reply["error"]["data"] == {"reason": "max_listens"}
    one_each = await make_gateway(notifying.url, limits={"max_listens_per_principal": 1})
    async with listening(one_each, {"toolsListChanged": True}) as stream:
        await stream.next()
        status, reply, _ = await one_each.post(rpc("subscriptions/listen", {"notifications": {}}))
        assert status == 429 and reply["error"]["data"] == {"reason": "max_listens_per_principal"}
        other = {"Authorization": "Bearer another-caller"}  # without auth, another principal
        async with listening(one_each, {"toolsListChanged": True}, headers=other) as theirs:
            assert (await theirs.next())["method"].endswith("/acknowledged")
    off = await make_gateway(notifying.url, limits={"max_listens": 0})
    status, reply, _ = await off.post(rpc("subscriptions/listen", {"notifications": {}}))
    assert status == 404 and reply["error"]["code"] == -32601
    _, discovered, _ = await off.post(rpc("server/discover"))
    assert discovered["result"]["capabilities"]["tools"] == {}


async def test_the_mcp_2x_client_hears_of_a_change_and_lists_the_new_tool(
    make_gateway, notifying: LegacyServer, modern
) -> None:
    gateway = await make_gateway(notifying.url)
    reply = await drive(
        modern,
        {
            "op": "listen",
            "url": gateway.url,
            "filter": {"tools_list_changed": True},
            "then": [{"name": "add_tool", "arguments": {"name": "from_the_sdk"}}],
            "events": 1,
        },
    )
    assert reply.get("honored") == {"toolsListChanged": True}, reply
    assert reply["events"] == ["tools"] and reply["ended"] == "read"
    assert "from_the_sdk" in reply["tools"]


async def test_a_listen_over_stdio_hears_of_a_change_a_call_made_in_another_process(
    make_gateway, tmp_path: Path
) -> None:
    """Over stdio each session is a process: the listen's, and the call's that added a tool."""
    upstream = {"command": legacy_stdio_command(tmp_path, notifying=True), "pool": {"min_idle": 1}}
    gateway = await make_gateway(upstream=upstream)
    async with listening(gateway, {"toolsListChanged": True}) as stream:
        assert (await stream.next(timeout=30))["params"]["notifications"] == {
            "toolsListChanged": True
        }
        assert await call(gateway, "add_tool", {"name": "piped"}) == "added piped"
        change = await stream.next()
    assert change["method"] == "notifications/tools/list_changed"
    assert change["params"] == {"_meta": {SUBSCRIPTION_ID: "l-1"}}


async def test_a_listen_whose_stdio_server_exits_is_cut_short(make_gateway, tmp_path: Path) -> None:
    """The listen's own session is a process of its own over stdio: when it dies, the
    subscriptions are gone, and the stream ends without a result."""
    upstream = {"command": legacy_stdio_command(tmp_path, notifying=True), "pool": {"min_idle": 0}}
    gateway = await make_gateway(upstream=upstream)
    async with listening(gateway, {"resourceSubscriptions": ["crash://soon"]}) as stream:
        ack = await stream.next(timeout=30)
        assert ack["params"]["notifications"] == {"resourceSubscriptions": ["crash://soon"]}
        assert await stream.next(timeout=15) is None
