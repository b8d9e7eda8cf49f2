"""Configuration: errors name the key path and the fix; secrets never come from the file."""

from __future__ import annotations

import ast
import copy
import dataclasses
from pathlib import Path

import pytest

from gateway.config import (
    GatewayConfig,
    TargetConfig,
    TaskPolicy,
    UpstreamConfig,
    load_config,
    parse_config,
)
from gateway.config.audit import AuditConfig, AuditFileConfig, AuditStreamConfig
from gateway.errors import ConfigError
from gateway.protocol.audit import ContentPolicy
from gateway.protocol.state import generate_key

ROOT = Path(__file__).resolve().parents[1]
UP = {"name": "u", "url": "http://127.0.0.1:1/mcp"}
CONFIG_PACKAGE = ROOT / "gateway" / "config"


def _imports(path: Path) -> set[str]:
    """Every module a file imports, also under `if TYPE_CHECKING:` and inside functions."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_config_package_imports_no_io_layer_and_has_no_cycle() -> None:
    modules = {path.stem: _imports(path) for path in CONFIG_PACKAGE.glob("*.py")}
    assert {"__init__", "model", "loader"} <= modules.keys()
    # gateway.auth's namespace loads no transport either (tests/auth checks it).
    allowed = ("gateway.errors", "gateway.protocol.", "gateway.config.", "gateway.auth")
    offenders = {
        f"{module}: {name}"
        for module, names in modules.items()
        for name in names
        if name.split(".")[0] in ("aiohttp", "redis", "asyncio", "socket")
        or (name.startswith("gateway") and not name.startswith(allowed))
    }
    assert offenders == set()
    # Within the package: submodules never import the package itself, and the
    # imports between them form no cycle.
    edges = {
        module: {
            n.removeprefix("gateway.config.") for n in names if n.startswith("gateway.config.")
        }
        for module, names in modules.items()
    }
    done: set[str] = set()
    while len(done) < len(edges):
        ready = {m for m, needs in edges.items() if m not in done and needs <= done}
        assert ready, f"import cycle among {sorted(edges.keys() - done)}"
        done |= ready


def test_the_example_config_loads_as_is() -> None:
    config = load_config(ROOT / "config" / "example.yaml", env={})
    (upstream,) = config.upstreams
    assert (upstream.name, upstream.path) == ("example", "/mcp")
    assert [r.key for r in upstream.rules_for("tools/call", "create_ticket")] == ["priority"]
    assert config.sealing.ephemeral and config.store.url == "memory://"


SECTIONS = ("listen", "limits", "sealing", "store", "fleet", "logging")


@pytest.mark.parametrize("empty", [None, {}], ids=["null", "empty-mapping"])
def test_empty_sections_load_the_dataclass_defaults(empty: dict | None) -> None:
    data = {name: empty for name in SECTIONS}
    upstream = {**UP, "pool": empty, "cache": empty, "headers": empty, "tools": {"t": empty}}
    config = parse_config({**data, "upstreams": [upstream]}, env={})
    expected = GatewayConfig(
        upstreams=(UpstreamConfig(name="u", url=UP["url"], tools={"t": TargetConfig()}),),
        replica_id=config.replica_id,  # random by default
    )
    for field in dataclasses.fields(GatewayConfig):
        assert getattr(config, field.name) == getattr(expected, field.name), field.name
    assert config.replica_id.startswith("replica-")


FULL = {
    "listen": {"host": "0.0.0.0", "port": 9090},
    "limits": {
        "max_body_bytes": 1024,
        "max_rounds": 3,
        "max_parked_calls": 50,
        "max_parked_per_principal": 5,
        "suspension_ttl_s": 60,
        "hold_timeout_s": 20.5,
        "coalesce_ms": 0,
        "keepalive_s": 5,
        "idle_timeout_s": 30,
        "body_timeout_s": 12.5,
        "max_listens": 3,
        "max_listens_per_principal": 2,
        "max_state_bytes": 2048,
        "max_upstream_message_bytes": 1 << 20,
        "max_tasks": 8,
        "max_tasks_per_principal": 2,
        "max_task_result_bytes": 4096,
        "rate": {"per_principal": {"per_s": 5, "burst": 10}},
    },
    "auth": {
        "public_url": "https://mcp.example.com",
        "oauth": {"issuer": "https://login.example.com", "scopes": ["mcp"]},
    },
    "sealing": {"audience": "staging"},
    "audit": {
        "log": True,
        "file": {"path": "/tmp/audit.jsonl"},
        "stream": {"url": "redis://audit:6379/2", "name": "trail", "max_len": 500},
        "buffer_events": 7,
        "include_arguments": True,
        "include_questions": True,
        "include_answers": True,
        "include_results": True,
        "redact": ["(?i)secret"],
        "max_value_bytes": 64,
    },
    "store": {
        "url": "redis://redis:6379/1",
        "key_prefix": "gw:",
        "replicas_acked": 1,
        "wait_ms": 150,
    },
    "fleet": {
        "heartbeat_s": 2,
        "drain_timeout_s": 5,
        "orphan_sweep_s": 7,
        "format_settle_s": 60,
        "format_level": 1,
    },
    "legacy": {
        "enabled": False,
        "session_ttl_s": 3600,
        "max_streams_per_principal": 2,
        "max_streams": 100,
        "max_bound_sessions": 9,
        "bound_session_idle_s": 45,
    },
    "logging": {"level": "debug", "format": "json"},
    "allowed_origins": ["https://app.example.com"],
    "allowed_hosts": ["MCP.example.com"],
    "replica_id": "gw-0",
    "upstreams": [
        {
            **UP,
            "path": "/legacy",
            "headers": {"X-Tenant": "a"},
            "timeout_s": 5,
            "pool": {
                "min_idle": 0,
                "max_sessions": 8,
                "idle_timeout_s": 60,
                "acquire_timeout_s": 2,
                "max_requests": 100,
            },
            "cache": {"ttl_ms": 500, "scope": "public"},
            "inputs": [{"key": "who", "method": "elicitation/create"}],
            "tools": {
                "t": {
                    "inputs": [{"key": "k"}],
                    "replay_safe": True,
                    "mode": "replay",
                    "scopes": ["admin"],
                },
                "long": {
                    "task": {
                        "support": "required",
                        "after_s": 2,
                        "ttl_s": 60,
                        "poll_interval_ms": 500,
                    }
                },
            },
            "oauth_client": {
                "token_url": "https://login.example.com/token",
                "client_id": "gateway",
                "client_secret_env": "UP_SECRET",
            },
            "prompts": {"p": {}},
            "resources": {"r": {}},
            "transport": "sse",
        },
        {
            "name": "local",
            "command": ["server", "--stdio"],
            "env": {"TOKEN": "t"},
            "cwd": ".",
            "max_message_bytes": 1024,
            "path": "/local",
        },
        {
            "name": "shared",
            "url": UP["url"],
            "path": "/shared",
            "pool": {
                "calls_per_session": 4,
                "isolation": "none",
                "max_idle_per_caller": 3,
                "max_opening": 2,
                "outside_question_s": 5,
            },
            "expose": {
                "tools": {"allow": ["t*"], "deny": ["delete_*"]},
                "prompts": {"allow": ["p*"], "deny": ["internal_*"]},
                "resources": {"allow": ["note://*"], "deny": ["note://secret/*"]},
            },
            "tools": {
                "t": {
                    "name": "shown",
                    "title": "Shown",
                    "description": "Shown so.",
                    "approval": "required",
                }
            },
            "catalog": {"ttl_s": 5, "per_caller": True, "pinning": "block"},
            "approval": "destructive",
            "approval_ttl_s": 60,
        },
        {"name": "solo", "url": UP["url"]},
    ],
    "endpoints": [
        {
            "path": "/solo",
            "upstreams": ["solo"],
            "prefix": "always",
            "separator": "-",
            "on_upstream_down": "fail",
        }
    ],
}


def _leaves(config: object, path: str = "") -> dict[str, object]:
    """Every field of a config tree by key path, nested dataclasses walked."""
    leaves: dict[str, object] = {}
    for field in dataclasses.fields(config):  # type: ignore[arg-type]
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value):
            leaves.update(_leaves(value, f"{path}{field.name}."))
        else:
            leaves[path + field.name] = value
    return leaves


def test_every_field_is_read_from_the_file() -> None:
    """A field the loader forgot keeps its default here, and this test names it."""
    env = {"MRTR_GATEWAY_SEALING_KEYS": generate_key(), "UP_SECRET": "s3cret"}
    config = parse_config(FULL, env=env)
    loaded = _leaves(config)
    defaults = _leaves(GatewayConfig())
    upstreams = [_leaves(u) for u in config.upstreams]  # HTTP+SSE, stdio, Streamable HTTP
    upstream_defaults = _leaves(UpstreamConfig(name="", url=""))
    same = [k for k in defaults if k != "upstreams" and loaded.get(k, ...) == defaults[k]]
    same += [
        f"upstreams[].{k}"
        for k in upstream_defaults
        if all(each.get(k, ...) == upstream_defaults[k] for each in upstreams)
    ]
    assert same == []
    target = config.upstreams[0].tools["t"]
    assert (target.replay_safe, target.mode, [r.key for r in target.inputs]) == (
        True,
        "replay",
        ["k"],
    )
    assert config.allowed_hosts == {"mcp.example.com"} and config.upstreams[0].pool.min_idle == 0
    assert config.upstreams[0].tools["long"].task == TaskPolicy(
        support="required", after_s=2.0, ttl_s=60.0, poll_interval_ms=500
    )


def test_every_audit_field_is_read_from_the_file() -> None:
    """The trail's section, leaf by leaf against its defaults (it has none as a whole)."""
    env = {"MRTR_GATEWAY_SEALING_KEYS": generate_key(), "UP_SECRET": "s3cret"}
    audit = parse_config(FULL, env=env).audit
    assert audit is not None and audit.file is not None and audit.stream is not None
    loaded = _leaves(audit)
    defaults = _leaves(AuditConfig(file=AuditFileConfig(), stream=AuditStreamConfig()))
    assert [k for k in defaults if loaded[k] == defaults[k]] == []
    assert audit.stream.key == "gw:{trail}:events"
    assert [p.pattern for p in audit.redact] == ["(?i)secret"]
    assert audit.policy == ContentPolicy(
        arguments=True,
        questions=True,
        answers=True,
        results=True,
        redact=audit.redact,
        max_bytes=64,
    )


