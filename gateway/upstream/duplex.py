"""A legacy session over one duplex message stream: the base of stdio and HTTP+SSE.

Everything the server says arrives on one stream, in order; the gateway writes
messages one at a time. So, unlike Streamable HTTP, nothing ties a server request
to the call that caused it except that the call owns the session: while a call
is attached, every server request and notification goes to its inbox, and so
does the response that ends it. Responses to the gateway's own requests
(`initialize`, plain requests) resolve their waiters; a question that arrives while no
call owns the session is held for the session's next call (`gateway.upstream.held`),
anything else is answered as `gateway.protocol.outside` decides.

When the stream ends (the process exits, the connection drops), every waiter
fails, the owning call gets a `StreamEnd`, and the session is dead for good: the
pool opens another. Such a session cannot be adopted by another replica (`id` is
None), so its call is replayed or lost when its owner dies.

A session can also carry a client that speaks the protocol itself (the legacy
lane's 2025 clients, `gateway.legacy_clients.bound`): `connect` starts the transport
without the gateway's own `initialize`, and every message the server sends goes to
the tap it is given, untouched and unanswered; `send` writes the client's.

Subclasses provide `_connect`, `_write` and `_disconnect`, and feed `_deliver`
and `_lost` from their reader.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from gateway.aio import spawn
from gateway.errors import UpstreamError
from gateway.protocol import jsonrpc, listen
from gateway.protocol.capabilities import ClientCaps
from gateway.protocol.outside import answer_outside_call
from gateway.protocol.translate import UpstreamInfo, upstream_info
from gateway.protocol.versions import UPSTREAM_VERSIONS, Version
from gateway.upstream.held import HeldQuestions, is_question
from gateway.upstream.port import (
    Inbox,
    Pumping,
    SessionExpired,
    StreamCursor,
    StreamEnd,
    TaskPump,
)

log = structlog.get_logger("gateway.upstream")


class DuplexSession:
    def __init__(
        self, name: str, caps: ClientCaps, *, timeout_s: float, client_version: str
    ) -> None:
        self.name = name
        self.caps = caps
        self.timeout_s = timeout_s
        self.client_version = client_version
        self.version: Version = UPSTREAM_VERSIONS[0]
        self.info: UpstreamInfo | None = None
        self.requests = 0
        self.last_used = 0.0  # stamped by the pool, on its clock
        self.principal: str | None = None  # the caller it serves, once the pool binds it
        self.held = HeldQuestions()
        self._open = False
        self._ended: UpstreamError | None = None
        self._waiters: dict[Any, asyncio.Future[dict[str, Any]]] = {}
        self._owner: Inbox | None = None
        self._call: tuple[Any, Inbox, asyncio.Event] | None = None
        self.on_change: Callable[[dict[str, Any]], None] | None = None
        self.on_forgotten: Callable[[], None] | None = None  # never: its stream just ends
        self.on_lost: Callable[[UpstreamError], None] | None = None
        self._tap: Callable[[dict[str, Any]], None] | None = None
        self._next_id = 0
        self._id_prefix = f"{id(self):x}"[-6:]

    @property
    def id(self) -> str | None:
        return None  # the session is a process or a connection: nobody else can adopt it

    @property
    def alive(self) -> bool:
        return self._open and self._ended is None

    # -- lifecycle ---------------------------------------------------------------------

    async def open(self) -> UpstreamInfo:
        """Start the transport, initialise the session.

        Raises:
            UpstreamError: it could not start, or refused or broke `initialize`.
        """
        await self._connect()
        params = {
            "protocolVersion": self.version.value,
            "capabilities": self.caps.legacy_declaration(self.version),
            "clientInfo": {"name": "mrtr-gateway", "version": self.client_version},
        }
        reply = await self._exchange(jsonrpc.request(self.next_id(), "initialize", params))
        self.info = upstream_info(reply)
        self.version = Version(self.info.protocol_version)
        await self._write(jsonrpc.notification("notifications/initialized"))
        self._open = True
        return self.info

    async def connect(self, tap: Callable[[dict[str, Any]], None]) -> None:
        """Start the transport for a client that speaks the protocol itself: no
        `initialize` of the gateway's; each message the server sends goes to `tap` as it
        came (`on_lost` tells when the stream ends).

        Raises:
            UpstreamError: it could not start.
        """
        self._tap = tap
        await self._connect()
        self._open = True

    async def close(self, *, end: bool = True) -> None:  # never adopted: always ends
        self._open = False
        await self._disconnect()

    async def adopt(self, session_id: str, version: Version) -> None:
        """Raises: SessionExpired, always: this transport's sessions cannot be adopted."""
        raise SessionExpired("a stdio or HTTP+SSE session cannot be taken over")

    async def end_other(self, session_id: str, version: Version) -> int:
        """Raises: UpstreamError, always: no other replica can name this transport's sessions."""
        raise UpstreamError("a stdio or HTTP+SSE session cannot be ended from another replica")

    async def wait_quiet(self) -> None:
        """Until no plain request is waiting for its answer on this session."""
        while self._waiters:
            await asyncio.wait(list(self._waiters.values()))

    # -- ownership ---------------------------------------------------------------------

    def attach(self, inbox: Inbox) -> None:
        self._owner = inbox

    def detach(self, inbox: Inbox) -> None:
        if self._owner is inbox:
            self._owner = None

    def next_id(self) -> str:
        rid = f"{self._id_prefix}-{self._next_id}"
        self._next_id += 1
        return rid

    # -- exchanges ---------------------------------------------------------------------

    async def send(self, message: dict[str, Any]) -> None:
        """Write a response or notification, within `timeout_s`.

        A server that does not take it in time is hung: the session is retired.

        Raises:
            UpstreamError
        """
        if self._ended is not None:
            raise self._ended
        try:
            async with asyncio.timeout(self.timeout_s):
                await self._write(message)
        except TimeoutError as exc:
            raise self._retire(UpstreamError("the upstream stopped reading its input")) from exc

    async def start(
        self,
        message: dict[str, Any],
        inbox: Inbox,
        cursor: StreamCursor,
        headers: Mapping[str, str] | None = None,
    ) -> Pumping:
        """Write the call's request (in a task); the reader puts what follows into `inbox`."""
        return TaskPump(spawn(self.pump(message, inbox, cursor), name=f"call-pump-{self.name}"))

    async def pump(self, message: dict[str, Any], inbox: Inbox, cursor: StreamCursor) -> None:
        """Write the call's request; the reader puts what follows into `inbox`."""
        done = asyncio.Event()
        self._call = (message["id"], inbox, done)
        self.requests += 1
        try:
            await self.send(message)
            cursor.accepted = True
            await done.wait()
        except UpstreamError as exc:
            inbox.put_nowait(StreamEnd(exc))
        finally:
            self._call = None

    async def pump_resumed(self, rid: Any, inbox: Inbox, cursor: StreamCursor) -> None:
        inbox.put_nowait(StreamEnd(UpstreamError("this transport cannot resume a stream")))
        if cursor.live is not None:
            cursor.live.set()

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None,
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """A request that never asks the client anything, and its response.

        Raises:
            UpstreamError
        """
        self.requests += 1
        return await self._exchange(jsonrpc.request(self.next_id(), method, params))

    async def _exchange(self, message: dict[str, Any]) -> dict[str, Any]:
        if self._ended is not None:
            raise self._ended
        rid = message["id"]
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters[rid] = waiter
        try:
            async with asyncio.timeout(self.timeout_s):
                await self._write(message)
                return await waiter
        except TimeoutError as exc:
            # A server that does not answer within timeout_s is hung: retire the session,
            # so the pool starts another instead of every request waiting here in turn.
            self._waiters.pop(rid, None)
            waiter.cancel()  # this caller gets the error raised; nobody else awaits it
            error = UpstreamError(f"upstream did not answer {message['method']} in time")
            raise self._retire(error) from exc
        finally:
            self._waiters.pop(rid, None)

    # -- what the reader feeds ---------------------------------------------------------

    def _deliver(self, message: dict[str, Any]) -> None:
        """One message from the server, in the order it was sent."""
        if self._tap is not None:
            self._tap(message)
            return
        if not isinstance(message.get("method"), str):
            rid = message.get("id")
            if isinstance(rid, bool) or not isinstance(rid, str | int):
                log.info("upstream_unexpected_response", upstream=self.name)
                return
            waiter = self._waiters.get(rid)
            if waiter is not None and not waiter.done():
                waiter.set_result(message)
                return
            if self._call is not None and self._call[0] == rid:
                _, inbox, done = self._call
                inbox.put_nowait(message)
                done.set()
                return
            log.info("upstream_unexpected_response", upstream=self.name)
            return
        if self.on_change is not None and listen.is_list_change(message):
            self.on_change(message)  # news of the server's, whoever owns the session
            return
        if self._owner is not None:
            self._owner.put_nowait(message)
            return
        if is_question(message):
            self.held.hold(message)  # for the next call, of the session's own caller
            return
        answer = answer_outside_call(message)
        if answer is not None:
            spawn(self._answer_quietly(answer), name=f"upstream-outside-answer-{self.name}")

    def _retire(self, error: UpstreamError) -> UpstreamError:
        """The session is unusable: fail everyone waiting, stop the transport; `error` back."""
        self._lost(error)
        spawn(self._disconnect(), name=f"upstream-retire-{self.name}", detached=True)
        return error

    def _lost(self, error: UpstreamError) -> None:
        """The stream ended: fail everyone waiting; the session is dead."""
        if self._ended is not None:
            return
        self._ended = error
        for waiter in self._waiters.values():
            if not waiter.done():
                waiter.set_exception(error)
        if self._call is not None:
            _, inbox, done = self._call
            inbox.put_nowait(StreamEnd(error))
            done.set()
        if self.on_lost is not None:
            self.on_lost(error)

    async def _answer_quietly(self, message: dict[str, Any]) -> None:
        try:
            await self.send(message)
        except UpstreamError as exc:
            log.warning("upstream_answer_failed", upstream=self.name, error=str(exc))

    # -- the transport -----------------------------------------------------------------

    async def _connect(self) -> None:
        """Start the process or open the connection, and its reader. Raises: UpstreamError."""
        raise NotImplementedError

    async def _write(self, message: dict[str, Any]) -> None:
        """Raises: UpstreamError."""
        raise NotImplementedError

    async def _disconnect(self) -> None:
        raise NotImplementedError
