"""A session's GET stream that gets no stream time after time (refused, or the server
unreachable) is asked less and less often and logged once, not every second, against
a scripted loopback server; the stream held again says so once."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from gateway import logging as log_context
from gateway.clock import SystemClock
from gateway.http1 import Http1Client
from gateway.protocol.versions import UPSTREAM_VERSIONS
from gateway.upstream.http import get_stream
from gateway.upstream.http.wire import HttpWire
from tests.http1.servers import Server
from tests.upstream.test_call_stream import SSE_HEAD, chunk, new_session


@pytest.fixture
async def http() -> AsyncIterator[Http1Client]:
    client = Http1Client()
    yield client
    await client.close()


def test_the_delay_doubles_from_the_reconnection_delay_up_to_its_bound() -> None:
    wire = HttpWire.__new__(HttpWire)  # the delays need no wire
    held = get_stream.GetStream(wire, "u", SystemClock())
    assert [held._backoff(n) for n in (1, 2, 3, 4, 5, 6)] == [1, 2, 4, 8, 16, 30]
    assert held._backoff(10_000) == get_stream.MAX_BACKOFF_S
    held._retry_s = 45.0  # a server asking for more than the bound gets what it asked
    assert held._backoff(1) == 45.0 and held._backoff(3) == 45.0


async def get_server(script: list[bytes], arrived: list[float]) -> tuple[Server, asyncio.Event]:
    """A server answering each GET with the next step of `script`: a status line, `drop`
    (the connection closed unanswered), `end` (a stream ended at once, its connection
    closed: a reused one found closed is asked again at once) or `ping-end` (the same
    after a comment); once the script is over,
    a stream held open (the event set). `arrived`: when each GET came."""
    held = asyncio.Event()

    async def answer(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> object:
        arrived.append(time.monotonic())
        step = script.pop(0) if script else b"hold"
        if step == b"drop":
            return False
        if step in (b"end", b"ping-end"):
            ping = chunk(b": ping\n\n") if step == b"ping-end" else b""
            writer.write(SSE_HEAD + ping + b"0\r\n\r\n")
            await writer.drain()
            return False
        if step != b"hold":
            writer.write(b"HTTP/1.1 " + step + b"\r\ncontent-length: 0\r\n\r\n")
            return None
        writer.write(SSE_HEAD)
        await writer.drain()
        held.set()
        await asyncio.Event().wait()
        return None

    return await Server().start(answer), held


class Recoveries:
    """A log processor that counts the `upstream_get_stream_recovered` lines: the server
    holding the stream open does not mean the gateway has read its head and said so yet."""

    def __init__(self, expected: int) -> None:
        self.expected, self.seen = expected, 0
        self.all_said = asyncio.Event()
        if expected == 0:
            self.all_said.set()

    def __call__(self, _logger: object, _name: str, event: dict[str, Any]) -> dict[str, Any]:
        if event["event"] == "upstream_get_stream_recovered":
            self.seen += 1
            if self.seen >= self.expected:
                self.all_said.set()
        return event


@contextlib.asynccontextmanager
async def adopted(
    http: Http1Client,
    script: list[bytes],
    arrived: list[float] | None = None,
    *,
    recoveries: int = 0,
    opened_by: str | None = None,
) -> AsyncIterator[list[dict[str, Any]]]:
    """A session adopted against `get_server(script)`, once its stream is held and the
    gateway has logged `recoveries` recovered lines: the logs (with what is bound to the
    logging context merged in). `opened_by`: the request id bound while it is adopted."""
    server, held = await get_server(script, [] if arrived is None else arrived)
    session = new_session(http, server)
    counted = Recoveries(recoveries)
    try:
        with capture_logs(processors=[log_context.merge_bound, counted]) as logs:
            if opened_by is not None:
                log_context.bind(request_id=opened_by)
            try:
                await session.adopt("s1", UPSTREAM_VERSIONS[0])
            finally:
                if opened_by is not None:
                    log_context.unbind("request_id")
            await asyncio.wait_for(held.wait(), 5)
            await asyncio.wait_for(counted.all_said.wait(), 5)
        yield logs
    finally:
        await session.close(end=False)
        await server.stop()


@pytest.mark.parametrize("refusal", [b"503 Service Unavailable", b"409 Conflict", b"drop"])
async def test_a_stream_that_fails_time_after_time_backs_off_and_logs_once(
    http: Http1Client, monkeypatch: pytest.MonkeyPatch, refusal: bytes
) -> None:
    """Five attempts in a row get no stream (a refusal, a 409 past its quick retries, or
    a connection closed unanswered): each waits twice the one before (up to the bound),
    one line says so at info or warning, and one says when the stream is held again."""
    monkeypatch.setattr(get_stream, "RECONNECT_DELAY_S", 0.01)
    monkeypatch.setattr(get_stream, "MAX_BACKOFF_S", 0.04)
    monkeypatch.setattr(get_stream, "BUSY_RETRY_S", (0.001,) * 2)
    # A 409 is asked again soon first; a stream is held once before the drops (a session
    # whose very first GET fails is not adopted).
    lead = [b"409 Conflict"] * 2 if refusal.startswith(b"409") else []
    lead = [b"end"] if refusal == b"drop" else lead
    failures = 5
    arrived: list[float] = []
    async with adopted(http, lead + [refusal] * failures, arrived, recoveries=1) as logs:
        delays = [0.01, 0.02, 0.04, 0.04, 0.04]  # after the 1st, 2nd, ... failure in a row
        tries = arrived[len(lead) :]
        gaps = [b - a for a, b in zip(tries, tries[1:], strict=False)]
        assert len(gaps) == failures
        for gap, delay in zip(gaps, delays, strict=True):
            assert gap >= delay * 0.95, (gaps, delays)  # sleeps end no sooner than asked
        named = {"upstream_get_stream_refused", "upstream_get_stream_dropped"}
        said = [e for e in logs if e["event"] in named and e["log_level"] != "debug"]
        assert len(said) == 1, logs
        assert said[0]["retry_in_s"] == delays[0] and said[0]["upstream"] == "u"
        assert said[0]["log_level"] == ("info" if refusal == b"drop" else "warning")
        (recovered,) = [e for e in logs if e["event"] == "upstream_get_stream_recovered"]
        assert recovered["failed"] == failures and recovered["log_level"] == "info"


async def test_the_streams_lines_are_not_logged_as_the_request_that_opened_the_session(
    http: Http1Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream outlives the request that happened to open its session: its lines
    carry none of that request's log fields."""
    monkeypatch.setattr(get_stream, "RECONNECT_DELAY_S", 0.01)
    refused = [b"503 Service Unavailable"]
    async with adopted(http, refused, recoveries=1, opened_by="the-opening-request") as logs:
        lines = [e for e in logs if e["event"].startswith("upstream_get_stream_")]
        assert {e["event"] for e in lines} == {
            "upstream_get_stream_refused",
            "upstream_get_stream_recovered",
        }
        assert all("request_id" not in e for e in lines), lines


