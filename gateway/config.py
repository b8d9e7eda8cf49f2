"""The gateway's configuration: a frozen dataclass tree loaded once from YAML.

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

Each default is written once, in the dataclasses: the loader passes only the keys
the file gives, so the dataclass supplies the rest.
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import typing
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from gateway.errors import ConfigError
from gateway.protocol.keys import KeyRule
from gateway.protocol.state import parse_key
from gateway.protocol.translate import CachePolicy

T = TypeVar("T")

ENV_KEYS = "MRTR_GATEWAY_SEALING_KEYS"
ENV_KEYS_FILE = "MRTR_GATEWAY_SEALING_KEYS_FILE"
ENV_STORE_URL = "MRTR_GATEWAY_STORE_URL"
ENV_LOG_LEVEL = "MRTR_GATEWAY_LOG_LEVEL"
ENV_LOG_FORMAT = "MRTR_GATEWAY_LOG_FORMAT"
ENV_REPLICA_ID = "MRTR_GATEWAY_REPLICA_ID"
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True, slots=True, kw_only=True)
class ListenConfig:
    host: str = "127.0.0.1"
    port: int = 8080


@dataclass(frozen=True, slots=True, kw_only=True)
class LimitsConfig:
    max_body_bytes: int = 4 * 1024 * 1024
    max_rounds: int = 16
    max_parked_calls: int = 10_000
    max_parked_per_principal: int = 16
    suspension_ttl_s: float = 600.0
    hold_timeout_s: float = 300.0
    coalesce_ms: int = 10
    keepalive_s: float = 15.0
    max_state_bytes: int = 16 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class SealingConfig:
    keys: tuple[bytes, ...] = ()
    audience: str = "mrtr-gateway"

    @property
    def ephemeral(self) -> bool:
        return not self.keys


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreConfig:
    url: str = "memory://"
    key_prefix: str = "mrtr:"

    @property
    def shared(self) -> bool:
        return not self.url.startswith("memory://")


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolLimits:
    min_idle: int = 1
    max_sessions: int = 64
    idle_timeout_s: float = 300.0
    acquire_timeout_s: float = 10.0
    # Recycle a session after this many requests, so whatever a legacy server keeps
    # per session stays bounded however long the gateway runs.
    max_requests: int = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetConfig:
    heartbeat_s: float = 1.0
    drain_timeout_s: float = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class LoggingConfig:
    level: str = "info"
    format: str = "console"


PARK = "park"
REPLAY = "replay"


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetConfig:
    """Per tool, prompt or resource settings."""

    inputs: tuple[KeyRule, ...] = ()
    # replay_safe: if the replica holding a parked call dies, the call may be run again
    # from its journal of answers (the body runs again: only for idempotent tools).
    replay_safe: bool = False
    # mode: park (the call waits in a store) or replay (nothing is parked: every retry
    # re-runs the call, its answers journaled inside requestState).
    mode: str = PARK


_DEFAULT_TARGET = TargetConfig()


@dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamConfig:
    name: str
    url: str
    path: str = "/mcp"
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 30.0
    pool: PoolLimits = PoolLimits()
    cache: CachePolicy = CachePolicy()
    inputs: tuple[KeyRule, ...] = ()
    tools: Mapping[str, TargetConfig] = field(default_factory=dict)
    prompts: Mapping[str, TargetConfig] = field(default_factory=dict)
    resources: Mapping[str, TargetConfig] = field(default_factory=dict)

    def target(self, method: str, target: str | None) -> TargetConfig:
        table = {
            "tools/call": self.tools,
            "prompts/get": self.prompts,
            "resources/read": self.resources,
        }
        return table.get(method, {}).get(target or "") or _DEFAULT_TARGET

    def rules_for(self, method: str, target: str | None) -> tuple[KeyRule, ...]:
        return self.target(method, target).inputs + self.inputs


@dataclass(frozen=True, slots=True, kw_only=True)
class GatewayConfig:
    listen: ListenConfig = ListenConfig()
    limits: LimitsConfig = LimitsConfig()
    sealing: SealingConfig = SealingConfig()
    store: StoreConfig = StoreConfig()
    fleet: FleetConfig = FleetConfig()
    logging: LoggingConfig = LoggingConfig()
    allowed_origins: frozenset[str] = frozenset()
    allowed_hosts: frozenset[str] = frozenset()

    @property
    def loopback(self) -> bool:
        """Listening on loopback only: then only loopback Host and Origin values are served."""
        return self.listen.host in ("127.0.0.1", "localhost", "::1") or self.listen.host.startswith(
            "127."
        )

    replica_id: str = field(default_factory=lambda: "replica-" + secrets.token_hex(4))
    upstreams: tuple[UpstreamConfig, ...] = ()


_SCALARS = (str, int, float, bool)


def _scalar_fields(cls: type[Any]) -> dict[str, type[Any]]:
    """The fields of dataclass `cls` that hold a str, int, float or bool, with that type."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if hints[f.name] in _SCALARS}