def test_without_an_audit_section_there_is_no_trail() -> None:
    assert parse_config({"upstreams": [UP]}, env={}).audit is None


def test_the_audit_stream_is_on_the_stores_redis_unless_told_otherwise() -> None:
    env = {"MRTR_GATEWAY_SEALING_KEYS": generate_key(), "AUDIT_PW": "pw"}
    data = {"upstreams": [UP], "store": {"url": "redis://r:6379/0"}, "audit": {"stream": {}}}
    redis = parse_config(data, env=env).audit.stream
    assert (redis.url, redis.key, redis.max_len) == (
        "redis://r:6379/0",
        "mrtr:{audit}:events",
        100_000,
    )
    env["MRTR_GATEWAY_STORE_URL"] = "redis://elsewhere:6379/0"  # the store's, wherever it is set
    assert parse_config(data, env=env).audit.stream.url == "redis://elsewhere:6379/0"
    data["audit"] = {"stream": {"url": "redis://:${AUDIT_PW}@audit:6379/0"}}
    assert parse_config(data, env=env).audit.stream.url == "redis://:pw@audit:6379/0"


def test_an_audit_file_is_read_relative_to_the_config(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "upstreams: [{name: u, url: 'http://127.0.0.1:1/mcp'}]\n"
        "audit: {file: {path: logs/audit.jsonl}}\n"
    )
    audit = load_config(path, env={}).audit
    assert audit is not None and audit.file is not None
    assert audit.file.path == str(tmp_path / "logs" / "audit.jsonl")


