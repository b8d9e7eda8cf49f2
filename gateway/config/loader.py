"""Reading and validating the configuration: YAML and the environment in, a GatewayConfig out.

Every value is validated explicitly; an error names the key path and says how to
fix it. Nothing is coerced silently. Secrets never live in the YAML: sealing
keys come from a key file or the environment, and upstream header values may
reference environment variables as `${NAME}`.

Environment overrides (a variable set and not empty wins over the file):
    MRTR_GATEWAY_SEALING_KEYS       comma-separated keys (first seals, all open)
    MRTR_GATEWAY_SEALING_KEYS_FILE  overrides sealing.keys_file
    MRTR_GATEWAY_STORE_URL          overrides store.url
    MRTR_GATEWAY_LOG_LEVEL / MRTR_GATEWAY_LOG_FORMAT  override logging.level / .format
    MRTR_GATEWAY_REPLICA_ID         overrides replica_id

Command-line flags reach this module as `overrides` of key paths, written into the
YAML data before validation: flag > environment variable > file > default.

Defaults are not written here: only the keys a file gives are passed to the
dataclasses of `gateway.config.model`, which supply the rest.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from gateway.config.audit import parse_audit
from gateway.config.auth import parse_auth
from gateway.config.endpoints import parse_endpoints
from gateway.config.model import (
    FleetConfig,
    GatewayConfig,
    LegacyConfig,
    LimitsConfig,
    ListenConfig,
    LoggingConfig,
    RateConfig,
    SealingConfig,
    StoreConfig,
    UpstreamConfig,
)
from gateway.config.paths import served_paths
from gateway.config.section import Problems, Section
from gateway.config.upstreams import no_scopes_without_auth, parse_upstream, unique
from gateway.errors import ConfigError
from gateway.protocol.formats import LEVEL, PREVIOUS
from gateway.protocol.state import parse_key

ENV_KEYS = "MRTR_GATEWAY_SEALING_KEYS"
ENV_KEYS_FILE = "MRTR_GATEWAY_SEALING_KEYS_FILE"
ENV_STORE_URL = "MRTR_GATEWAY_STORE_URL"
ENV_LOG_LEVEL = "MRTR_GATEWAY_LOG_LEVEL"
ENV_LOG_FORMAT = "MRTR_GATEWAY_LOG_FORMAT"
ENV_REPLICA_ID = "MRTR_GATEWAY_REPLICA_ID"
#: The least `limits.max_upstream_message_bytes`: below it, a value meant in KiB or MiB
#: would refuse an upstream's ordinary answers (a tools/list alone can be tens of KiB).
MIN_UPSTREAM_MESSAGE_BYTES = 64 * 1024


def _from_env(values: dict[str, Any], key: str, env: Mapping[str, str], name: str) -> None:
    """The environment variable, when set and not empty, replaces the file's value."""
    if env.get(name):
        values[key] = env[name]


def _sealing(sec: Section, env: Mapping[str, str], base: Path) -> SealingConfig:
    if sec.has("keys"):
        raise ConfigError(
            f"{sec.at('keys')}: sealing keys must not be written in the config file; "
            f"use sealing.keys_file or the {ENV_KEYS} environment variable"
        )
    keys_file = sec.get("keys_file", str)
    values = sec.scalars(SealingConfig)
    sec.done()
    if env.get(ENV_KEYS):
        keys = [
            parse_key(k, f"{ENV_KEYS} key #{i + 1}")
            for i, k in enumerate(env[ENV_KEYS].split(","))
            if k.strip()
        ]
        return SealingConfig(keys=tuple(keys), **values)
    keys_file = env.get(ENV_KEYS_FILE) or keys_file
    if keys_file:
        values["keys"] = tuple(load_keys_file(base / keys_file))  # an absolute path stays as is
    return SealingConfig(**values)


