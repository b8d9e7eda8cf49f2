"""What serves a 2026 client's request on one route, by method: the 2026 lane.

The request pipeline (`gateway.web.pipeline`) has read, classified and admitted the
request, and ends it; here each method's server does the work between, through the
table `ModernLane.served_by`:

- `tools/call`, `prompts/get`, `resources/read`: through the bridge after a tool's
  `Mcp-Param-*` headers are checked (a tool with a task policy through `gateway.tasks`);
  a `resources/read` result is held to the caller's scopes;
- `tasks/*`: the tasks extension (`gateway.tasks`);
- `server/discover`: answered from the upstream's `initialize`;
- `subscriptions/listen`: served on a session of its own (`gateway.listens`);
- the lists and `completion/complete`: passed straight through, a list left without what
  the caller may not see and through the `listing` seam (`gateway.seams`).

A server notes what it learns on the request's record (`gateway.seams.RequestServed`:
the outcome of a call, a listen cut short) and returns the result, None for a stream
cut short; it raises an `RpcError` for the pipeline to answer.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from gateway.calls.bridge import Bridge
from gateway.config import GatewayConfig, UpstreamConfig
from gateway.errors import GatewayError, MethodNotFound, UpstreamError
from gateway.listens import Acknowledge, Listens, Send, serve
from gateway.protocol import inbound, methods, params, translate
from gateway.protocol import listen as listen_wire
from gateway.protocol.capabilities import NO_CAPABILITIES, ClientCaps
from gateway.protocol.jsonrpc import RequestId
from gateway.protocol.legacy_tasks import serves_legacy_tasks
from gateway.protocol.listen import ListenFilter
from gateway.seams import Caller, RequestServed, Seams
from gateway.tasks.service import Tasks
from gateway.upstream.port import Inbox, UpstreamPool
from gateway.web.channel import ResponseChannel
from gateway.web.front_door import FrontDoor
from gateway.web.tool_headers import ToolHeaders

#: Why `subscriptions/listen` is unknown on every route of a replica that serves none.
LISTENS_OFF = "Method not found: subscriptions/listen (limits.max_listens is 0)"

#: What serves one 2026 request: its record, the request, its headers by lower-case
#: name, its response channel -> its result (None: a stream cut short).
Server = Callable[
    [RequestServed, inbound.FrontRequest, Mapping[str, str], ResponseChannel],
    Awaitable[dict[str, Any] | None],
]


class ModernLane:
    """The 2026 lane of one route (one upstream)."""

    def __init__(
        self,
        config: GatewayConfig,
        upstream: UpstreamConfig,
        bridge: Bridge,
        pools: Mapping[str, UpstreamPool],
        front_door: FrontDoor,
        listens: Listens,
        tasks: Tasks,
        *,
        legacy: bool,
        seams: Seams,
    ) -> None:
        """`legacy`: whether the route serves 2025 clients too (`server/discover` says so)."""
        self.tasks = tasks
        self.listens = listens
        self.legacy = legacy
        self.upstream = upstream
        self.bridge = bridge
        self.front_door = front_door
        self.seams = seams
        self._pools = pools  # filled when the app starts
        self.tool_headers = ToolHeaders(self._list_tools, clock=bridge.clock)

    @property
    def pool(self) -> UpstreamPool:
        return self._pools[self.upstream.name]

    def served_by(self) -> dict[str, Server]:
        """The server of every method a 2026 client may send (`methods.FRONT`)."""
        table: dict[str, Server] = {
            "server/discover": self.discover,
            "subscriptions/listen": self.listen,
            "completion/complete": self.pass_through,
        }
        table.update(dict.fromkeys(methods.LISTS, self.pass_through))
        table.update(dict.fromkeys(methods.INTERRUPTIBLE, self.call))
        table.update(dict.fromkeys(methods.TASKS, self.task))
        return table

    def call(
        self,
        served: RequestServed,
        message: inbound.FrontRequest,
        headers: Mapping[str, str],
        channel: ResponseChannel,
    ) -> Awaitable[dict[str, Any]]:
        """A call, through the bridge (or as a task): its result, to await, which the
        pipeline then hands to `called`. (The tasks service's or the bridge's coroutine
        itself, not one of ours around it: a frame fewer to resume at every wake of the
        call, of which a round trip has a dozen.)

        Raises:
            RpcError
        """
        if message.method == "tools/call":
            tools = self.tool_headers
            if tools.stale():
                return self._call_reloaded(served, message, headers, channel)
            params.check_param_headers(
                tools.for_tool(message.target), message.params.get("arguments"), headers
            )
            task_support = tools.task_support(message.target)
        else:
            task_support = None
        channel.start_keepalive()
        principal = served.caller.principal
        return self.tasks.call(self.upstream, message, principal, channel.notify, task_support)

    async def _call_reloaded(
        self,
        served: RequestServed,
        message: inbound.FrontRequest,
        headers: Mapping[str, str],
        channel: ResponseChannel,
    ) -> dict[str, Any]:
        """A tool call once the upstream's tool listing, out of date, has been read again."""
        await self.tool_headers.reload()
        return await self.call(served, message, headers, channel)

    def called(
        self, served: RequestServed, message: inbound.FrontRequest, result: dict[str, Any]
    ) -> None:
        """What follows a call's result (`call`): its outcome noted (its `resultType`), and
        a `resources/read` result held to the caller's scopes.

        Raises:
            InsufficientScope
        """
        served.outcome = result.get("resultType", "complete")
        self.front_door.check_result(served.caller, message.method, result)

    def task(
        self,
        served: RequestServed,
        message: inbound.FrontRequest,
        headers: Mapping[str, str],
        channel: ResponseChannel,
    ) -> Awaitable[dict[str, Any]]:
        """A `tasks/*` request: the tasks service's coroutine itself, as `call`'s."""
        return self.tasks.serve(message, served.caller.principal)

    async def discover(
        self,
        served: RequestServed,
        message: inbound.FrontRequest,
        headers: Mapping[str, str],
        channel: ResponseChannel,
    ) -> dict[str, Any]:
        info = await self.pool.upstream_info()
        return translate.discover_result(
            info,
            self.upstream.cache,
            listens=self.listens.enabled,
            legacy=self.legacy,
            tasks=self.upstream.has_tasks or serves_legacy_tasks(info.capabilities),
        )

    async def listen(
        self,
        served: RequestServed,
        message: inbound.FrontRequest,
        headers: Mapping[str, str],
        channel: ResponseChannel,
    ) -> dict[str, Any] | None:
        """Serve a `subscriptions/listen` stream until it ends (its result, or None when it
        is cut short). Raises: RpcError, before the stream is acknowledged."""
        if not self.listens.enabled:
            raise MethodNotFound(LISTENS_OFF)
        caller = served.caller
        asked = self.listen_filter(caller, listen_wire.read_filter(message.params))
        with self.listens.opened(self.upstream.name, caller.principal) as inbox:
            channel.start_keepalive()
            result = await self.serve_listen(caller, message.id, asked, inbox, channel.notify)
        if result is None:
            served.outcome = "cut_short"
        return result

    def listen_filter(self, caller: Caller, asked: ListenFilter) -> ListenFilter:
        """`asked` without the resources this upstream's exposure rules hide (a hidden
        resource is refused, not an error).

        Raises:
            InsufficientScope: a resource asked for the caller may not read.
        """
        exposure = self.upstream.exposure
        if asked.resources and not exposure.everything:
            shown = [u for u in asked.resources if exposure.shows("resources/read", u)]
            asked = dataclasses.replace(asked, resources=tuple(shown))
        for uri in asked.resources:
            self.front_door.check_target(caller, "resources/read", uri)
        return asked

    async def serve_listen(
        self,
        caller: Caller,
        listen_id: RequestId,
        asked: ListenFilter,
        inbox: Inbox,
        send: Send,
        acknowledge: Acknowledge | None = None,
    ) -> dict[str, Any] | None:
        """Serve a listen of `caller`'s to this upstream on `inbox` (opened by the caller
        of this, `asked` read through `listen_filter`) until it ends: `gateway.listens.serve`.

        Raises:
            UpstreamError: before the stream was acknowledged.
            ClientStalled: the client stopped reading.
        """

        def may_read(uri: str) -> bool:
            try:
                self.front_door.check_target(caller, "resources/read", uri)
            except GatewayError:
                return False
            return True

        expires_at = caller.identity.expires_at if caller.identity is not None else None
        clock = self.bridge.clock
        return await serve(
            self.pool,
            inbox,
            listen_id,
            asked,
            send,
            may_read,
            self.upstream.name,
            None if expires_at is None else max(0.0, expires_at - clock.wall_s()),
            clock=clock,
            acknowledge=acknowledge,
        )

    async def pass_through(
        self,
        served: RequestServed,
        message: inbound.FrontRequest,
        headers: Mapping[str, str],
        channel: ResponseChannel,
    ) -> dict[str, Any]:
        """A list or a completion, passed straight through; a list as the caller may see
        it (its scopes, then the `listing` seam)."""
        method = message.method
        cache = self.upstream.cache
        listed = None
        if self.seams.lists is not None and method in methods.LISTS:
            listed = await self.seams.lists(served, method, message.params)
        if listed is not None:  # served from the catalog, not asked upstream
            result, cache = listed
        else:
            result = await self._request(
                message.envelope.capabilities,
                served.caller.principal,
                method,
                translate.upstream_params(message, None),
                message.trace,
            )
        if method == "tools/list":
            self.tool_headers.learn(result)
        info = self.pool.info
        result = translate.decorate_result(
            method,
            result,
            server_info=info.server_info if info else None,
            cache=cache,
        )
        result = self.front_door.visible(served.caller, method, result)
        if self.seams.listing and method in methods.LISTS:
            result = self.seams.listed(served, method, result)
        return result

    def answered(self, message: inbound.FrontRequest, result: dict[str, Any]) -> dict[str, Any]:
        """A call a seam answered itself, as a call the upstream answered at once is."""
        info = self.pool.info
        return translate.decorate_result(
            message.method,
            result,
            server_info=info.server_info if info else None,
            cache=self.upstream.cache,
        )

    async def _request(
        self,
        caps: ClientCaps,
        principal: str | None,
        method: str,
        upstream_params: dict[str, Any],
        trace: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """A plain upstream request's result, on a session of `principal`'s (None: the
        gateway's own). Raises: RpcError (translated upstream errors)."""
        started = time.perf_counter()
        try:
            reply = await self.pool.request(caps, principal, method, upstream_params, trace)
        except UpstreamError as exc:
            self.bridge.metrics.upstream_errors.labels(self.upstream.name, exc.kind).inc()
            raise
        finally:
            self.bridge.metrics.upstream_seconds.labels(self.upstream.name, method).observe(
                time.perf_counter() - started
            )
        error = reply.get("error")
        if isinstance(error, dict):
            raise translate.translate_error(error)
        result = reply.get("result")
        return result if isinstance(result, dict) else {}

    async def _list_tools(self, cursor: str | None) -> dict[str, Any]:
        return await self._request(
            NO_CAPABILITIES, None, "tools/list", {"cursor": cursor} if cursor else {}
        )
