"""A legacy session's standalone GET stream: held for the session's life, reconnected
when it drops, its messages routed to the call that owns the session.

mcp 1.x sends `sampling/createMessage` (no related id) and `roots/list` on this stream,
and drops them until it holds it, which a loaded server does late: a session serves no
call before the server has answered the stream (`listened`, at most `LISTEN_WAIT_S`).

A server holds one GET stream per session and refuses a second with 409. Most often
the first is one this gateway has just let go of and the server has not yet seen
closed (a session adopted again right after its last call here ended), so a 409 is
asked again soon, a few times (`BUSY_RETRY_S`), before it counts as a refusal. A stream
that drops is opened again (with `Last-Event-ID`) after a second, or after the server's
SSE `retry` once it gave one (at least `MIN_RETRY_S`). Attempts that get no stream,
time after time (refused, or the server unreachable), wait twice as long each time, up
to `MAX_BACKOFF_S`; the first of them is logged at its level, the rest at debug until
a stream is held again (`upstream_get_stream_recovered`). So do streams the server ends
at once, time after time, having sent nothing (`SHORT_LIVED_S`).

While one call owns the session its inbox gets the stream's messages. With none, a
question is held for the session's next call (`gateway.upstream.held`). A session several
calls share (`pool.calls_per_session`) cannot tell whose a question there is, so with
more than one owner it gets the answer `gateway.protocol.outside` decides at once (the
call that asked is waiting for it), as anything else outside every call does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog

from gateway import clock as clocks
from gateway.aio import cancel_and_wait, spawn
from gateway.clock import Backoff, Clock
from gateway.errors import UpstreamError
from gateway.http1 import Http1Response
from gateway.protocol import listen
from gateway.protocol.outside import answer_outside_call
from gateway.upstream.held import HeldQuestions, is_question
from gateway.upstream.http.wire import HttpWire
from gateway.upstream.port import Inbox, SessionExpired

log = structlog.get_logger("gateway.upstream")

#: How long a session waits for its GET stream's answer before serving calls anyway.
LISTEN_WAIT_S = 5.0
#: Between two attempts at a stream that dropped, unless the server says (SSE `retry`).
RECONNECT_DELAY_S = 1.0
#: Between the attempts at a stream the server refused as busy (409), before it counts.
BUSY_RETRY_S = (0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
#: The least delay between reconnections a server's `retry` can ask for (0 would spin).
MIN_RETRY_S = 0.05
#: The most a stream refused or unreachable time after time waits between attempts.
MAX_BACKOFF_S = 30.0
#: A stream the server ends sooner than this, having sent nothing, ended at once: one
#: that does so time after time is asked again with the same growing delay.
SHORT_LIVED_S = 1.0


class GetStream:
    def __init__(
        self, wire: HttpWire, name: str, clock: Clock, held: HeldQuestions | None = None
    ) -> None:
        self.wire = wire
        self.name = name  # the upstream's, for logs
        self.clock = clock  # every wait and reading of the stream's
        self.held = held if held is not None else HeldQuestions()  # its session's
        self.owners: list[Inbox] = []  # the calls attached to the session
        # Told of list changes instead of the owners; told once the stream is lost (a
        # listen's session: what the server says meanwhile is not heard).
        self.on_change: Callable[[dict[str, Any]], None] | None = None
        self.on_forgotten: Callable[[], None] | None = None  # told of a 404
        self.on_lost: Callable[[UpstreamError], None] | None = None
        self.holding = False  # a stream is being read now
        self._task: asyncio.Task[None] | None = None
        self._last_event_id: str | None = None
        self._retry_s = RECONNECT_DELAY_S  # the server's SSE `retry`, once it gave one
        self._answered = asyncio.Event()
        self._closed = False
        self._failed = 0  # attempts in a row that got no stream: refused, or no answer
        self._short = 0  # streams in a row the server ended at once, having sent nothing

    def start(self, first: Http1Response | None = None) -> None:
        """Hold the stream from now on; `first`: the answer to a GET already sent.
        Once the session is closed, nothing is started (a reopen that was under way)."""
        if self._closed:
            return
        self._answered.clear()
        self._task = spawn(self._keep_open(first), name=f"upstream-get-{self.name}", detached=True)

    async def listened(self) -> None:
        """Until the server has answered the stream, it stopped, or `LISTEN_WAIT_S` passed."""
        try:
            async with clocks.timeout(self.clock, LISTEN_WAIT_S):
                await self._answered.wait()
        except TimeoutError:
            log.warning(
                "upstream_get_stream_unanswered",
                upstream=self.name,
                waited_s=LISTEN_WAIT_S,
                detail="serving calls without it: what the server asks there may be lost",
            )

    async def stop(self, *, forget: bool = False) -> None:
        """Let the stream go; `forget`: a new session follows, not this one's events."""
        await cancel_and_wait(self._task)
        if forget:
            self._last_event_id = None
            self._retry_s = RECONNECT_DELAY_S
            self._failed = self._short = 0

    async def close(self) -> None:
        """Let the stream go for good: nobody waits for it, and none is started again."""
        self._closed = True
        self._answered.set()
        await self.stop()

    async def _keep_open(self, first: Http1Response | None) -> None:
        busy = 0  # 409s in a row
        try:
            while True:
                wait = self._retry_s
                try:
                    resp = first or await self.wire.open_get(self._last_event_id)
                    first = None
                    async with resp:
                        busy = busy + 1 if resp.status == 409 else 0
                        if 0 < busy <= len(BUSY_RETRY_S):  # not an answer yet: asked again
                            wait = BUSY_RETRY_S[busy - 1]
                            log.debug("upstream_get_stream_busy", upstream=self.name, tries=busy)
                        elif not await self._answer(resp):
                            return
                        elif self._failed or self._short:  # refused, or ended at once
                            wait = self._backoff(self._failed or self._short)
                except (UpstreamError, OSError, ValueError) as exc:
                    busy = 0
                    if self._last_event_id is None:  # nothing said meanwhile is replayed
                        self._lose(UpstreamError(f"the session's GET stream failed: {exc}"))
                    self._answered.set()  # no stream to wait for
                    self._failed += 1
                    wait = self._backoff(self._failed)
                    level = log.info if self._failed == 1 else log.debug
                    level(
                        "upstream_get_stream_dropped",
                        upstream=self.name,
                        error=str(exc),
                        failed=self._failed,
                        retry_in_s=wait,
                    )
                await clocks.sleep(self.clock, wait)
        finally:
            self._answered.set()  # stopped (the session closing): nobody waits for it

    async def _answer(self, resp: Http1Response) -> bool:
        """Take the server's answer to the GET; False when there will never be a stream."""
        self._answered.set()
        if resp.status == 200:
            if self._failed:
                log.info("upstream_get_stream_recovered", upstream=self.name, failed=self._failed)
                self._failed = 0
            started = self.clock.monotonic()
            self.holding = True
            try:
                carried = await self._read(resp)
            finally:
                self.holding = False
            if self._last_event_id is None:  # what comes before a new stream is not replayed
                self._lose(UpstreamError("the session's GET stream ended"))
            if carried or self.clock.monotonic() - started >= SHORT_LIVED_S:
                self._short = 0
            else:
                self._short += 1
                if self._short == 1:
                    log.info(
                        "upstream_get_stream_ended_at_once",
                        upstream=self.name,
                        detail="asked again with a growing delay while it keeps doing so",
                    )
        elif resp.status == 405:
            log.info("upstream_has_no_get_stream", upstream=self.name)
            self._lose(UpstreamError("the server holds no GET stream for its sessions"))
            return False
        elif resp.status == 404:
            self.wire.gone = True
            log.info("upstream_session_gone", upstream=self.name)
            if self.on_forgotten is not None:
                self.on_forgotten()
            self._lose(SessionExpired())
            return False
        else:
            self._failed += 1
            self._refused(resp.status)
            self._lose(UpstreamError(f"the session's GET stream was refused ({resp.status})"))
        return True

    def _backoff(self, failed: int) -> float:
        """The delay after `failed` attempts in a row without a stream: the reconnection
        delay, doubled with each further one, up to `MAX_BACKOFF_S`."""
        return Backoff(self._retry_s, max(MAX_BACKOFF_S, self._retry_s)).delay(failed)

    def _refused(self, status: int) -> None:
        """The first refusal in a row is a warning; the ones after it, until a stream is
        held again (`upstream_get_stream_recovered`), are logged at debug."""
        failed, wait = self._failed, self._backoff(self._failed)
        if failed == 1:
            log.warning(
                "upstream_get_stream_refused",
                upstream=self.name,
                status=status,
                retry_in_s=wait,
                detail=f"asked again with a growing delay, at most {MAX_BACKOFF_S:g} s",
            )
        else:
            log.debug(
                "upstream_get_stream_refused",
                upstream=self.name,
                status=status,
                failed=failed,
                retry_in_s=wait,
            )

    async def _read(self, resp: Http1Response) -> bool:
        """Route the stream's messages until it ends; a `retry` the server gives is the
        delay before each reconnection from then on (at least `MIN_RETRY_S`). True when
        it carried anything (an event, a comment)."""
        parser = self.wire.sse_parser()
        carried = False
        while (chunk := await resp.next_chunk()) is not None:
            carried = True
            for event in parser.feed(chunk):
                if event.retry is not None:
                    self._retry_s = max(event.retry / 1000, MIN_RETRY_S)
                item = self.wire.message(event)
                if item is not None:
                    self._route(item)
            self._last_event_id = parser.last_event_id or self._last_event_id
        return carried

    def watch(self, told: Callable[[UpstreamError], None] | None) -> None:
        """Tell `told` once the stream is lost: at once if none is held now."""
        self.on_lost = told
        if told is not None and not self.holding:
            self._lose(UpstreamError("the session holds no GET stream"))

    def _lose(self, error: UpstreamError) -> None:
        """Tell `on_lost`, once."""
        told, self.on_lost = self.on_lost, None
        if told is not None:
            told(error)

    def _route(self, item: dict[str, Any]) -> None:
        if self.on_change is not None and listen.is_list_change(item):
            self.on_change(item)  # news of the server's, whoever owns the session
            return
        if len(self.owners) == 1:
            self.owners[0].put_nowait(item)
            return
        if self.owners and "id" in item and "method" in item:
            log.warning(
                "upstream_question_unattributable",
                upstream=self.name,
                method=item["method"],
                calls=len(self.owners),
                detail="asked on the session's GET stream while several calls share it",
            )
            self._answer_now(item)
            return
        self.outside(item)

    def outside(self, item: dict[str, Any]) -> None:
        """A message no call owns (on this stream, or a plain request's): a question is
        held for the session's next call; other server requests are answered so nothing
        upstream hangs; `on_change` is told of a list change."""
        if self.on_change is not None and listen.is_list_change(item):
            self.on_change(item)
            return
        if is_question(item):
            self.held.hold(item)
            return
        self._answer_now(item)

    def _answer_now(self, item: dict[str, Any]) -> None:
        answer = answer_outside_call(item)
        if answer is not None:
            spawn(self._answer_quietly(answer), name="upstream-outside-answer")

    async def _answer_quietly(self, message: dict[str, Any]) -> None:
        try:
            await self.wire.send(message)
        except UpstreamError as exc:
            log.warning("upstream_answer_failed", upstream=self.name, error=str(exc))