class _Section:
    """A mapping read with its key path, so every error can say where it is.

    Every key read through it (`get`, `raw`, `section`, `items`, `scalars`) counts as
    known; `done()` refuses the others, naming the first by its key path.
    """

    def __init__(self, data: Any, path: str) -> None:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(
                f"{path or 'the file'}: expected a mapping, got {type(data).__name__}"
            )
        self._data: dict[Any, Any] = data
        self.path = path
        self._seen: set[str] = set()

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def get(self, key: str, kind: type[T]) -> T | None:
        """The value checked against `kind`, or None when absent or null (the default applies).

        An int is accepted where a float is expected; a bool is never a number.
        """
        self._seen.add(key)
        value = self._data.get(key)
        if value is None:
            return None
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind in (int, float) and isinstance(value, bool)):
            raise ConfigError(
                f"{self.at(key)}: expected {kind.__name__}, got {type(value).__name__} {value!r}"
            )
        return value

    def scalars(self, cls: type[Any], *, zero_ok: Collection[str] = ()) -> dict[str, Any]:
        """The keys given for the str, int, float and bool fields of dataclass `cls`.

        Keys left out are left out of the result too, so `cls(**result)` takes the
        dataclass's own defaults. Numbers must be greater than 0, or 0 or more for
        the fields named in `zero_ok`.
        """
        values: dict[str, Any] = {}
        for name, kind in _scalar_fields(cls).items():
            value = self.get(name, kind)
            if value is None:
                continue
            if kind in (int, float):
                if name in zero_ok and value < 0:
                    raise ConfigError(f"{self.at(name)}: must be 0 or more, got {value!r}")
                if name not in zero_ok and value <= 0:
                    raise ConfigError(f"{self.at(name)}: must be greater than 0, got {value!r}")
            values[name] = value
        return values

    def has(self, key: str) -> bool:
        """Whether the key is written at all (it still counts as unknown until read)."""
        return key in self._data

    def raw(self, key: str) -> Any:
        """The value as decoded, unchecked, for the caller to validate; None when absent."""
        self._seen.add(key)
        return self._data.get(key)

    def section(self, key: str) -> _Section:
        return _Section(self.raw(key), self.at(key))

    def items(self) -> Iterator[tuple[str, Any]]:
        """Every key with its raw value, each counting as known. Keys must be strings."""
        for key, value in self._data.items():
            if not isinstance(key, str):
                raise ConfigError(
                    f"{self.at(str(key))}: expected a name (a string), got "
                    f"{type(key).__name__} {key!r}; quote it, e.g. '{key}'"
                )
            self._seen.add(key)
            yield key, value

    def done(self) -> None:
        unknown = sorted(set(self._data) - self._seen, key=str)
        if unknown:
            raise ConfigError(
                f"{self.at(str(unknown[0]))}: unknown key; "
                "check the spelling against the config reference"
            )


def _from_env(values: dict[str, Any], key: str, env: Mapping[str, str], name: str) -> None:
    """The environment variable, when set and not empty, replaces the file's value."""
    if env.get(name):
        values[key] = env[name]


def _expand_env(value: str, where: str, env: Mapping[str, str]) -> str:
    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in env:
            raise ConfigError(f"{where}: environment variable {name} is not set")
        return env[name]

    return _ENV_REF.sub(sub, value)