@pytest.mark.parametrize(
    ("audit", "message"),
    [
        ({}, "audit: name at least one sink"),
        (None, "audit: name at least one sink"),
        ({"log": False}, "audit: name at least one sink"),
        ({"lg": True}, "audit.lg: unknown key; did you mean log?"),
        ({"log": "yes"}, "audit.log: expected bool"),
        ({"file": {}}, "audit.file.path: the file to append events to is required"),
        (
            {"file": {"path": "/no/such/folder/a.jsonl"}},
            "audit.file.path: the folder /no/such/folder does not exist",
        ),
        ({"file": {"path": "/tmp"}}, "audit.file.path: /tmp is a folder"),
        ({"stream": {}}, "audit.stream.url: the store is in memory"),
        ({"stream": {"url": "http://r"}}, "audit.stream.url: a Redis URL"),
        ({"stream": {"url": "redis://r", "name": "a{b}"}}, "audit.stream.name: letters, digits"),
        (
            {"stream": {"url": "redis://r", "max_len": 0}},
            "audit.stream.max_len: must be greater than 0",
        ),
        ({"stream": {"url": "redis://r", "key": "k"}}, "audit.stream.key: unknown key"),
        (
            {"stream": {"url": "redis://${NOT_SET}/0"}},
            "audit.stream.url: environment variable NOT_SET is not set",
        ),
        ({"log": True, "redact": "secret"}, "audit.redact: expected a list of regular expressions"),
        ({"log": True, "redact": ["ok", "("]}, "audit.redact[1]: not a regular expression"),
        ({"log": True, "buffer_events": 0}, "audit.buffer_events: must be greater than 0"),
        ({"log": True, "max_value_bytes": 8}, "audit.max_value_bytes: at least 16 bytes"),
    ],
)
def test_bad_audit_sections_name_the_key_and_the_fix(audit: object, message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config({"upstreams": [UP], "audit": audit}, env={})
    assert any(problem.startswith(message) for problem in refused.value.problems), (
        refused.value.problems
    )


def test_a_task_policy_is_a_support_level_or_a_mapping_with_defaults() -> None:
    tools = {"a": {"task": "optional"}, "b": {"task": {"support": "required", "after_s": 0.5}}}
    upstream = parse_config({"upstreams": [{**UP, "tools": {**tools, "c": {}}}]}).upstreams[0]
    assert upstream.tools["a"].task == TaskPolicy(support="optional")
    assert upstream.tools["b"].task == TaskPolicy(support="required", after_s=0.5)
    assert upstream.tools["c"].task == TaskPolicy(support="none")
    assert (TaskPolicy().ttl_s, TaskPolicy().poll_interval_ms) == (3600.0, 1000)
    assert upstream.has_tasks
    assert not parse_config({"upstreams": [{**UP, "tools": {"c": {}}}]}).upstreams[0].has_tasks


@pytest.mark.parametrize(
    "rate", [{}, {"per_s": 0}, {"per_s": 0, "burst": 0}, {"per_s": 0, "burst": 40}]
)
def test_a_rate_of_zero_is_off_as_leaving_it_out_is(rate: dict) -> None:
    config = parse_config({"upstreams": [UP], "limits": {"rate": {"per_principal": rate}}})
    assert not config.limits.rate_per_principal.enabled


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "upstreams: at least one"),
        ({"upstreams": [{"name": "u"}]}, r"upstreams\[0\].url"),
        ({"upstreams": [{**UP, "path": "mcp"}]}, r"upstreams\[0\].path: must start with '/'"),
        ({"upstreams": [UP, {**UP}]}, r"upstreams\[1\].name: 'u' is used"),
        (
            {"upstreams": [UP], "fleet": {"heartbeat_s": 2, "orphan_sweep_s": 3}},
            r"fleet.orphan_sweep_s: must be at least twice fleet.heartbeat_s \(4\), got 3",
        ),
        ({"upstreams": [{**UP, "timeout": 5}]}, r"upstreams\[0\].timeout: unknown key"),
        ({"upstreams": [UP], "legacy": {"enabled": "yes"}}, r"^legacy.enabled: expected bool"),
        (
            {"upstreams": [UP], "legacy": {"session_ttl_s": 0}},
            r"^legacy.session_ttl_s: must be greater than 0",
        ),
        (
            {"upstreams": [UP], "legacy": {"max_streams_per_principal": -1}},
            r"^legacy.max_streams_per_principal: must be 0 or more",
        ),
        (
            {"upstreams": [UP], "legacy": {"max_streams_per_principal": 8, "max_streams": 4}},
            r"^legacy.max_streams_per_principal: 8 is more than legacy.max_streams \(4\)",
        ),
        ({"upstreams": [UP], "legacy": {"ttl": 5}}, r"^legacy.ttl: unknown key"),
        (
            {"upstreams": [UP], "legacy": {"max_bound_sessions": 0}},
            r"^legacy.max_bound_sessions: must be greater than 0",
        ),
        (
            {"upstreams": [UP], "legacy": {"bound_session_idle_s": -1}},
            r"^legacy.bound_session_idle_s: must be greater than 0",
        ),
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
        ({"upstreams": [UP], "listen": {"port": 70000}}, "listen.port: must be 0..65535"),
        ({"upstreams": [UP], "limits": {"max_rounds": True}}, "expected int, got bool"),
        ({"upstreams": [UP], "limits": {"max_rounds": 2.5}}, "expected int, got float"),
        ({"upstreams": [UP], "limits": {"coalesce_ms": -1}}, "coalesce_ms: must be 0 or more"),
        (
            {"upstreams": [UP], "limits": {"idle_timeout_s": 0}},
            "limits.idle_timeout_s: must be greater than 0",
        ),
        ({"upstreams": [UP], "limits": {"body_timeout_s": "1m"}}, "expected float, got str"),
        (
            {"upstreams": [UP], "limits": {"max_upstream_message_bytes": 64}},
            r"^limits.max_upstream_message_bytes: must be at least 65536 \(64 KiB\), got 64; "
            r"it is in bytes",
        ),
        (
            {"upstreams": [UP], "limits": {"max_upstream_message_bytes": "64MiB"}},
            r"^limits.max_upstream_message_bytes: expected int, got str",
        ),
        (
            {"upstreams": [{**UP, "pool": {"min_idle": -1}}]},
            r"upstreams\[0\].pool.min_idle: must be 0 or more, got -1",
        ),
        (
            {"upstreams": [{**UP, "pool": {"calls_per_session": 0}}]},
            r"pool.calls_per_session: must be greater than 0",
        ),
        (
            {"upstreams": [{**UP, "approval": "sometimes"}]},
            r"^upstreams\[0\].approval: must be one of none, destructive, all, not 'sometimes'",
        ),
        (
            {"upstreams": [{**UP, "approval_ttl_s": -1}]},
            r"^upstreams\[0\].approval_ttl_s: must be 0 or more",
        ),
        (
            {"upstreams": [{**UP, "tools": {"t": {"approval": "always"}}}]},
            r"^upstreams\[0\].tools.t.approval: must be required or none, not 'always'",
        ),
        (
            {"upstreams": [{**UP, "prompts": {"p": {"approval": "required"}}}]},
            r"^upstreams\[0\].prompts.p.approval: only a tool's call is approved",
        ),
        (
            {"upstreams": [{"name": "s", "command": ["srv"], "pool": {"calls_per_session": 2}}]},
            r"^upstreams\[0\].pool.calls_per_session: only a streamable-http upstream can carry",
        ),
        (
            {
                "upstreams": [
                    {**UP, "transport": "sse", "pool": {"calls_per_session": 2}},
                ]
            },
            r"over sse they cannot be told apart",
        ),
        ({"upstreams": [UP], "replica_id": ""}, "replica_id: must not be empty"),
        (
            {"upstreams": [UP], "limits": {"rate": {"per_principal": {"per_s": 5}}}},
            r"limits.rate.per_principal.burst: give a burst of at least 1 request",
        ),
        (
            {"upstreams": [UP], "limits": {"rate": {"per_principal": {"per_s": -1}}}},
            r"limits.rate.per_principal.per_s: must be 0 or more",
        ),
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
        (
            {"upstreams": [{**UP, "tools": {"wipe": {"scopes": ["admin"]}}}]},
            r"^upstreams\[0\].tools.wipe.scopes: scopes need an `auth` section",
        ),
        (
            {"upstreams": [{**UP, "resources": {"static://a": {}, "STATIC://a": {}}}]},
            r"^upstreams\[0\].resources.STATIC://a: the same resource as 'static://a'",
        ),
        ({"upstreams": [UP], "store": {"url": "postgres://x"}}, "store.url"),
        ({"upstreams": [UP], "logging": {"format": "xml"}}, "logging.format"),
        (
            {"upstreams": [{**UP, "tools": {"t": {"task": "sometimes"}}}]},
            r"^upstreams\[0\].tools.t.task: must be one of none, optional, required",
        ),
        (
            {"upstreams": [{**UP, "tools": {"t": {"task": {"support": "maybe"}}}}]},
            r"^upstreams\[0\].tools.t.task.support: must be one of",
        ),
        (
            {"upstreams": [{**UP, "tools": {"t": {"task": {"ttl_s": 0}}}}]},
            r"^upstreams\[0\].tools.t.task.ttl_s: must be greater than 0",
        ),
        (
            {"upstreams": [{**UP, "tools": {"t": {"task": {"after_s": 60, "ttl_s": 30}}}}]},
            r"^upstreams\[0\].tools.t.task.after_s: must be shorter than ttl_s",
        ),
        (
            {"upstreams": [{**UP, "tools": {"t": {"task": {"poll_interval_ms": 5}}}}]},
            r"^upstreams\[0\].tools.t.task.poll_interval_ms: must be at least 100",
        ),
        (
            {"upstreams": [{**UP, "tools": {"t": {"task": {"suport": "optional"}}}}]},
            r"^upstreams\[0\].tools.t.task.suport: unknown key",
        ),
        (
            {"upstreams": [{**UP, "prompts": {"p": {"task": "optional"}}}]},
            r"^upstreams\[0\].prompts.p.task: only a tool runs as a task",
        ),
        (
            {"upstreams": [{**UP, "tools": {"t": {"mode": "replay", "task": "optional"}}}]},
            r"^upstreams\[0\].tools.t.task: a replay-mode tool cannot run as a task",
        ),
        ({"upstreams": [UP], "limits": {"max_tasks": 0}}, r"^limits.max_tasks: must be greater"),
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


