"""Thin handlers: parse -> protocol / bridge / pool -> serialize.

One `McpEndpoint` serves one upstream on its own path, to clients of both eras. Each
request is classified first (`gateway.protocol.era`): a 2025 client's goes to the
legacy lane (`gateway.legacy_clients.lane`) once its HTTP layer is checked and its
caller admitted; a 2026 client's takes the path below, exactly as with the lane off.
There, interruptible methods go to the bridge after their `Mcp-Param-*` headers are
checked (a tool with a task policy through `gateway.tasks`, which also serves
`tasks/*`); `server/discover` is answered from the upstream's `initialize`;
`subscriptions/listen` is served on a session of its own (`gateway.listens`); every
other method passes straight through.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import structlog
from aiohttp import StreamReader, web

from gateway import logging as log_context
from gateway.calls.bridge import Bridge
from gateway.config import GatewayConfig, UpstreamConfig
from gateway.errors import (
    GatewayError,
    MethodNotFound,
    PayloadTooLarge,
    RpcError,
    UpstreamError,
)
from gateway.legacy_clients.lane import LegacyLane, LegacyMethodNotAllowed
from gateway.listens import Listens, serve
from gateway.protocol import inbound, jsonrpc, methods, params, translate
from gateway.protocol import listen as listen_wire
from gateway.protocol.capabilities import NO_CAPABILITIES, ClientCaps
from gateway.protocol.era import Lane, lane_of
from gateway.protocol.legacy_tasks import serves_legacy_tasks
from gateway.tasks.service import Tasks
from gateway.tracing import TRACING
from gateway.upstream.port import UpstreamPool
from gateway.web.channel import ResponseChannel
from gateway.web.front_door import Caller, FrontDoor
from gateway.web.middleware import (
    NO_HEADERS,
    REQUEST_ID,
    STREAM,
    closing_refusal,
    rpc_error_headers,
    rpc_error_reply,
)
from gateway.web.tool_headers import ToolHeaders

log = structlog.get_logger("gateway.web")


async def read_body(request: web.Request, limit: int, timeout_s: float) -> bytes:
    """The whole body, refused with 413 as soon as it passes `limit`. A body that stops
    short of its `Content-Length` is returned as far as it came (it fails to parse).

    A body not all there yet gets `timeout_s` to arrive: aiohttp's own timer
    (`limits.idle_timeout_s`) does not run while a handler reads, so a body that trickles
    or never ends (or a chunk aiohttp's parser refuses after the head) would otherwise
    hold its connection for ever.

    Raises:
        PayloadTooLarge
        web.HTTPRequestTimeout: 408, the body did not arrive in time; the connection closes
        web.HTTPBadRequest: 400, a body aiohttp could not decode; the connection closes
    """
    length = request.content_length
    if length is not None and length > limit:
        raise PayloadTooLarge(f"Request body is over the {limit}-byte limit")
    content = request.content
    try:
        if content.is_eof():  # all here (nearly every request): no timer to arm
            return await _read(content, length, limit)
        async with asyncio.timeout(timeout_s):
            return await _read(content, length, limit)
    except TimeoutError:
        log.info("request_body_timed_out", timeout_s=timeout_s)
        raise closing_refusal(
            web.HTTPRequestTimeout, f"The request body did not arrive within {timeout_s:g} s"
        ) from None
    except web.RequestPayloadError:
        # aiohttp logs what was wrong as it drains the body (`request_malformed`, one line).
        raise closing_refusal(web.HTTPBadRequest, "The request body could not be decoded") from None


async def _read(content: StreamReader, length: int | None, limit: int) -> bytes:
    if length is not None:
        try:
            return await content.readexactly(length)  # one read when it is here
        except asyncio.IncompleteReadError as exc:
            return exc.partial
    chunks, size = [], 0
    async for chunk in content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"Request body is over the {limit}-byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


class McpEndpoint:
    def __init__(
        self,
        config: GatewayConfig,
        upstream: UpstreamConfig,
        bridge: Bridge,
        pools: Mapping[str, UpstreamPool],
        front_door: FrontDoor,
        listens: Listens,
        tasks: Tasks,
        legacy: LegacyLane | None = None,
    ) -> None:
        """`legacy`: the route's legacy lane, None when it is off (`legacy.enabled`);
        `tasks`: the tasks extension's service."""
        self.config = config
        self.tasks = tasks
        self.listens = listens
        self.legacy = legacy
        self.upstream = upstream
        self.bridge = bridge
        self.front_door = front_door
        self._pools = pools  # filled when the app starts
        self.tool_headers = ToolHeaders(self._list_tools, clock=bridge.clock)
        self.policy = inbound.OriginPolicy(
            origins=config.allowed_origins,
            hosts=config.allowed_hosts,
            loopback_only=config.loopback,
        )

    @property
    def pool(self) -> UpstreamPool:
        return self._pools[self.upstream.name]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        legacy = self.legacy
        if legacy is not None and request.method != "POST":
            lower, _ = inbound.read_headers(request.headers.items())
            if lane_of(request.method, lower) is Lane.LEGACY:
                return await self._legacy_stream(request, legacy, lower)
        inbound.check_http(request.method, request.headers, policy=self.policy)
        caller = await self.front_door.admit(request.headers.get("Authorization"))
        limits = self.config.limits
        body = await read_body(request, limits.max_body_bytes, limits.body_timeout_s)
        headers, duplicate = inbound.read_headers(request.headers.items())
        decoded = jsonrpc.decode(body)
        if legacy is not None and lane_of("POST", headers, decoded) is Lane.LEGACY:
            log_context.bind(era="legacy", upstream=self.upstream.name)
            return await legacy.post(request, caller, headers, body, decoded)
        try:
            message = inbound.classify(decoded, headers, duplicate)
        except RpcError as exc:
            log.info("request_rejected", code=exc.error_object()["code"], error=exc.message)
            reply, status = rpc_error_reply(exc, jsonrpc.id_of(decoded))
            return web.Response(
                body=jsonrpc.dumps(reply), status=status, content_type="application/json"
            )
        if isinstance(message, jsonrpc.Notification):
            inbound.check_notification(headers)
            return web.Response(status=202)
        log_context.bind(rpc_method=message.method, upstream=self.upstream.name)
        principal = caller.principal
        channel = ResponseChannel(request, keepalive_s=limits.keepalive_s)
        started = time.monotonic()
        outcome = "complete"
        extra = NO_HEADERS
        result: dict[str, Any] | None
        cut = False  # a listen cut short: its stream ends without a result
        span = TRACING.span(
            f"mcp {message.method}",
            parent=message.trace,
            kind="server",
            attributes={"mcp.method": message.method, "mcp.upstream": self.upstream.name},
        )
        with span:
            try:
                self.front_door.check_request(caller, message.method, message.params)
                task_support = None
                if message.method == "tools/call":
                    declared = await self.tool_headers.for_tool(message.target)
                    params.check_param_headers(declared, message.params.get("arguments"), headers)
                    task_support = self.tool_headers.task_support(message.target)
                if message.method in methods.INTERRUPTIBLE:
                    channel.start_keepalive()
                    result = await self.tasks.call(
                        self.upstream, message, principal, channel.notify, task_support
                    )
                    outcome = result.get("resultType", "complete")
                    self.front_door.check_result(caller, message.method, result)
                elif message.method in methods.TASKS:
                    result = await self.tasks.serve(message, principal)
                elif message.method == "server/discover":
                    info = await self.pool.upstream_info()
                    result = translate.discover_result(
                        info,
                        self.upstream.cache,
                        listens=self.listens.enabled,
                        legacy=legacy is not None,
                        tasks=self.upstream.has_tasks or serves_legacy_tasks(info.capabilities),
                    )
                elif message.method == "subscriptions/listen":
                    result = await self._listen(caller, message, channel)
                else:
                    result = await self._pass_through(message, principal)
                    result = self.front_door.visible(caller, message.method, result)
                if result is None:
                    outcome, cut = "cut_short", True
                reply, status = jsonrpc.result(message.id, result or {}), 200
            except RpcError as exc:
                outcome = "error"
                reply, status = rpc_error_reply(exc, message.id)
                extra = rpc_error_headers(exc)
                log.info(
                    "request_failed",
                    code=exc.error_object()["code"],
                    error=exc.message,
                    kind=type(exc).__name__,
                )
            finally:
                await channel.close()
        elapsed = time.monotonic() - started
        metrics = self.bridge.metrics
        metrics.requests.labels(message.method, outcome).inc()
        metrics.request_seconds.labels(message.method).observe(elapsed)
        log.info(
            "request_served",
            status=status,
            outcome=outcome,
            duration_ms=round(elapsed * 1000, 1),
            principal=caller.log_id,
            **inbound.logged_target(message.method, message.params),
        )
        response = await (channel.cut_short() if cut else channel.finish(reply, status))
        if extra and not response.prepared:  # a stream said 200 already
            response.headers.update(extra)
        return response

    async def _legacy_stream(
        self, request: web.Request, legacy: LegacyLane, headers: Mapping[str, str]
    ) -> web.StreamResponse:
        """A legacy client's GET (its session's stream) or DELETE (its session's end).

        Raises:
            LegacyMethodNotAllowed, ForbiddenOrigin, and what the front door and the lane raise
        """
        if request.method not in ("GET", "DELETE"):
            raise LegacyMethodNotAllowed()
        self.policy.check(headers)
        caller = await self.front_door.admit(request.headers.get("Authorization"))
        log_context.bind(era="legacy", upstream=self.upstream.name)
        if request.method == "GET":
            return await legacy.get(request, caller, headers)
        return await legacy.delete(request, caller, headers)

    async def _listen(
        self, caller: Caller, message: inbound.FrontRequest, channel: ResponseChannel
    ) -> dict[str, Any] | None:
        """Serve a `subscriptions/listen` stream until it ends (its result, or None when it
        is cut short). Raises: RpcError, before the stream is acknowledged."""
        if not self.listens.enabled:
            raise MethodNotFound("Method not found: subscriptions/listen (limits.max_listens is 0)")
        asked = listen_wire.read_filter(message.params)
        for uri in asked.resources:
            self.front_door.check_target(caller, "resources/read", uri)

        def may_read(uri: str) -> bool:
            try:
                self.front_door.check_target(caller, "resources/read", uri)
            except GatewayError:
                return False
            return True

        expires_at = caller.identity.expires_at if caller.identity is not None else None
        with self.listens.opened(self.upstream.name, caller.principal) as inbox:
            channel.start_keepalive()
            return await serve(
                self.pool,
                inbox,
                message.id,
                asked,
                channel.notify,
                may_read,
                self.upstream.name,
                None if expires_at is None else max(0.0, expires_at - self.bridge.clock.wall_s()),
                clock=self.bridge.clock,
            )

    async def _pass_through(self, message: inbound.FrontRequest, principal: str) -> dict[str, Any]:
        result = await self._request(
            message.envelope.capabilities,
            principal,
            message.method,
            translate.upstream_params(message, None),
            message.trace,
        )
        if message.method == "tools/list":
            self.tool_headers.learn(result)
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


class FrontStreams:
    """`gateway.legacy_clients.relay.StreamHooks` for the front: a stream the legacy lane
    answers names its request (`X-Request-Id`), and the error middleware knows it began."""

    def heading(self, request: web.Request, headers: dict[str, str]) -> None:
        request_id = request.get(REQUEST_ID)
        if request_id is not None:
            headers["X-Request-Id"] = request_id

    def begun(self, request: web.Request, response: web.StreamResponse) -> None:
        request[STREAM] = response
