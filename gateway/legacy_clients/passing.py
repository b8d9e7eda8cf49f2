"""A 2025 client's POST: the upstream's answer passed on, whole or as a stream.

What the lane (`gateway.legacy_clients.lane`) answers a POST with once its request has
gone upstream: the upstream's status and body (JSON as it came, `Passing.whole`), or its
stream event by event (`Passing.streamed`, `gateway.legacy_clients.relay`), with the
gateway's session id and never the upstream's. A POST's stream whose first message,
within a keepalive's wait, is the response (most are) is sent whole, as a body, the rest
of the upstream's stream read in the background. A POST's stream whose upstream fails,
or says nothing for `limits.hold_timeout_s`, before its response and without an event
id to resume from, ends with a JSON-RPC error for the request. A call whose client the
gateway asked a question of its own first (`gateway.legacy_clients.asking`) has its
stream open already: the upstream's answer follows on it (`Passing.onto`), or the
call's refusal ends it (`Passing.refused_on`). List results leave out what the caller
may not see and go through the `listing` seam (`AnswerView`), whole and in a stream.

It must not import the web part (`gateway.web`) nor the call core (`gateway.calls`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Protocol

import structlog
from aiohttp import web

from gateway.clock import Clock
from gateway.config import LimitsConfig
from gateway.errors import GatewayError, UpstreamError, UpstreamTimeout
from gateway.legacy_clients.answers import AnswerView, Listed, outcome_of
from gateway.legacy_clients.asking import StreamAsker
from gateway.legacy_clients.relay import (
    ENDED,
    IDLE,
    Prelude,
    Relay,
    StreamHooks,
    drain,
    read_prelude,
)
from gateway.legacy_clients.trail import LegacyCall
from gateway.legacy_clients.upstream import EventStream, UpstreamAnswer
from gateway.protocol import jsonrpc, sse
from gateway.protocol.lists import MaySee
from gateway.protocol.rendering import rendered
from gateway.seams import Caller, RequestServed, Seams

log = structlog.get_logger("gateway.legacy")

SESSION_HEADER = "Mcp-Session-Id"
SSE_HEADERS: Mapping[str, str] = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache, no-transform",
    "X-Accel-Buffering": "no",
}


class Door(Protocol):
    """What the lane asks of its route's front door (`gateway.web.front_door.FrontDoor`)."""

    def check_request(self, caller: Caller, method: str, params: dict[str, Any]) -> None: ...

    def check_result(self, caller: Caller, method: str, result: dict[str, Any]) -> None: ...

    def list_filter(self, caller: Caller) -> MaySee | None: ...


