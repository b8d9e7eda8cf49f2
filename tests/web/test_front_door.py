"""Identity at the front door, on the wire: a real authorization server (JWKS over HTTP,
keys made per run), the gateway in process, a real mcp 1.x legacy server behind it."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from gateway.app import build_app
from gateway.auth import new_api_key
from gateway.auth.errors import InsufficientScope
from gateway.auth.principal import Identity, Principal
from gateway.config import parse_config
from gateway.protocol.state import generate_key
from gateway.web.front_door import Caller, build_front_doors
from tests.peers.auth_server import AuthServer
from tests.peers.tooling import LegacyServer

pytestmark = pytest.mark.peers

PUBLIC = "http://127.0.0.1:8000"  # what the gateway says clients reach it as
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
}
ALICE = {"elicit.username": {"action": "accept", "content": {"username": "alice"}}}


def call(name: str, rid: int = 1, **params: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "tools/call",
        "params": {"name": name, "arguments": params.pop("arguments", {}), "_meta": META, **params},
    }


def list_tools() -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {"_meta": META}}


class Front:
    def __init__(self, server: TestServer, http: aiohttp.ClientSession) -> None:
        self.server, self.http = server, http

    async def post(self, body: dict[str, Any], token: str | None = None) -> tuple[int, Any, Any]:
        headers = {
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": body["method"],
        }
        if "name" in body["params"] or "uri" in body["params"]:
            headers["Mcp-Name"] = body["params"].get("name") or body["params"]["uri"]
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        async with self.http.post(self.server.make_url("/mcp"), json=body, headers=headers) as r:
            raw = await r.read()
            return r.status, (await r.json() if raw else None), r.headers


@pytest.fixture
async def issuer() -> AsyncIterator[AuthServer]:
    server = await AuthServer(audience=f"{PUBLIC}/mcp").start()
    yield server
    await server.down()


@pytest.fixture
async def front(
    legacy: LegacyServer, issuer: AuthServer, tmp_path: Path
) -> AsyncIterator[Callable[..., Any]]:
    started: list[tuple[TestServer, aiohttp.ClientSession]] = []

    key, entry = new_api_key("ci-bot", ["mcp:tools"])
    (tmp_path / "keys.yaml").write_text(entry)
    sealing = generate_key()

    async def start(store: str | None = None, **limits: Any) -> Front:
        start.api_key = key  # type: ignore[attr-defined]
        config: dict[str, Any] = {
            "auth": {
                "public_url": PUBLIC,
                "oauth": {"issuer": issuer.issuer, "scopes": ["mcp:tools"]},
                "api_keys_file": "keys.yaml",
            },
            "limits": limits,
            "upstreams": [
                {
                    "name": "legacy",
                    "url": legacy.url,
                    "tools": {"increment_counter": {"scopes": ["admin"]}},
                }
            ],
        }
        if store is not None:
            config["store"] = {"url": store, "key_prefix": f"fd{id(started)}:"}
        parsed = parse_config(config, env={"MRTR_GATEWAY_SEALING_KEYS": sealing}, base=tmp_path)
        server = TestServer(build_app(parsed), host="127.0.0.1")
        await server.start_server()
        http = aiohttp.ClientSession()
        started.append((server, http))
        return Front(server, http)

    yield start
    for server, http in started:
        await http.close()
        await server.close()


async def test_the_protected_resource_metadata_is_served_and_named_in_every_401(
    front: Callable[..., Any], issuer: AuthServer
) -> None:
    gateway: Front = await front()
    url = gateway.server.make_url("/.well-known/oauth-protected-resource/mcp")
    async with gateway.http.get(url) as resp:
        document = await resp.json()
    assert document["resource"] == f"{PUBLIC}/mcp"
    assert document["authorization_servers"] == [issuer.issuer]
    status, _, headers = await gateway.post(call("greet"))
    assert status == 401
    challenge = headers["WWW-Authenticate"]
    assert challenge.startswith("Bearer ")
    assert f'resource_metadata="{PUBLIC}/.well-known/oauth-protected-resource/mcp"' in challenge
    assert 'scope="mcp:tools"' in challenge and "invalid_token" not in challenge


async def test_bad_tokens_are_refused_with_an_invalid_token_challenge(
    front: Callable[..., Any], issuer: AuthServer
) -> None:
    gateway: Front = await front()
    bad = {
        "expired": issuer.sign(issuer.claims(exp=int(issuer.clock()) - 600)),
        "wrong audience": issuer.sign(issuer.claims(aud="https://elsewhere.example/mcp")),
        "alg none": issuer.unsigned_token(issuer.claims()),
        "hs256 with the rsa public key": issuer.hs256_with_public_key(issuer.claims()),
        "unknown kid": issuer.sign(issuer.claims(), headers={"kid": "nope"}),
        "garbage": "not.a.token",
    }
    for what, token in bad.items():
        status, _, headers = await gateway.post(call("greet"), token)
        assert status == 401, what
        assert 'error="invalid_token"' in headers["WWW-Authenticate"], what


async def test_a_tool_needing_a_scope_is_refused_with_403_and_hidden_from_the_list(
    front: Callable[..., Any], issuer: AuthServer
) -> None:
    gateway: Front = await front()
    status, _, headers = await gateway.post(call("increment_counter"), issuer.sign())
    assert status == 403
    challenge = headers["WWW-Authenticate"]
    assert 'error="insufficient_scope"' in challenge and "admin" in challenge
    status, listed, _ = await gateway.post(list_tools(), issuer.sign())
    names = {t["name"] for t in listed["result"]["tools"]}
    assert "greet" in names and "increment_counter" not in names
    assert listed["result"]["cacheScope"] == "private"
    admin = issuer.sign(issuer.claims(scope="mcp:tools admin"))
    status, listed, _ = await gateway.post(list_tools(), admin)
    assert "increment_counter" in {t["name"] for t in listed["result"]["tools"]}


async def test_a_refreshed_token_resumes_its_call_and_another_subject_or_app_cannot(
    front: Callable[..., Any], issuer: AuthServer
) -> None:
    gateway: Front = await front()
    run_id = uuid.uuid4().hex
    status, first, _ = await gateway.post(
        call("register", arguments={"run_id": run_id}), issuer.sign()
    )
    state = first["result"]["requestState"]
    retry = call("register", 2, arguments={"run_id": run_id}, requestState=state)
    retry["params"]["inputResponses"] = ALICE
    mallory = issuer.sign(issuer.claims(sub="mallory"))
    status, refused, _ = await gateway.post(retry, mallory)
    assert status == 400 and refused["error"]["code"] == -32602
    another_app = issuer.sign(issuer.claims(client_id="another-app"))  # alice, elsewhere
    status, refused, _ = await gateway.post(retry, another_app)
    assert status == 400 and refused["error"]["code"] == -32602
    refreshed = issuer.sign(issuer.claims(jti="refreshed"), kid="ec-1")  # a new token, alice
    status, done, _ = await gateway.post(retry, refreshed)
    assert status == 200 and done["result"]["resultType"] == "input_required"  # its next round
    status, again, _ = await gateway.post(retry, refreshed)  # the same round: used up
    assert status == 400 and again["error"]["code"] == -32602


async def test_an_api_key_made_by_the_cli_works_and_an_altered_one_is_refused(
    front: Callable[..., Any],
) -> None:
    gateway: Front = await front()
    key: str = front.api_key  # type: ignore[attr-defined]
    status, listed, _ = await gateway.post(list_tools(), key)
    assert status == 200 and listed["result"]["tools"]
    altered = key[:-1] + ("A" if key[-1] != "A" else "B")
    status, _, headers = await gateway.post(list_tools(), altered)
    assert status == 401 and 'error="invalid_token"' in headers["WWW-Authenticate"]


async def test_a_noisy_principal_gets_429_with_retry_after_while_another_is_served(
    front: Callable[..., Any], issuer: AuthServer
) -> None:
    gateway: Front = await front(rate={"per_principal": {"per_s": 0.01, "burst": 2}})
    noisy = issuer.sign()
    statuses = [(await gateway.post(list_tools(), noisy))[0] for _ in range(3)]
    assert statuses == [200, 200, 429]
    status, _, headers = await gateway.post(list_tools(), noisy)
    assert status == 429 and int(headers["Retry-After"]) >= 1
    quiet = issuer.sign(issuer.claims(sub="bob"))
    assert (await gateway.post(list_tools(), quiet))[0] == 200


async def test_the_rate_limit_is_shared_by_replicas_on_redis(
    front: Callable[..., Any], issuer: AuthServer, redis_server
) -> None:
    rate = {"per_principal": {"per_s": 0.01, "burst": 2}}
    one: Front = await front(store=redis_server.url, rate=rate)
    two: Front = await front(store=redis_server.url, rate=rate)
    noisy = issuer.sign(issuer.claims(sub=f"noisy-{uuid.uuid4().hex[:6]}"))
    assert (await one.post(list_tools(), noisy))[0] == 200
    assert (await two.post(list_tools(), noisy))[0] == 200
    status, _, headers = await one.post(list_tools(), noisy)  # the third, on either replica
    assert status == 429 and int(headers["Retry-After"]) >= 1
    assert (await two.post(list_tools(), noisy))[0] == 429
    quiet = issuer.sign(issuer.claims(sub=f"quiet-{uuid.uuid4().hex[:6]}"))
    assert (await two.post(list_tools(), quiet))[0] == 200


async def test_the_mcp_2_client_with_a_bearer_token_completes_a_call_and_no_token_leaks(
    front: Callable[..., Any], issuer: AuthServer, modern
) -> None:
    from structlog.testing import capture_logs

    from tests.support.cases import drive, text_of

    gateway: Front = await front()
    token = issuer.sign()
    url = str(gateway.server.make_url("/mcp"))
    with capture_logs() as logs:
        reply = await drive(
            modern,
            {"op": "call_tool", "url": url, "name": "greet", "arguments": {}, "token": token},
        )
        seen = await drive(
            modern,
            {
                "op": "call_tool",
                "url": url,
                "name": "authorization_seen",
                "arguments": {},
                "token": token,
            },
        )
        refused = await gateway.post(call("greet"), token + "x")
    assert reply["rounds"] == [["elicit.username"]] and text_of(reply) == "Hello, alice!"
    assert text_of(seen) == "None"  # the legacy server never saw the client's token
    assert refused[0] == 401
    logged = repr(logs)
    assert token not in logged and token[:40] not in logged and "Bearer" not in logged
    assert any(entry.get("principal", "").startswith("p_") for entry in logs)


async def test_an_upstream_gets_the_gateways_own_client_credentials_token_not_the_clients(
    legacy: LegacyServer, issuer: AuthServer, tmp_path: Path
) -> None:
    issuer.clients["mrtr-gateway"] = "gw-secret"
    (tmp_path / "secret").write_text("gw-secret\n")
    config = {
        "upstreams": [
            {
                "name": "legacy",
                "url": legacy.url,
                "oauth_client": {
                    "token_url": issuer.token_url,
                    "client_id": "mrtr-gateway",
                    "client_secret_file": "secret",
                    "scope": "upstream:read",
                },
            }
        ]
    }
    parsed = parse_config(config, env={}, base=tmp_path)
    server = TestServer(build_app(parsed), host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as http:
            gateway = Front(server, http)
            status, reply, _ = await gateway.post(call("authorization_seen"), "the-clients-token")
    finally:
        await server.close()
    seen = reply["result"]["content"][0]["text"]
    assert status == 200 and seen.startswith("Bearer ") and "the-clients-token" not in seen
    assert issuer.token_requests and issuer.token_requests[-1]["grant_type"] == "client_credentials"


async def test_one_upstream_has_its_metadata_at_the_root_too(front: Callable[..., Any]) -> None:
    gateway: Front = await front()
    async with gateway.http.get(
        gateway.server.make_url("/.well-known/oauth-protected-resource")
    ) as r:
        assert r.status == 200 and (await r.json())["resource"] == f"{PUBLIC}/mcp"


async def test_a_gateway_without_auth_beyond_loopback_says_so_at_start(
    legacy: LegacyServer,
) -> None:
    from structlog.testing import capture_logs

    config = {"listen": {"host": "0.0.0.0"}, "upstreams": [{"name": "l", "url": legacy.url}]}
    parsed = parse_config(config, env={})
    server = TestServer(build_app(parsed), host="127.0.0.1")
    with capture_logs() as logs:
        await server.start_server()
    await server.close()
    assert "gateway_unauthenticated" in [entry["event"] for entry in logs]


async def test_behind_a_path_prefix_the_advertised_metadata_url_is_served(
    legacy: LegacyServer, issuer: AuthServer
) -> None:
    config = {
        "auth": {"public_url": "http://127.0.0.1:8000/base", "oauth": {"issuer": issuer.issuer}},
        "upstreams": [{"name": "legacy", "url": legacy.url}],
    }
    server = TestServer(build_app(parse_config(config, env={})), host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as http:
            gateway = Front(server, http)
            status, _, headers = await gateway.post(call("greet"))
            advertised = headers["WWW-Authenticate"].split('resource_metadata="')[1].split('"')[0]
            assert advertised.endswith("/.well-known/oauth-protected-resource/base/mcp")
            path = "/.well-known/oauth-protected-resource/base/mcp"
            async with http.get(server.make_url(path)) as resp:
                assert (await resp.json())["resource"] == "http://127.0.0.1:8000/base/mcp"
    finally:
        await server.close()


async def test_a_prompts_scopes_guard_its_completions_and_its_place_in_the_list(
    legacy: LegacyServer, issuer: AuthServer, tmp_path: Path
) -> None:
    config = {
        "auth": {"public_url": PUBLIC, "oauth": {"issuer": issuer.issuer}},
        "upstreams": [
            {"name": "legacy", "url": legacy.url, "prompts": {"interview": {"scopes": ["hr"]}}}
        ],
    }
    server = TestServer(build_app(parse_config(config, env={})), host="127.0.0.1")
    await server.start_server()
    body = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "completion/complete",
        "params": {
            "ref": {"type": "ref/prompt", "name": "interview"},
            "argument": {"name": "guest", "value": "a"},
            "_meta": META,
        },
    }
    try:
        async with aiohttp.ClientSession() as http:
            status, _, headers = await Front(server, http).post(body, issuer.sign())
    finally:
        await server.close()
    assert status == 403 and 'scope="hr' in headers["WWW-Authenticate"]
    server = TestServer(build_app(parse_config(config, env={})), host="127.0.0.1")
    await server.start_server()
    listing = {"jsonrpc": "2.0", "id": 4, "method": "prompts/list", "params": {"_meta": META}}
    try:
        async with aiohttp.ClientSession() as http:
            status, listed, _ = await Front(server, http).post(listing, issuer.sign())
            names = {p["name"] for p in listed["result"]["prompts"]}
            assert "interview" not in names and "plain" in names
            assert listed["result"]["cacheScope"] == "private"
            hr = issuer.sign(issuer.claims(scope="hr"))
            status, listed, _ = await Front(server, http).post(listing, hr)
            assert "interview" in {p["name"] for p in listed["result"]["prompts"]}
    finally:
        await server.close()


async def test_a_resources_scopes_bind_however_its_uri_is_spelled(
    legacy: LegacyServer, issuer: AuthServer
) -> None:
    """The server reads `STATIC://hello` as `static://hello` (so did the gateway's scope
    check not, it would hand the guarded text to anyone who changed the case)."""
    config = {
        "auth": {"public_url": PUBLIC, "oauth": {"issuer": issuer.issuer}},
        "upstreams": [
            {
                "name": "legacy",
                "url": legacy.url,
                "resources": {"static://hello": {"scopes": ["secret"]}},
            }
        ],
    }
    server = TestServer(build_app(parse_config(config, env={})), host="127.0.0.1")
    await server.start_server()

    def read(uri: str) -> dict[str, Any]:
        return {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "resources/read",
            "params": {"uri": uri, "_meta": META},
        }

    spellings = [
        "static://hello",
        "STATIC://hello",
        "Static://hello",
        "sTaTiC://hello",
    ]
    try:
        async with aiohttp.ClientSession() as http:
            door = Front(server, http)
            for uri in spellings:
                status, reply, headers = await door.post(read(uri), issuer.sign())
                assert status == 403, (uri, reply)
                assert 'scope="secret' in headers["WWW-Authenticate"]
            completion = {
                "jsonrpc": "2.0",
                "id": 6,
                "method": "completion/complete",
                "params": {
                    "ref": {"type": "ref/resource", "uri": "STATIC://hello"},
                    "argument": {"name": "x", "value": "a"},
                    "_meta": META,
                },
            }
            status, _, _ = await door.post(completion, issuer.sign())
            assert status == 403
            allowed = issuer.sign(issuer.claims(scope="secret"))
            status, reply, _ = await door.post(read("STATIC://hello"), allowed)
            assert status == 200 and reply["result"]["contents"][0]["text"]
    finally:
        await server.close()


def test_a_read_whose_contents_are_a_guarded_resource_is_refused(tmp_path: Path) -> None:
    """Whatever spelling reached it, a result holding a guarded resource (by the URIs the
    server gave its contents) goes to no one without the resource's scopes."""
    key, entry = new_api_key("reader", ["mcp"])
    (tmp_path / "keys.yaml").write_text(entry)
    config = parse_config(
        {
            "auth": {"public_url": PUBLIC, "api_keys_file": "keys.yaml"},
            "upstreams": [
                {
                    "name": "u",
                    "url": "http://127.0.0.1:9/mcp",
                    "resources": {"file:///vault/k": {"scopes": ["vault"]}},
                }
            ],
        },
        env={},
        base=tmp_path,
    )
    door = build_front_doors(config, fetcher=None, wall_s=time.time, limiter=None)["u"]  # type: ignore[arg-type]
    reader = Identity(Principal.for_api_key("reader"), frozenset({"mcp"}))
    keeper = Identity(Principal.for_api_key("keeper"), frozenset({"mcp", "vault"}))
    result = {
        "contents": [{"uri": "file:///pub/a", "text": "a"}, {"uri": "file:///vault/k", "text": "k"}]
    }
    with pytest.raises(InsufficientScope) as refused:
        door.check_result(Caller("key:reader", "r", reader), "resources/read", result)
    assert refused.value.missing == {"vault"}
    door.check_result(Caller("key:keeper", "k", keeper), "resources/read", result)
    door.check_result(
        Caller("key:reader", "r", reader), "resources/read", {"contents": result["contents"][:1]}
    )


