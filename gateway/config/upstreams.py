"""Reading one `upstreams[]` entry: its transport, its command or URL, its key rules.

A stdio upstream is a command (`command`, `env`, `cwd`); the others are a URL
(`url`, `headers`). Values may use `${VAR}` from the gateway's environment; what
a stdio child gets is only its `env` and a minimal base (see
`gateway.upstream.stdio.session.BASE_ENV`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from gateway.auth import ClientCredentials, require_secure_url
from gateway.config.auth import parse_oauth_client, parse_scopes
from gateway.config.model import (
    APPROVALS,
    ISOLATE_CALLERS,
    PARK,
    PINNING,
    REPLAY,
    SHARE_SESSIONS,
    SSE,
    STDIO,
    STREAMABLE_HTTP,
    TASK_NONE,
    TASK_SUPPORT,
    TOOL_APPROVALS,
    TRANSPORTS,
    CatalogConfig,
    ExposeConfig,
    ExposedList,
    PoolLimits,
    TargetConfig,
    TaskPolicy,
    UpstreamConfig,
)
from gateway.config.section import Section, expand_env
from gateway.errors import ConfigError
from gateway.protocol.keys import KeyRule
from gateway.protocol.methods import INPUT as INPUT_METHODS
from gateway.protocol.translate import CachePolicy
from gateway.protocol.uris import normal as normal_uri

T = TypeVar("T")

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
#: A tool name as the spec advises: 1 to 128 of letters, digits, `_`, `-` and `.`.
_SHOWN_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def _key_rules(owner: Section, key: str) -> tuple[KeyRule, ...]:
    """The key rules at `owner`'s `key` (`inputs`)."""
    items, path = owner.raw(key), owner.at(key)
    if items is None:
        return ()
    if not isinstance(items, list):
        raise ConfigError(f"{path}: expected a list of input key rules")
    rules = []
    for index, item in enumerate(items):
        rule = owner.child(item, f"{path}[{index}]")
        name = rule.get("key", str)
        if not name:
            raise ConfigError(f"{rule.at('key')}: every input rule needs a key")
        method = rule.get("method", str) or None
        if method is not None and method not in INPUT_METHODS:
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
            KeyRule(key=name, method=method, fields=frozenset(fields_) or None, message=compiled)
        )
    return tuple(rules)


def _task_policy(parent: Section, raw: Any, path: str) -> TaskPolicy:
    """`tools.<name>.task`: a support level (`optional`), or a mapping of the policy's keys."""
    if raw is None:
        return TaskPolicy()
    sec = parent.child({"support": raw} if isinstance(raw, str) else raw, path)
    policy = TaskPolicy(**sec.scalars(TaskPolicy, zero_ok={"after_s"}))
    if policy.support not in TASK_SUPPORT:
        where = sec.at("support") if not isinstance(raw, str) else path
        raise ConfigError(f"{where}: must be one of {', '.join(TASK_SUPPORT)}")
    if policy.poll_interval_ms < 100:
        raise ConfigError(f"{sec.at('poll_interval_ms')}: must be at least 100 milliseconds")
    if policy.after_s >= policy.ttl_s:
        raise ConfigError(f"{sec.at('after_s')}: must be shorter than ttl_s ({policy.ttl_s:g})")
    sec.done()
    return policy


def _targets(
    section: Section, *, uri: bool = False, tasks: bool = False
) -> dict[str, TargetConfig]:
    """Tools or prompts by name; resources (`uri`) by `gateway.protocol.uris.normal` of
    their URI, two spellings of one URI refused. Only tools (`tasks`) take a task policy."""
    targets = {}
    spelled: dict[str, str] = {}
    for name, body in section.items():
        key = name
        if uri:
            key = normal_uri(name)
            if key in spelled:
                raise ConfigError(
                    f"{section.at(name)}: the same resource as {spelled[key]!r} "
                    f"(a server reads both as {key!r}); give its settings once"
                )
            spelled[key] = name
        config = _attempt(section, functools.partial(_target, section, body, name, tasks))
        if config is not None:
            targets[key] = config
    return targets


