"""API keys: made by the function, stored as hashes, loaded with clear errors, checked exactly."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gateway.auth import (
    ApiKeyStore,
    Authenticator,
    InsufficientScope,
    Unauthenticated,
    hash_key,
    load_api_keys,
    new_api_key,
    parse_api_keys,
)
from gateway.errors import ConfigError


def store_with(*made: tuple[str, str]) -> ApiKeyStore:
    entries = parse_api_keys(yaml.safe_load("".join(text for _, text in made)))
    return ApiKeyStore(entries)


def test_a_new_key_is_prefixed_random_and_its_entry_holds_only_the_hash() -> None:
    key, text = new_api_key("ci-bot", ["mcp:tools", "mcp:read"])
    other, _ = new_api_key("ci-bot", ["mcp:tools"])
    assert key.startswith("mrtr_") and len(key) == 5 + 43 and key != other
    assert key not in text and key[5:] not in text
    assert yaml.safe_load(text) == [
        {"id": "ci-bot", "hash": hash_key(key), "scopes": ["mcp:read", "mcp:tools"]}
    ]


async def test_keys_made_by_the_function_authenticate_as_their_id() -> None:
    made = new_api_key("ci-bot", ["mcp:tools"]), new_api_key("ops", [])
    authenticator = Authenticator(api_keys=store_with(*made), scopes=["mcp:tools"])
    ci = await authenticator.authenticate("Bearer " + made[0][0])
    ops = await authenticator.authenticate("bearer  " + made[1][0])
    assert (ci.principal.key, ci.kind) == ("key:ci-bot", "key")
    assert ci.scopes == {"mcp:tools"}
    assert ops.principal.key == "key:ops"
    authenticator.require(ci, ["mcp:tools"])
    with pytest.raises(InsufficientScope) as caught:
        authenticator.require(ops, ["mcp:tools"])
    assert caught.value.headers == {
        "WWW-Authenticate": 'Bearer error="insufficient_scope", scope="mcp:tools"'
    }


def altered(key: str) -> list[str]:
    def swap(c: str) -> str:
        return "A" if c != "A" else "B"

    middle = len(key) // 2
    return [
        key[:-1] + swap(key[-1]),  # last character
        key[:middle] + swap(key[middle]) + key[middle + 1 :],  # one in the middle
        key[:-1],  # truncated
        key + "A",  # extended
        "mrtr_" + "A" * 43,  # well formed, never issued
    ]


async def test_an_altered_key_is_refused_with_invalid_token() -> None:
    key, text = new_api_key("ci-bot", ["mcp:tools"])
    authenticator = Authenticator(api_keys=store_with((key, text)), scopes=["mcp:tools"])
    for wrong in altered(key):
        with pytest.raises(Unauthenticated) as caught:
            await authenticator.authenticate("Bearer " + wrong)
        assert caught.value.http_status == 401
        assert caught.value.headers == {
            "WWW-Authenticate": 'Bearer error="invalid_token", scope="mcp:tools"'
        }
        assert caught.value.reason == "unknown API key"
        assert wrong not in str(caught.value)


async def test_a_key_on_a_route_that_takes_only_tokens_is_refused() -> None:
    from gateway.auth.jwks import JwksCache
    from gateway.auth.tokens import JwtVerifier
    from tests.auth.conftest import FakeFetcher

    cache = JwksCache(issuer="https://as.example", fetcher=FakeFetcher(), clock=lambda: 0.0)
    jwt_only = Authenticator(
        jwt=JwtVerifier(issuers=[cache], audiences=["https://gw.example/mcp"], clock=lambda: 0.0)
    )
    key, _ = new_api_key("ci", [])
    with pytest.raises(Unauthenticated) as caught:
        await jwt_only.authenticate("Bearer " + key)
    assert caught.value.reason == "API keys are not accepted on this route"


def test_a_keys_file_round_trips(tmp_path: Path) -> None:
    key_a, text_a = new_api_key("a", ["s1"])
    _, text_b = new_api_key("b", [])
    path = tmp_path / "keys.yaml"
    path.write_text(text_a + text_b)
    entries = load_api_keys(path)
    assert [e.id for e in entries] == ["a", "b"]
    assert ApiKeyStore(entries).check(key_a) == entries[0]


GOOD_HASH = "sha256:" + "0" * 64


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"id": "a"}, "must be a YAML list"),
        (["x"], "entry 0: must be a mapping"),
        ([{"id": "a", "hash": GOOD_HASH, "role": "x"}], "entry 0: unknown field(s) role"),
        ([{"id": "", "hash": GOOD_HASH}], "entry 0: id must be"),
        ([{"id": "a b", "hash": GOOD_HASH}], "entry 0: id must be"),
        ([{"id": "ci", "hash": "mrtr_plaintext"}], "entry 0 (id 'ci'): hash must be 'sha256:'"),
        ([{"id": "ci", "hash": "sha256:" + "A" * 64}], "entry 0 (id 'ci'): hash must be"),
        ([{"id": "ci", "hash": GOOD_HASH, "scopes": "a b"}], "(id 'ci'): scopes must be a list"),
        ([{"id": "ci", "hash": GOOD_HASH, "scopes": ["a b"]}], "(id 'ci'): scopes must be a list"),
        (
            [{"id": "ci", "hash": GOOD_HASH}, {"id": "ci", "hash": "sha256:" + "1" * 64}],
            "entry 1: id 'ci' is used twice",
        ),
        (
            [{"id": "a", "hash": GOOD_HASH}, {"id": "b", "hash": GOOD_HASH}],
            "entry 1 (id 'b'): the same key hash appears twice",
        ),
    ],
)
def test_a_bad_keys_file_names_the_entry_and_the_fix(data, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_api_keys(data, "keys file /etc/mrtr/keys.yaml")
    assert str(caught.value).startswith("keys file /etc/mrtr/keys.yaml")
    assert message in str(caught.value)


def test_a_plaintext_hash_points_at_the_command_that_makes_one() -> None:
    with pytest.raises(ConfigError, match="mrtr-gateway apikey --id ci"):
        parse_api_keys([{"id": "ci", "hash": "oops"}])


def test_an_empty_keys_file_has_no_keys_and_a_missing_one_is_an_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_api_keys(empty) == []
    with pytest.raises(ConfigError, match="cannot be read"):
        load_api_keys(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("- id: [")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_api_keys(broken)


def test_making_a_key_refuses_a_bad_id() -> None:
    with pytest.raises(ConfigError, match="id must be"):
        new_api_key("has space", [])


async def test_a_jwt_on_a_route_that_takes_only_api_keys_is_refused() -> None:
    key, text = new_api_key("ci", [])
    keys_only = Authenticator(api_keys=store_with((key, text)))
    with pytest.raises(Unauthenticated) as caught:
        await keys_only.authenticate("Bearer eyJhbGciOiJSUzI1NiJ9.e30.c2ln")
    assert caught.value.reason == "access tokens are not accepted on this route"
    assert caught.value.headers == {"WWW-Authenticate": 'Bearer error="invalid_token"'}
