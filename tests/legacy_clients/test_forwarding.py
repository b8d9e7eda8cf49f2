"""A replica-bound session reached through another replica, as transcripts over the
in-memory bus (`tests.fakes.fleet`) on a manual clock: the owner's answer comes back as
it gave it (a whole body, a stream event by event, its failure as its own); a reader
that stops reading stops the owner's stream; either side's death ends the exchange
(the owner's: 404, or an error inside a stream); a message taken up twice is served
once."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import pytest

from gateway.aio import spawn
from gateway.errors import InvalidRequest, RelayedError, RpcError, UpstreamError
from gateway.fleet import messages
from gateway.legacy_clients.bound import Channel
from gateway.legacy_clients.forwarding import OwnerSide, Remote
from gateway.legacy_clients.upstream import UpstreamAnswer
from tests.fakes.clock import ManualClock
from tests.fakes.fleet import Network

SSE = {"Content-Type": "text/event-stream"}


class Scripted:
    """A `SessionUpstream` on the owner answering each exchange with the next of
    `answers` (an `UpstreamAnswer`, or an error to raise), noting what it was given."""

    def __init__(self, *answers: UpstreamAnswer | RpcError) -> None:
        self.answers = list(answers)
        self.seen: list[tuple[str, str | None, bytes, dict[str, str]]] = []

    def _next(self, verb: str, session: str | None, body: bytes, headers: Any) -> UpstreamAnswer:
        self.seen.append((verb, session, body, dict(headers)))
        answer = self.answers.pop(0)
        if isinstance(answer, RpcError):
            raise answer
        return answer

    async def post(
        self, session: str | None, body: bytes, headers: Mapping[str, str]
    ) -> UpstreamAnswer:
        return self._next("POST", session, body, headers)

    async def get(self, session: str | None, headers: Mapping[str, str]) -> UpstreamAnswer:
        return self._next("GET", session, b"", headers)

    async def delete(self, session: str | None, headers: Mapping[str, str]) -> UpstreamAnswer:
        return self._next("DELETE", session, b"", headers)


class Pair:
    """Two replicas: `owner` holds the session (its `OwnerSide` serves `upstream`), `reader`
    got the client's request and reaches the owner through `remote`."""

    def __init__(self, upstream: Scripted) -> None:
        self.clock = ManualClock()
        self.network = Network(self.clock)
        self.upstream = upstream
        self.owner_side = OwnerSide(
            self.network.bus("owner"), {"local": upstream}, check_every_s=2.0, clock=self.clock
        )
        self.network.join("owner", self.owner_side.serve)
        self.network.join("reader", self._unexpected)
        self.remote = Remote(
            self.network.bus("reader"), "owner", "local", wait_s=30.0, clock=self.clock
        )

    async def _unexpected(self, message: messages.Message) -> None:
        raise AssertionError(f"the reader was sent {message}")


async def _next_event(events: Any) -> Any:
    return await anext(events)


def closing_channel() -> tuple[Channel, asyncio.Event]:
    closed = asyncio.Event()
    return Channel(lambda channel: closed.set()), closed


async def test_a_whole_answer_comes_back_as_the_owner_gave_it() -> None:
    pair = Pair(Scripted(UpstreamAnswer(202, {"Retry-After": "1"}, b"")))
    body = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
    answer = await pair.remote.post("h1", body, {"MCP-Protocol-Version": "2025-11-25"})
    assert (answer.status, dict(answer.headers), answer.body) == (202, {"Retry-After": "1"}, b"")
    assert pair.upstream.seen == [("POST", "h1", body, {"MCP-Protocol-Version": "2025-11-25"})]


async def test_a_stream_comes_back_event_by_event_and_ends_with_the_owners() -> None:
    channel, closed = closing_channel()
    pair = Pair(Scripted(UpstreamAnswer(200, SSE, channel)))
    answer = await pair.remote.get("h1", {})
    assert answer.status == 200 and dict(answer.headers) == SSE
    assert not isinstance(answer.body, bytes)
    channel.put({"jsonrpc": "2.0", "id": "s1", "method": "roots/list"})
    channel.put({"jsonrpc": "2.0", "method": "notifications/message", "params": {}})
    channel.end()
    seen = [json.loads(event.data)["method"] async for event in answer.body]
    assert seen == ["roots/list", "notifications/message"]
    async with asyncio.timeout(5):
        await closed.wait()  # the owner let go of its stream


class InFlight:
    """The reader's bus whose pop, once it has taken a reply off the list, waits for
    `arrived` before returning it: a Redis BLPOP whose answer is on the wire. Cut short
    there, the reply is off the list and only the read in flight still has it."""

    def __init__(self, bus: Any) -> None:
        self.bus = bus
        self.taken = asyncio.Event()
        self.arrived = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.bus, name)

    async def receive(self, key: str) -> str | None:
        payload = await self.bus.receive(key)
        if payload is not None and isinstance(messages.decode(payload), messages.StreamEvent):
            self.taken.set()
            await self.arrived.wait()
        return payload