def test_the_environment_names_the_replica_over_the_file() -> None:
    data = {"upstreams": [UP], "replica_id": "from-file"}
    assert parse_config(data, env={}).replica_id == "from-file"
    assert parse_config(data, env={"MRTR_GATEWAY_REPLICA_ID": "pod-1"}).replica_id == "pod-1"


def test_overrides_are_written_into_the_data_before_validation() -> None:
    data = {"upstreams": [UP], "store": {"url": "memory://", "key_prefix": "p:"}}
    written = copy.deepcopy(data)
    with pytest.raises(ConfigError, match="every replica shares"):
        parse_config(data, env={}, overrides={"store.url": "redis://r:6379/0"})
    env = {
        "MRTR_GATEWAY_STORE_URL": "redis://env:6379/0",
        "MRTR_GATEWAY_SEALING_KEYS": generate_key(),
    }
    config = parse_config(data, env=env, overrides={"store.url": "memory://"})
    assert (config.store.url, config.store.key_prefix) == ("memory://", "p:")
    assert data == written  # the caller's data is not changed
    with pytest.raises(ConfigError, match="^listen.port: must be 0..65535"):
        parse_config(data, env={}, overrides={"listen.port": 70000})
    with pytest.raises(ConfigError, match="^listen: expected a mapping, got int"):
        parse_config({**data, "listen": 8080}, env={}, overrides={"listen.port": 9000})


