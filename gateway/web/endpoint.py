"""The 2026 lane of an endpoint of several upstreams (`endpoints[]`): the pipeline's
dispatch step chooses the upstream a request is for, and the lists and `server/discover`
are served merged.

- `tools/call`, `prompts/get`: the upstream whose prefix the name carries, or (with
  `prefix: none`) whose list holds the name; `resources/read`: the upstream that lists
  the URI (or has a template it matches); `completion/complete`: the upstream of its
  `ref`. The request then goes on as on that upstream's own path: the `calling` seam,
  its front door's target scopes, its 2026 lane (`gateway.web.handlers.ModernLane`).
  A retry repeats the name its call was made with, so it comes back to the same
  upstream, whose audience its `requestState` is sealed for.
- the four lists: each upstream's, as its own path serves it (the catalog, the
  caller's scopes, the `listing` seam), merged (`gateway.protocol.merging`); an upstream
  that cannot be reached is left out (`on_upstream_down: omit`, the list then not to be
  cached) or fails the list (`fail`).
- `server/discover`: each upstream's, merged, its `serverInfo` naming the upstreams.
- `tasks/*`: the tasks extension's, whose records name their upstream.
- `subscriptions/listen`: a listen of each upstream on one stream
  (`gateway.joined_listen`), each resource URI asked of the upstream `resources/read`
  would reach, acknowledged with what some upstream accepted.

2025 clients are served by the endpoint's legacy lane
(`gateway.legacy_clients.endpoint`), which asks this one which upstream a request is for
(`owner_of`) and for the merged lists (`legacy_list`): one path for both eras.

Nothing here reaches an upstream but through the member upstreams' lanes and catalogs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import structlog

from gateway import __version__
from gateway import logging as log_context
from gateway.catalog import UNKNOWN, Catalog, UnknownTarget
from gateway.config import DOWN_FAIL, EndpointConfig
from gateway.errors import METHOD_NOT_FOUND, MethodNotFound, RpcError
from gateway.joined_listen import JoinedListen
from gateway.protocol import inbound, merging, methods
from gateway.protocol import listen as listen_wire
from gateway.protocol.capabilities import NO_CAPABILITIES
from gateway.protocol.versions import Version
from gateway.seams import CALLING, RequestServed
from gateway.web.channel import ResponseChannel
from gateway.web.front_door import FrontDoor
from gateway.web.handlers import LISTENS_OFF, ModernLane, Server

log = structlog.get_logger("gateway.web")

#: The list a request about one target is told apart by: a name, or a URI (then a
#: resource's, or a template's it matches).
_LISTED_IN = {
    "tools/call": ("tools/list",),
    "prompts/get": ("prompts/list",),
    "resources/read": ("resources/list", "resources/templates/list"),
}


#: A request about a resource told apart as a read of it is.
_ABOUT = {"resources/subscribe": "resources/read", "resources/unsubscribe": "resources/read"}

#: The most sets of shared names remembered as told (past it, each is told every time).
_MOST_TOLD = 1024


@dataclass(frozen=True, slots=True)
class MemberLane:
    """What serves a request for one upstream of a route: its 2026 lane, the table of
    its servers by method (`ModernLane.served_by`), its front door."""

    lane: ModernLane
    served_by: Mapping[str, Server]
    door: FrontDoor


class EndpointLane:
    """The dispatch step and the merged servers of one endpoint of several upstreams."""

    def __init__(
        self, endpoint: EndpointConfig, members: Mapping[str, MemberLane], catalog: Catalog
    ) -> None:
        self.endpoint = endpoint
        self.members = dict(members)  # in the endpoint's order
        self.catalog = catalog
        self.server_info = merging.endpoint_info(endpoint.path, members, __version__)
        self._told: set[tuple[str, tuple[str, ...]]] = set()  # shared names logged
        first = next(iter(self.members.values()))
        table: dict[str, Server] = dict(first.served_by)  # tasks/*: records name their upstream
        table.update(dict.fromkeys(methods.LISTS, self.merged_list))
        table["server/discover"] = self.discover
        table["subscriptions/listen"] = self.listen
        #: What serves the requests of the endpoint as a whole (lists, discover, tasks).
        self.whole = MemberLane(first.lane, table, first.door)

    async def dispatch(self, served: RequestServed, message: inbound.FrontRequest) -> MemberLane:
        """The member a request is for (its upstream then on `served` and in the log
        context), or the endpoint as a whole.

        Raises:
            UnknownTarget: no upstream (or two) shows the name or URI.
            UpstreamError: no upstream shows it, and one could not be asked.
        """
        if message.method not in CALLING:
            return self.whole
        upstream = await self.owner_of(message.method, message.params, served.caller.principal)
        if upstream is None:
            return self.whole
        served.upstream = upstream
        log_context.bind(upstream=upstream)
        return self.members[upstream]

    async def owner_of(self, method: str, params: dict[str, Any], principal: str) -> str | None:
        """The upstream a request about one target (a call, a prompt, a read, a
        completion, a resource subscription) is for; None for one that names none
        (malformed: the first upstream's checks answer it).

        Raises:
            UnknownTarget: no upstream (or two) shows the name or URI.
            UpstreamError: no upstream shows it, and one could not be asked.
        """
        method = _ABOUT.get(method, method)
        if method == "completion/complete":
            ref = params.get("ref")
            if not isinstance(ref, dict):
                return None
            if ref.get("type") == "ref/prompt":
                method, target = "prompts/get", ref.get("name")
            else:
                method, target = "resources/read", ref.get("uri")
        else:
            target = params.get("uri" if method == "resources/read" else "name")
        if not isinstance(target, str):
            return None
        return await self._owner(method, target, principal)

    async def legacy_owner(self, method: str, params: dict[str, Any], principal: str) -> str | None:
        """`owner_of` for a 2025 client: a call, a prompt or a read of a name no upstream
        shows gets what the first upstream answers a name it does not know (as a 2025
        client on an upstream's own path is answered: hidden and absent alike).

        Raises:
            Answered: that answer is a result (mcp 1.x servers answer a tool's error).
            RpcError: that answer is an error, or as `owner_of`.
        """
        try:
            return await self.owner_of(method, params, principal)
        except UnknownTarget:
            if method not in UNKNOWN:
                raise
            name = params.get("uri" if method == "resources/read" else "name")
            first = next(iter(self.members))
            await self.catalog[first].unknown(method, str(name))
            raise

    async def _owner(self, method: str, target: str, principal: str) -> str:
        if method != "resources/read" and self.endpoint.prefixed:
            for name, member in self.members.items():
                if target.startswith(member.lane.upstream.prefix):
                    return name
            raise UnknownTarget(method, target)
        down: RpcError | None = None
        names = list(self.members)
        for listed in _LISTED_IN[method]:
            # Asked of every upstream at once: one slow to answer delays a call by its own
            # wait only.
            asked = [self._shown(name, listed, principal) for name in names]
            answers = await asyncio.gather(*asked, return_exceptions=True)
            shown: dict[str, dict[str, Any]] = {}
            for name, answer in zip(names, answers, strict=True):
                if isinstance(answer, dict):
                    shown[name] = answer
                elif isinstance(answer, RpcError):
                    if answer.code == METHOD_NOT_FOUND:  # it has no such list
                        continue
                    down = down or answer
                    last = self._last_shown(name, listed, principal)
                    if last is not None:  # its names stay its own while it is down
                        shown[name] = last
                else:
                    raise answer
            found = merging.owners(listed, target, shown)
            if len(found) == 1:
                return found[0]
            if found:
                self._tell_shared(method, [target], found)
                raise UnknownTarget(method, target)
        if down is not None:
            raise down
        raise UnknownTarget(method, target)

    def _tell_shared(self, method: str, names: list[str], upstreams: list[str]) -> None:
        """`endpoint_name_shared` in the log, once per method and names on this replica
        (a list or a call of them is refused as often as it is asked)."""
        key = (method, tuple(names))
        if key in self._told:
            return
        if len(self._told) < _MOST_TOLD:
            self._told.add(key)
        log.warning(
            "endpoint_name_shared",
            path=self.endpoint.path,
            method=method,
            names=names[:20],
            count=len(names),
            upstreams=upstreams,
        )

    async def _shown(self, upstream: str, method: str, principal: str) -> dict[str, Any]:
        """`upstream`'s `method` list as the exposure rules show it, from the catalog."""
        catalog = self.catalog[upstream]
        result, _ = await catalog.listed(method, NO_CAPABILITIES, principal, {})
        return catalog.upstream.exposure.view(method, result)

    def _last_shown(self, upstream: str, method: str, principal: str) -> dict[str, Any] | None:
        """`upstream`'s last `method` list as the rules show it, however old."""
        catalog = self.catalog[upstream]
        last = catalog.last_listed(method, principal)
        return None if last is None else catalog.upstream.exposure.view(method, last)

    # -- the endpoint as a whole ------------------------------------------------------------

    async def merged_list(
        self,
        served: RequestServed,
        message: inbound.FrontRequest,
        headers: Mapping[str, str],
        channel: ResponseChannel | None,
    ) -> dict[str, Any]:
        """A list of every upstream's, each as its own path serves it.

        Raises:
            RpcError: an upstream's, with `on_upstream_down: fail` (or when all failed).
        """
        method, principal = message.method, served.caller.principal
        results = await self._each(served, message, headers, channel, "pass_through")
        absent = []
        if not self.endpoint.prefixed:  # bare names: a down upstream's stay its own
            for name in self.members.keys() - results.keys():
                last = self._last_shown(name, method, principal)
                absent += [] if last is None else [last]
        merged, dropped = merging.merged_list(method, results, self.server_info, absent)
        if dropped:
            self._tell_shared(method, sorted(dropped), list(self.members))
        if len(results) < len(self.members):
            merged["ttlMs"] = 0  # served without an upstream: ask again soon
        return merged

    async def legacy_list(
        self, served: RequestServed, method: str, params: dict[str, Any]
    ) -> dict[str, Any]:
        """A list for a 2025 client of the endpoint: the one a 2026 client gets
        (`merged_list`), without what only 2026 results carry (`resultType`, the cache
        hints, the `serverInfo` in `_meta`).

        Raises:
            RpcError: as `merged_list`.
        """
        envelope = inbound.Envelope(Version.V2025_11_25, NO_CAPABILITIES, None, None)
        message = inbound.FrontRequest(served.rid or 0, method, params, envelope)
        merged = await self.merged_list(served, message, {}, None)
        return merging.legacy_result(merged)

    async def discover(
        self,
        served: RequestServed,
        message: inbound.FrontRequest,
        headers: Mapping[str, str],
        channel: ResponseChannel,
    ) -> dict[str, Any]:
        results = await self._each(served, message, headers, channel, "discover")
        merged = merging.merged_discover(results, self.server_info)
        if len(results) < len(self.members):
            merged["ttlMs"] = 0
        return merged

    async def listen(
        self,
        served: RequestServed,
        message: inbound.FrontRequest,
        headers: Mapping[str, str],
        channel: ResponseChannel,
    ) -> dict[str, Any] | None:
        """A `subscriptions/listen` of every upstream on one stream (`gateway.joined_listen`):
        list changes asked of each, a resource URI of the upstream that serves it (as
        `resources/read` finds it); acknowledged with what some upstream accepted.

        Raises:
            RpcError: before the stream is acknowledged.
        """
        lanes = {name: member.lane for name, member in self.members.items()}
        listens = self.whole.lane.listens
        if not listens.enabled:
            raise MethodNotFound(LISTENS_OFF)
        caller = served.caller
        asked = listen_wire.read_filter(message.params)
        routed = await self._routed(asked, caller.principal)
        filters = {name: lane.listen_filter(caller, routed[name]) for name, lane in lanes.items()}
        with listens.opened_each(list(lanes), caller.principal) as inboxes:
            channel.start_keepalive()
            members = {
                name: partial(lane.serve_listen, caller, message.id, filters[name], inboxes[name])
                for name, lane in lanes.items()
            }
            joined = JoinedListen(message.id, asked, channel.notify, self.whole.lane.bridge.clock)
            result = await joined.serve(members, omit=self.endpoint.on_upstream_down != DOWN_FAIL)
        if result is None:
            served.outcome = "cut_short"
        return result

    async def _routed(
        self, asked: listen_wire.ListenFilter, principal: str
    ) -> dict[str, listen_wire.ListenFilter]:
        """`asked` as each upstream is to hear it: the list changes, and the resource URIs
        it serves (a URI no upstream, or two, serve is subscribed nowhere)."""
        uris: dict[str, list[str]] = {name: [] for name in self.members}
        for uri in asked.resources:
            try:
                uris[await self._owner("resources/read", uri, principal)].append(uri)
            except RpcError as exc:  # unknown, shared, or its upstream down: not honoured
                log.info("listen_subscription_unrouted", path=self.endpoint.path, error=exc.message)
        return {
            name: listen_wire.ListenFilter(asked.lists, tuple(found))
            for name, found in uris.items()
        }

    async def _each(
        self,
        served: RequestServed,
        message: inbound.FrontRequest,
        headers: Mapping[str, str],
        channel: ResponseChannel | None,
        server: str,
    ) -> dict[str, dict[str, Any]]:
        """Each upstream's answer to `message` through its lane's `server`, by upstream:
        one without the method (-32601) lists nothing; one that failed is left out
        (`omit`) or fails the whole (`fail`, or when every one failed)."""
        names = list(self.members)
        asked = [
            getattr(self.members[name].lane, server)(
                self._for(served, name), message, headers, channel
            )
            for name in names
        ]
        answers = await asyncio.gather(*asked, return_exceptions=True)
        results: dict[str, dict[str, Any]] = {}
        failed: RpcError | None = None
        for name, answer in zip(names, answers, strict=True):
            if isinstance(answer, dict):
                results[name] = answer
            elif isinstance(answer, RpcError) and answer.code == METHOD_NOT_FOUND:
                results[name] = {}
            elif isinstance(answer, RpcError):
                failed = failed or answer
                log.warning(
                    "endpoint_upstream_omitted",
                    upstream=name,
                    method=message.method,
                    kind=type(answer).__name__,
                    error=answer.message,
                )
            elif isinstance(answer, BaseException):
                raise answer
        if failed is not None and (self.endpoint.on_upstream_down == DOWN_FAIL or not results):
            raise failed
        return results

    @staticmethod
    def _for(served: RequestServed, upstream: str) -> RequestServed:
        """The request as `upstream`'s own path would serve it (the seams read its upstream)."""
        return RequestServed(
            served.lane,
            served.caller,
            served.started,
            served.method,
            served.rid,
            served.target,
            served.status,
            served.outcome,
            upstream=upstream,
        )
