"""A replica-bound legacy session reached through another replica, over the fleet bus.

A stdio or HTTP+SSE session lives in the replica that opened it (its id names that
owner, `gateway.legacy_clients.bound`). A POST, a client's answer, a GET or a DELETE of
it that lands on another replica is checked there by the lane as any other (principal,
scopes, limits, logs) and then passed to the owner through `Remote`, a
`SessionUpstream` whose every exchange is one message in the owner's inbox (`Exchange`).
The owner (`OwnerSide.serve`) passes it to the session as it would its own client's request
and sends the answer back on a reply list of the exchange's own: its `ExchangeHead` (status,
headers, and a whole body or "a stream follows"), then a stream's events one by one
(`StreamEvent`), then its `ExchangeEnd`; or `ExchangeFailed` (the error and its status),
which the receiving replica raises as the owner's (`RelayedError`).

An owner whose heartbeat is gone has taken its sessions with it: the exchange is
answered 404 (the client starts over), and a stream being relayed ends with an error.
A stream's reader that stops reading (its client went, its replica drains) tells the
owner (`Stop`), so the session's GET stream is free again; an owner whose reader
stopped beating stops sending. A message taken up twice by the owner (`RedisBus`: a
lost reply) is served once.

Those messages are the lane's kind in the catalogue of what replicas say
(`gateway.fleet.messages`, `formats.Kind.LANE_MESSAGE`), written in the version every live
replica reads. It moves the lane's exchanges; it decides nothing about them. The bus is
`gateway.fleet.redis_bus.RedisBus`, seen through its port (`gateway.fleet.port.Bus`),
which hands the owner each message of its inbox decoded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import structlog

from gateway import clock as clocks
from gateway.aio import cancel_and_wait, spawn
from gateway.clock import Clock
from gateway.errors import RelayedError, RpcError, StoreError, UpstreamError
from gateway.fleet import messages
from gateway.fleet.port import Bus
from gateway.legacy_clients.bound import not_found
from gateway.legacy_clients.upstream import EventStream, SessionUpstream, UpstreamAnswer
from gateway.protocol import sse
from gateway.protocol.formats import Kind
from gateway.protocol.served import ServedReplies

log = structlog.get_logger("gateway.legacy")

#: How long the owner may take to send an exchange's head, beyond the upstream's timeout.
HEAD_SLACK_S = 5.0


def _encoded(bus: Bus, message: messages.LaneMessage) -> str:
    """`message` in the version of the lane's messages every live replica reads."""
    return messages.encode(message, bus.level.version(Kind.LANE_MESSAGE))


# -- the receiving side ------------------------------------------------------------------


class Remote:
    """`SessionUpstream` of the sessions another replica (`owner`) holds on one route."""

    def __init__(self, bus: Bus, owner: str, route: str, *, wait_s: float, clock: Clock) -> None:
        self.bus = bus
        self.owner = owner
        self.route = route
        self.wait_s = wait_s
        self.clock = clock

    async def post(
        self, session: str | None, body: bytes, headers: Mapping[str, str]
    ) -> UpstreamAnswer:
        return await self._exchange("POST", session, body, headers)

    async def get(self, session: str | None, headers: Mapping[str, str]) -> UpstreamAnswer:
        return await self._exchange("GET", session, b"", headers)

    async def delete(self, session: str | None, headers: Mapping[str, str]) -> UpstreamAnswer:
        return await self._exchange("DELETE", session, b"", headers)

    async def _exchange(
        self, verb: str, session: str | None, body: bytes, headers: Mapping[str, str]
    ) -> UpstreamAnswer:
        """Raises: UpstreamError, RelayedError (the owner's), StoreError."""
        bus, reply = self.bus, self.bus.new_reply_key()
        exchange = messages.Exchange(
            verb=verb,
            route=self.route,
            session=session,
            body=body.decode(),  # JSON: checked UTF-8 at the front door
            headers=dict(headers),
            reply=reply,
            reader=bus.replica_id,
        )
        payload = _encoded(bus, exchange)
        delivered = await bus.deliver(self.owner, payload)
        if not delivered and await bus.alive(self.owner):  # a Redis that just restarted
            delivered = await bus.deliver(self.owner, payload)
        if not delivered:
            log.info("legacy_owner_gone", owner=self.owner, http=verb)
            return not_found()
        events = RemoteEvents(bus, self.owner, reply)
        try:
            async with clocks.timeout(self.clock, self.wait_s + HEAD_SLACK_S):
                head = await events.next_message()
        except TimeoutError as exc:
            await events.aclose()
            raise UpstreamError("the replica holding this session did not answer in time") from exc
        except BaseException:
            await events.aclose()
            raise
        if head is None:  # the owner died before it answered: so did the session
            return not_found()
        if isinstance(head, messages.ExchangeFailed):
            events.finished()
            raise RelayedError(head.error, head.status)
        if not isinstance(head, messages.ExchangeHead):
            await events.aclose()
            raise UpstreamError(f"unexpected fleet reply {type(head).__name__}")
        if head.stream:
            return UpstreamAnswer(head.status, head.headers, events)
        events.finished()
        return UpstreamAnswer(head.status, head.headers, head.body.encode())


