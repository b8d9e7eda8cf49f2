"""Replica-bound legacy sessions: a 2025 client's session over a stdio process or an
HTTP+SSE (2024-11-05) connection of its own, held by the replica that opened it.

Such a session cannot be named to the upstream by another replica (it is a process, a
connection), so `BoundUpstream` keeps it in a table of this replica's, under a random
handle the lane seals into the gateway's session id with this replica as its owner
(other replicas forward to it: `gateway.legacy_clients.forwarding`). `initialize`
starts the link (`gateway.upstream`'s stdio and HTTP+SSE sessions, with the client's
own `initialize` in place of the gateway's) and passes the client's request on; every
later message of the client is written to it as it came.

The link is one stream in each direction, so what the server says is routed here
(`BoundSession.heard`): a response to the POST stream of its request, which then ends;
a progress notification to the stream of the request that gave its token; any other
server request or notification to the newest POST stream still waiting for its
response, else to the session's GET stream, else kept (at most `BACKLOG` messages)
for the next GET stream. A new GET stream of the session replaces the open one, which
ends: the client has reconnected (the replica relaying its old one may have died). A
client's answer to a server request is written back on the same link, so it reaches
the request that waits for it.

A session ends when its client deletes it, when its link ends (the process exits,
the connection drops), after `legacy.bound_session_idle_s` without a POST, or when the
replica stops; then its id gets 404 (the client starts over). At most
`legacy.max_bound_sessions` live in one replica; past it `initialize` gets 503.

It must not apply policy (the lane does, on whichever replica the client reached).
"""

from __future__ import annotations

import asyncio
import secrets
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from gateway.aio import cancel_and_wait, spawn
from gateway.errors import CapacityExceeded, InvalidRequest, UpstreamError
from gateway.legacy_clients.upstream import SessionNotFound, UpstreamAnswer
from gateway.protocol import jsonrpc, sse
from gateway.protocol.rendering import rendered
from gateway.upstream.duplex import DuplexSession

log = structlog.get_logger("gateway.legacy")

#: Server messages kept for a GET stream while none is open (the oldest dropped first).
BACKLOG = 64
#: Server messages one client stream may hold unsent (its client not reading): past it
#: the stream ends with an error, rather than the replica's memory growing.
MAX_PENDING = 1024
#: How often idle sessions are looked for, at most (a tenth of the idle time, if less).
SWEEP_S = 5.0
_JSON = {"Content-Type": "application/json"}
_SSE = {"Content-Type": "text/event-stream"}


class BoundSessionsFull(CapacityExceeded):
    reason = "legacy.max_bound_sessions"
    default_message = "Too many stdio or HTTP+SSE sessions are open on this replica; retry later"


def not_found() -> UpstreamAnswer:
    """What a session this replica does not hold (any more) is answered: 404, start over."""
    answer = rendered(SessionNotFound("Session not found: start a new session"))
    return UpstreamAnswer(answer.status, _JSON, jsonrpc.dumps(answer.message))


class Channel:
    """One client stream of a bound session (a POST's, or the GET's), as the lane reads an
    upstream's: an `EventStream` of the server's messages, one event each."""

    __slots__ = ("_items", "_waiter", "_ended", "_closed", "on_close")

    def __init__(self, on_close: Callable[[Channel], None]) -> None:
        self._items: deque[dict[str, Any]] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._ended: UpstreamError | None | bool = False  # False: open; None: ended well
        self._closed = False
        self.on_close = on_close

    def put(self, message: dict[str, Any]) -> None:
        if not self.open:
            return  # its client has gone, or it has ended: nobody would read it
        if len(self._items) >= MAX_PENDING:
            self.end(UpstreamError("the client did not keep up with its stream"))
            return
        self._items.append(message)
        self._wake()

    def take(self) -> list[dict[str, Any]]:
        """What was put and not yet read, taken out."""
        taken = list(self._items)
        self._items.clear()
        return taken

    def end(self, error: UpstreamError | None = None) -> None:
        if self._ended is False:
            self._ended = error
            self._wake()

    @property
    def open(self) -> bool:
        return not self._closed and self._ended is False

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def __aiter__(self) -> Channel:
        return self

    async def __anext__(self) -> sse.SseEvent:
        while not self._items:
            ended = self._ended
            if isinstance(ended, UpstreamError):
                raise ended
            if ended is None:
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return sse.SseEvent(data=jsonrpc.dumps(self._items.popleft()).decode())

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self.on_close(self)