def _target(section: Section, body: Any, name: str, tasks: bool) -> TargetConfig:
    target = section.child(body, section.at(name))
    inputs = _key_rules(target, "inputs")
    scopes = parse_scopes(target.raw("scopes"), target.at("scopes"))
    task = TaskPolicy()
    if target.has("task"):
        if not tasks:
            raise ConfigError(
                f"{target.at('task')}: only a tool runs as a task (the tasks extension "
                "augments tools/call alone)"
            )
        task = _task_policy(target, target.raw("task"), target.at("task"))
    shown = {key: target.get(key, str) for key in ("name", "title", "description")}
    if any(v is not None for v in shown.values()) and not tasks:
        key = next(k for k, v in shown.items() if v is not None)
        raise ConfigError(
            f"{target.at(key)}: only a tool is shown under another name, title or description"
        )
    approval = target.get("approval", str)
    if approval is not None and not tasks:
        raise ConfigError(
            f"{target.at('approval')}: only a tool's call is approved (prompts and "
            "resources are read, not run)"
        )
    if approval is not None and approval not in TOOL_APPROVALS:
        raise ConfigError(
            f"{target.at('approval')}: must be {' or '.join(TOOL_APPROVALS)}, not {approval!r}"
        )
    if shown["name"] is not None and not _SHOWN_NAME.match(shown["name"]):
        raise ConfigError(
            f"{target.at('name')}: a tool name of letters, digits, '_', '-' or '.' "
            "(1 to 128 of them) is required"
        )
    config = TargetConfig(
        inputs=inputs,
        scopes=scopes,
        task=task,
        name=shown["name"],
        title=shown["title"],
        description=shown["description"],
        approval=approval,
        **target.scalars(TargetConfig),
    )
    target.done()
    if config.mode not in (PARK, REPLAY):
        raise ConfigError(f"{target.at('mode')}: must be park or replay")
    if config.mode == REPLAY and task.support != TASK_NONE:
        raise ConfigError(
            f"{target.at('task')}: a replay-mode tool cannot run as a task (nothing of "
            "it is kept between rounds); use mode: park"
        )
    return config


def _attempt(sec: Section, read: Callable[[], T]) -> T | None:
    """`read()`; with the reading's problems, its ConfigError is kept there (None)."""
    if sec.problems is None:
        return read()
    return sec.problems.attempt(read)


def parse_upstream(sec: Section, env: Mapping[str, str], base: Path) -> UpstreamConfig:
    """One `upstreams[]` entry. Raises: ConfigError naming the key path and the fix."""
    values = sec.scalars(UpstreamConfig, zero_ok={"approval_ttl_s"})
    name = values.get("name", "")
    if not _NAME.match(name):
        raise ConfigError(
            f"{sec.at('name')}: a name of letters, digits, '.', '_' or '-' is required"
        )
    transport = values.setdefault("transport", STDIO if sec.has("command") else STREAMABLE_HTTP)
    if transport not in TRANSPORTS:
        raise ConfigError(f"{sec.at('transport')}: must be one of {', '.join(TRANSPORTS)}")
    if values.get("approval", APPROVALS[0]) not in APPROVALS:
        raise ConfigError(
            f"{sec.at('approval')}: must be one of {', '.join(APPROVALS)}, "
            f"not {values['approval']!r}"
        )
    if "path" in values and not values["path"].startswith("/"):
        raise ConfigError(f"{sec.at('path')}: must start with '/', e.g. /mcp")
    if transport == STDIO:
        process = _process(sec, values, env, base)
        headers: dict[str, str] = {}
    else:
        process = {}
        headers = _http(sec, values, env)
    parts: dict[str, Callable[[], Any]] = {
        "pool": lambda: _pool(sec.section("pool"), transport),
        "cache": lambda: _cache(sec.section("cache")),
        "oauth_client": lambda: _oauth_client(sec, values, env, base),
        "inputs": lambda: _key_rules(sec, "inputs"),
        "tools": lambda: _targets(sec.section("tools"), tasks=True),
        "prompts": lambda: _targets(sec.section("prompts")),
        "resources": lambda: _targets(sec.section("resources"), uri=True),
        "expose": lambda: _expose(sec.section("expose")),
        "catalog": lambda: _catalog(sec.section("catalog")),
    }
    # A part with a mistake (kept in the reading's problems, which refuse the file) is
    # left to its default, so that the rest of the entry is read and checked too.
    read = {key: _attempt(sec, part) for key, part in parts.items()}
    sec.done()
    given = {key: value for key, value in read.items() if value is not None}
    upstream = UpstreamConfig(**values, **process, headers=headers, **given)
    _attempt(sec, functools.partial(_check_exposure, sec, upstream))
    return upstream