def test_a_stdio_upstream_is_a_command_and_each_mistake_is_named(tmp_path: Path) -> None:
    def upstream(**entry: object) -> UpstreamConfig:
        data = {"upstreams": [{"name": "s", **entry}]}
        return parse_config(data, env={"TOKEN": "t0k"}, base=tmp_path).upstreams[0]

    local = upstream(command=["node", "server.js"], env={"API_KEY": "${TOKEN}"}, cwd=".")
    assert (local.transport, local.command, dict(local.env)) == (
        "stdio",
        ("node", "server.js"),
        {"API_KEY": "t0k"},
    )
    assert local.cwd == str(tmp_path / ".") and local.url == ""
    assert upstream(transport="sse", url="http://h:1/sse").transport == "sse"
    refusals = {
        "upstreams[0].command": dict(command="node server.js"),
        "upstreams[0].url": dict(command=["node"], url="http://h/mcp"),
        "upstreams[0].env": dict(url="http://h/mcp", env={"A": "b"}),
        "upstreams[0].transport": dict(transport="websocket", url="http://h/mcp"),
        "upstreams[0].cwd": dict(command=["node"], cwd="missing-folder"),
        "upstreams[0].env.PORT": dict(command=["node"], env={"PORT": 80}),
        "upstreams[0].env.SECRET": dict(command=["node"], env={"SECRET": "${UNSET_VAR}"}),
    }
    for where, entry in refusals.items():
        with pytest.raises(ConfigError) as refused:
            upstream(**entry)
        assert str(refused.value).startswith(where), (where, str(refused.value))