class BoundSession:
    """One client session over one link, and where the server's messages go."""

    def __init__(self, handle: str, link: DuplexSession, now: float) -> None:
        self.handle = handle
        self.link = link
        self.last_used = now
        self.waiting: dict[jsonrpc.RequestId, Channel] = {}  # by the client's request id
        self.tokens: dict[Any, Channel] = {}  # progress token -> the stream of its request
        self.listener: Channel | None = None
        self.backlog: deque[dict[str, Any]] = deque(maxlen=BACKLOG)
        self.ended: UpstreamError | None = None
        self.gone = asyncio.Event()  # set once the link has ended

    def heard(self, message: dict[str, Any]) -> None:
        """One message from the server, routed to the client stream it belongs on."""
        if not isinstance(message.get("method"), str):
            rid = message.get("id")
            known = isinstance(rid, str | int) and not isinstance(rid, bool)
            channel = self.waiting.pop(rid, None) if known else None  # type: ignore[arg-type]
            if channel is None:
                log.info("upstream_unexpected_response", upstream=self.link.name)
                return
            self._untoken(channel)
            channel.put(message)
            channel.end()  # its response: the POST's stream ends there
            return
        target = self._stream_for(message)
        if target is not None:
            target.put(message)
        else:
            self.backlog.append(message)

    def _stream_for(self, message: dict[str, Any]) -> Channel | None:
        if message.get("method") == "notifications/progress":
            params = message.get("params")
            token = params.get("progressToken") if isinstance(params, dict) else None
            if token is not None and (owner := self.tokens.get(token)) is not None:
                return owner
        for channel in reversed(self.waiting.values()):  # the newest request first
            if channel.open:
                return channel
        if self.listener is not None and self.listener.open:
            return self.listener
        return None

    def lost(self, error: UpstreamError) -> None:
        """The link ended: every stream of the session ends with it."""
        self.ended = error
        self.gone.set()
        for channel in [*self.waiting.values(), self.listener]:
            if channel is not None:
                channel.end(error)
        self.waiting.clear()
        self.tokens.clear()

    def expect(self, message: jsonrpc.Request) -> Channel:
        """The stream a request's answer goes to.

        Raises:
            InvalidRequest: a request of the same id is still waiting for its response.
        """
        if message.id in self.waiting:
            raise InvalidRequest(f"a request with id {message.id!r} is still in progress")
        channel = Channel(self._let_go)
        self.waiting[message.id] = channel
        meta = message.params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        if isinstance(token, str | int) and not isinstance(token, bool):
            self.tokens[token] = channel
        return channel

    def listen(self) -> Channel:
        """The session's GET stream, with what waited for it. One open already ends, and
        what it had not sent yet goes on the new one: the client has reconnected (the
        replica relaying its old stream may have died without a word)."""
        old, channel = self.listener, Channel(self._let_go)
        if old is not None and old.open:
            for message in old.take():
                channel.put(message)
            old.end()
        while self.backlog:
            channel.put(self.backlog.popleft())
        self.listener = channel
        return channel

    def _let_go(self, channel: Channel) -> None:
        """A client stream closed (read to its end, or cut): nothing goes to it any more."""
        if self.listener is channel:
            self.listener = None
        for rid, waiting in list(self.waiting.items()):
            if waiting is channel:
                del self.waiting[rid]
        self._untoken(channel)

    def _untoken(self, channel: Channel) -> None:
        for token, owner in list(self.tokens.items()):
            if owner is channel:
                del self.tokens[token]

    @property
    def busy(self) -> bool:
        """Whether a POST of the client's waits for its response."""
        return bool(self.waiting)


