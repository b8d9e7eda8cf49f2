"""Configuration: errors name the key path and the fix; secrets never come from the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import load_config, parse_config
from gateway.errors import ConfigError
from gateway.protocol.state import generate_key

ROOT = Path(__file__).resolve().parents[1]
UP = {"name": "u", "url": "http://127.0.0.1:1/mcp"}


def test_the_example_config_loads_as_is() -> None:
    config = load_config(ROOT / "config" / "example.yaml", env={})
    (upstream,) = config.upstreams
    assert (upstream.name, upstream.path) == ("example", "/mcp")
    assert [r.key for r in upstream.rules_for("tools/call", "create_ticket")] == ["priority"]
    assert config.sealing.ephemeral and config.store.url == "memory://"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "upstreams: at least one"),
        ({"upstreams": [{"name": "u"}]}, r"upstreams\[0\].url"),
        ({"upstreams": [{**UP, "path": "mcp"}]}, r"upstreams\[0\].path: must start with '/'"),
        ({"upstreams": [UP, {**UP}]}, r"upstreams\[1\].name: 'u' is used"),
        ({"upstreams": [{**UP, "timeout": 5}]}, r"upstreams\[0\].timeout: unknown key"),
        ({"upstreams": [UP], "listn": {}}, "^listn: unknown key"),
        ({"upstreams": [UP], "limits": {"max_round": 3}}, "^limits.max_round: unknown key"),
        ({"upstreams": [{**UP, "pool": {"max": 1}}]}, r"^upstreams\[0\].pool.max: unknown key"),
        (
            {"upstreams": [{**UP, "tools": {"t": {"mode": "park", "retries": 1}}}]},
            r"^upstreams\[0\].tools.t.retries: unknown key",
        ),
        (
            {"upstreams": [{**UP, "tools": {"t": {"inputs": [{"key": "k", "feilds": []}]}}}]},
            r"^upstreams\[0\].tools.t.inputs\[0\].feilds: unknown key",
        ),
        (
            {"upstreams": [{**UP, "prompts": {1: {}}}]},
            r"^upstreams\[0\].prompts.1: expected a name \(a string\), got int 1; quote it",
        ),
        (
            {"upstreams": [{**UP, "headers": {"X-Retries": 3}}]},
            r"^upstreams\[0\].headers.X-Retries: header values must be strings",
        ),
        ({"upstreams": [UP], "listen": {"port": "80"}}, "listen.port: expected int, got str"),
        (
            {"upstreams": [UP], "limits": {"max_rounds": 0}},
            "limits.max_rounds: must be greater than 0",
        ),
        (
            {"upstreams": [UP], "sealing": {"keys": ["x"]}},
            "sealing.keys: .* must not be written in the config",
        ),
        (
            {"upstreams": [{**UP, "headers": {"Authorization": "Bearer ${NOPE}"}}]},
            r"headers.Authorization: environment variable NOPE",
        ),
        (
            {"upstreams": [{**UP, "tools": {"t": {"inputs": [{"key": "k", "method": "ping"}]}}}]},
            r"tools.t.inputs\[0\].method",
        ),
        (
            {"upstreams": [{**UP, "tools": {"t": {"inputs": [{"key": "k", "message": "("}]}}}]},
            "not a valid regular expression",
        ),
        ({"upstreams": [UP], "store": {"url": "postgres://x"}}, "store.url"),
        ({"upstreams": [UP], "logging": {"format": "xml"}}, "logging.format"),
    ],
)
def test_bad_configs_name_the_key_and_the_fix(data: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(data, env={})


def test_secrets_come_from_the_environment() -> None:
    key = generate_key()
    config = parse_config(
        {"upstreams": [{**UP, "headers": {"Authorization": "Bearer ${TOKEN}"}}]},
        env={"TOKEN": "s3cret", "MRTR_GATEWAY_SEALING_KEYS": f"{key},{generate_key()}"},
    )
    assert config.upstreams[0].headers == {"Authorization": "Bearer s3cret"}
    assert len(config.sealing.keys) == 2 and not config.sealing.ephemeral


def test_a_keys_file_is_read_relative_to_the_config(tmp_path: Path) -> None:
    (tmp_path / "keys").write_text(f"# current\n{generate_key()}\n\n# previous\n{generate_key()}\n")
    (tmp_path / "gw.yaml").write_text(
        "sealing: {keys_file: keys}\nupstreams: [{name: u, url: 'http://h/mcp'}]\n"
    )
    assert len(load_config(tmp_path / "gw.yaml", env={}).sealing.keys) == 2
    (tmp_path / "keys").write_text("short\n")
    with pytest.raises(ConfigError, match=r"keys:1: .*keygen"):
        load_config(tmp_path / "gw.yaml", env={})


def test_unreadable_or_invalid_yaml_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("upstreams: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path / "bad.yaml")


def test_environment_overrides_replace_keys_that_the_file_also_sets() -> None:
    data = {
        "upstreams": [UP],
        "logging": {"format": "console", "level": "info"},
        "store": {"url": "memory://"},
    }
    config = parse_config(
        data, env={"MRTR_GATEWAY_LOG_FORMAT": "json", "MRTR_GATEWAY_LOG_LEVEL": "warning"}
    )
    assert (config.logging.format, config.logging.level) == ("json", "warning")
