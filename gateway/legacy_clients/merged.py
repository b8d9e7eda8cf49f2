"""Several upstreams' standalone streams as one: the GET stream of a 2025 client's session
on an endpoint of several upstreams (`gateway.legacy_clients.endpoint`).

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

from gateway.aio import cancel_and_wait, spawn
from gateway.errors import UpstreamError
from gateway.legacy_clients.answers import AnswerView
from gateway.legacy_clients.upstream import EventStream
from gateway.protocol import sse

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