def _pool(pool_sec: Section, transport: str) -> PoolLimits:
    pool = PoolLimits(**pool_sec.scalars(PoolLimits, zero_ok={"min_idle", "max_idle_per_caller"}))
    pool_sec.done()
    if pool.isolation not in (ISOLATE_CALLERS, SHARE_SESSIONS):
        raise ConfigError(
            f"{pool_sec.at('isolation')}: must be {ISOLATE_CALLERS} (a session serves one "
            f"caller) or {SHARE_SESSIONS} (sessions shared by every caller: only for a server "
            f"that keeps no state per session), not {pool.isolation!r}"
        )
    if pool.calls_per_session > 1 and transport != STREAMABLE_HTTP:
        raise ConfigError(
            f"{pool_sec.at('calls_per_session')}: only a {STREAMABLE_HTTP} upstream can carry "
            f"several calls on one session (its calls' questions come on their own streams; "
            f"over {transport} they cannot be told apart)"
        )
    return pool


def _expose(sec: Section) -> ExposeConfig:
    lists = {}
    for kind in ("tools", "prompts", "resources"):
        if not sec.has(kind):
            continue
        rule = sec.section(kind)
        globs = {}
        for key in ("allow", "deny"):
            value = rule.raw(key)
            if value is None:
                continue
            if not isinstance(value, list) or not all(isinstance(g, str) and g for g in value):
                raise ConfigError(f'{rule.at(key)}: expected a list of globs, e.g. ["delete_*"]')
            globs[key] = tuple(value)
        rule.done()
        lists[kind] = ExposedList(**globs)
    sec.done()
    return ExposeConfig(**lists)


def _catalog(sec: Section) -> CatalogConfig:
    catalog = CatalogConfig(**sec.scalars(CatalogConfig, zero_ok={"ttl_s"}))
    sec.done()
    if catalog.pinning not in PINNING:
        raise ConfigError(f"{sec.at('pinning')}: must be one of {', '.join(PINNING)}")
    return catalog


def _check_exposure(sec: Section, upstream: UpstreamConfig) -> None:
    """Rules that cannot do what they say: every tool hidden, a tool shown under another
    tool's name, a hidden tool shown under another name.

    Raises:
        ConfigError: naming the key.
    """
    exposure = upstream.exposure
    if not upstream.expose.tools.allow or any(g == "*" for g in upstream.expose.tools.deny):
        raise ConfigError(
            f"{sec.at('expose.tools')}: hides every tool of this upstream; to serve none of "
            "its tools, remove the upstream instead"
        )
    shown_as: dict[str, str] = {}
    for own, target in upstream.tools.items():
        if target.name is None:
            continue
        where = sec.at(f"tools.{own}.name")
        if not exposure.tools.admits(own):
            raise ConfigError(
                f"{where}: {own!r} is hidden by expose.tools; a hidden tool is shown under no name"
            )
        if target.name in shown_as:
            raise ConfigError(
                f"{where}: {shown_as[target.name]!r} is shown as {target.name!r} already"
            )
        if target.name != own and target.name in upstream.tools:
            raise ConfigError(
                f"{where}: {target.name!r} is another tool's own name; two tools cannot be "
                "shown under one name"
            )
        shown_as[target.name] = own


def _cache(cache_sec: Section) -> CachePolicy:
    cache = CachePolicy(**cache_sec.scalars(CachePolicy, zero_ok={"ttl_ms"}))
    cache_sec.done()
    if cache.scope not in ("private", "public"):
        raise ConfigError(f"{cache_sec.at('scope')}: must be private or public")
    return cache


