"""`subscriptions/listen` in front of a legacy server, sans-IO.

A 2026-07-28 client asks for change notifications with one long POST whose answer is an
SSE stream (spec §7.1): first `notifications/subscriptions/acknowledged` with the part of
its filter the server will honour, then only the notifications it asked for, each
stamped with the listen request's id in `_meta`, and, when the server ends the stream
gracefully, a `complete` result with the same stamp.

A legacy server sends `notifications/{tools,prompts,resources}/list_changed` on a
session's standalone stream (when it declared `listChanged`) and
`notifications/resources/updated` to the sessions that sent `resources/subscribe` (when
it declared `subscribe`). This module reads the filter, works out what can be honoured
from the server's capabilities, and turns a legacy message into the stamped
notification, or into nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.errors import InvalidParams
from gateway.protocol import jsonrpc
from gateway.protocol.jsonrpc import RequestId

SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
ACKNOWLEDGED = "notifications/subscriptions/acknowledged"
UPDATED = "notifications/resources/updated"

#: The list-change notifications, by the filter field that asks for each, and the
#: legacy server capability that must declare `listChanged` for it.
LIST_CHANGED = {
    "notifications/tools/list_changed": ("toolsListChanged", "tools"),
    "notifications/prompts/list_changed": ("promptsListChanged", "prompts"),
    "notifications/resources/list_changed": ("resourcesListChanged", "resources"),
}
_FLAGS = tuple(flag for flag, _ in LIST_CHANGED.values())

#: At most this many resource URIs in one listen's filter: each is a
#: `resources/subscribe` sent upstream before the stream is acknowledged.
MAX_RESOURCE_SUBSCRIPTIONS = 100


@dataclass(frozen=True, slots=True)
class ListenFilter:
    """What a listen asks for, or what the server will honour of it."""

    #: The list-change filter fields that are true (`toolsListChanged`, ...).
    lists: frozenset[str] = frozenset()
    #: Resource URIs, as the client spelt them, in its order, without repeats.
    resources: tuple[str, ...] = ()

    def wire(self) -> dict[str, Any]:
        """The filter as `notifications` on the wire: only what is asked for."""
        out: dict[str, Any] = {flag: True for flag in _FLAGS if flag in self.lists}
        if self.resources:
            out["resourceSubscriptions"] = list(self.resources)
        return out

    def wants(self, method: str) -> bool:
        """Whether a legacy notification of `method` is one this filter lets through."""
        if method == UPDATED:
            return bool(self.resources)
        entry = LIST_CHANGED.get(method)
        return entry is not None and entry[0] in self.lists


def is_list_change(message: Mapping[str, Any]) -> bool:
    """Whether a legacy server's message says one of its lists changed."""
    return message.get("method") in LIST_CHANGED and "id" not in message


def read_filter(params: Mapping[str, Any]) -> ListenFilter:
    """The filter of a `subscriptions/listen` request's params.

    Raises:
        InvalidParams: a field of the wrong type, or too many resource URIs.
    """
    raw = params.get("notifications", {})
    if not isinstance(raw, dict):
        raise InvalidParams("params.notifications must be an object")
    lists = set()
    for flag in _FLAGS:
        value = raw.get(flag)
        if value is not None and not isinstance(value, bool):
            raise InvalidParams(f"params.notifications.{flag} must be a boolean")
        if value:
            lists.add(flag)
    uris = raw.get("resourceSubscriptions")
    if uris is None:
        uris = []
    if not isinstance(uris, list) or not all(isinstance(u, str) and u for u in uris):
        raise InvalidParams(
            "params.notifications.resourceSubscriptions must be an array of URI strings"
        )
    unique = tuple(dict.fromkeys(uris))
    if len(unique) > MAX_RESOURCE_SUBSCRIPTIONS:
        raise InvalidParams(
            f"params.notifications.resourceSubscriptions holds {len(unique)} URIs;"
            f" at most {MAX_RESOURCE_SUBSCRIPTIONS} are served in one listen"
        )
    return ListenFilter(frozenset(lists), unique)


def honoured(asked: ListenFilter, server_capabilities: Mapping[str, Any]) -> ListenFilter:
    """The part of `asked` a legacy server with these capabilities can deliver."""

    def declares(name: str, feature: str) -> bool:
        section = server_capabilities.get(name)
        return isinstance(section, dict) and section.get(feature) is True

    lists = frozenset(
        flag
        for flag, capability in LIST_CHANGED.values()
        if flag in asked.lists and declares(capability, "listChanged")
    )
    resources = asked.resources if declares("resources", "subscribe") else ()
    return ListenFilter(lists, resources)


def joined(asked: ListenFilter, parts: Iterable[ListenFilter]) -> ListenFilter:
    """What a listen of several upstreams (an endpoint's) honours of `asked`, from what
    each of them honours: every filter field some upstream honours, and the resource URIs
    some upstream subscribed, in the client's order."""
    parts = list(parts)
    lists = frozenset(flag for part in parts for flag in part.lists)
    subscribed = {uri for part in parts for uri in part.resources}
    return ListenFilter(lists, tuple(uri for uri in asked.resources if uri in subscribed))


def advertises(server_capabilities: Mapping[str, Any]) -> dict[str, dict[str, bool]]:
    """What `server/discover` may say of change notifications: what a listen delivers."""
    out: dict[str, dict[str, bool]] = {}
    for _, capability in LIST_CHANGED.values():
        section = server_capabilities.get(capability)
        if isinstance(section, dict) and section.get("listChanged") is True:
            out.setdefault(capability, {})["listChanged"] = True
    resources = server_capabilities.get("resources")
    if isinstance(resources, dict) and resources.get("subscribe") is True:
        out.setdefault("resources", {})["subscribe"] = True
    return out


def acknowledgement(listen_id: RequestId, honour: ListenFilter) -> dict[str, Any]:
    """The stream's first message."""
    return jsonrpc.notification(
        ACKNOWLEDGED, {"_meta": {SUBSCRIPTION_ID: listen_id}, "notifications": honour.wire()}
    )


def relayed(
    listen_id: RequestId, honour: ListenFilter, message: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The stamped notification to send for a legacy server's `message`, or None when it
    is not a change notification `honour` lets through (a request, a response, progress,
    a log message, or one not asked for)."""
    method = message.get("method")
    if not isinstance(method, str) or "id" in message or not honour.wants(method):
        return None
    params: dict[str, Any] = {"_meta": {SUBSCRIPTION_ID: listen_id}}
    if method == UPDATED:
        raw = message.get("params")
        uri = raw.get("uri") if isinstance(raw, dict) else None
        if not isinstance(uri, str) or not uri:
            return None
        params["uri"] = uri
    return jsonrpc.notification(method, params)


def closing(listen_id: RequestId) -> dict[str, Any]:
    """The result that ends a listen gracefully (the body of its JSON-RPC result)."""
    return {"resultType": "complete", "_meta": {SUBSCRIPTION_ID: listen_id}}
