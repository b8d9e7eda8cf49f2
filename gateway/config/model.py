"""The configuration tree: frozen dataclasses, each default written here and only here.

The loader (`gateway.config.loader`) passes only the keys a file gives, so a
changed default here is the loaded default too. Nothing in this module reads
files or the environment.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from gateway.auth import ClientCredentials
from gateway.config.audit import AuditConfig
from gateway.config.auth import AuthConfig
from gateway.config.endpoints import EndpointConfig
from gateway.protocol.exposure import EVERYTHING, Exposure, Globs, Shown
from gateway.protocol.keys import KeyRule
from gateway.protocol.translate import CachePolicy
from gateway.protocol.uris import normal as normal_uri


@dataclass(frozen=True, slots=True, kw_only=True)
class ListenConfig:
    host: str = "127.0.0.1"
    """The address the gateway listens on. On a loopback address only loopback `Host` and
    `Origin` values are served (DNS-rebinding protection)."""
    port: int = 8080
    """The port it listens on (0: any free port)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RateConfig:
    """A token bucket per principal: `per_s` requests a second, bursts of `burst`; 0 is off."""

    per_s: float = 0.0
    """Requests a second one caller may make (429 with `Retry-After` beyond); `0` is off.
    Fleet-wide on Redis."""
    burst: int = 0
    """How many requests at once the bucket holds (at least 1 when `per_s` is on)."""

    @property
    def enabled(self) -> bool:
        return self.per_s > 0