def _key_rules(items: Any, path: str) -> tuple[KeyRule, ...]:
    if items is None:
        return ()
    if not isinstance(items, list):
        raise ConfigError(f"{path}: expected a list of input key rules")
    rules = []
    for index, item in enumerate(items):
        rule = _Section(item, f"{path}[{index}]")
        key = rule.get("key", str)
        if not key:
            raise ConfigError(f"{rule.at('key')}: every input rule needs a key")
        method = rule.get("method", str) or None
        if method not in (None, "elicitation/create", "sampling/createMessage", "roots/list"):
            raise ConfigError(
                f"{rule.at('method')}: must be elicitation/create, "
                "sampling/createMessage or roots/list"
            )
        fields_ = rule.get("fields", list) or []
        if not all(isinstance(f, str) for f in fields_):
            raise ConfigError(f"{rule.at('fields')}: expected a list of property names")
        pattern = rule.get("message", str)
        try:
            compiled = re.compile(pattern) if pattern else None
        except re.error as exc:
            raise ConfigError(
                f"{rule.at('message')}: not a valid regular expression: {exc}"
            ) from exc
        rule.done()
        rules.append(
            KeyRule(key=key, method=method, fields=frozenset(fields_) or None, message=compiled)
        )
    return tuple(rules)


def _targets(section: _Section) -> dict[str, TargetConfig]:
    targets = {}
    for name, body in section.items():
        target = _Section(body, section.at(name))
        inputs = _key_rules(target.raw("inputs"), target.at("inputs"))
        values = target.scalars(TargetConfig)
        if values.get("mode", PARK) not in (PARK, REPLAY):
            raise ConfigError(f"{target.at('mode')}: must be park or replay")
        target.done()
        targets[name] = TargetConfig(inputs=inputs, **values)
    return targets


def _upstream(data: Any, path: str, env: Mapping[str, str]) -> UpstreamConfig:
    sec = _Section(data, path)
    values = sec.scalars(UpstreamConfig)
    name = values.get("name", "")
    if not _NAME.match(name):
        raise ConfigError(
            f"{sec.at('name')}: a name of letters, digits, '.', '_' or '-' is required"
        )
    url = values["url"] = _expand_env(values.get("url", ""), sec.at("url"), env)
    if not url.startswith(("http://", "https://")):
        raise ConfigError(
            f"{sec.at('url')}: an http:// or https:// URL of the legacy MCP endpoint is required"
        )
    if not values.get("path", "/").startswith("/"):
        raise ConfigError(f"{sec.at('path')}: must start with '/', e.g. /mcp")
    headers_sec = sec.section("headers")
    headers = {}
    for key, value in headers_sec.items():
        if not isinstance(value, str):
            raise ConfigError(f"{headers_sec.at(key)}: header values must be strings")
        headers[key] = _expand_env(value, headers_sec.at(key), env)
    pool_sec = sec.section("pool")
    pool = PoolLimits(**pool_sec.scalars(PoolLimits, zero_ok={"min_idle"}))
    pool_sec.done()
    cache_sec = sec.section("cache")
    cache = CachePolicy(**cache_sec.scalars(CachePolicy, zero_ok={"ttl_ms"}))
    if cache.scope not in ("private", "public"):
        raise ConfigError(f"{cache_sec.at('scope')}: must be private or public")
    cache_sec.done()
    config = UpstreamConfig(
        **values,
        headers=headers,
        pool=pool,
        cache=cache,
        inputs=_key_rules(sec.raw("inputs"), sec.at("inputs")),
        tools=_targets(sec.section("tools")),
        prompts=_targets(sec.section("prompts")),
        resources=_targets(sec.section("resources")),
    )
    sec.done()
    return config


def _sealing(sec: _Section, env: Mapping[str, str], base: Path) -> SealingConfig:
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


def _store(sec: _Section, env: Mapping[str, str]) -> StoreConfig:
    values = sec.scalars(StoreConfig)
    sec.done()
    _from_env(values, "url", env, ENV_STORE_URL)
    store = StoreConfig(**values)
    if not store.url.startswith(_STORE_SCHEMES):
        raise ConfigError(
            "store.url: use memory:// (one replica) or redis://host:port/db, "
            "redis+sentinel://host:port/service, redis+cluster://host:port"
        )
    return store