def _http(sec: Section, values: dict[str, Any], env: Mapping[str, str]) -> dict[str, str]:
    """The URL of an HTTP transport (checked in `values`) and its headers."""
    for key in ("command", "env", "cwd"):
        if sec.has(key):
            raise ConfigError(
                f"{sec.at(key)}: only a stdio upstream runs a command; "
                f"this one has transport {values['transport']}"
            )
    url = values["url"] = expand_env(values.get("url", ""), sec.at("url"), env)
    if not url.startswith(("http://", "https://")):
        example = "http://host:port/sse" if values["transport"] == SSE else "http://host:port/mcp"
        raise ConfigError(
            f"{sec.at('url')}: an http:// or https:// URL of the legacy endpoint is required, "
            f"e.g. {example}"
        )
    headers_sec = sec.section("headers")
    headers = {}
    for key, value in headers_sec.items():
        if not isinstance(value, str):
            raise ConfigError(f"{headers_sec.at(key)}: header values must be strings")
        headers[key] = expand_env(value, headers_sec.at(key), env)
    return headers


def _process(
    sec: Section, values: dict[str, Any], env: Mapping[str, str], base: Path
) -> dict[str, Any]:
    """The command, environment and working directory of a stdio upstream."""
    for key in ("url", "headers", "oauth_client"):
        if sec.has(key):
            raise ConfigError(
                f"{sec.at(key)}: a stdio upstream has no {key}; it runs upstreams[].command "
                "(give it credentials through upstreams[].env)"
            )
    values.pop("url", None)
    command = sec.raw("command")
    if (
        not isinstance(command, list)
        or not command
        or not all(isinstance(a, str) and a for a in command)
    ):
        raise ConfigError(
            f"{sec.at('command')}: a stdio upstream needs its command as a list of "
            "strings, e.g. [node, server.js, stdio]"
        )
    env_sec = sec.section("env")
    child_env = {}
    for key, value in env_sec.items():
        if not isinstance(value, str):
            raise ConfigError(f"{env_sec.at(key)}: values must be strings (quote numbers)")
        child_env[key] = expand_env(value, env_sec.at(key), env)
    cwd = sec.get("cwd", str)
    if cwd is not None:
        folder = base / cwd  # an absolute path stays as it is
        if not folder.is_dir():
            raise ConfigError(f"{sec.at('cwd')}: {folder} is not a folder")
        cwd = str(folder)
    return {"command": tuple(command), "env": child_env, "cwd": cwd}


def _oauth_client(
    sec: Section, values: dict[str, Any], env: Mapping[str, str], base: Path
) -> ClientCredentials | None:
    """The gateway's own credentials for an HTTP upstream; its token travels only over https
    (or to loopback)."""
    credentials = parse_oauth_client(sec.section("oauth_client"), env, base)
    if credentials is not None and values.get("url"):
        require_secure_url(values["url"], sec.at("url"))
    return credentials


def unique(upstreams: list[tuple[int, UpstreamConfig]], what: str) -> None:
    """Each upstream's `name` (or `path`) is its own. Raises: ConfigError naming the second."""
    seen: set[str] = set()
    for index, upstream in upstreams:
        value = getattr(upstream, what)
        if value in seen:
            raise ConfigError(f"upstreams[{index}].{what}: {value!r} is used by another upstream")
        seen.add(value)


def no_scopes_without_auth(upstreams: list[tuple[int, UpstreamConfig]]) -> None:
    """Scopes bind only authenticated callers: without `auth` they would guard nothing.

    Raises:
        ConfigError: naming the first target with scopes.
    """
    for index, upstream in upstreams:
        for kind in ("tools", "prompts", "resources"):
            for name, target in getattr(upstream, kind).items():
                if target.scopes:
                    raise ConfigError(
                        f"upstreams[{index}].{kind}.{name}.scopes: scopes need an `auth` "
                        f"section (without one every caller is anonymous and nothing would be "
                        f"refused); add auth, or remove the scopes"
                    )