async def test_a_refusal_after_a_held_stream_starts_again_from_the_shortest_delay(
    http: Http1Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The count of failures is of failures in a row: a stream held in between resets it,
    so the next refusal is a warning again and waits the reconnection delay only."""
    monkeypatch.setattr(get_stream, "RECONNECT_DELAY_S", 0.01)
    monkeypatch.setattr(get_stream, "MAX_BACKOFF_S", 5.0)
    busy = b"503 Service Unavailable"
    async with adopted(http, [busy, busy, busy, b"end", busy], recoveries=2) as logs:
        warnings = [
            e
            for e in logs
            if e["event"] == "upstream_get_stream_refused" and e["log_level"] == "warning"
        ]
        assert [w["retry_in_s"] for w in warnings] == [0.01, 0.01], logs
        recovered = [e for e in logs if e["event"] == "upstream_get_stream_recovered"]
        assert [r["failed"] for r in recovered] == [3, 1]


async def test_streams_the_server_ends_at_once_time_after_time_are_asked_less_often(
    http: Http1Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that answers the GET with a stream it ends at once, having sent nothing,
    is not asked again every second for ever: the delays grow as for a refusal, and one
    line says so."""
    monkeypatch.setattr(get_stream, "RECONNECT_DELAY_S", 0.01)
    monkeypatch.setattr(get_stream, "MAX_BACKOFF_S", 0.04)
    arrived: list[float] = []
    async with adopted(http, [b"end"] * 4, arrived) as logs:
        gaps = [b - a for a, b in zip(arrived, arrived[1:], strict=False)]
        delays = [0.01, 0.02, 0.04, 0.04]
        assert len(gaps) == len(delays), arrived
        for gap, delay in zip(gaps, delays, strict=True):
            assert gap >= delay * 0.95, (gaps, delays)
        said = [e for e in logs if e["event"] == "upstream_get_stream_ended_at_once"]
        assert len(said) == 1 and said[0]["log_level"] == "info", logs


async def test_a_stream_that_carried_something_before_it_ended_is_asked_again_at_the_usual_pace(
    http: Http1Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(get_stream, "RECONNECT_DELAY_S", 0.01)
    async with adopted(http, [b"ping-end"] * 3) as logs:
        assert not [e for e in logs if e["event"] == "upstream_get_stream_ended_at_once"], logs


class Answer:
    def __init__(self, status: int) -> None:
        self.status = status


async def test_a_listens_session_is_told_once_when_it_holds_no_get_stream_or_loses_it() -> None:
    """A listen's session hears the server's updates only on its GET stream: none held
    when it starts watching, a refusal, a server without one or one gone all say so,
    once; a session nobody watches is told nothing."""
    wire = HttpWire.__new__(HttpWire)
    held = get_stream.GetStream(wire, "u", SystemClock())
    told: list[Exception] = []
    held.watch(told.append)  # no stream held now: at once
    assert len(told) == 1
    held.holding = True
    held.watch(told.append)
    assert len(told) == 1
    assert await held._answer(Answer(503))  # asked again later, but the listen is told
    assert len(told) == 2 and "refused (503)" in str(told[1])
    assert await held._answer(Answer(503))
    assert len(told) == 2  # once
    for status in (405, 404):
        unwatched = get_stream.GetStream(wire, "u", SystemClock())
        unwatched.holding = True
        unwatched.watch(told.append)
        assert not await unwatched._answer(Answer(status))
    assert len(told) == 4


def test_a_list_change_on_any_stream_no_call_owns_is_news_for_the_listens() -> None:
    wire = HttpWire.__new__(HttpWire)
    held = get_stream.GetStream(wire, "u", SystemClock())
    heard: list[dict[str, Any]] = []
    held.on_change = heard.append
    change = {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"}
    held.outside(change)  # a plain request's stream, or the GET stream of an idle session
    held._route(change)
    assert heard == [change, change]