def load_keys_file(path: Path) -> list[bytes]:
    """Keys, one per line, first seals; blank lines and `#` comments are skipped.

    Raises:
        ConfigError
    """
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"sealing.keys_file: cannot read {path}: {exc.strerror}") from exc
    lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1)]
    keys = [
        parse_key(line, f"{path}:{n}") for n, line in lines if line and not line.startswith("#")
    ]
    if not keys:
        raise ConfigError(
            f"sealing.keys_file: {path} holds no key; generate one with: mrtr-gateway keygen"
        )
    return keys


_STORE_SCHEMES = (
    "memory://",
    "redis://",
    "rediss://",
    "unix://",
    "redis+sentinel://",
    "redis+cluster://",
)


def _store(sec: Section, env: Mapping[str, str]) -> StoreConfig:
    values = sec.scalars(StoreConfig, zero_ok={"replicas_acked"})
    sec.done()
    _from_env(values, "url", env, ENV_STORE_URL)
    store = StoreConfig(**values)
    if not store.url.startswith(_STORE_SCHEMES):
        raise ConfigError(
            "store.url: use memory:// (one replica) or redis://host:port/db, "
            "redis+sentinel://host:port/service, redis+cluster://host:port"
        )
    return store


def _logging(sec: Section, env: Mapping[str, str]) -> LoggingConfig:
    values = sec.scalars(LoggingConfig)
    sec.done()
    _from_env(values, "level", env, ENV_LOG_LEVEL)
    _from_env(values, "format", env, ENV_LOG_FORMAT)
    # Case is not meaningful here (INFO is info), so this is no silent change of meaning.
    config = LoggingConfig(**{key: value.lower() for key, value in values.items()})
    if config.level not in ("debug", "info", "warning", "error"):
        raise ConfigError("logging.level: must be debug, info, warning or error")
    if config.format not in ("auto", "console", "json"):
        raise ConfigError("logging.format: must be auto, console or json")
    return config


def _legacy(sec: Section) -> LegacyConfig:
    config = LegacyConfig(
        **sec.scalars(LegacyConfig, zero_ok={"max_streams_per_principal", "max_streams"})
    )
    sec.done()
    if config.max_streams_per_principal > config.max_streams:
        raise ConfigError(
            f"legacy.max_streams_per_principal: {config.max_streams_per_principal} is more than "
            f"legacy.max_streams ({config.max_streams}), the streams of the whole replica; "
            "lower it or raise legacy.max_streams"
        )
    return config


def _names(root: Section, key: str, example: str) -> frozenset[str] | None:
    """A list of strings as a set, or None when the key is absent (the default applies)."""
    items = root.get(key, list)
    if items is None:
        return None
    if not all(isinstance(item, str) for item in items):
        raise ConfigError(f"{root.at(key)}: expected a list of {example}")
    return frozenset(items)


# The environment variables that set a key path: an override of that key wins over them.
_ENV_SETS: dict[str, tuple[str, ...]] = {
    "store.url": (ENV_STORE_URL,),
    "sealing.keys_file": (ENV_KEYS, ENV_KEYS_FILE),
    "logging.level": (ENV_LOG_LEVEL,),
    "logging.format": (ENV_LOG_FORMAT,),
    "replica_id": (ENV_REPLICA_ID,),
}