def test_urls_in_logs_carry_no_credentials_and_any_host_list() -> None:
    from gateway.app import redact

    assert redact("redis://:s3cret@redis:6379/0") == "redis://redis:6379/0"
    assert redact("unix:///run/redis.sock?db=0&password=s3cret") == "unix:///run/redis.sock"
    sentinel = "redis+sentinel://:pw@h1:26379,h2:26379/mymaster"
    assert redact(sentinel) == "redis+sentinel://h1:26379,h2:26379/mymaster"


async def test_without_auth_a_callers_log_id_is_keyed_so_no_guess_of_its_credential_checks_out(
    tmp_path: Path,
) -> None:
    """The id a log line carries for an unauthenticated caller is an HMAC under a key of
    the sealing key's: not a hash of its Authorization header anyone can compute."""
    import hashlib

    def door(key: str) -> Any:
        config = parse_config(
            {"upstreams": [{"name": "u", "url": "http://127.0.0.1:9/mcp"}]},
            env={"MRTR_GATEWAY_SEALING_KEYS": key},
            base=tmp_path,
        )
        return build_front_doors(config, fetcher=None, wall_s=time.time, limiter=None)["u"]  # type: ignore[arg-type]

    key = generate_key()
    caller = await door(key).admit("Bearer s3cret")
    header_hash = hashlib.sha256(b"Bearer s3cret").hexdigest()
    assert caller.log_id.startswith("p_") and caller.log_id[2:] not in header_hash
    assert caller.log_id[2:] not in hashlib.sha256(caller.principal.encode()).hexdigest()
    assert (await door(key).admit("Bearer s3cret")).log_id == caller.log_id  # fleet-stable
    assert (await door(key).admit("Bearer other")).log_id != caller.log_id
    assert (await door(generate_key()).admit("Bearer s3cret")).log_id != caller.log_id
    assert (await door(key).admit(None)).log_id == "anonymous"


