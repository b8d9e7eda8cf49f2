"""The configuration tree: frozen dataclasses, each default written here and only here.

The loader (`gateway.config.loader`) passes only the keys a file gives, so a
changed default here is the loaded default too. Nothing in this module reads
files or the environment.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

from gateway.auth import ClientCredentials
from gateway.config.auth import AuthConfig
from gateway.protocol.keys import KeyRule
from gateway.protocol.translate import CachePolicy
from gateway.protocol.uris import normal as normal_uri


@dataclass(frozen=True, slots=True, kw_only=True)
class ListenConfig:
    host: str = "127.0.0.1"
    port: int = 8080


@dataclass(frozen=True, slots=True, kw_only=True)
class RateConfig:
    """A token bucket per principal: `per_s` requests a second, bursts of `burst`; 0 is off."""

    per_s: float = 0.0
    burst: int = 0

    @property
    def enabled(self) -> bool:
        return self.per_s > 0


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
    # A client connection with no request under way (idle, or a request head still
    # arriving) is closed this long after it opened or after its last answer.
    idle_timeout_s: float = 75.0
    # A request's body must have arrived this long after its head (408, connection closed).
    body_timeout_s: float = 60.0
    # Open `subscriptions/listen` streams on this replica, over every upstream (0: none
    # served); one with resource subscriptions holds an upstream session of its own.
    max_listens: int = 16
    max_listens_per_principal: int = 4
    max_state_bytes: int = 16 * 1024
    # The largest message an HTTP upstream may send: a JSON answer read whole, or one SSE
    # event. Above any honest tool result (a 48 MB one passes); past it, the call gets 502.
    max_upstream_message_bytes: int = 64 * 1024 * 1024
    rate_per_principal: RateConfig = RateConfig()  # YAML: limits.rate.per_principal


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
    # Replicas that must have a parked call's record before its client is answered
    # (Redis WAIT, bounded by wait_ms): a failover to a replica then keeps the record.
    replicas_acked: int = 0
    wait_ms: int = 200

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
    # Interruptible calls one session carries at once (Streamable HTTP only). 1: each call
    # owns its session. More: parked calls cost the server a call, not a session each; a
    # question sent on the session's GET stream (mcp 1.x `list_roots`, `create_message`
    # without a related request) while several calls share it is answered as outside
    # any call. See docs/operations.md.
    calls_per_session: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetConfig:
    heartbeat_s: float = 1.0
    drain_timeout_s: float = 30.0
    # How often each replica looks for replicas that died without ending their upstream
    # sessions, and ends them (`gateway.fleet.ledger`); a death is acted on after two.
    orphan_sweep_s: float = 10.0
    # Data shared with replicas of another release (`gateway.protocol.formats`): how long
    # the fleet must be all of this release before it writes this release's formats (a
    # rollback within that time loses nothing), and the most a replica writes (0: follow
    # the fleet; 1: the previous release's formats, to keep a rollback possible).
    format_settle_s: float = 900.0
    format_level: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class LegacyConfig:
    """The legacy lane: 2025 clients (initialize, sessions) on the same endpoint."""

    enabled: bool = True
    # A gateway session id's absolute lifetime: past it the client gets 404 and starts over.
    session_ttl_s: float = 24 * 3600.0
    # Open GET streams (a session's standalone stream) per principal, and in all, on this
    # replica; past either the GET gets 429 or 503. 0: GET streams are not served (405).
    max_streams_per_principal: int = 4
    max_streams: int = 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class LoggingConfig:
    level: str = "info"
    format: str = "auto"  # auto: console on a terminal, else JSON lines


PARK = "park"
REPLAY = "replay"

STREAMABLE_HTTP = "streamable-http"
SSE = "sse"  # HTTP+SSE of protocol 2024-11-05
STDIO = "stdio"
TRANSPORTS = (STREAMABLE_HTTP, SSE, STDIO)
#: The transports whose upstreams the legacy lane serves to 2025 clients (passed through
#: one session to one session); the others' `initialize` is refused, naming what is served.
LEGACY_TRANSPORTS = (STREAMABLE_HTTP,)


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
    # scopes: what a caller needs for it beyond auth.oauth.scopes (checked on every round).
    scopes: tuple[str, ...] = ()


_DEFAULT_TARGET = TargetConfig()


@dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamConfig:
    name: str
    transport: str = STREAMABLE_HTTP  # stdio when a command is given
    url: str = ""  # streamable-http and sse (the SSE endpoint, e.g. http://host:port/sse)
    command: tuple[str, ...] = ()  # stdio: the program and its arguments
    env: Mapping[str, str] = field(default_factory=dict)  # stdio: the child's environment
    cwd: str | None = None  # stdio: the child's working directory
    max_message_bytes: int = 16 * 1024 * 1024  # stdio: the longest message either way
    path: str = "/mcp"
    headers: Mapping[str, str] = field(default_factory=dict)
    # oauth_client: the gateway's own token for this upstream (client credentials grant).
    oauth_client: ClientCredentials | None = None
    timeout_s: float = 30.0
    pool: PoolLimits = PoolLimits()
    cache: CachePolicy = CachePolicy()
    inputs: tuple[KeyRule, ...] = ()
    tools: Mapping[str, TargetConfig] = field(default_factory=dict)
    prompts: Mapping[str, TargetConfig] = field(default_factory=dict)
    resources: Mapping[str, TargetConfig] = field(default_factory=dict)

    def target(self, method: str, target: str | None) -> TargetConfig:
        """The settings of one tool, prompt or resource (the defaults if it has none).
        Resources are keyed by `gateway.protocol.uris.normal` (the loader keys them so):
        the one key of every spelling a server reads as that URI."""
        if method == "tools/call":
            table = self.tools
        elif method == "prompts/get":
            table = self.prompts
        elif method == "resources/read":
            table = self.resources
            if table and target:
                target = normal_uri(target)
        else:
            return _DEFAULT_TARGET
        return table.get(target or "") or _DEFAULT_TARGET

    def rules_for(self, method: str, target: str | None) -> tuple[KeyRule, ...]:
        return self.target(method, target).inputs + self.inputs

    @property
    def location(self) -> str:
        """Where it is, for people: the URL, or the command line."""
        return " ".join(self.command) if self.transport == STDIO else self.url


@dataclass(frozen=True, slots=True, kw_only=True)
class GatewayConfig:
    listen: ListenConfig = ListenConfig()
    limits: LimitsConfig = LimitsConfig()
    sealing: SealingConfig = SealingConfig()
    store: StoreConfig = StoreConfig()
    fleet: FleetConfig = FleetConfig()
    legacy: LegacyConfig = LegacyConfig()
    logging: LoggingConfig = LoggingConfig()
    allowed_origins: frozenset[str] = frozenset()
    allowed_hosts: frozenset[str] = frozenset()

    @property
    def loopback(self) -> bool:
        """Listening on loopback only: then only loopback Host and Origin values are served."""
        return self.listen.host in ("127.0.0.1", "localhost", "::1") or self.listen.host.startswith(
            "127."
        )

    auth: AuthConfig | None = None  # None: no authentication (the gateway warns off loopback)
    replica_id: str = field(default_factory=lambda: "replica-" + secrets.token_hex(4))
    upstreams: tuple[UpstreamConfig, ...] = ()
