"""Challenges and protected resource metadata: pure, table-driven."""

from __future__ import annotations

import pytest

from gateway.auth import (
    Identity,
    Principal,
    insufficient_scope_challenge,
    metadata_url,
    protected_resource_metadata,
    resource_url,
    unauthorized_challenge,
    well_known_paths,
)
from gateway.auth.challenge import quote
from gateway.auth.principal import parsed

PRM = "https://gw.example/.well-known/oauth-protected-resource/mcp"


@pytest.mark.parametrize(
    ("kwargs", "header"),
    [
        (
            {"resource_metadata": PRM, "scopes": ["b", "a", "b"]},
            f'Bearer resource_metadata="{PRM}", scope="a b"',
        ),
        (
            {"resource_metadata": PRM, "scopes": ["mcp"], "invalid_token": True},
            f'Bearer error="invalid_token", resource_metadata="{PRM}", scope="mcp"',
        ),
        ({"resource_metadata": PRM}, f'Bearer resource_metadata="{PRM}"'),
        ({"resource_metadata": None, "scopes": []}, "Bearer"),
        ({"resource_metadata": None, "invalid_token": True}, 'Bearer error="invalid_token"'),
    ],
)
def test_the_401_challenge(kwargs: dict, header: str) -> None:
    assert unauthorized_challenge(**kwargs) == header


def test_the_403_challenge_names_every_scope_needed() -> None:
    assert insufficient_scope_challenge(resource_metadata=PRM, scopes={"w", "r"}) == (
        f'Bearer error="insufficient_scope", scope="r w", resource_metadata="{PRM}"'
    )


def test_quoted_strings_escape_quotes_and_backslashes() -> None:
    assert quote('a"b\\c') == '"a\\"b\\\\c"'


@pytest.mark.parametrize(
    ("public_url", "path", "resource", "metadata"),
    [
        (
            "https://gw.example",
            "/mcp",
            "https://gw.example/mcp",
            "https://gw.example/.well-known/oauth-protected-resource/mcp",
        ),
        (
            "https://gw.example/",
            "/mcp",
            "https://gw.example/mcp",
            "https://gw.example/.well-known/oauth-protected-resource/mcp",
        ),
        (
            "https://gw.example:8443/base",
            "/tools/mcp",
            "https://gw.example:8443/base/tools/mcp",
            "https://gw.example:8443/.well-known/oauth-protected-resource/base/tools/mcp",
        ),
    ],
)
def test_resource_and_metadata_urls(
    public_url: str, path: str, resource: str, metadata: str
) -> None:
    assert resource_url(public_url, path) == resource
    assert metadata_url(public_url, path) == metadata


def test_the_gateways_own_well_known_routes() -> None:
    assert well_known_paths("/mcp") == (
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    )


def test_protected_resource_metadata_never_advertises_offline_access() -> None:
    document = protected_resource_metadata(
        public_url="https://gw.example",
        path="/mcp",
        authorization_servers=["https://as.example", "https://as.example"],
        scopes=["mcp:tools", "offline_access", "mcp:read", "mcp:tools"],
    )
    assert document == {
        "resource": "https://gw.example/mcp",
        "authorization_servers": ["https://as.example"],
        "scopes_supported": ["mcp:tools", "mcp:read"],
        "bearer_methods_supported": ["header"],
    }


def test_principal_forms_are_stable_and_distinct() -> None:
    alice = Principal.for_token("https://as.example", "alice")
    assert alice.key == "jwt:https://as.example|alice"
    assert Principal.for_api_key("ci").key == "key:ci"
    assert Principal.anonymous().key == "anonymous"
    # A subject that looks like an API-key id is another principal.
    assert Principal.for_token("https://as.example", "ci").key != Principal.for_api_key("ci").key
    assert Identity(alice, frozenset({"a"})).lacks(["a", "b"]) == {"b"}
    assert Identity.anonymous().kind == "anonymous"


def test_a_subject_or_client_holding_a_bar_cannot_pass_for_another_principal() -> None:
    issuer = "https://as.example"
    split_one_way = Principal.for_token(issuer, "alice|app")
    split_another = Principal.for_token(issuer, "alice", "app")
    assert split_one_way.key != split_another.key
    one, other = Principal.for_token(issuer, "a", "b|c"), Principal.for_token(issuer, "a|b", "c")
    assert one.key != other.key
    assert Principal.for_token(issuer, "alice%7Capp").key != split_one_way.key  # `%` too
    assert Principal.for_token(issuer, "alice").key == f"jwt:{issuer}|alice"  # unchanged


@pytest.mark.parametrize(
    "principal",
    [
        Principal.for_token("https://as.example", "alice"),
        Principal.for_token("https://as.example", "alice|app", "cli%7C|x"),
        Principal.for_token("https://as.example", "a%25b", "c"),
        Principal.for_api_key("ci-bot"),
        Principal.anonymous(),
    ],
)
def test_a_principal_is_read_back_from_its_key(principal: Principal) -> None:
    assert parsed(principal.key) == principal


def test_a_key_of_no_principal_form_reads_as_none() -> None:
    assert parsed("sha256:0123abcd") is None  # no auth: a hash of a credential, no one
    assert parsed("jwt:only-one-part") is None


def test_the_package_namespace_loads_no_transport() -> None:
    """The config layer may import gateway.auth: check-config must load no aiohttp or redis."""
    import subprocess
    import sys

    probe = (
        "import sys, gateway.auth, gateway.auth.build, gateway.auth.upstream;"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'aiohttp', 'redis'}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"