def _written(data: Any, parents: list[str], leaf: str, value: object) -> Any:
    """A copy of mapping `data` with `value` at parents.leaf (the input is not changed).

    Anything but a mapping (or null) on the way is returned as is: the override is
    not applied and parse_config refuses the malformed data by its key path.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return data
    copy = dict(data)
    if parents:
        copy[parents[0]] = _written(copy.get(parents[0]), parents[1:], leaf, value)
    else:
        copy[leaf] = value
    return copy


def parse_config(
    data: Any,
    *,
    env: Mapping[str, str] | None = None,
    base: Path | None = None,
    overrides: Mapping[str, object] | None = None,
) -> GatewayConfig:
    """Build and validate the config tree from decoded YAML.

    `overrides` maps key paths to values (`{"store.url": "redis://r:6379/0"}`, as the
    command line gives them). Each is written into the data before anything is
    validated, as if the file said so, so every rule applies to the combined result;
    each also wins over the environment variables that set its key. Precedence:
    override > environment variable (see the module docstring) > data > dataclass
    default. Relative paths in the data are read from `base` (default: the working
    directory).

    Raises:
        ConfigError: naming the key path and the fix.
    """
    env = dict(os.environ if env is None else env)
    for key_path, value in (overrides or {}).items():
        *parents, leaf = key_path.split(".")
        data = _written(data, parents, leaf, value)
        for name in _ENV_SETS.get(key_path, ()):
            env.pop(name, None)
    base = base or Path.cwd()
    problems = Problems()
    root = Section(data, "", problems)
    values: dict[str, Any] = root.scalars(GatewayConfig)
    _from_env(values, "replica_id", env, ENV_REPLICA_ID)
    if values.get("replica_id") == "":
        problems.add("replica_id: must not be empty; leave it out for a random name")
    # Each part is read whatever became of the others, so one run names every mistake.
    parts = {
        "listen": lambda: _listen(root.section("listen")),
        "limits": lambda: _limits(root.section("limits")),
        "sealing": lambda: _sealing(root.section("sealing"), env, base),
        "store": lambda: _store(root.section("store"), env),
        "fleet": lambda: _fleet(root.section("fleet")),
        "legacy": lambda: _legacy(root.section("legacy")),
        "logging": lambda: _logging(root.section("logging"), env),
        "allowed_origins": lambda: _names(
            root, "allowed_origins", "origins such as https://app.example.com"
        ),
        "allowed_hosts": lambda: _hosts(root),
    }
    for key, read in parts.items():
        value = problems.attempt(read)
        if value is not None:
            values[key] = value
    store_read: StoreConfig | None = values.get("store")
    audit = problems.attempt(
        lambda: parse_audit(
            root.section("audit"),
            base,
            env,
            None if store_read is None else store_read.url,
            (store_read or StoreConfig()).key_prefix,
            present=root.has("audit"),
        )
    )
    if audit is not None:
        values["audit"] = audit
    sealing, store = values.get("sealing"), values.get("store")
    if sealing is not None and store is not None and store.shared and sealing.ephemeral:
        problems.add(
            "sealing: a shared store (Redis) needs a sealing key that every replica shares; "
            f"set sealing.keys_file or {ENV_KEYS} (generate one with: mrtr-gateway keygen)"
        )
    entries = _upstreams(root, env, base)
    endpoints = parse_endpoints(root, {u.name: i for i, u in entries})
    entries = served_paths(root, entries, endpoints)
    values["endpoints"] = tuple(e for _, e in endpoints)
    try:  # checked for the paths of the upstreams read (all of them, or a mistake is kept)
        values["auth"] = parse_auth(root.section("auth"), base, [u.path for _, u in entries])
    except ConfigError as exc:
        for problem in exc.problems:
            problems.add(problem)
    else:
        if values["auth"] is None:
            problems.attempt(lambda: no_scopes_without_auth(entries))
    root.done()
    problems.check()
    return GatewayConfig(**values, upstreams=tuple(u for _, u in entries))


def _listen(sec: Section) -> ListenConfig:
    listen = ListenConfig(**sec.scalars(ListenConfig, zero_ok={"port"}))
    sec.done()
    if listen.port > 65535:
        raise ConfigError(f"{sec.at('port')}: must be 0..65535, got {listen.port}")
    return listen


def _limits(lim: Section) -> LimitsConfig:
    rate_sec = lim.section("rate")
    per_principal = rate_sec.section("per_principal")
    # 0 for `per_s` is off, as leaving it out is (the documented default); a burst is
    # checked only for a bucket that is on.
    rate = RateConfig(**per_principal.scalars(RateConfig, zero_ok={"per_s", "burst"}))
    if rate.enabled and rate.burst < 1:
        per_principal.mistake(f"{per_principal.at('burst')}: give a burst of at least 1 request")
    per_principal.done()
    rate_sec.done()
    limits = LimitsConfig(
        **lim.scalars(LimitsConfig, zero_ok={"coalesce_ms", "max_listens"}),
        rate_per_principal=rate,
    )
    lim.done()
    if limits.coalesce_ms > 5000:
        raise ConfigError("limits.coalesce_ms: must be 0..5000 milliseconds")
    if limits.max_upstream_message_bytes < MIN_UPSTREAM_MESSAGE_BYTES:
        raise ConfigError(
            f"limits.max_upstream_message_bytes: must be at least {MIN_UPSTREAM_MESSAGE_BYTES} "
            f"(64 KiB), got {limits.max_upstream_message_bytes}; it is in bytes "
            "(67108864 for 64 MiB)"
        )
    return limits


def _fleet(sec: Section) -> FleetConfig:
    fleet = FleetConfig(**sec.scalars(FleetConfig, zero_ok={"format_level", "format_settle_s"}))
    sec.done()
    if fleet.format_level not in (0, *range(PREVIOUS, LEVEL + 1)):
        raise ConfigError(
            f"fleet.format_level: 0 (follow the fleet) or a level from {PREVIOUS} "
            f"to {LEVEL}, got {fleet.format_level}"
        )
    if fleet.orphan_sweep_s < 2 * fleet.heartbeat_s:
        # Two looks must be further apart than a heartbeat's TTL (two beats): a replica
        # only late with one beat is never taken for dead.
        raise ConfigError(
            f"fleet.orphan_sweep_s: must be at least twice fleet.heartbeat_s "
            f"({2 * fleet.heartbeat_s:g}), got {fleet.orphan_sweep_s:g}"
        )
    return fleet


def _hosts(root: Section) -> frozenset[str] | None:
    hosts = _names(root, "allowed_hosts", "host names such as mcp.example.com")
    return None if hosts is None else frozenset(h.lower() for h in hosts)


def _upstream(
    root: Section, item: Any, path: str, env: Mapping[str, str], base: Path
) -> UpstreamConfig:
    return parse_upstream(root.child(item, path), env, base)


def _upstreams(
    root: Section, env: Mapping[str, str], base: Path
) -> list[tuple[int, UpstreamConfig]]:
    """The `upstreams[]` entries that could be read, with their index; the mistakes of the
    others (or of a list missing or empty) are kept in the reading's problems."""
    problems = root.problems
    assert problems is not None
    items = root.get("upstreams", list)
    if not items:
        if not (root.has("upstreams") and items is None):  # else its wrong type is named
            problems.add("upstreams: at least one legacy server is required (name, url, path)")
        return []
    read = [
        (
            i,
            problems.attempt(
                functools.partial(_upstream, root, item, f"upstreams[{i}]", env, base)
            ),
        )
        for i, item in enumerate(items)
    ]
    upstreams = [(i, u) for i, u in read if u is not None]
    problems.attempt(lambda: unique(upstreams, "name"))  # paths: `parse_endpoints`
    return upstreams


def yaml_mistake(path: Path, exc: yaml.YAMLError) -> str:
    """A YAML error in one line: the file, line and column (1-based) and what is wrong."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).replace("\n", " ")
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    context, opened = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and opened is not None:
        problem += f", {context} opened at line {opened.line + 1}, column {opened.column + 1}"
    elif context:
        problem += f", {context}"
    if mark is not None and ("block" in problem or "mapping values are not allowed" in problem):
        # PyYAML's words for a key indented unlike its neighbours, the usual slip by hand.
        problem += f"; check the indentation of line {mark.line + 1}"
    return f"{where}: not valid YAML: {problem}"


def load_config(
    path: str | Path,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> GatewayConfig:
    """Read and validate a YAML config file; see `parse_config` for `env` and `overrides`.

    Raises:
        ConfigError
    """
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(yaml_mistake(path, exc)) from exc
    return parse_config(data, env=env, base=path.parent, overrides=overrides)