async def test_with_auth_a_callers_log_id_is_keyed_too_so_no_subject_can_be_checked_against_it(
    tmp_path: Path,
) -> None:
    """Subjects are often emails: the id logs carry for an authenticated caller is an
    HMAC of its principal under the sealing key's log secret, as without auth."""
    import hashlib

    api_key, entry = new_api_key("alice@example.com", ["mcp"])
    (tmp_path / "keys.yaml").write_text(entry)

    def door(sealing: str) -> Any:
        config = parse_config(
            {
                "auth": {"public_url": PUBLIC, "api_keys_file": "keys.yaml"},
                "upstreams": [{"name": "u", "url": "http://127.0.0.1:9/mcp"}],
            },
            env={"MRTR_GATEWAY_SEALING_KEYS": sealing},
            base=tmp_path,
        )
        return build_front_doors(config, fetcher=None, wall_s=time.time, limiter=None)["u"]  # type: ignore[arg-type]

    sealing = generate_key()
    caller = await door(sealing).admit(f"Bearer {api_key}")
    assert caller.principal == "key:alice@example.com"
    unsalted = hashlib.sha256(caller.principal.encode()).hexdigest()
    assert caller.log_id.startswith("p_") and caller.log_id[2:] not in unsalted
    assert (await door(sealing).admit(f"Bearer {api_key}")).log_id == caller.log_id
    assert (await door(generate_key()).admit(f"Bearer {api_key}")).log_id != caller.log_id