def _logging(sec: _Section, env: Mapping[str, str]) -> LoggingConfig:
    values = sec.scalars(LoggingConfig)
    sec.done()
    _from_env(values, "level", env, ENV_LOG_LEVEL)
    _from_env(values, "format", env, ENV_LOG_FORMAT)
    # Case is not meaningful here (INFO is info), so this is no silent change of meaning.
    config = LoggingConfig(**{key: value.lower() for key, value in values.items()})
    if config.level not in ("debug", "info", "warning", "error"):
        raise ConfigError("logging.level: must be debug, info, warning or error")
    if config.format not in ("console", "json"):
        raise ConfigError("logging.format: must be console or json")
    return config


def _names(root: _Section, key: str, example: str) -> frozenset[str] | None:
    """A list of strings as a set, or None when the key is absent (the default applies)."""
    items = root.get(key, list)
    if items is None:
        return None
    if not all(isinstance(item, str) for item in items):
        raise ConfigError(f"{root.at(key)}: expected a list of {example}")
    return frozenset(items)


def parse_config(
    data: Any, *, env: Mapping[str, str] | None = None, base: Path | None = None
) -> GatewayConfig:
    """Build and validate the config tree from decoded YAML.

    Precedence: an environment variable (see the module docstring) > the data > the
    dataclass default. Relative paths in the data are read from `base` (default: the
    working directory).

    Raises:
        ConfigError: naming the key path and the fix.
    """
    env = os.environ if env is None else env
    base = base or Path.cwd()
    root = _Section(data, "")
    values: dict[str, Any] = root.scalars(GatewayConfig)
    _from_env(values, "replica_id", env, ENV_REPLICA_ID)
    if values.get("replica_id") == "":
        raise ConfigError("replica_id: must not be empty; leave it out for a random name")
    listen_sec = root.section("listen")
    values["listen"] = listen = ListenConfig(**listen_sec.scalars(ListenConfig, zero_ok={"port"}))
    if listen.port > 65535:
        raise ConfigError(f"listen.port: must be 0..65535, got {listen.port}")
    listen_sec.done()
    lim = root.section("limits")
    values["limits"] = limits = LimitsConfig(**lim.scalars(LimitsConfig, zero_ok={"coalesce_ms"}))
    if limits.coalesce_ms > 5000:
        raise ConfigError("limits.coalesce_ms: must be 0..5000 milliseconds")
    lim.done()
    values["sealing"] = sealing = _sealing(root.section("sealing"), env, base)
    values["store"] = store = _store(root.section("store"), env)
    if store.shared and sealing.ephemeral:
        raise ConfigError(
            "sealing: a shared store (Redis) needs a sealing key that every replica shares; "
            f"set sealing.keys_file or {ENV_KEYS} (generate one with: mrtr-gateway keygen)"
        )
    fleet_sec = root.section("fleet")
    values["fleet"] = FleetConfig(**fleet_sec.scalars(FleetConfig))
    fleet_sec.done()
    values["logging"] = _logging(root.section("logging"), env)
    origins = _names(root, "allowed_origins", "origins such as https://app.example.com")
    if origins is not None:
        values["allowed_origins"] = origins
    hosts = _names(root, "allowed_hosts", "host names such as mcp.example.com")
    if hosts is not None:
        values["allowed_hosts"] = frozenset(h.lower() for h in hosts)
    items = root.get("upstreams", list)
    if not items:
        raise ConfigError("upstreams: at least one legacy server is required (name, url, path)")
    upstreams = tuple(_upstream(item, f"upstreams[{i}]", env) for i, item in enumerate(items))
    _unique([u.name for u in upstreams], "name")
    _unique([u.path for u in upstreams], "path")
    root.done()
    return GatewayConfig(**values, upstreams=upstreams)


def _unique(values: list[str], what: str) -> None:
    seen: set[str] = set()
    for index, value in enumerate(values):
        if value in seen:
            raise ConfigError(f"upstreams[{index}].{what}: {value!r} is used by another upstream")
        seen.add(value)


def load_config(path: str | Path, *, env: Mapping[str, str] | None = None) -> GatewayConfig:
    """Read and validate a YAML config file.

    Raises:
        ConfigError
    """
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    return parse_config(data, env=env, base=path.parent)
