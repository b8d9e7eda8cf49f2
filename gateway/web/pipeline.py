"""One MCP route's request pipeline, for clients of both eras.

Every request on the MCP endpoint takes the same steps, in `Pipeline.handle`:

1. **read**: the HTTP layer is checked (method, Origin and Host, Accept, media type), the
   body read whole (bounded in size and in time, `read_body`) and decoded once;
2. **classified**: by era (`gateway.protocol.era`); a 2026 client's body then climbs the
   validation ladder (`inbound.classify`), whose refusal is answered with the request's
   id (`request_rejected`);
3. **admitted**: the caller's identity, the route's scopes and the per-principal rate
   (`FrontDoor.admit`), before the body is read; a target's own scopes once it is known
   (`FrontDoor.check_request`, the lanes');
4. **dispatched** through a table to what serves it: a 2026 request to its method's
   server (`gateway.web.handlers.ModernLane.served_by`), a 2025 client's POST, GET or
   DELETE to the legacy lane (`gateway.legacy_clients.lane`), by HTTP method. On an
   endpoint of several upstreams (`gateway.web.endpoint`) a 2026 request is first
   dispatched to the upstream it is for (a call, by the name or URI it names), or to
   the endpoint as a whole (its merged lists, `server/discover`), before the `calling`
   seam and the target's scopes;
5. **ended** in one place, `Pipeline._end`: the request's `request_served` line, its
   metrics and the `ended` seam (`gateway.seams`), for both eras. An error after the
   request was read is logged once (`request_failed`, `_failed`) and answered by the
   one renderer (`gateway.protocol.rendering`), as JSON or as a stream's last event;
   one before it, by `gateway.web.front.failed` (as every route's).

Which requests get a `request_served` line (docs/operations.md, Logs): a 2026 request
that is answered (its result or a JSON-RPC error; one refused at the HTTP layer, a
scope for instance, logs `request_refused` only), and every POST of a 2025 client however
it ended (a refusal is its outcome `refused`, with its status). The two eras count into
metric families of their own (`mrtr_requests`, `mrtr_legacy_requests`), each labelled by
the methods its clients send (`Family`), and time a request on their own clock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import Any

import structlog
from aiohttp import StreamReader, web

from gateway import logging as log_context
from gateway.calls.bridge import Bridge
from gateway.config import GatewayConfig, UpstreamConfig
from gateway.errors import HttpError, MethodNotAllowed, PayloadTooLarge, RpcError
from gateway.legacy_clients.endpoint import EndpointLegacyLane
from gateway.legacy_clients.lane import LegacyLane, LegacyMethodNotAllowed
from gateway.listens import Listens
from gateway.observability import TalliedCounter, TalliedHistogram
from gateway.protocol import inbound, jsonrpc, methods
from gateway.protocol.era import Lane, lane_of
from gateway.protocol.rendering import rendered
from gateway.seams import CALLING, NO_SEAMS, Answered, Caller, RequestServed, Seams
from gateway.tasks.service import Tasks
from gateway.tracing import TRACING
from gateway.upstream.port import UpstreamPool
from gateway.web import front
from gateway.web.channel import ResponseChannel
from gateway.web.endpoint import EndpointLane, MemberLane
from gateway.web.front import closing_refusal, error_response, rejected
from gateway.web.front_door import FrontDoor
from gateway.web.handlers import ModernLane

log = structlog.get_logger("gateway.web")

#: What a 2025 client sends, as metric labels ("response": its answer to a server
#: request); any other method is counted as "other".
LEGACY_LABELS = methods.LEGACY_CLIENT | {"response"}

_NO_SPAN = nullcontext()
# The lanes as module constants: on Python 3.11 an enum member read off its class is a
# descriptor call, a few hundred instructions on every request.
_MODERN, _LEGACY = Lane.MODERN, Lane.LEGACY
#: The methods `ModernLane.call` serves, whose result it then reads (`ModernLane.called`).
_CALLS = methods.INTERRUPTIBLE

#: What serves a 2025 client's GET or DELETE (`LegacyLane.get`, `LegacyLane.delete`).
Verb = Callable[[web.Request, RequestServed, Mapping[str, str]], Awaitable[web.StreamResponse]]


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
        if content.is_eof():  # all here (nearly every request): read without a coroutine
            body = content.read_nowait()  # short of a Content-Length if the client stopped
            if len(body) > limit:  # a chunked body, whose length no header gave
                raise PayloadTooLarge(f"Request body is over the {limit}-byte limit")
            return body
        async with asyncio.timeout(timeout_s):
            return await _read(content, length, limit)
    except asyncio.IncompleteReadError as exc:  # shorter than its Content-Length
        return exc.partial
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
        return await content.readexactly(length)  # one read when it is here
    chunks, size = [], 0
    async for chunk in content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"Request body is over the {limit}-byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


class Family:
    """How one era counts and times its requests: its metric families, the methods its
    labels name (any other is "other"), and the clock its durations are read on."""

    __slots__ = ("requests", "seconds", "labels", "now")

    def __init__(
        self,
        requests: TalliedCounter,
        seconds: TalliedHistogram,
        labels: frozenset[str],
        now: Callable[[], float],
    ) -> None:
        self.requests = requests
        self.seconds = seconds
        self.labels = labels
        self.now = now


class Pipeline:
    """The request pipeline of one route (one upstream): its aiohttp handler is `handle`."""

    def __init__(
        self,
        config: GatewayConfig,
        upstream: UpstreamConfig,
        bridge: Bridge,
        pools: Mapping[str, UpstreamPool],
        front_door: FrontDoor,
        listens: Listens,
        tasks: Tasks,
        legacy: LegacyLane | EndpointLegacyLane | None = None,
        *,
        seams: Seams = NO_SEAMS,
        endpoint: EndpointLane | None = None,
    ) -> None:
        """`legacy`: the route's legacy lane, None when it is off (`legacy.enabled`);
        `tasks`: the tasks extension's service; `seams`: where capabilities hook in (the
        legacy lane is handed the same); `endpoint`: the route is an endpoint of several
        upstreams (`upstream` its first), whose 2026 requests are dispatched to one."""
        self.name = upstream.name if endpoint is None else "+".join(endpoint.members)
        self.endpoint = endpoint
        self.limits = config.limits
        self.front_door = front_door
        self.legacy = legacy
        self.seams = seams
        self.policy = inbound.OriginPolicy(
            origins=config.allowed_origins,
            hosts=config.allowed_hosts,
            loopback_only=config.loopback,
        )
        self.modern = ModernLane(
            config,
            upstream,
            bridge,
            pools,
            front_door,
            listens,
            tasks,
            legacy=legacy is not None,
            seams=seams,
        )
        metrics = bridge.metrics
        self.modern_family = Family(
            metrics.requests, metrics.request_seconds, methods.FRONT, time.monotonic
        )
        #: What serves a 2026 request, by its method (`classify` lets no other through).
        self.served_by = self.modern.served_by()
        #: What serves a 2026 request on a route of one upstream.
        self.own = MemberLane(self.modern, self.served_by, front_door)
        self.legacy_family: Family | None = None
        #: What serves a 2025 client's request, by HTTP method (a POST: `_legacy_post`).
        self.legacy_verbs: dict[str, Verb] = {}
        if legacy is not None:
            lane = legacy.metrics
            self.legacy_family = Family(
                lane.requests, lane.request_seconds, LEGACY_LABELS, legacy.clock.monotonic
            )
            self.legacy_verbs = {"GET": legacy.get, "DELETE": legacy.delete}

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Every request on the route's path, either era (the steps: the module docstring).
        aiohttp's handler itself: it names its request and answers its errors with
        `gateway.web.front` (a middleware would be a coroutine resumed at every wake)."""
        request_id = front.begin(request)
        try:
            if request.method != "POST":
                return front.named(await self._unposted(request), request_id)
            inbound.check_http("POST", request.headers, policy=self.policy)
            caller = await self.front_door.admit(request.headers.get("Authorization"))
            limits = self.limits
            body = await read_body(request, limits.max_body_bytes, limits.body_timeout_s)
            headers, duplicate = inbound.read_headers(request.headers.items())
            decoded = jsonrpc.decode(body)
            legacy = self.legacy
            if legacy is not None and lane_of("POST", headers, decoded) is _LEGACY:
                answer = await self._legacy_post(request, legacy, caller, headers, body, decoded)
                return front.named(answer, request_id)
            try:
                message = inbound.classify(decoded, headers, duplicate)
            except RpcError as exc:
                return front.named(rejected(exc, jsonrpc.id_of(decoded)), request_id)
            if isinstance(message, jsonrpc.Notification):
                inbound.check_notification(headers)
                return front.named(web.Response(status=202), request_id)
            # A 2026 client's request, served by its method's server and ended here (inline:
            # a coroutine of its own would be one more frame at every resumption).
            method = message.method
            log_context.bind(rpc_method=method, upstream=self.name)
            channel = ResponseChannel(
                request, keepalive_s=limits.keepalive_s, request_id=request_id
            )  # which names its answers, JSON or a stream
            target = inbound.logged_target(method, message.params)
            served = RequestServed(
                _MODERN,
                caller,
                time.monotonic(),
                method,
                message.id,
                target,
                200,
                "complete",
                upstream=self.name,
            )
            result = failure = None
            member = self.own
            with _NO_SPAN if not TRACING.enabled else _span(message, self.name):
                try:
                    if self.endpoint is not None:  # the upstream it is for, or the whole
                        member = await self.endpoint.dispatch(served, message)
                    if self.seams.calling and method in CALLING:
                        message = await self._entering(served, message)
                    member.door.check_request(caller, method, message.params)
                    result = await member.served_by[method](served, message, headers, channel)
                    if method in _CALLS and result is not None:  # a call's always is
                        member.lane.called(served, message, result)
                except Answered as answered:  # by a seam, as the upstream would have
                    result = member.lane.answered(message, answered.result)
                except RpcError as exc:
                    failure = exc
                    served.failed(exc)
                finally:
                    await channel.close()
            self._end(served)
            if failure is not None:
                return await _failure(channel, failure, message.id)
            if result is None:  # a listen cut short: its stream ends without a result
                return await channel.cut_short()
            return await channel.finish(jsonrpc.result(message.id, result))
        except Exception as exc:
            return front.failed(request, request_id, exc)

    async def _unposted(self, request: web.Request) -> web.StreamResponse:
        """A request that is no POST: a 2025 client's GET (its session's stream) or DELETE
        (its session's end); anything else is refused.

        Raises:
            MethodNotAllowed, LegacyMethodNotAllowed, ForbiddenOrigin, and what the front
            door and the lane raise
        """
        legacy = self.legacy
        if legacy is None:
            raise MethodNotAllowed()
        headers, _ = inbound.read_headers(request.headers.items())
        if lane_of(request.method, headers) is not _LEGACY:
            raise MethodNotAllowed()
        serve = self.legacy_verbs.get(request.method)
        if serve is None:
            raise LegacyMethodNotAllowed()
        self.policy.check(headers)
        caller = await self.front_door.admit(request.headers.get("Authorization"))
        log_context.bind(era="legacy", upstream=self.name)
        served = RequestServed(_LEGACY, caller, 0.0, method=request.method, upstream=self.name)
        return await serve(request, served, headers)  # no `request_served` line: not a POST

    async def _legacy_post(
        self,
        request: web.Request,
        legacy: LegacyLane | EndpointLegacyLane,
        caller: Caller,
        headers: Mapping[str, str],
        body: bytes,
        decoded: Any,
    ) -> web.StreamResponse:
        """A 2025 client's POST, served by the legacy lane and ended here, however it ends."""
        log_context.bind(era="legacy", upstream=self.name)
        assert self.legacy_family is not None
        served = RequestServed(_LEGACY, caller, self.legacy_family.now(), upstream=self.name)
        try:
            return await legacy.post(request, served, headers, body, decoded)
        except HttpError as exc:  # answered by `front.failed`, with its headers
            served.status, served.outcome = exc.http_status, "refused"
            raise
        except RpcError as exc:
            served.failed(exc)
            return error_response(exc, served.rid)
        finally:
            self._end(served)

    async def _entering(
        self, served: RequestServed, message: inbound.FrontRequest
    ) -> inbound.FrontRequest:
        """A call as the `calling` seam lets it in (its params may change)."""
        params = await self.seams.called(served, message.params)
        return message if params is message.params else replace(message, params=params)

    def _end(self, served: RequestServed) -> None:
        """The end of a request of either era: its `request_served` line, its metrics (by
        method, bounded to its era's, and outcome) and the `ended` seam."""
        fields: Mapping[str, Any]
        if served.lane is _MODERN:
            family: Family | None = self.modern_family
            fields = served.target  # the rest is bound: rpc_method, upstream, the call's
        else:
            family = self.legacy_family
            fields = {"rpc_method": served.method, "session": served.session, **served.target}
        assert family is not None
        elapsed = family.now() - served.started
        label = served.method if served.method in family.labels else "other"
        family.requests.labels(label, served.outcome).inc()
        family.seconds.labels(label).observe(elapsed)
        log.info(
            "request_served",
            status=served.status,
            outcome=served.outcome,
            duration_ms=round(elapsed * 1000, 1),
            principal=served.caller.log_id,
            **fields,
        )
        if self.seams.ended:
            self.seams.end(served)


async def _failure(
    channel: ResponseChannel, failure: RpcError, rid: jsonrpc.RequestId
) -> web.StreamResponse:
    """A 2026 request's error, rendered, on its channel: as JSON with its status and
    headers, or, once the channel has gone to SSE (200), as the stream's last event."""
    answer = rendered(failure, rid)
    assert answer.message is not None  # a JSON-RPC error always has its message
    response = await channel.finish(answer.message, answer.status)
    if answer.headers and not response.prepared:
        response.headers.update(answer.headers)
    return response


def _span(message: inbound.FrontRequest, upstream: str) -> AbstractContextManager[object]:
    """The server span of a 2026 request (tracing on)."""
    return TRACING.span(
        f"mcp {message.method}",
        parent=message.trace,
        kind="server",
        attributes={"mcp.method": message.method, "mcp.upstream": upstream},
    )