class Passing:
    """How one route's lane passes an upstream's answer to a POST on."""

    def __init__(
        self,
        *,
        door: Door,
        seams: Seams,
        limits: LimitsConfig,
        hooks: StreamHooks,
        clock: Clock,
        marks: str | None = None,
    ) -> None:
        """`marks`: the upstream's name on an endpoint of several upstreams, whose
        requests to the client and event ids are marked with it (`AnswerView`)."""
        self.marks = marks
        self.door = door
        self.seams = seams
        self.limits = limits
        self.hooks = hooks
        self.clock = clock

    @property
    def _keepalive(self) -> float:
        return self.limits.keepalive_s

    def listed(self, served: RequestServed) -> Listed | None:
        """The `listing` seam for `served`'s answer, None when nothing is plugged in."""
        if not self.seams.listing:
            return None
        return functools.partial(self.seams.listed, served)

    async def answer(
        self,
        request: web.Request,
        answer: UpstreamAnswer,
        served: RequestServed,
        token: str | None,
        call: LegacyCall | None = None,
    ) -> web.StreamResponse:
        """The upstream's answer to a POST, passed on: whole, or its stream (a call's
        questions and response followed by the audit trail, `call`)."""
        served.status = answer.status
        caller = served.caller
        view = AnswerView(
            rid=served.rid,
            method=served.method,
            may_see=self.door.list_filter(caller),
            check=functools.partial(self.door.check_result, caller, served.method),
            listed=self.listed(served),
            call=call,
            marks=self.marks,
        )
        asker = served.asker
        if isinstance(asker, StreamAsker) and asker.relay.started:
            return await self._onto(asker.relay, answer, served, view)
        if isinstance(answer.body, bytes):
            return self._whole(answer, served, token, view)
        headers = dict(SSE_HEADERS)
        if token is not None:
            headers[SESSION_HEADER] = token
        return await self._streamed(request, answer.body, headers, served, view)

    def _whole(
        self, answer: UpstreamAnswer, served: RequestServed, token: str | None, view: AnswerView
    ) -> web.Response:
        """A JSON answer (or any whole body), as the caller may see it.

        Raises:
            InsufficientScope: a result the caller may not see (nothing was sent yet).
        """
        assert isinstance(answer.body, bytes)
        served.outcome = outcome_of(answer.status)
        body = answer.body
        if answer.status == 200 and served.rid is not None:
            body, served.outcome = view.whole(body)
        elif view.call is not None:  # the server refused the call's POST
            view.call.ended({"error": {"code": -32603, "message": f"HTTP {answer.status}"}})
        return plain(answer, token, body)

    async def _streamed(
        self,
        request: web.Request,
        events: EventStream,
        headers: dict[str, str],
        served: RequestServed,
        view: AnswerView,
    ) -> web.StreamResponse:
        """An SSE answer: sent whole when its response comes first, else relayed."""
        prelude = Prelude(self.clock.monotonic())
        if served.rid is not None:
            # Its head waits for the first message, as long as a keepalive would: a
            # response that comes first (most answers) is sent whole, no stream relayed.
            hold_s = self.limits.hold_timeout_s
            wait_s = min(self._keepalive, hold_s)
            prelude = await read_prelude(
                events,
                view.see,
                wait_s,
                gave_up=IDLE if wait_s == hold_s else None,
                clock=self.clock,
            )
            if view.has_answer():
                drain(events, self.clock)
                served.outcome = view.outcome
                body = b"".join(sse.encode_event(event) for event in prelude.events)
                return web.Response(status=200, body=body, headers=headers)
        relay = Relay(request, headers, self.hooks, keepalive_s=self._keepalive, clock=self.clock)
        await started(relay, events)
        try:
            await self._relay(relay, events, prelude, served, view)
        finally:
            await relay.close()
            served.outcome = view.outcome  # also when the client went first
        return await relay.finish()

    async def _relay(
        self,
        relay: Relay,
        events: EventStream,
        prelude: Prelude,
        served: RequestServed,
        view: AnswerView,
    ) -> None:
        """Relay a POST's stream (its prelude first) to its end; one that ends
        before its response, with no event id to resume from, ends with an error for it."""
        try:
            for event in prelude.events:
                await relay.write(sse.encode_event(event))
        except BaseException:
            await events.aclose()
            raise
        how = prelude.how
        if how is None:
            how = await relay.run(
                events,
                view.see,
                idle_s=self.limits.hold_timeout_s,
                done=view.has_answer,
                quiet_since=prelude.heard,
            )
        else:
            await events.aclose()
            relay.error = prelude.error
        if how == ENDED or served.rid is None or view.answered:
            return
        log.info("legacy_stream_cut", how=how, error=str(relay.error or ""))
        if not view.resumable:  # the client has no way to get the rest: it is told
            failure = relay.error or UpstreamTimeout(
                "The upstream MCP server said nothing for limits.hold_timeout_s"
            )
            reply = rendered(failure, served.rid).message
            if view.call is not None:
                view.call.ended(reply)
            await relay.write(sse.encode(jsonrpc.dumps(reply).decode()))

    async def _onto(
        self, relay: Relay, answer: UpstreamAnswer, served: RequestServed, view: AnswerView
    ) -> web.StreamResponse:
        """The upstream's answer on the stream the gateway's question opened: a JSON
        answer as one event (looked at as a stream's), a stream relayed (`_relay`)."""
        try:
            if isinstance(answer.body, bytes):
                if answer.status == 200:
                    shown = view.see(sse.SseEvent(answer.body.decode()))
                    await relay.write(sse.encode_event(shown))
                else:  # the server refused the POST: its status can no longer be sent
                    refused = UpstreamError(f"the upstream answered HTTP {answer.status}")
                    reply = rendered(refused, served.rid).message
                    if view.call is not None:
                        view.call.ended(reply)
                    await relay.write(sse.encode(jsonrpc.dumps(reply).decode()))
                served.outcome = view.outcome if view.answered else outcome_of(answer.status)
            else:
                await self._relay(relay, answer.body, Prelude(self.clock.monotonic()), served, view)
                served.outcome = view.outcome
        finally:
            await relay.close()
        served.status = 200
        return await relay.finish()

    async def refused_on(
        self, relay: Relay, refused: GatewayError, served: RequestServed
    ) -> web.StreamResponse:
        """A call refused after the gateway asked its client (or unanswered): its error
        for the request ends the stream the question opened."""
        served.status, served.outcome = 200, "refused"
        log.info("legacy_call_refused_after_asking", kind=type(refused).__name__)
        reply = rendered(refused, served.rid).message
        try:
            if reply is not None:
                event = jsonrpc.dumps({**reply, "id": served.rid}).decode()
                await relay.write(sse.encode(event))
        except ConnectionResetError:
            pass  # the client went first: nothing is owed to it
        finally:
            await relay.close()
        return await relay.finish()


def plain(answer: UpstreamAnswer, token: str | None, body: bytes | None = None) -> web.Response:
    """`answer` whole (its body, or `body` in its place), with the gateway's session id."""
    assert isinstance(answer.body, bytes)
    headers = dict(answer.headers)
    if token is not None:
        headers[SESSION_HEADER] = token
    return web.Response(
        status=answer.status, body=answer.body if body is None else body, headers=headers
    )


async def started(relay: Relay, events: EventStream) -> None:
    """Send the stream's head; if it cannot be sent (the client has gone), `events` is
    closed: nothing else would let its upstream connection go."""
    try:
        await relay.start()
    except BaseException:
        await events.aclose()
        raise


async def discard(answer: UpstreamAnswer) -> None:
    body: bytes | EventStream = answer.body
    if not isinstance(body, bytes):
        await body.aclose()
