"""The gateway's configuration: a frozen dataclass tree, loaded once from YAML.

    model.py    the dataclasses; every default is written there, once
    section.py  typed reads of one YAML mapping; unknown keys are refused by key path
    loader.py   YAML and the environment in, a validated GatewayConfig out
    upstreams.py  one upstreams[] entry: transport, command or URL, key rules
    endpoints.py  endpoints[]: several upstreams on one path
    paths.py    which path serves each upstream (an endpoint's members), each path once

Precedence, highest first: command-line flag (applied by `gateway.cli`, which merges
it into the YAML data) > environment variable > file > dataclass default. This
package does no network I/O and imports neither aiohttp nor redis, so
`mrtr-gateway check-config` stays light.
"""

from gateway.config.endpoints import (
    DOWN_FAIL,
    DOWN_OMIT,
    PREFIX_ALWAYS,
    PREFIX_NONE,
    EndpointConfig,
)
from gateway.config.loader import (
    ENV_KEYS,
    ENV_KEYS_FILE,
    ENV_LOG_FORMAT,
    ENV_LOG_LEVEL,
    ENV_REPLICA_ID,
    ENV_STORE_URL,
    load_config,
    load_keys_file,
    parse_config,
)
from gateway.config.model import (
    APPROVAL_ALL,
    APPROVAL_DESTRUCTIVE,
    APPROVAL_NONE,
    APPROVAL_REQUIRED,
    BOUND_TRANSPORTS,
    ISOLATE_CALLERS,
    LEGACY_TRANSPORTS,
    NO_TASKS,
    PARK,
    PINNING,
    PINNING_BLOCK,
    PINNING_OFF,
    PINNING_WARN,
    REPLAY,
    SHARE_SESSIONS,
    SSE,
    STDIO,
    STREAMABLE_HTTP,
    TASK_NONE,
    TASK_OPTIONAL,
    TASK_REQUIRED,
    TRANSPORTS,
    FleetConfig,
    GatewayConfig,
    LegacyConfig,
    LimitsConfig,
    ListenConfig,
    LoggingConfig,
    PoolLimits,
    SealingConfig,
    StoreConfig,
    TargetConfig,
    TaskPolicy,
    UpstreamConfig,
)

__all__ = [
    "APPROVAL_ALL",
    "APPROVAL_DESTRUCTIVE",
    "APPROVAL_NONE",
    "APPROVAL_REQUIRED",
    "ENV_KEYS",
    "ENV_KEYS_FILE",
    "ENV_LOG_FORMAT",
    "ENV_LOG_LEVEL",
    "ENV_REPLICA_ID",
    "ENV_STORE_URL",
    "BOUND_TRANSPORTS",
    "DOWN_FAIL",
    "DOWN_OMIT",
    "PREFIX_ALWAYS",
    "PREFIX_NONE",
    "EndpointConfig",
    "LEGACY_TRANSPORTS",
    "NO_TASKS",
    "ISOLATE_CALLERS",
    "PARK",
    "PINNING",
    "PINNING_BLOCK",
    "PINNING_OFF",
    "PINNING_WARN",
    "REPLAY",
    "SHARE_SESSIONS",
    "SSE",
    "STDIO",
    "STREAMABLE_HTTP",
    "TASK_NONE",
    "TASK_OPTIONAL",
    "TASK_REQUIRED",
    "TRANSPORTS",
    "FleetConfig",
    "GatewayConfig",
    "LegacyConfig",
    "LimitsConfig",
    "ListenConfig",
    "LoggingConfig",
    "PoolLimits",
    "SealingConfig",
    "StoreConfig",
    "TargetConfig",
    "TaskPolicy",
    "UpstreamConfig",
    "load_config",
    "load_keys_file",
    "parse_config",
]
