"""What a caller may see of a list, at the HTTP tier: a 2026 client and a 2025 client of
the same route, behind the same front door, see the same entries of every list. A
resource guarded by scopes is left out of `resources/list`, and its template out of
`resources/templates/list`, for a caller without them (the 2026 front once filtered
templates for 2025 clients only), and a list that depends on who asks is private.

The legacy server is a second in-process aiohttp app (`StreamableServer`); the callers
hold API keys."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.app import build_app
from gateway.auth import new_api_key
from gateway.web.serving import serve
from tests.support.inprocess import Gateway, gateway_config
from tests.support.legacy_wire import open_session, request, send
from tests.support.streamable import StreamableServer
from tests.support.wire import rpc

TEMPLATES = [
    {"uriTemplate": "public://{id}", "name": "public"},
    {"uriTemplate": "secret://{id}", "name": "secret"},
]
RESOURCES = [
    {"uri": "public://a", "name": "a"},
    {"uri": "secret://b", "name": "b"},
]
RESULTS = {
    "resources/templates/list": {"resourceTemplates": TEMPLATES},
    "resources/list": {"resources": RESOURCES},
    "tools/list": {"tools": []},
}
#: What each caller may see of each list, by its name field.
SEEN = {
    "reader": {"resources/templates/list": ["public://{id}"], "resources/list": ["public://a"]},
    "keeper": {
        "resources/templates/list": ["public://{id}", "secret://{id}"],
        "resources/list": ["public://a", "secret://b"],
    },
}


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[tuple[Gateway, dict[str, str]]]:
    """The gateway on a route whose `secret://` resources need the scope `vault` (its
    lists otherwise cached as public), and an API key for each caller: `reader` (without
    it) and `keeper` (with it)."""
    keys, entries = {}, []
    for name, scopes in (("reader", ["mcp"]), ("keeper", ["mcp", "vault"])):
        keys[name], entry = new_api_key(name, scopes)
        entries.append(entry)
    (tmp_path / "keys.yaml").write_text("".join(entries))
    upstream = await StreamableServer(RESULTS, capabilities={"resources": {}, "tools": {}}).start()
    guarded = {"scopes": ["vault"]}
    config = gateway_config(
        upstream.url,
        auth={"public_url": "http://127.0.0.1:8000", "api_keys_file": str(tmp_path / "keys.yaml")},
        upstream={
            "resources": {"secret://{id}": guarded, "secret://b": guarded},
            "cache": {"scope": "public", "ttl_ms": 60_000},
        },
    )
    server = await serve(build_app(config), "127.0.0.1", 0, idle_timeout_s=75)
    http = aiohttp.ClientSession()
    try:
        yield Gateway(server, http, upstream.url), keys
    finally:
        await http.close()
        await server.close()
        await upstream.stop()


def names(method: str, result: dict[str, Any]) -> list[str]:
    member, field = {
        "resources/templates/list": ("resourceTemplates", "uriTemplate"),
        "resources/list": ("resources", "uri"),
    }[method]
    return [entry[field] for entry in result[member]]


@pytest.mark.parametrize("method", ["resources/templates/list", "resources/list"])
@pytest.mark.parametrize("caller", ["reader", "keeper"])
async def test_a_2026_client_sees_of_a_list_only_what_its_scopes_allow(
    gateway: tuple[Gateway, dict[str, str]], method: str, caller: str
) -> None:
    front, keys = gateway
    auth = {"Authorization": f"Bearer {keys[caller]}"}
    status, reply, _ = await front.post(rpc(method, {}), headers=auth)
    assert status == 200, reply
    assert names(method, reply["result"]) == SEEN[caller][method]
    assert reply["result"]["cacheScope"] == "private"  # it depends on who asks


@pytest.mark.parametrize("method", ["resources/templates/list", "resources/list"])
@pytest.mark.parametrize("caller", ["reader", "keeper"])
async def test_a_2025_client_sees_of_a_list_what_a_2026_client_with_its_scopes_sees(
    gateway: tuple[Gateway, dict[str, str]], method: str, caller: str
) -> None:
    front, keys = gateway
    auth = {"Authorization": f"Bearer {keys[caller]}"}
    session = await open_session(front.http, front.url, headers=auth)
    reply = await send(front.http, front.url, request(method), session=session, headers=auth)
    assert reply.status == 200, reply
    assert names(method, reply.last["result"]) == SEEN[caller][method]


async def test_a_list_no_scope_guards_keeps_the_routes_cache_scope(
    gateway: tuple[Gateway, dict[str, str]],
) -> None:
    front, keys = gateway
    auth = {"Authorization": f"Bearer {keys['reader']}"}
    status, reply, _ = await front.post(rpc("tools/list", {}), headers=auth)
    assert status == 200 and reply["result"]["tools"] == []
    assert reply["result"]["cacheScope"] == "public"  # the route's: nobody sees less