class BoundUpstream:
    """`LegacyUpstream` of a stdio or HTTP+SSE upstream: its sessions held here."""

    replica_bound = True

    def __init__(
        self,
        name: str,
        link: Callable[[], DuplexSession],
        *,
        max_sessions: int,
        idle_s: float,
        monotonic: Callable[[], float],
    ) -> None:
        self._name = name
        self.link = link
        self.max_sessions = max_sessions
        self.idle_s = idle_s
        self.monotonic = monotonic
        self.sessions: dict[str, BoundSession] = {}
        self._opening = 0
        self._sweeper: asyncio.Task[None] | None = None
        # Links being closed: a task each, so that nothing cut short (the sweep stopped,
        # the replica stopping) leaves a process or a connection behind.
        self._closing: set[asyncio.Task[None]] = set()

    @property
    def name(self) -> str:
        return self._name

    def start(self) -> None:
        self._sweeper = spawn(self._sweep(), name=f"legacy-bound-sweep-{self.name}")

    async def close(self) -> None:
        """The replica stops: every session it holds ends (its process, its connection)."""
        await cancel_and_wait(self._sweeper)
        for handle in list(self.sessions):
            self._end(handle, "replica_stopped")
        while self._closing:
            await asyncio.wait(set(self._closing))

    async def initialize(self, body: bytes, headers: Mapping[str, str]) -> UpstreamAnswer:
        if len(self.sessions) + self._opening >= self.max_sessions:
            raise BoundSessionsFull()
        message = jsonrpc.parse_message(jsonrpc.loads(body))
        assert isinstance(message, jsonrpc.Request)  # the lane sends initialize only
        link = self.link()
        session = BoundSession(secrets.token_urlsafe(18), link, self.monotonic())
        link.on_lost = session.lost
        self._opening += 1
        try:
            await link.connect(session.heard)
            reply = await self._first_answer(session, message, body)
        except BaseException:
            await link.close()
            raise
        finally:
            self._opening -= 1
        if "result" not in reply:  # refused: no session to keep
            await link.close()
            return UpstreamAnswer(200, _JSON, jsonrpc.dumps(reply))
        self.sessions[session.handle] = session
        log.info("legacy_bound_session_opened", upstream=self.name, sessions=len(self.sessions))
        return UpstreamAnswer(200, _JSON, jsonrpc.dumps(reply), session.handle)

    async def _first_answer(
        self, session: BoundSession, message: jsonrpc.Request, body: bytes
    ) -> dict[str, Any]:
        """The server's answer to the client's `initialize`, within the link's timeout.

        Raises:
            UpstreamError
        """
        channel = session.expect(message)
        try:
            await session.link.send(jsonrpc.loads(body))
            async with asyncio.timeout(session.link.timeout_s):
                async for event in channel:
                    reply = jsonrpc.loads(event.data)
                    if "method" not in reply:
                        return reply  # type: ignore[no-any-return]
        except TimeoutError as exc:
            raise UpstreamError("upstream did not answer initialize in time") from exc
        finally:
            await channel.aclose()
        raise UpstreamError("upstream ended the session before answering initialize")

    async def post(
        self, session: str | None, body: bytes, headers: Mapping[str, str]
    ) -> UpstreamAnswer:
        bound = self._live(session)
        if bound is None:
            return not_found()
        bound.last_used = self.monotonic()
        message = jsonrpc.parse_message(jsonrpc.loads(body))
        channel = bound.expect(message) if isinstance(message, jsonrpc.Request) else None
        try:
            await bound.link.send(jsonrpc.loads(body))
        except UpstreamError:
            if channel is not None:
                await channel.aclose()
            if bound.link.alive:
                raise
            self._end(bound.handle, "upstream_ended")
            return not_found()
        if channel is None:
            return UpstreamAnswer(202, {}, b"")
        return UpstreamAnswer(200, _SSE, channel)

    async def get(self, session: str | None, headers: Mapping[str, str]) -> UpstreamAnswer:
        bound = self._live(session)
        if bound is None:
            return not_found()
        return UpstreamAnswer(200, _SSE, bound.listen())

    async def delete(self, session: str | None, headers: Mapping[str, str]) -> UpstreamAnswer:
        if self._live(session) is None:
            return not_found()
        assert session is not None
        closing = self._end(session, "deleted")
        if closing is not None:
            await asyncio.shield(closing)  # ended when DELETE is answered
        return UpstreamAnswer(200, {}, b"")

    def _live(self, handle: str | None) -> BoundSession | None:
        bound = self.sessions.get(handle) if handle is not None else None
        if bound is not None and bound.ended is not None:
            self._end(bound.handle, "upstream_ended")
            return None
        return bound

    def _end(self, handle: str, why: str) -> asyncio.Task[None] | None:
        """Take a session out of the table and close its link (in a task of its own,
        awaited by `close`); None if it was not in it."""
        held = self.sessions.pop(handle, None)
        if held is None:
            return None
        held.lost(UpstreamError("the session ended"))
        log.info("legacy_bound_session_ended", upstream=self.name, how=why)
        closing = spawn(held.link.close(), name=f"legacy-bound-close-{self.name}")
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)
        return closing

    async def _sweep(self) -> None:
        """End the sessions with no POST for `idle_s` and none waiting for its response."""
        every = min(SWEEP_S, self.idle_s / 10)
        while True:
            await asyncio.sleep(every)
            now = self.monotonic()
            for handle, held in list(self.sessions.items()):
                if held.ended is not None:
                    self._end(handle, "upstream_ended")
                elif not held.busy and now - held.last_used >= self.idle_s:
                    self._end(handle, "idle")
