"""Several upstreams' standalone streams as one: the GET stream of a 2025 client's session
on an endpoint of several upstreams (`merged_stream`, for `gateway.legacy_clients.endpoint`).

Each upstream's stream is read by a task of its own, and its events, as that upstream's
view shows them (`AnswerView.see`: lists filtered, ids marked with the upstream), are
handed on in the order they come, through a bounded queue (a slow client slows every
upstream's reading, as one stream's relay does). The whole ends when every stream has
ended; one that fails is told in the log and the rest go on. It must not import the web
part (`gateway.web`) nor the call core (`gateway.calls`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping

import structlog
from aiohttp import web

from gateway.aio import cancel_and_wait, spawn
from gateway.errors import GatewayError, UpstreamError
from gateway.legacy_clients.answers import AnswerView
from gateway.legacy_clients.lane import LegacyLane
from gateway.legacy_clients.passing import SESSION_HEADER, SSE_HEADERS, discard, plain, started
from gateway.legacy_clients.relay import Relay
from gateway.legacy_clients.upstream import EventStream, UpstreamAnswer, crossing_headers
from gateway.protocol import sse
from gateway.protocol.legacy_session import SessionClaims
from gateway.seams import RequestServed

log = structlog.get_logger("gateway.legacy")

#: The most events read ahead of the client, across the upstreams.
READ_AHEAD = 64


class MergedEvents:
    """Several upstreams' streams as one: each event as its upstream's view shows it
    (marked with the upstream), in the order they come; it ends when every one has
    ended (one that fails is told in the log, the rest go on)."""

    def __init__(self, streams: Mapping[str, tuple[EventStream, AnswerView]]) -> None:
        self.streams = dict(streams)
        self._queue: asyncio.Queue[sse.SseEvent | None] = asyncio.Queue(maxsize=READ_AHEAD)
        self._pumps: list[asyncio.Task[None]] = []
        self._left = len(self.streams)

    def __aiter__(self) -> AsyncIterator[sse.SseEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[sse.SseEvent]:
        if not self._pumps:
            self._pumps = [
                spawn(self._pump(name, events, view), name=f"merged-stream-{name}")
                for name, (events, view) in self.streams.items()
            ]
        while self._left:
            event = await self._queue.get()
            if event is None:
                self._left -= 1
            else:
                yield event

    async def _pump(self, upstream: str, events: EventStream, view: AnswerView) -> None:
        try:
            async for event in events:
                await self._queue.put(view.see(event))
        except UpstreamError as exc:
            log.info("endpoint_stream_failed", upstream=upstream, error=exc.message)
        await self._queue.put(None)  # ended (not when cancelled: nobody reads then)

    async def aclose(self) -> None:
        for pump in self._pumps:
            await cancel_and_wait(pump)
        for events, _ in self.streams.values():
            await events.aclose()


async def merged_stream(
    request: web.Request,
    served: RequestServed,
    headers: Mapping[str, str],
    token: str,
    first: LegacyLane,
    opened: Mapping[str, tuple[LegacyLane, SessionClaims]],
    end_at: float,
) -> web.StreamResponse:
    """The GET stream of a session on an endpoint: the standalone stream of each
    upstream's session behind it (`opened`: its lane and its session's claims), merged,
    counted once against the caller's streams, ended at `end_at` (on the lanes' clock).
    An upstream that serves no stream (405) or fails to open one is left out; with none
    left, the first refusal is passed on.

    Raises:
        UpstreamError: no upstream answered at all.
    """
    caller, clock = served.caller, first.clock
    head = {**SSE_HEADERS, SESSION_HEADER: token}
    keepalive_s = first.settings.limits.keepalive_s
    relay = Relay(request, head, first.hooks, keepalive_s=keepalive_s, clock=clock)
    crossing = crossing_headers(headers)
    with first.streams.opened(caller.principal, relay.stop):
        names = list(opened)
        answers = await asyncio.gather(
            *(
                lane.reach(member, served).get(member.session, crossing)
                for lane, member in opened.values()
            ),
            return_exceptions=True,
        )
        failed = [a for a in answers if isinstance(a, BaseException)]
        if any(not isinstance(a, GatewayError) for a in failed):
            for answer in answers:  # no stream that opened is left open
                if isinstance(answer, UpstreamAnswer):
                    await discard(answer)
            raise next(a for a in failed if not isinstance(a, GatewayError))
        streams: dict[str, tuple[EventStream, AnswerView]] = {}
        refused: UpstreamAnswer | None = None
        for name, answer in zip(names, answers, strict=True):
            if isinstance(answer, BaseException):
                log.warning("endpoint_stream_omitted", upstream=name, error=str(answer))
            elif isinstance(answer.body, bytes):
                refused = refused or answer  # it serves no stream (405), or refused it
            else:
                streams[name] = (answer.body, opened[name][0].stream_view(served))
        if not streams:
            if refused is None:
                raise UpstreamError("no upstream of the endpoint opened a stream")
            return plain(refused, token)
        events = MergedEvents(streams)
        await started(relay, events)
        await relay.standalone(
            events,
            _as_it_is,
            end_at=end_at,
            principal=caller.log_id,
            session=served.session,
            upstreams=list(streams),
        )
        return await relay.finish()


def _as_it_is(event: sse.SseEvent) -> sse.SseEvent:
    return event  # each upstream's events were looked at as they were merged