async def test_a_wait_for_the_next_event_cut_short_loses_no_event() -> None:
    # The lane holds a stream's head for its first message only so long, then relays the
    # stream as it comes: an event whose read was under way when the wait was cut short is
    # the next one read.
    channel, _ = closing_channel()
    pair = Pair(Scripted(UpstreamAnswer(200, SSE, channel)))
    in_flight = InFlight(pair.network.bus("reader"))
    remote = Remote(in_flight, "owner", "local", wait_s=30.0, clock=pair.clock)  # type: ignore[arg-type]
    answer = await remote.get("h1", {})
    assert not isinstance(answer.body, bytes)
    events = aiter(answer.body)
    waiting = spawn(_next_event(events), name="test-read")
    channel.put({"jsonrpc": "2.0", "id": "s1", "method": "roots/list"})
    async with asyncio.timeout(5):
        await in_flight.taken.wait()  # off the reply list, on its way to the reader
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    in_flight.arrived.set()
    async with asyncio.timeout(5):
        event = await _next_event(events)
    assert json.loads(event.data)["method"] == "roots/list"
    await answer.body.aclose()


async def test_a_reader_that_stops_reading_stops_the_owners_stream() -> None:
    channel, closed = closing_channel()
    pair = Pair(Scripted(UpstreamAnswer(200, SSE, channel)))
    answer = await pair.remote.get("h1", {})
    assert not isinstance(answer.body, bytes)
    await answer.body.aclose()  # its client went, or its replica drains
    async with asyncio.timeout(5):
        await closed.wait()
    assert not channel.open


async def test_the_owners_failure_is_raised_as_its_own() -> None:
    pair = Pair(Scripted(InvalidRequest("a request with id 1 is still in progress")))
    with pytest.raises(RelayedError) as raised:
        await pair.remote.post("h1", b'{"jsonrpc":"2.0","id":1,"method":"ping"}', {})
    assert raised.value.status == 400 and raised.value.error_object()["code"] == -32600


async def test_an_owner_gone_is_a_404_at_once_and_mid_stream_an_error() -> None:
    channel, _ = closing_channel()
    pair = Pair(Scripted(UpstreamAnswer(200, SSE, channel)))
    answer = await pair.remote.get("h1", {})
    assert not isinstance(answer.body, bytes)
    pair.network.kill("owner")
    reading = spawn(_next_event(answer.body), name="test-read")
    with pytest.raises(UpstreamError, match="stopped"):
        await pair.clock.run_until_done(reading, step=1.0, limit=5.0)
    gone = await pair.remote.post("h1", b'{"jsonrpc":"2.0","id":2,"method":"ping"}', {})
    assert gone.status == 404  # nothing sent: the session died with its owner
    assert len(pair.upstream.seen) == 1


async def test_the_owner_stops_sending_to_a_reader_whose_replica_died() -> None:
    channel, closed = closing_channel()
    pair = Pair(Scripted(UpstreamAnswer(200, SSE, channel)))
    answer = await pair.remote.get("h1", {})
    assert not isinstance(answer.body, bytes)
    pair.network.kill("reader")
    waiting = spawn(closed.wait(), name="test-wait")
    await pair.clock.run_until_done(waiting, step=1.0, limit=5.0)
    assert not channel.open


def exchange(reply: str) -> messages.Exchange:
    """An exchange as a reader sends it: a notification posted to session h1."""
    return messages.Exchange(
        verb="POST",
        route="local",
        session="h1",
        body='{"jsonrpc":"2.0","method":"notifications/initialized"}',
        headers={},
        reply=reply,
        reader="reader",
    )


async def test_a_message_taken_up_twice_is_served_once() -> None:
    pair = Pair(Scripted(UpstreamAnswer(202, {}, b""), UpstreamAnswer(202, {}, b"")))
    message = exchange("reply:reader:once")
    await pair.owner_side.serve(message)
    await pair.owner_side.serve(message)
    assert len(pair.upstream.seen) == 1
    assert pair.network.replies["reply:reader:once"].qsize() == 1


async def test_an_exchange_whose_stop_came_first_is_not_served() -> None:
    pair = Pair(Scripted(UpstreamAnswer(202, {}, b"")))
    await pair.owner_side.serve(messages.Stop("reply:reader:late"))
    await pair.owner_side.serve(exchange("reply:reader:late"))
    assert pair.upstream.seen == []


@pytest.mark.parametrize(
    "head",
    [
        '{"op":"legacy_head","status":200,"headers":{},"v":2}',  # a newer release's version
        '{"op":"legacy_head","status":"200","headers":{},"v":1}',  # a field of another type
        '{"op":"outcome","result":{},"v":2}',  # a message of another exchange's kind
    ],
)
async def test_a_reply_the_reader_does_not_read_fails_the_exchange_whole(head: str) -> None:
    """The reader decodes each reply once: one it does not read (or not where it stands)
    is an upstream error, never half-read, and the owner is told to stop sending."""
    clock = ManualClock()
    network = Network(clock)
    owner = network.bus("owner")
    told: asyncio.Queue[messages.Message] = asyncio.Queue()

    async def answering(message: messages.Message) -> None:
        told.put_nowait(message)
        if isinstance(message, messages.Exchange):
            await owner.reply(message.reply, head)

    network.join("owner", answering)
    remote = Remote(network.bus("reader"), "owner", "local", wait_s=30.0, clock=clock)
    with pytest.raises(UpstreamError):
        await remote.post("h1", b'{"jsonrpc":"2.0","id":1,"method":"ping"}', {})
    async with asyncio.timeout(5):
        exchange = await told.get()
        assert isinstance(exchange, messages.Exchange) and exchange.reader == "reader"
        assert await told.get() == messages.Stop(exchange.reply)  # it may still be sending
