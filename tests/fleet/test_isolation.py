"""A legacy session serves one caller, on a fleet: three `mrtr-gateway serve` processes on
one Redis behind a round-robin balancer, in front of a real mcp 1.x server that keeps a
value per session (`remember` / `recall`, keyed by the session as servers keep a login).

Two callers, each with an API key or an OAuth token of its own: whatever the first
remembers, the second never recalls, in any number of calls through any replica, over
Streamable HTTP and over stdio (a process per session). The same fleet with
`pool.isolation: none` (sessions shared by every caller, for stateless servers only)
shows what the test would catch: there the second caller recalls the first's secret.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.auth.apikeys import new_api_key
from tests.peers.auth_server import AuthServer
from tests.peers.tooling import (
    LegacyServer,
    RedisServer,
    legacy_stdio_command,
)
from tests.support.fleet import Fleet, fleet_of
from tests.support.wire import rpc

pytestmark = pytest.mark.peers

PUBLIC = "http://127.0.0.1:8000"  # what the gateway says clients reach it as
RECALLS = 12  # four through each replica
PATHS = {  # path: (transport, isolation)
    "/http": ("streamable-http", "caller"),
    "/stdio": ("stdio", "caller"),
    "/http-shared": ("streamable-http", "none"),
    "/stdio-shared": ("stdio", "none"),
}


class Callers:
    """Two API keys and two OAuth subjects' tokens, each its own principal."""

    def __init__(self, keys: list[str], issuer: AuthServer) -> None:
        self.keys = keys
        self.issuer = issuer

    def token(self, who: str, path: str) -> str:
        """`who`'s credential for the endpoint at `path` (a token's audience is its URL)."""
        if who.startswith("key-"):
            return self.keys[int(who[-1])]
        audience = f"{PUBLIC}{path}"
        exp = int(self.issuer.clock()) + 600
        return self.issuer.sign(self.issuer.claims(sub=who, aud=audience, exp=exp))


@pytest.fixture
async def guarded_fleet(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    redis_server: RedisServer,
    legacy: LegacyServer,
) -> AsyncIterator[tuple[Fleet, Callers]]:
    issuer = await AuthServer().start()
    made = [new_api_key(f"caller-{i}", ["mcp:tools"]) for i in range(2)]
    keys_file = tmp_path / "api-keys.yaml"
    keys_file.write_text("".join(text for _, text in made))
    upstreams = []
    for path, (transport, isolation) in PATHS.items():
        where: dict[str, Any] = (
            {"url": legacy.url}
            if transport == "streamable-http"
            else {"command": legacy_stdio_command(tmp_path)}
        )
        # Without isolation, one session for calls per replica (beside the gateway's own):
        # the second caller can only take the very session the first gave back, so the
        # control below sees the leak however the pool would otherwise open ahead.
        pool: dict[str, Any] = {"isolation": isolation, "min_idle": 0}
        if isolation == "none":
            pool["max_sessions"] = 2
        upstreams.append({"name": path.strip("/"), "path": path, "pool": pool, **where})
    config = {
        "store": {"url": redis_server.url, "key_prefix": f"t{uuid.uuid4().hex[:8]}:"},
        "sealing": {"audience": "isolation-test"},
        "auth": {
            "public_url": PUBLIC,
            "oauth": {"issuer": issuer.issuer, "scopes": ["mcp:tools"]},
            "api_keys_file": str(keys_file),
        },
        "upstreams": upstreams,
    }
    try:
        async with fleet_of(config, tmp_path, request) as fleet:
            yield fleet, Callers([key for key, _ in made], issuer)
    finally:
        await issuer.down()


async def call(fleet: Fleet, path: str, callers: Callers, who: str, tool: str, **args: Any) -> str:
    body = rpc("tools/call", {"name": tool, "arguments": args}, caps={})
    token = callers.token(who, path)
    status, reply = await fleet.post(fleet.url(path), body, Authorization=f"Bearer {token}")
    assert status == 200 and reply["result"]["resultType"] == "complete", (status, reply)
    return str(reply["result"]["content"][0]["text"]) if reply["result"]["content"] else ""


async def recalled_by_second(
    fleet: Fleet, callers: Callers, path: str, pair: tuple[str, str]
) -> tuple[str, list[str]]:
    first, second = pair
    secret = f"secret-{uuid.uuid4().hex[:8]}"
    # The first caller leaves its secret in a session of every replica.
    for _ in range(len(fleet.replicas)):
        assert await call(fleet, path, callers, first, "remember", value=secret)
    seen = [await call(fleet, path, callers, second, "recall") for _ in range(RECALLS)]
    return secret, seen


@pytest.mark.parametrize("transport", ["http", "stdio"])
@pytest.mark.parametrize("pair", [("key-0", "key-1"), ("alice", "bob")], ids=["api-keys", "oauth"])
async def test_the_second_caller_never_sees_what_the_first_left_in_a_session(
    guarded_fleet: tuple[Fleet, Callers], transport: str, pair: tuple[str, str]
) -> None:
    fleet, callers = guarded_fleet
    secret, seen = await recalled_by_second(fleet, callers, f"/{transport}", pair)
    assert secret not in seen and len(seen) == RECALLS
    # The first caller's own sessions kept it: its next call on each replica recalls it.
    mine = [await call(fleet, f"/{transport}", callers, pair[0], "recall") for _ in range(3)]
    assert mine == [secret] * 3
    # The control: with sessions shared between callers, the same steps leak the secret.
    secret, seen = await recalled_by_second(fleet, callers, f"/{transport}-shared", pair)
    assert secret in seen
