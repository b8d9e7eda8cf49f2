"""The same front door for 2025 clients: a real authorization server's tokens, principals
bound by (issuer, subject, client) so a refreshed token keeps its session and another
principal's token gets 404 for it, per-target scopes read from the body (403 with the
`insufficient_scope` challenge) and list results leaving out what a caller may not see,
in a JSON answer and inside a stream; the same for a stdio upstream's sessions, held by
the replica that opened them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.peers.auth_server import AuthServer
from tests.peers.tooling import LegacyClient, LegacyServer, legacy_stdio_command
from tests.support.legacy_wire import call, open_session, request, send

pytestmark = pytest.mark.peers

PUBLIC = "http://127.0.0.1:8000"  # what the gateway says clients reach it as
GUARDED = {
    "tools": {"increment_counter": {"scopes": ["admin"]}},
    "prompts": {"plain": {"scopes": ["hr"]}},
    "resources": {"static://hello": {"scopes": ["hr"]}},
}


@pytest.fixture
async def issuer() -> AsyncIterator[AuthServer]:
    server = await AuthServer(audience=f"{PUBLIC}/mcp").start()
    yield server
    await server.down()


@pytest.fixture
def json_server() -> Any:
    server = LegacyServer(json_response=True)
    yield server
    server.stop()


async def guarded(
    make_gateway: Any, issuer: AuthServer, url: str | None = None, stdio: Path | None = None
) -> Any:
    """A gateway behind `issuer`'s tokens; `stdio`: its upstream the legacy test server as a
    stdio program (its run counts kept there)."""
    auth = {"public_url": PUBLIC, "oauth": {"issuer": issuer.issuer, "scopes": ["mcp:tools"]}}
    upstream: dict[str, Any] = dict(GUARDED)
    if stdio is not None:
        upstream["command"] = legacy_stdio_command(stdio)
    return await make_gateway(url, auth=auth, upstream=upstream)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize("transport", ["streamable-http", "stdio"])
async def test_a_refreshed_token_keeps_the_session_and_another_principal_gets_404(
    make_gateway: Any,
    issuer: AuthServer,
    legacy_client: LegacyClient,
    transport: str,
    tmp_path: Path,
) -> None:
    stdio = tmp_path if transport == "stdio" else None
    gateway = await guarded(make_gateway, issuer, stdio=stdio)
    name = "refreshed"
    opened = await asyncio.to_thread(
        legacy_client.run,
        {"op": "open", "session": name, "url": gateway.url, "token": issuer.sign()},
    )
    session = opened["session_id"]
    try:
        refreshed = issuer.sign(issuer.claims(jti="refreshed"), kid="ec-1")  # alice, a new token
        await asyncio.to_thread(
            legacy_client.run, {"op": "token", "session": name, "token": refreshed}
        )
        greeted = await asyncio.to_thread(
            legacy_client.run, {"op": "call", "session": name, "name": "greet"}
        )
        assert greeted["result"]["content"][0]["text"] == "Hello, alice!"
        others = {
            "another subject": issuer.sign(issuer.claims(sub="mallory")),
            "another application": issuer.sign(issuer.claims(client_id="another-app")),
        }
        for what, token in others.items():
            reply = await send(
                gateway.http, gateway.url, request("tools/list"), session=session,
                headers=bearer(token),
            )  # fmt: skip
            assert reply.status == 404, what
            reply = await send(
                gateway.http, gateway.url, None, session=session, method="GET",
                headers=bearer(token),
            )  # fmt: skip
            assert reply.status == 404, what
        unauthenticated = await send(
            gateway.http, gateway.url, request("tools/list"), session=session
        )
        assert unauthenticated.status == 401
        assert "resource_metadata=" in unauthenticated.headers["WWW-Authenticate"]
    finally:
        await asyncio.to_thread(legacy_client.run, {"op": "close", "session": name})


@pytest.mark.parametrize("answers", ["stream", "json", "stdio"])
async def test_per_target_scopes_refuse_with_403_and_lists_hide_what_a_caller_may_not_see(
    make_gateway: Any, issuer: AuthServer, json_server: LegacyServer, answers: str, tmp_path: Path
) -> None:
    url = json_server.url if answers == "json" else None
    gateway = await guarded(make_gateway, issuer, url, tmp_path if answers == "stdio" else None)
    alice = bearer(issuer.sign())
    session = await open_session(gateway.http, gateway.url, headers=alice)

    async def ask(body: dict[str, Any], headers: dict[str, str] = alice) -> Any:
        return await send(gateway.http, gateway.url, body, session=session, headers=headers)

    for body, scope in (
        (call("increment_counter"), "admin"),
        (request("prompts/get", {"name": "plain"}), "hr"),
        (request("resources/read", {"uri": "static://hello"}), "hr"),
        (request("resources/subscribe", {"uri": "static://hello"}), "hr"),
    ):
        refused = await ask(body)
        assert refused.status == 403, body
        challenge = refused.headers["WWW-Authenticate"]
        assert 'error="insufficient_scope"' in challenge and scope in challenge
    listed = {
        method: await ask(request(method))
        for method in ("tools/list", "prompts/list", "resources/list")
    }
    for reply in listed.values():
        kind = "application/json" if answers == "json" else "text/event-stream"
        assert reply.status == 200 and reply.headers["Content-Type"].startswith(kind)
    tools = {t["name"] for t in listed["tools/list"].last["result"]["tools"]}
    assert "echo" in tools and "increment_counter" not in tools
    assert "plain" not in {p["name"] for p in listed["prompts/list"].last["result"]["prompts"]}
    assert not listed["resources/list"].last["result"]["resources"]
    # The same principal with more scopes (its token refreshed with them) sees everything.
    everything = bearer(issuer.sign(issuer.claims(scope="mcp:tools admin hr")))
    tools_now = await ask(request("tools/list"), everything)
    assert "increment_counter" in {t["name"] for t in tools_now.last["result"]["tools"]}
    read = await ask(request("resources/read", {"uri": "static://hello"}), everything)
    assert read.status == 200 and read.last["result"]["contents"][0]["text"] == "hello resource"