@dataclass(frozen=True, slots=True, kw_only=True)
class LimitsConfig:
    max_body_bytes: int = 4 * 1024 * 1024
    """A request body larger than this gets 413."""
    max_rounds: int = 16
    """A call needing more rounds fails (502, -32603, `reason: max_rounds`)."""
    max_parked_calls: int = 10_000
    """Parked calls on this replica (503 beyond)."""
    max_parked_per_principal: int = 16
    """Parked calls per principal (429 beyond). Keep it below `pool.max_sessions`: each
    parked call holds a session. Without `auth` a principal is whatever `Authorization`
    header a client sends, so this binds honest clients only; where clients are not
    trusted, turn `auth` on."""
    suspension_ttl_s: float = 600.0
    """How long a question waits for its retry; then the call is cancelled upstream."""
    hold_timeout_s: float = 300.0
    """The longest a single round may wait for the upstream (502 past it)."""
    coalesce_ms: int = 10
    """The longest wait for sibling questions before answering `input_required` (0 to
    5000); tools that ask one question at a time stop waiting once learned."""
    keepalive_s: float = 15.0
    """The SSE keepalive interval, and how long an answer is held before it switches to
    SSE."""
    idle_timeout_s: float = 75.0
    """A client connection with no request under way (idle, or a request head still
    arriving) is closed this long after it opened or after its last answer; keep it
    above the idle timeout of a load balancer in front."""
    body_timeout_s: float = 60.0
    """A request body not all there this long after the gateway starts reading it gets
    408 and its connection closed."""
    max_listens: int = 16
    """Open `subscriptions/listen` streams on this replica, over every upstream (503
    beyond); one with resource subscriptions holds an upstream session of its own.
    `0` serves none (-32601)."""
    max_listens_per_principal: int = 4
    """Open listen streams of one caller on this replica (429 beyond)."""
    max_state_bytes: int = 16 * 1024
    """The largest `requestState` of a tool in `mode: replay`, whose journal of answers
    travels in it (502, `reason: max_state_bytes`, beyond)."""
    max_upstream_message_bytes: int = 64 * 1024 * 1024
    """The largest message an HTTP upstream may send: a JSON answer read whole, or one
    SSE event (at least 65536). Past it the call gets 502 and the connection is
    closed."""
    rate_per_principal: RateConfig = field(
        default=RateConfig(), metadata={"yaml": "rate.per_principal"}
    )
    """A token bucket per caller."""
    max_tasks: int = 256
    """Tasks (the io.modelcontextprotocol/tasks extension) not yet ended on this replica,
    each holding an upstream call and its session; past it a call that would become a
    task gets 503."""
    max_tasks_per_principal: int = 16
    """Tasks not yet ended of one caller on this replica (503 beyond)."""
    max_task_result_bytes: int = 1024 * 1024
    """A task's result above this ends it `failed` (the result is not kept)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SealingConfig:
    keys: tuple[bytes, ...] = field(
        default=(), metadata={"yaml": "keys_file", "type": "path", "default": "none"}
    )
    """A file of keys, one per line (`#` comments allowed): the first seals, all open.
    Without one the gateway makes a key per process (one replica only). Keys never go
    in this file; make one with `mrtr-gateway keygen`."""
    audience: str = "mrtr-gateway"
    """Names this deployment inside every `requestState`: a state minted by another
    deployment with the same keys is refused."""

    @property
    def ephemeral(self) -> bool:
        return not self.keys


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreConfig:
    url: str = "memory://"
    """Where parked calls are kept: `memory://` (one replica), `redis://[:pw@]host:port/db`,
    `rediss://…`, `unix:///path`, `redis+sentinel://h:26379[,h2:26379]/service[/db]` or
    `redis+cluster://host:port`. A Redis store needs a shared sealing key."""
    key_prefix: str = "mrtr:"
    """The prefix of every Redis key."""
    replicas_acked: int = 0
    """On Sentinel or Cluster: Redis replicas that must hold a parked call's record
    before its client is answered (Redis `WAIT`), so a failover keeps it."""
    wait_ms: int = 200
    """The longest that `WAIT` waits for `replicas_acked`."""

    @property
    def shared(self) -> bool:
        return not self.url.startswith("memory://")


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolLimits:
    min_idle: int = 1
    """Pre-initialised idle sessions kept per capability set; more are opened ahead
    while calls keep sessions faster than one opens (a burst of parking calls)."""
    max_sessions: int = 64
    """The most sessions open to this upstream."""
    idle_timeout_s: float = 300.0
    """Idle sessions beyond `min_idle` are closed after this."""
    acquire_timeout_s: float = 10.0
    """How long a call waits for a free session before it is answered 503."""
    max_requests: int = 10_000
    """A session is replaced after this many requests, so whatever a legacy server keeps
    per session stays bounded however long the gateway runs."""
    calls_per_session: int = 1
    """Streamable HTTP only: interruptible calls one session carries at once (always of
    one caller). Above 1, parked calls share sessions (they cost the server a call, not a
    session each), and a question sent on the session's GET stream while several calls
    share it is answered as outside any call (see operations.md)."""
    isolation: str = "caller"
    """`caller`: a session serves one caller (principal) from its first call to its end,
    so nothing a legacy server keeps per session (a login, a value, the client's roots)
    reaches another caller. `none`: any caller's calls share sessions; only for servers
    known to keep no per-session state (see operations.md)."""
    max_idle_per_caller: int = 2
    """Idle sessions one caller keeps past the pool's periodic look (every 30 s at most;
    its least recently used closed beyond): a burst leaves a caller its sessions for its
    next calls, not for ever. All callers' together are bounded by `max_sessions`, the
    least recently used closed first when room is needed."""
    max_opening: int = 4
    """Sessions being opened at once (a stdio server's process starting counts): a burst
    of new callers opens sessions at this pace instead of all at once."""
    outside_question_s: float = 30.0
    """A question the server asks while no call of the session runs (e.g. `roots/list`
    at session start) is asked of the session's caller in its next call; unasked after
    this long it is answered as outside any call and the session retired."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetConfig:
    heartbeat_s: float = 1.0
    """This replica's heartbeat in Redis; a replica silent for about two beats is dead
    and its calls are taken over or replayed."""
    drain_timeout_s: float = 30.0
    """On SIGTERM, how long the calls held here may still be resumed before the rest
    are cancelled upstream."""
    orphan_sweep_s: float = 10.0
    """How often a replica looks for dead replicas' idle upstream sessions and ends
    them (acted on after two looks; at least twice `heartbeat_s`)."""
    format_settle_s: float = 900.0
    """Upgrades (data shared with replicas of another release): how long the fleet must
    be all of this release before it writes this release's formats (a rollback within
    that time loses nothing)."""
    format_level: int = 0
    """The most a replica writes: `0` follows the fleet; `1` keeps the previous
    release's formats, so that a rollback stays possible."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LegacyConfig:
    """The legacy lane: 2025 clients (initialize, sessions) on the same endpoint."""

    enabled: bool = True
    """Serve 2025 clients (`initialize`, sessions, GET streams) on the same endpoints;
    off, they get 404 -32601 for `initialize` and 405 for GET and DELETE."""
    session_ttl_s: float = 24 * 3600.0
    """A gateway session id's absolute lifetime: past it the client gets 404 and starts
    over."""
    max_streams_per_principal: int = 4
    """GET streams one caller holds open on a replica (429 beyond); `0`: GET streams are
    not served (405)."""
    max_streams: int = 1024
    """GET streams a replica holds open in all, each with an upstream connection (503
    beyond)."""
    max_bound_sessions: int = 64
    """Sessions of stdio and HTTP+SSE upstreams (a process, a connection each) live in the
    replica that opened them: at most this many per replica and upstream (`initialize`
    past it: 503)."""
    bound_session_idle_s: float = 600.0
    """How long such a session lives without a request; past it its client gets 404 and
    starts over."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LoggingConfig:
    level: str = "info"
    """`debug`, `info`, `warning` or `error`. At `info` a request is one `request_served`
    line."""
    format: str = "auto"
    """`json` (JSON lines), `console` (for people), or `auto`: console on a terminal,
    else JSON lines."""


PARK = "park"
REPLAY = "replay"

ISOLATE_CALLERS = "caller"  # `pool.isolation`: a session serves one principal
SHARE_SESSIONS = "none"  # `pool.isolation`: any caller's calls share sessions

STREAMABLE_HTTP = "streamable-http"
SSE = "sse"  # HTTP+SSE of protocol 2024-11-05
STDIO = "stdio"
TRANSPORTS = (STREAMABLE_HTTP, SSE, STDIO)
#: The transports whose upstreams the legacy lane serves to 2025 clients, one client
#: session to one upstream session: Streamable HTTP passed through from any replica; stdio
#: and HTTP+SSE held by the replica that opened the session (the others forward to it).
LEGACY_TRANSPORTS = (STREAMABLE_HTTP, SSE, STDIO)
#: Of those, the transports whose sessions live in one replica.
BOUND_TRANSPORTS = (SSE, STDIO)


#: `tools.<name>.task.support`: the tool never runs as a task, may (for a client that
#: declared the tasks extension), or must (a client without it gets -32021).
TASK_NONE = "none"
TASK_OPTIONAL = "optional"
TASK_REQUIRED = "required"
TASK_SUPPORT = (TASK_NONE, TASK_OPTIONAL, TASK_REQUIRED)


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskPolicy:
    """How a tool's calls become tasks (the io.modelcontextprotocol/tasks extension)."""

    support: str = TASK_NONE
    """`none`, `optional` (a task for a client that declared the tasks extension) or
    `required` (a client without it gets -32021). Written alone, `task: optional` sets
    only this."""
    after_s: float = 0.0
    """A call still running this long after it started (or after a retry's answers)
    becomes a task; a question asked or a result given sooner is answered as usual (an
    MRTR round; a `required` tool's result then comes as a task already completed)."""
    ttl_s: float = 3600.0
    """How long a task is kept from its creation (`ttlMs`); past it, it is unknown."""
    poll_interval_ms: int = 1000
    """The poll interval suggested to clients (`pollIntervalMs`, at least 100)."""

    @property
    def enabled(self) -> bool:
        return self.support != TASK_NONE


NO_TASKS = TaskPolicy()


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetConfig:
    """Per tool, prompt or resource settings."""

    inputs: tuple[KeyRule, ...] = ()
    """Key rules for this tool's questions, tried before the upstream's own."""
    replay_safe: bool = False
    """If the replica holding a parked call dies, the call may be run again from its
    journal of answers (its body runs again: only for idempotent tools)."""
    mode: str = PARK
    """`park`: the call waits in the store between rounds. `replay`: nothing is parked;
    every retry runs the call again, its answers journaled inside `requestState`."""
    scopes: tuple[str, ...] = ()
    """Scopes a caller needs for it beyond `auth.oauth.scopes`, checked on every round
    (without them a tool is left out of `tools/list`). Needs an `auth` section."""
    task: TaskPolicy = field(
        default=NO_TASKS, metadata={"kind": "section, or a string: its support"}
    )
    """Whether a call of this tool may run as a task (tools only; see `TaskPolicy`)."""
    name: str | None = None
    """Tools only: the name clients see and call it by (the upstream always gets its
    own; the old name is then unknown to clients)."""
    title: str | None = None
    """Tools only: the title clients see instead of the server's."""
    description: str | None = None
    """Tools only: the description clients see instead of the server's."""
    approval: str | None = None
    """Tools only: `required` (a person approves every call before it reaches the
    server) or `none` (never asked); overrides the upstream's `approval`."""


APPROVAL_NONE = "none"  # `approval`: never asked
APPROVAL_DESTRUCTIVE = "destructive"  # tools whose annotations say they may destroy
APPROVAL_ALL = "all"
APPROVALS = (APPROVAL_NONE, APPROVAL_DESTRUCTIVE, APPROVAL_ALL)
APPROVAL_REQUIRED = "required"  # a tool's `approval`: asked at every call (or within the ttl)
TOOL_APPROVALS = (APPROVAL_REQUIRED, APPROVAL_NONE)

PINNING_OFF = "off"
PINNING_WARN = "warn"
PINNING_BLOCK = "block"
PINNING = (PINNING_OFF, PINNING_WARN, PINNING_BLOCK)


@dataclass(frozen=True, slots=True, kw_only=True)
class ExposedList:
    """Which entries of one list clients see: those matching an `allow` glob and no `deny`
    glob (`*`, `?`, `[...]`; case-sensitive). Tools and prompts by name, resources by URI,
    resource templates by their `uriTemplate`."""

    allow: tuple[str, ...] = ("*",)
    """Globs of what is shown (absent: everything)."""
    deny: tuple[str, ...] = ()
    """Globs of what is hidden, even if allowed (deny wins)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ExposeConfig:
    """What clients see of this upstream: a hidden entry is absent from every list and
    refused everywhere it could be reached with the answer an unknown name gets."""

    tools: ExposedList = ExposedList()
    """The tools shown, by the server's own names."""
    prompts: ExposedList = ExposedList()
    """The prompts shown."""
    resources: ExposedList = ExposedList()
    """The resources shown, by URI (resource templates by their `uriTemplate`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CatalogConfig:
    """The lists served to clients (`tools/list`, `prompts/list`, `resources/list`,
    `resources/templates/list`) from what the server last listed, and the tools' pins."""

    ttl_s: float = 60.0
    """How long a list is served from what the server last said; a `list_changed` the
    server sends, heard by any replica, refreshes it sooner. `0` asks the server every
    time (and checks calls only against the exposure rules)."""
    per_caller: bool = False
    """The server lists per caller (a login or other state of its session decides what
    it lists): lists are then kept per caller, never shared."""
    pinning: str = PINNING_WARN
    """`off`, `warn` or `block`: a tool whose definition changed since it was first seen
    (or last approved) is `catalog_drift` in the log; with `block` it is refused until
    approved (`mrtr-gateway pins approve`)."""


_DEFAULT_TARGET = TargetConfig()
_NO_TARGETS: Mapping[str, TargetConfig] = MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamConfig:
    name: str
    """A label: letters, digits, `.`, `_`, `-`, starting with a letter or digit."""
    transport: str = STREAMABLE_HTTP
    """`streamable-http`, `sse` (2024-11-05 HTTP+SSE) or `stdio`; `stdio` when a
    `command` is given (see stdio.md)."""
    url: str = field(default="", metadata={"default": "required (not for stdio)"})
    """The legacy endpoint: Streamable HTTP, or the SSE endpoint
    (`http://host:port/sse`) with `transport: sse`; may use `${VAR}`."""
    command: tuple[str, ...] = ()
    """stdio: the server's program and its arguments, e.g. `[node, server.js, stdio]`."""
    env: Mapping[str, str] = field(default_factory=dict)
    """stdio: the server's environment (values may use `${VAR}`). Of the gateway's own it
    gets only `PATH`, `HOME`, `LANG`, `LC_ALL`, `LC_CTYPE`, `TZ`, `TMPDIR`, `USER` and
    `LOGNAME`."""
    cwd: str | None = None
    """stdio: the server's working directory."""
    max_message_bytes: int = 16 * 1024 * 1024
    """stdio: the longest message either way."""
    path: str = "/mcp"
    """The gateway path serving this upstream."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Headers sent upstream (the client's token is never forwarded); values may use
    `${VAR}`."""
    oauth_client: ClientCredentials | None = None
    """The gateway's own token for this upstream (OAuth client credentials grant)."""
    timeout_s: float = 30.0
    """The connect, initialize and plain-request timeout."""
    pool: PoolLimits = PoolLimits()
    """The sessions kept open to this upstream."""
    cache: CachePolicy = CachePolicy()
    """Cache hints added to cacheable results (never to one reached through rounds)."""
    inputs: tuple[KeyRule, ...] = ()
    """Key rules for every tool, prompt and resource of this upstream: each names the
    `inputRequests` key of the questions it matches. The first rule matching every
    condition it gives wins."""
    tools: Mapping[str, TargetConfig] = field(default_factory=dict)
    """Settings of one tool, by its name."""
    prompts: Mapping[str, TargetConfig] = field(default_factory=dict)
    """Settings of one prompt, by its name."""
    resources: Mapping[str, TargetConfig] = field(default_factory=dict, metadata={"entry": "<uri>"})
    """Settings of one resource, by its URI."""
    expose: ExposeConfig = ExposeConfig()
    """What clients see of this upstream's tools, prompts and resources (and may reach)."""
    catalog: CatalogConfig = CatalogConfig()
    """How lists are served and tools pinned."""
    approval: str = APPROVAL_NONE
    """Which tools a person approves before a call reaches the server (the gateway asks
    by elicitation): `none`, `destructive` (every tool whose annotations do not say
    `readOnlyHint: true` and say, or leave at its default, `destructiveHint: true`) or
    `all`. A tool's own `approval` wins."""
    approval_ttl_s: float = 0.0
    """How long one approval covers the same caller's calls of the same tool (as long as
    its definition does not change); 0 asks at every call."""
    prefix: str = field(default="", metadata={"yaml": None})
    """What clients see before each of its tool and prompt names: `<name><separator>` on
    an endpoint that prefixes (`endpoints[].prefix`), else nothing (set by the loader)."""
    exposure: Exposure = field(
        default=EVERYTHING, init=False, repr=False, compare=False, metadata={"yaml": None}
    )
    """The rules of `expose` and the tools' `name`, `title` and `description`, as the
    catalog applies them (worked out from those keys)."""

    def __post_init__(self) -> None:
        shown = {
            own: Shown(name=t.name, title=t.title, description=t.description)
            for own, t in self.tools.items()
            if t.name is not None or t.title is not None or t.description is not None
        }
        rules = self.expose
        exposure = Exposure(
            tools=Globs(rules.tools.allow, rules.tools.deny),
            prompts=Globs(rules.prompts.allow, rules.prompts.deny),
            resources=Globs(rules.resources.allow, rules.resources.deny),
            shown=MappingProxyType(shown),
            prefix=self.prefix,
        )
        object.__setattr__(self, "exposure", EVERYTHING if exposure.everything else exposure)

    def targets(self, method: str) -> Mapping[str, TargetConfig]:
        """The settings of the tools, prompts or resources a request of `method` is about
        (`gateway.protocol.methods.NAME_FIELD`), by name or URI; none for another method."""
        if method == "tools/call":
            return self.tools
        if method == "prompts/get":
            return self.prompts
        if method == "resources/read":
            return self.resources
        return _NO_TARGETS

    def target(self, method: str, target: str | None) -> TargetConfig:
        """The settings of one tool, prompt or resource (the defaults if it has none).
        Resources are keyed by `gateway.protocol.uris.normal` (the loader keys them so):
        the one key of every spelling a server reads as that URI."""
        table = self.targets(method)
        if not table:
            return _DEFAULT_TARGET
        if method == "resources/read" and target:
            target = normal_uri(target)
        return table.get(target or "") or _DEFAULT_TARGET

    @property
    def has_tasks(self) -> bool:
        """Whether some tool of this upstream has a task policy (`server/discover` then
        advertises the tasks extension)."""
        return any(t.task.enabled for t in self.tools.values())

    def rules_for(self, method: str, target: str | None) -> tuple[KeyRule, ...]:
        return self.target(method, target).inputs + self.inputs

    @property
    def location(self) -> str:
        """Where it is, for people: the URL, or the command line."""
        return " ".join(self.command) if self.transport == STDIO else self.url


@dataclass(frozen=True, slots=True, kw_only=True)
class GatewayConfig:
    listen: ListenConfig = ListenConfig()
    """Where the gateway listens."""
    limits: LimitsConfig = LimitsConfig()
    """Bounds on requests, calls, rounds and streams."""
    sealing: SealingConfig = SealingConfig()
    """The keys that seal `requestState` (and the legacy lane's session ids)."""
    store: StoreConfig = StoreConfig()
    """Where parked calls are kept: in memory (one replica) or Redis (a fleet)."""
    fleet: FleetConfig = FleetConfig()
    """Replicas sharing a Redis store."""
    legacy: LegacyConfig = LegacyConfig()
    """The legacy lane: 2025 clients on the same endpoints."""
    logging: LoggingConfig = LoggingConfig()
    """The log stream (stderr)."""
    allowed_origins: frozenset[str] = frozenset()
    """Browser `Origin`s allowed; a request with any other `Origin` gets 403 (a gateway
    listening on loopback also accepts loopback origins)."""
    allowed_hosts: frozenset[str] = frozenset()
    """`Host` names served (any when empty); a gateway listening on loopback serves only
    loopback names (DNS-rebinding protection)."""

    @property
    def loopback(self) -> bool:
        """Listening on loopback only: then only loopback Host and Origin values are served."""
        return self.listen.host in ("127.0.0.1", "localhost", "::1") or self.listen.host.startswith(
            "127."
        )

    auth: AuthConfig | None = None
    """Who may call: without it there is no authentication (the gateway warns when it
    listens beyond loopback); with it every request must be authenticated (see
    auth.md)."""
    audit: AuditConfig | None = None
    """The audit trail: every call, round, task, refusal and 2025 session, written to the
    sinks it names (see operations.md); without it there is none."""
    replica_id: str = field(
        default_factory=lambda: "replica-" + secrets.token_hex(4),
        metadata={"default": "replica-<random>"},
    )
    """This replica's name in records and logs."""
    upstreams: tuple[UpstreamConfig, ...] = field(default=(), metadata={"default": "required"})
    """The legacy servers, each served on its own path (or on its endpoint's): at least
    one."""
    endpoints: tuple[EndpointConfig, ...] = ()
    """Several upstreams served on one path to both eras: one list of each kind, each
    call sent to the upstream whose name it calls, a 2025 client's session with a session
    of each server behind it (see endpoints.md)."""

    def routes(self) -> list[tuple[str, tuple[UpstreamConfig, ...], EndpointConfig | None]]:
        """Every MCP path served: its upstreams (an upstream on no endpoint alone on its
        own path) and its endpoint, in the order of `upstreams`."""
        by_name = {u.name: u for u in self.upstreams}
        on = {name: e for e in self.endpoints for name in e.upstreams}
        routes: list[tuple[str, tuple[UpstreamConfig, ...], EndpointConfig | None]] = []
        for upstream in self.upstreams:
            endpoint = on.get(upstream.name)
            if endpoint is None:
                routes.append((upstream.path, (upstream,), None))
            elif endpoint.upstreams[0] == upstream.name:
                members = tuple(by_name[n] for n in endpoint.upstreams)
                routes.append((endpoint.path, members, endpoint))
        return routes