async def test_with_api_keys_only_a_401_is_a_bare_bearer_and_there_is_no_metadata(
    legacy: LegacyServer, tmp_path: Path
) -> None:
    """docs/auth.md's smallest setup: no authorization server to send a client to, so the
    challenge names none and no metadata document is served; a key gets through."""
    key, entry = new_api_key("ci-bot", ["mcp"])
    (tmp_path / "api-keys.yaml").write_text(entry)
    config = parse_config(
        {
            "auth": {"public_url": PUBLIC, "api_keys_file": "api-keys.yaml"},
            "upstreams": [
                {"name": "example", "url": legacy.url, "tools": {"greet": {"scopes": ["x"]}}}
            ],
        },
        env={"MRTR_GATEWAY_SEALING_KEYS": generate_key()},
        base=tmp_path,
    )
    server = TestServer(build_app(config), host="127.0.0.1")
    await server.start_server()
    http = aiohttp.ClientSession()
    try:
        gateway = Front(server, http)
        status, reply, headers = await gateway.post(list_tools())
        assert (status, headers["WWW-Authenticate"]) == (401, "Bearer")
        assert reply == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32600, "message": "Authentication required"},
        }
        status, _, headers = await gateway.post(list_tools(), "mrtr_not-a-key")
        assert (status, headers["WWW-Authenticate"]) == (401, 'Bearer error="invalid_token"')
        for path in (
            "/.well-known/oauth-protected-resource/mcp",
            "/.well-known/oauth-protected-resource",
        ):
            async with http.get(server.make_url(path)) as resp:
                assert resp.status == 404
        status, listed, _ = await gateway.post(list_tools(), key)
        assert status == 200 and "tools" in listed["result"]
        status, _, headers = await gateway.post(call("greet"), key)
        assert status == 403
        assert headers["WWW-Authenticate"] == 'Bearer error="insufficient_scope", scope="x"'
    finally:
        await http.close()
        await server.close()