def test_every_mistake_of_a_file_is_named_in_one_run_by_key_path() -> None:
    data = {
        "listen": {"port": 80800},
        "limits": {"max_body_bytes": "big", "max_rounds": 0},
        "upstreams": [
            {**UP, "pool": {"max_sessions": -1}},
            {"name": "two", "url": "ftp://x", "path": "/two"},
        ],
        "logging": {"level": "loud"},
    }
    with pytest.raises(ConfigError) as refused:
        parse_config(data, env={})
    paths = [problem.split(": ", 1)[0] for problem in refused.value.problems]
    assert paths == [
        "limits.max_body_bytes",
        "limits.max_rounds",
        "listen.port",
        "logging.level",
        "upstreams[0].pool.max_sessions",
        "upstreams[1].url",
    ]
    assert str(refused.value).startswith("6 mistakes: limits.max_body_bytes: expected int")


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"upstream": [UP]}, "upstream: unknown key; did you mean upstreams?"),
        ({"upstreams": [UP], "limit": {}}, "limit: unknown key; did you mean limits?"),
        (
            {"upstreams": [UP], "limits": {"max_body_byte": 1}},
            "limits.max_body_byte: unknown key; did you mean max_body_bytes?",
        ),
        (
            {"upstreams": [UP], "limits": {"rate": {"per_principal": {"per_sec": 1}}}},
            "limits.rate.per_principal.per_sec: unknown key; did you mean per_s?",
        ),
        (
            {"upstreams": [{**UP, "pool": {"max_session": 4}}]},
            "upstreams[0].pool.max_session: unknown key; did you mean max_sessions?",
        ),
        (
            {"upstreams": [{**UP, "tools": {"t": {"replay_saf": True}}}]},
            "upstreams[0].tools.t.replay_saf: unknown key; did you mean replay_safe?",
        ),
        (
            {"upstreams": [{**UP, "inputs": [{"key": "k", "methd": "roots/list"}]}]},
            "upstreams[0].inputs[0].methd: unknown key; did you mean method?",
        ),
        (
            {"upstreams": [UP], "legacy": {"enable": False}},
            "legacy.enable: unknown key; did you mean enabled?",
        ),
    ],
)
def test_a_misspelt_key_at_any_level_suggests_the_key_it_resembles(
    data: dict, problem: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(data, env={})
    assert problem in refused.value.problems


def test_a_key_like_no_other_points_to_the_reference() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config({"upstreams": [UP], "zzz": 1}, env={})
    assert refused.value.problems == (
        "zzz: unknown key; see the configuration reference, docs/configuration.md",
    )


@pytest.mark.parametrize(
    ("text", "where", "detail"),
    [
        ("upstreams:\n  - name: u\n    url: [http://x\n", ":4:1:", "opened at line 3, column 10"),
        ("listen:\n  port: 8080\n   host: x\n", ":3:8:", "mapping values are not allowed"),
        ("upstreams: [{name: u}\nlisten: {}\n", ":2:1:", "expected ',' or ']'"),
    ],
)
def test_a_yaml_error_names_the_file_line_and_column(
    tmp_path: Path, text: str, where: str, detail: str
) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as refused:
        load_config(path, env={})
    (problem,) = refused.value.problems
    assert problem.startswith(f"{path}{where} not valid YAML: ")
    assert detail in problem and "<unicode string>" not in problem


def test_an_upstream_refused_whole_does_not_hide_the_mistakes_of_auth() -> None:
    data = {
        "upstreams": [{"name": "bad name!", "url": "http://h/mcp"}, UP],
        "auth": {"oauth": {"issuer": "https://login.example.com"}},
    }
    with pytest.raises(ConfigError) as refused:
        parse_config(data, env={})
    paths = [problem.split(": ", 1)[0] for problem in refused.value.problems]
    assert paths == ["auth.public_url", "upstreams[0].name"]


def test_a_duplicate_after_an_entry_refused_is_named_by_its_own_index() -> None:
    data = {"upstreams": [{"name": "bad name!", "url": "http://h/mcp"}, UP, {**UP, "path": "/b"}]}
    with pytest.raises(ConfigError) as refused:
        parse_config(data, env={})
    assert [p.split(": ", 1)[0] for p in refused.value.problems] == [
        "upstreams[0].name",
        "upstreams[2].name",
    ]
