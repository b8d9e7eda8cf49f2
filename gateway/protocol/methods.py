"""The MCP methods the gateway knows, by family: the one registry of method sets.

The front door (which requests a 2026 client may send), the legacy lane (which a 2025
client sends, as metric labels), translation (which results carry cache hints, which
server requests become `inputRequests`), tasks and the configuration (which methods an
input key rule may name) all read their sets here; what a caller may see of each list
is `gateway.protocol.lists`.

Pure data: no I/O, and no rule beyond which family a method belongs to.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Requests about one tool, prompt or resource -> the params member naming it (mirrored
#: into `Mcp-Name`; the upstream's configuration keeps settings by it).
NAME_FIELD = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
#: Methods that may answer `input_required` (spec §5.1): those about one target.
INTERRUPTIBLE = frozenset(NAME_FIELD)


@dataclass(frozen=True, slots=True)
class Listed:
    """What a list's result holds: its entries' member, the field naming an entry, and
    the method about one entry (whose per-target scopes guard it)."""

    member: str
    field: str
    used_by: str


#: The list methods, each with what its result holds.
LISTS = {
    "tools/list": Listed("tools", "name", "tools/call"),
    "prompts/list": Listed("prompts", "name", "prompts/get"),
    "resources/list": Listed("resources", "uri", "resources/read"),
    "resources/templates/list": Listed("resourceTemplates", "uriTemplate", "resources/read"),
}

#: The tasks extension's methods; `tasks/result` and `tasks/list` (2025-11-25) are gone.
TASKS = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})

#: Every client request method of 2026-07-28 the gateway serves (`subscriptions/listen`
#: gets -32601 after all while `limits.max_listens` is 0; the tasks extension's are
#: refused with -32021 unless declared).
FRONT = frozenset(
    {"server/discover", "completion/complete", "subscriptions/listen"}
    | set(LISTS)
    | INTERRUPTIBLE
    | TASKS
)

#: Results that must carry `ttlMs` and `cacheScope` (spec §8).
CACHEABLE = frozenset({"server/discover", "resources/read"} | set(LISTS))

#: Server requests that become `inputRequests` entries (and that an input key rule names).
INPUT = frozenset({"elicitation/create", "sampling/createMessage", "roots/list"})

#: The requests and notifications a legacy (2025) client sends.
LEGACY_CLIENT = frozenset(
    {
        "initialize",
        "ping",
        "resources/subscribe",
        "resources/unsubscribe",
        "logging/setLevel",
        "completion/complete",
        "notifications/initialized",
        "notifications/cancelled",
        "notifications/progress",
        "notifications/roots/list_changed",
    }
    | set(LISTS)
    | INTERRUPTIBLE
)