class RemoteEvents:
    """`EventStream` of an answer the owner sends on `reply`, event by event.

    A wait for the next event that is cancelled loses nothing (the lane holds a stream's
    head only so long, `relay.read_prelude`): the read of the reply list goes on in a task of
    its own, shielded, and the next wait takes up what it read. A blocking pop cut short
    could otherwise have taken a message off the list that nobody then reads."""

    __slots__ = ("bus", "owner", "reply", "_done", "_pending")

    def __init__(self, bus: Bus, owner: str, reply: str) -> None:
        self.bus = bus
        self.owner = owner
        self.reply = reply
        self._done = False
        self._pending: asyncio.Task[messages.Message | None] | None = None

    async def next_message(self) -> messages.Message | None:
        """The owner's next message on the reply list; None once the owner is gone.

        Raises:
            UpstreamError: the bus failed, or the message is none this release reads.
        """
        while True:
            try:
                payload = await self.bus.receive(self.reply)
                if payload is None:
                    if not await self.bus.alive(self.owner):
                        self._done = True
                        return None
                    continue
            except StoreError as exc:
                raise UpstreamError("the fleet bus failed while relaying a session") from exc
            try:
                return messages.decode(payload)
            except ValueError as exc:
                raise UpstreamError(f"a fleet reply not read here: {exc}") from exc

    def finished(self) -> None:
        """The owner has sent all it will: nothing to tell it when closed."""
        self._done = True

    def __aiter__(self) -> RemoteEvents:
        return self

    async def __anext__(self) -> sse.SseEvent:
        if self._done:
            raise StopAsyncIteration
        pending = self._pending
        if pending is None:
            pending = self._pending = spawn(self.next_message(), name="legacy-forward-read")
        try:
            message = await asyncio.shield(pending)
        except asyncio.CancelledError:
            if pending.cancelled():  # closed under it
                self._pending = None
            raise  # a wait cut short: the read goes on for the next one
        except BaseException:
            self._pending = None
            raise
        self._pending = None
        if message is None:
            raise UpstreamError("the replica holding this session stopped")
        if isinstance(message, messages.StreamEvent):
            return sse.SseEvent(message.data, message.event, message.id, message.retry)
        self._done = True
        if not isinstance(message, messages.ExchangeEnd):
            raise UpstreamError(f"unexpected fleet reply {type(message).__name__}")
        if message.error:
            raise UpstreamError(message.error)
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Stop reading; the owner, if it still sends, is told to stop."""
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        if not self._done:
            self._done = True
            stop = _encoded(self.bus, messages.Stop(reply=self.reply))
            spawn(_send_quietly(self.bus, self.owner, stop), name="legacy-forward-stop")


async def _send_quietly(bus: Bus, replica: str, payload: str) -> None:
    try:
        await bus.send(replica, payload)
    except StoreError as exc:
        log.warning("legacy_forward_stop_failed", error=str(exc))


# -- the owning side ---------------------------------------------------------------------


class OwnerSide:
    """The owner's side: the exchanges other replicas pass to the sessions held here."""

    def __init__(
        self,
        bus: Bus,
        upstreams: Mapping[str, SessionUpstream],
        *,
        check_every_s: float,
        clock: Clock,
    ) -> None:
        """`upstreams`: the replica-bound ones, by route; `check_every_s`: how often a
        stream being sent looks whether its reader's replica still beats."""
        self.bus = bus
        self.upstreams = upstreams
        self.check_every_s = check_every_s
        self.clock = clock
        self._serving: dict[str, asyncio.Task[Any]] = {}
        self._finished = ServedReplies(bus.reply_ttl_ms / 1000)  # reply keys served

    async def serve(self, message: messages.Exchange | messages.Stop) -> None:
        """One of the lane's messages another replica pushed into this replica's inbox."""
        reply = message.reply
        if isinstance(message, messages.Stop):
            task = self._serving.pop(reply, None)
            if task is not None:
                task.cancel()  # its reader went: the session's stream is free again
            else:
                self._remember(reply)  # come before its exchange: that is not served
            return
        if reply in self._serving or reply in self._finished:
            return  # the same message again (taken up after a lost reply)
        current = asyncio.current_task()
        assert current is not None
        self._serving[reply] = current
        watch = spawn(self._watch(message.reader, current), name="legacy-watch")
        try:
            await self._exchange(message)
        except asyncio.CancelledError:
            log.info("legacy_forward_stopped")
        except StoreError as exc:
            log.warning("legacy_forward_reply_failed", error=str(exc))
        finally:
            await cancel_and_wait(watch)
            self._serving.pop(reply, None)
            self._remember(reply)

    async def _exchange(self, message: messages.Exchange) -> None:
        upstream = self.upstreams.get(message.route)
        session, body, headers = message.session, message.body.encode(), message.headers
        reply = message.reply
        try:
            if upstream is None or session is None:
                answer = not_found()
            elif message.verb == "POST":
                answer = await upstream.post(session, body, headers)
            elif message.verb == "GET":
                answer = await upstream.get(session, headers)
            else:
                answer = await upstream.delete(session, headers)
        except RpcError as exc:
            failure = messages.ExchangeFailed(exc.error_object(), exc.status)
            await self.bus.reply(reply, _encoded(self.bus, failure))
            return
        if isinstance(answer.body, bytes):
            head = messages.ExchangeHead(
                answer.status, dict(answer.headers), body=answer.body.decode()
            )
            await self.bus.reply(reply, _encoded(self.bus, head))
            return
        head = messages.ExchangeHead(answer.status, dict(answer.headers), stream=True)
        await self._stream(reply, head, answer.body)

    async def _stream(self, reply: str, head: messages.ExchangeHead, events: EventStream) -> None:
        error: str | None = None
        try:
            await self.bus.reply(reply, _encoded(self.bus, head))
            try:
                async for event in events:
                    shown = messages.StreamEvent(event.data, event.event, event.id, event.retry)
                    await self.bus.reply(reply, _encoded(self.bus, shown))
            except UpstreamError as exc:
                error = str(exc)
            await self.bus.reply(reply, _encoded(self.bus, messages.ExchangeEnd(error)))
        finally:
            await events.aclose()

    async def _watch(self, reader: str, task: asyncio.Task[Any]) -> None:
        """Stop sending to a reader whose replica has stopped beating."""
        try:
            while True:
                await clocks.sleep(self.clock, self.check_every_s)
                if reader and not await self.bus.alive(reader):
                    log.info("legacy_forward_reader_gone", reader=reader)
                    task.cancel()
                    return
        except StoreError:
            return  # the bus is down: the reply pushes fail, which ends the exchange

    def _remember(self, reply: str) -> None:
        """Keep `reply` as served for as long as its reply list lives."""
        self._finished.add(reply, self.clock.monotonic())
