"""A call's POST stream, read by its connection's callbacks into the call's inbox.

No task reads a Streamable HTTP call's answer: the upstream client hands each piece
of the SSE body to `CallStream` as it arrives (`Http1Response.stream_into`), which puts
the messages into the call's inbox up to the call's response, then lets the rest of
the stream run out (for at most `DRAIN_S`) so its connection is reused. A stream the
server ends before the response is resumed with GET + Last-Event-ID in a task of its
own (the rare case); one that breaks, or ends without an event id to resume from,
ends the call's stream with a `StreamEnd`. A large event (held by the stream's parser)
is read in steps by a task of its own (`HttpWire.read_large`), the loop free between
them; what arrives meanwhile waits in the parser, and the stream's end for the task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from gateway.aio import cancel_and_wait, spawn
from gateway.errors import UpstreamError
from gateway.http1 import Http1Response
from gateway.upstream.http.wire import HttpWire
from gateway.upstream.port import Inbox, StreamCursor, StreamEnd
from gateway.upstream.transport import failure

#: How long the rest of a stream may take to end after the call's response.
DRAIN_S = 1.0


class CallStream:
    """A `BodySink` for the client, and the `Pumping` handle the call core stops."""

    __slots__ = (
        "_wire",
        "_resp",
        "_rid",
        "_inbox",
        "_cursor",
        "_parser",
        "_done",
        "_drain",
        "_resume",
        "_reading",
        "_ended",
    )

    def __init__(
        self,
        wire: HttpWire,
        resp: Http1Response,
        rid: Any,
        inbox: Inbox,
        cursor: StreamCursor,
        done: Callable[[], None],
    ) -> None:
        self._wire = wire
        self._resp = resp
        self._rid = rid
        self._inbox = inbox
        self._cursor = cursor
        self._parser = wire.sse_parser(large_raw=True)
        self._done: Callable[[], None] | None = done  # told once, when the stream is over
        self._drain: asyncio.TimerHandle | None = None
        self._resume: asyncio.Task[None] | None = None
        # A large event being read, and the stream's end if it came meanwhile (its error).
        self._reading: asyncio.Task[None] | None = None
        self._ended: tuple[BaseException | None] | None = None

    # -- BodySink: called by the connection as the body arrives --------------------------

    def data(self, chunk: bytes) -> None:
        cursor = self._cursor
        if cursor.answered:
            return  # what follows the response: read only so the connection is reused
        for item in self._wire.call_messages(self._parser, chunk, self._rid, cursor):
            self._inbox.put_nowait(item)
        if cursor.answered:
            self._drain = asyncio.get_running_loop().call_later(DRAIN_S, self._stop_draining)
        elif self._parser.held is not None and self._reading is None:
            # A large event: read in steps, what follows it waiting in the parser.
            self._reading = spawn(self._read(), name="upstream-large-message")

    def end(self, error: BaseException | None) -> None:
        if self._reading is not None:
            self._ended = (error,)  # once the large event is read
            return
        if self._drain is not None:
            self._drain.cancel()
            self._drain = None
        if self._cursor.answered:
            self._finish()
        elif error is not None:
            self._fail(failure("posting a request", error))
        elif self._cursor.last_id is None:
            self._fail(UpstreamError("upstream closed the stream before answering"))
        else:
            self._resume = spawn(self._resumed(), name="upstream-call-resume")

    # -- Pumping -------------------------------------------------------------------------

    async def stop(self) -> None:
        self._resp.release()  # closed unless it had ended: the server sees the call go
        if self._drain is not None:
            self._drain.cancel()
            self._drain = None
        await cancel_and_wait(self._resume)
        await cancel_and_wait(self._reading)
        self._finish()

    def done(self) -> bool:
        return self._done is None

    # -- the rest ------------------------------------------------------------------------

    async def _read(self) -> None:
        """The large event the parser holds read in steps, then what came after it."""
        wire, parser, cursor = self._wire, self._parser, self._cursor
        try:
            while parser.held is not None and not cursor.answered:
                for item in await wire.read_large(parser, self._rid, cursor):
                    self._inbox.put_nowait(item)
        except ValueError as broken:  # what came after it broke the stream's bounds
            self._reading = None
            self._resp.release()
            self._fail(failure("posting a request", broken))
            return
        self._reading = None
        ended, self._ended = self._ended, None
        if ended is not None:
            self.end(ended[0])
        elif cursor.answered:
            self._drain = asyncio.get_running_loop().call_later(DRAIN_S, self._stop_draining)

    def _stop_draining(self) -> None:
        """The stream went on after the response: give its connection up."""
        self._drain = None
        self._resp.release()
        self._finish()

    async def _resumed(self) -> None:
        try:
            async for item in self._wire.resume(self._rid, self._cursor):
                self._inbox.put_nowait(item)
            if not self._cursor.answered:
                self._inbox.put_nowait(StreamEnd(UpstreamError("upstream stream ended early")))
        except UpstreamError as exc:
            self._inbox.put_nowait(StreamEnd(exc))
        finally:
            self._finish()

    def _fail(self, error: UpstreamError) -> None:
        self._inbox.put_nowait(StreamEnd(error))
        self._finish()

    def _finish(self) -> None:
        done, self._done = self._done, None
        if done is not None:
            done()


class Stopped:
    """`Pumping` for a stream that is over already (a JSON answer, a refusal)."""

    __slots__ = ()

    async def stop(self) -> None:
        return None

    def done(self) -> bool:
        return True


STOPPED = Stopped()
