"""One stateful legacy session over Streamable HTTP; implements `UpstreamSession`.

The gateway is the legacy client here: `initialize` with exactly the client's
capabilities, `notifications/initialized`, then the standalone GET stream
(`gateway.upstream.http.get_stream`), whose answer it awaits before the session serves a
call.

A call's POST stream is read into the inbox its caller passes by the connection's
own callbacks (`start`, `gateway.upstream.http.stream`); the GET stream goes into the
inbox of whichever call owns the session (`attach`). A question that arrives while no
call owns it (on the GET stream, or a plain request's stream) is held for the session's
next call (`gateway.upstream.held`).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import structlog

from gateway.clock import Clock
from gateway.errors import UpstreamError
from gateway.http1 import Http1Client, Http1Response
from gateway.protocol import jsonrpc
from gateway.protocol.capabilities import ClientCaps
from gateway.protocol.translate import UpstreamInfo, upstream_info
from gateway.protocol.versions import Version
from gateway.upstream.held import HeldQuestions
from gateway.upstream.http.get_stream import GetStream
from gateway.upstream.http.stream import STOPPED, CallStream
from gateway.upstream.http.wire import Endpoint, HttpWire
from gateway.upstream.port import Inbox, Pumping, SessionExpired, StreamCursor, StreamEnd

log = structlog.get_logger("gateway.upstream")


class HttpSession:
    def __init__(
        self, http: Http1Client, endpoint: Endpoint, caps: ClientCaps, *, clock: Clock
    ) -> None:
        self.wire = HttpWire(http, endpoint)
        self.endpoint = endpoint
        self.caps = caps
        self.info: UpstreamInfo | None = None
        self.last_used = 0.0  # stamped by the pool, on its clock
        self.principal: str | None = None  # the caller it serves, once the pool binds it
        self.held = HeldQuestions()
        self.requests = 0  # requests sent on this session, for recycling
        self._open = False
        self._inflight = 0
        self._quiet: asyncio.Event | None = None  # made only when someone waits for quiet
        self._next_id = 0
        self._id_prefix = secrets.token_hex(4)
        self._renewing = asyncio.Lock()  # calls sharing the session renew it once
        self._get_stream = GetStream(self.wire, endpoint.name, clock, self.held)
        self._closing = False

    @property
    def on_change(self) -> Callable[[dict[str, Any]], None] | None:
        return self._get_stream.on_change

    @on_change.setter
    def on_change(self, told: Callable[[dict[str, Any]], None] | None) -> None:
        self._get_stream.on_change = told

    @property
    def on_forgotten(self) -> Callable[[], None] | None:
        return self._get_stream.on_forgotten

    @on_forgotten.setter
    def on_forgotten(self, told: Callable[[], None] | None) -> None:
        self._get_stream.on_forgotten = told

    @property
    def on_lost(self) -> Callable[[UpstreamError], None] | None:
        return self._get_stream.on_lost

    @on_lost.setter
    def on_lost(self, told: Callable[[UpstreamError], None] | None) -> None:
        self._get_stream.watch(told)  # at once when it holds no GET stream now

    @property
    def id(self) -> str | None:
        return self.wire.session_id

    @property
    def version(self) -> Version:
        return self.wire.version

    @property
    def alive(self) -> bool:
        return self._open and not self.wire.gone and not self._closing

    # -- lifecycle ---------------------------------------------------------------------

    async def open(self) -> UpstreamInfo:
        """Initialise the session and open its standalone GET stream.

        Raises:
            UpstreamError: the server refused, broke the protocol or is unreachable.
        """
        rid = self.next_id()
        params = {
            "protocolVersion": self.wire.version.value,
            "capabilities": self.caps.legacy_declaration(self.wire.version),
            "clientInfo": {
                "name": self.endpoint.client_name,
                "version": self.endpoint.client_version,
            },
        }
        message: dict[str, Any] | None = None
        try:
            async with asyncio.timeout(self.endpoint.timeout_s):
                request = jsonrpc.request(rid, "initialize", params)
                async for item in self._post(request, rid, StreamCursor()):
                    message = item
        except TimeoutError as exc:
            raise UpstreamError("upstream did not answer initialize in time") from exc
        self.info = upstream_info(message)
        self.wire.version = Version(self.info.protocol_version)
        if self._closing:  # closed while it renewed: end the session it just opened
            with contextlib.suppress(UpstreamError):
                await self.wire.delete()
            raise UpstreamError("the session was closed while it was opened again")
        await self.wire.send(jsonrpc.notification("notifications/initialized"))
        self._open = True
        self._get_stream.start()
        await self._get_stream.listened()  # no call before the stream is answered
        return self.info

    async def close(self, *, end: bool = True) -> None:
        """Stop the GET stream and end the session upstream (DELETE), best effort; not
        ended when another replica took it over (`end=False`)."""
        if self._closing:
            return
        self._closing = True
        await self._get_stream.close()
        if self.wire.session_id is None or not end:
            return
        try:
            await self.wire.delete()
        except UpstreamError:
            log.debug("session_delete_failed", upstream=self.endpoint.name)

    async def adopt(self, session_id: str, version: Version) -> None:
        """Take over a session another replica initialised (no handshake).

        Opens the standalone GET stream first, so a session the server has forgotten
        is known at once.

        Raises:
            SessionExpired: the server no longer knows the session.
            UpstreamError
        """
        self.wire.session_id = session_id
        self.wire.version = version
        resp = await self.wire.open_get()
        if resp.status == 404:
            resp.release()
            raise SessionExpired()
        self._open = True
        self._get_stream.start(resp)
        await self._get_stream.listened()  # a busy stream (409) is asked again
        if self.wire.gone:  # asked again, the server said it no longer knows it
            raise SessionExpired()

    async def end_other(self, session_id: str, version: Version) -> int:
        """End upstream a session another replica opened and died holding (no handshake, no
        GET stream; this object serves nothing after): the status of the server's answer.

        Raises:
            UpstreamError
        """
        self._closing = True
        self.wire.session_id = session_id
        self.wire.version = version
        return await self.wire.delete()

    async def reopen(self) -> None:
        """Initialise a new session in place of one the server no longer knows.

        Raises:
            UpstreamError
        """
        await self._get_stream.stop(forget=True)
        self.wire.forget_session()
        self._open = False
        await self.open()

    async def _renew(self, expired: str | None) -> None:
        """`reopen` the session `expired` named, unless a call sharing it did already.

        Raises:
            UpstreamError
        """
        async with self._renewing:
            if self.wire.session_id == expired:
                await self.reopen()

    async def wait_quiet(self) -> None:
        """Until no request is in flight on this session."""
        if self._inflight:
            if self._quiet is None:
                self._quiet = asyncio.Event()
            await self._quiet.wait()

    # -- ownership ---------------------------------------------------------------------

    def attach(self, inbox: Inbox) -> None:
        """Route this session's standalone-stream traffic to the owning call's inbox."""
        self._get_stream.owners.append(inbox)

    def detach(self, inbox: Inbox) -> None:
        if inbox in self._get_stream.owners:
            self._get_stream.owners.remove(inbox)

    def next_id(self) -> str:
        """A request id unique to this session and, thanks to the random prefix, beyond it:
        servers that key stored SSE events by request id never mix two sessions' calls."""
        rid = f"{self._id_prefix}-{self._next_id}"
        self._next_id += 1
        return rid

    # -- exchanges ---------------------------------------------------------------------

    async def send(self, message: dict[str, Any]) -> None:
        """POST a response or notification. Raises: UpstreamError."""
        await self.wire.send(message)

    async def start(
        self,
        message: dict[str, Any],
        inbox: Inbox,
        cursor: StreamCursor,
        headers: Mapping[str, str] | None = None,
    ) -> Pumping:
        """POST a call's request; once its answer's head is in, the body is read into
        `inbox` by the connection's callbacks (`CallStream`), with no task of its own.

        A stream that breaks before the response is resumed with GET + Last-Event-ID
        where the server gave event ids; else a `StreamEnd` is put.
        """
        self.requests += 1
        self._inflight += 1
        sent_on = self.wire.session_id
        answer: Http1Response | dict[str, Any] | None
        try:
            try:  # the wire's coroutine awaited here: a frame fewer while the server answers
                answer = await self.wire.post_call(message, cursor, headers)
            except UpstreamError as exc:
                answer = await self._post_failed(exc, sent_on, message, inbox, cursor, headers)
        except BaseException:
            self._quieter()
            raise
        if answer is None or isinstance(answer, dict):
            if answer is not None:
                inbox.put_nowait(answer)
            self._quieter()
            return STOPPED
        stream = CallStream(self.wire, answer, message["id"], inbox, cursor, self._quieter)
        answer.stream_into(stream)
        return stream

    async def _post_failed(
        self,
        error: UpstreamError,
        sent_on: str | None,
        message: dict[str, Any],
        inbox: Inbox,
        cursor: StreamCursor,
        headers: Mapping[str, str] | None,
    ) -> Http1Response | dict[str, Any] | None:
        """A call's POST on session `sent_on` failed with `error`: the answer of the one
        POST sent again, or None once a `StreamEnd` says why there is none."""
        # The server refused the POST itself for an unknown session (e.g. it restarted):
        # nothing ran, so initialise afresh and send it again, once. Once it took the
        # request, a lost session is a lost call: never re-sent.
        if isinstance(error, SessionExpired) and not cursor.accepted:
            log.info("upstream_session_expired", upstream=self.endpoint.name)
            try:
                await self._renew(sent_on)
                return await self.wire.post_call(message, cursor, headers)
            except UpstreamError as again:  # the session not renewed, or the POST refused
                error = again
        inbox.put_nowait(StreamEnd(error))
        return None

    async def pump_resumed(self, rid: Any, inbox: Inbox, cursor: StreamCursor) -> None:
        """Continue another replica's call stream (GET + Last-Event-ID) into `inbox`;
        `cursor.live` is set once the stream carries the call's new events (or it ended)."""
        try:
            async for item in self.wire.resume(rid, cursor):
                inbox.put_nowait(item)
        except UpstreamError as exc:
            inbox.put_nowait(StreamEnd(exc))
        finally:
            if cursor.live is not None:
                cursor.live.set()

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None,
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """One request and its response, for methods that never ask the client anything.

        A question arriving meanwhile is held for the session's next call; any other
        server request is answered as outside any call.

        Raises:
            UpstreamError
        """
        rid = self.next_id()
        response: dict[str, Any] | None = None
        try:
            async with asyncio.timeout(self.endpoint.timeout_s):
                # Read to the end (not just to the response) so the connection is reused.
                request = jsonrpc.request(rid, method, params)
                async for item in self._post(request, rid, StreamCursor(), headers):
                    if "method" in item:
                        self._get_stream.outside(item)
                    else:
                        response = item
        except TimeoutError as exc:
            raise UpstreamError(f"upstream did not answer {method} in time") from exc
        if response is None:
            raise UpstreamError(f"upstream closed {method} without a response")
        return response

    async def _post(
        self,
        message: dict[str, Any],
        rid: Any,
        cursor: StreamCursor,
        headers: Mapping[str, str] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """POST `message` and yield its answer's messages, counting what is in flight."""
        self.requests += 1
        self._inflight += 1
        try:
            async for item in self.wire.exchange(message, rid, cursor, headers):
                yield item
        finally:
            self._quieter()

    def _quieter(self) -> None:
        """One exchange fewer in flight (see `wait_quiet`)."""
        self._inflight -= 1
        if self._inflight == 0 and self._quiet is not None:
            self._quiet.set()
            self._quiet = None
