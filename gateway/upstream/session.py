"""One stateful session with a legacy MCP server over Streamable HTTP (2025-03-26 .. 2025-11-25).

The gateway is the legacy client here: it sends `initialize` with exactly the
client's capabilities, `notifications/initialized`, then opens the standalone
GET stream at once, because mcp 1.x sends `sampling/createMessage` (no related
id) and `roots/list` there and drops them when nobody listens.

Messages from the server reach a consumer through an inbox queue: the POST
stream of a call pumps into the inbox its caller passes, and the GET stream
pumps into the inbox of whichever call owns the session (`attach`). Server
`ping`s are answered here and never surface. A 404 on a request carrying the
session id means the server forgot the session: `SessionExpired`.

Foreign errors (aiohttp, JSON) become `UpstreamError` at this boundary.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import structlog

from gateway.aio import cancel_and_wait, spawn
from gateway.errors import UpstreamError
from gateway.protocol import jsonrpc, sse
from gateway.protocol.capabilities import ClientCaps
from gateway.protocol.translate import UpstreamInfo
from gateway.protocol.versions import UPSTREAM_VERSIONS, Version

log = structlog.get_logger("gateway.upstream")

SESSION_HEADER = "Mcp-Session-Id"
VERSION_HEADER = "MCP-Protocol-Version"
_ACCEPT = "application/json, text/event-stream"
_RECONNECT_DELAY_S = 1.0
_MAX_RESUME_ATTEMPTS = 6
_DRAIN_S = 1.0


class SessionExpired(UpstreamError):
    default_message = "The upstream server ended the session"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where and how to reach one legacy server."""

    name: str
    url: str
    headers: dict[str, str]
    timeout_s: float
    client_name: str = "mrtr-gateway"
    client_version: str = "0.1.0"


@dataclass(slots=True)
class StreamCursor:
    """Where a call's stream stands: the last event id, the server's retry hint, done or not.

    The bridge keeps one per call; its `last_id` goes into the parked record so another
    replica can take the call over with GET + Last-Event-ID.
    """

    last_id: str | None = None
    retry_ms: int | None = None
    answered: bool = False
    accepted: bool = False  # the server took the request (2xx): it may already be running


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """Put in an inbox when a call's POST stream ends without the call's response."""

    error: UpstreamError


Inbox = asyncio.Queue[dict[str, Any] | StreamEnd]
OrphanHandler = Callable[["LegacySession", dict[str, Any]], None]


class LegacySession:
    def __init__(
        self,
        http: aiohttp.ClientSession,
        endpoint: Endpoint,
        caps: ClientCaps,
        *,
        on_orphan: OrphanHandler | None = None,
    ) -> None:
        self.http = http
        self.endpoint = endpoint
        self.caps = caps
        self.id: str | None = None
        self.version: Version = UPSTREAM_VERSIONS[0]
        self.info: UpstreamInfo | None = None
        self.alive = False
        self.last_used = time.monotonic()
        self.requests = 0  # requests sent on this session, for recycling
        self._inflight = 0
        self._quiet = asyncio.Event()
        self._quiet.set()
        self._next_id = 0
        self._id_prefix = secrets.token_hex(4)
        self._owner: Inbox | None = None
        self._on_orphan = on_orphan
        self._get_task: asyncio.Task[None] | None = None
        self._get_last_event_id: str | None = None
        self._closing = False

    # -- lifecycle ---------------------------------------------------------------------

    async def open(self) -> UpstreamInfo:
        """Initialise the session and open its standalone GET stream.

        Raises:
            UpstreamError: the server refused, broke the protocol or is unreachable.
        """
        rid = self.next_id()
        params = {
            "protocolVersion": self.version.value,
            "capabilities": self.caps.legacy_declaration(self.version),
            "clientInfo": {
                "name": self.endpoint.client_name,
                "version": self.endpoint.client_version,
            },
        }
        message: dict[str, Any] | None = None
        async with asyncio.timeout(self.endpoint.timeout_s):
            async for item in self._post(
                jsonrpc.request(rid, "initialize", params), rid, StreamCursor()
            ):
                message = item
        if message is None or "result" not in message:
            error = (message or {}).get("error") or {}
            raise UpstreamError(f"initialize was refused: {error.get('message', 'no result')}")
        result = message["result"]
        negotiated = Version.parse(result.get("protocolVersion"))
        if negotiated is None or negotiated not in UPSTREAM_VERSIONS:
            raise UpstreamError(
                f"upstream negotiated protocol version {result.get('protocolVersion')!r}, "
                "which the gateway does not speak"
            )
        self.version = negotiated
        server_info = result.get("serverInfo")
        self.info = UpstreamInfo(
            protocol_version=negotiated.value,
            capabilities=result.get("capabilities")
            if isinstance(result.get("capabilities"), dict)
            else {},
            server_info=server_info if isinstance(server_info, dict) else {},
            instructions=result.get("instructions")
            if isinstance(result.get("instructions"), str)
            else None,
        )
        await self.send(jsonrpc.notification("notifications/initialized"))
        self.alive = True
        self._get_task = spawn(self._standalone_stream(), name=f"upstream-get-{self.endpoint.name}")
        return self.info

    async def close(self) -> None:
        """Stop the GET stream and end the session upstream (DELETE), best effort."""
        if self._closing:
            return
        self._closing = True
        self.alive = False
        await cancel_and_wait(self._get_task)
        if self.id is None:
            return
        try:
            async with asyncio.timeout(5):
                async with self.http.delete(self.endpoint.url, headers=self._headers()) as resp:
                    await resp.read()
        except (aiohttp.ClientError, TimeoutError, OSError):
            log.debug("session_delete_failed", upstream=self.endpoint.name)

    # -- ownership ---------------------------------------------------------------------

    def attach(self, inbox: Inbox) -> None:
        """Route this session's standalone-stream traffic to the owning call's inbox."""
        self._owner = inbox

    def detach(self) -> None:
        self._owner = None

    def next_id(self) -> str:
        """A request id unique to this session and, thanks to the random prefix, beyond it:
        servers that key stored SSE events by request id never mix two sessions' calls."""
        rid = f"{self._id_prefix}-{self._next_id}"
        self._next_id += 1
        return rid

    # -- exchanges ---------------------------------------------------------------------

    async def pump(
        self,
        message: dict[str, Any],
        inbox: Inbox,
        cursor: StreamCursor,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """POST a request and put everything the server says about it into `inbox`.

        Ends when the response to `message` has been put. A stream that breaks first
        is resumed with GET + Last-Event-ID where the server gave event ids; else a
        `StreamEnd` is put.
        """
        rid = message["id"]
        for attempt in (1, 2):
            try:
                async for item in self._post(message, rid, cursor, headers):
                    await inbox.put(item)
                return
            except SessionExpired as exc:
                # The server refused the POST itself for an unknown session (e.g. it
                # restarted): nothing ran, so initialise afresh and send it again, once.
                # Once it took the request, a lost session is a lost call: never re-sent.
                if cursor.accepted or attempt == 2:
                    await inbox.put(StreamEnd(exc))
                    return
                log.info("upstream_session_expired", upstream=self.endpoint.name)
                try:
                    await self.reopen()
                except (UpstreamError, TimeoutError) as reopen_error:
                    error = reopen_error if isinstance(reopen_error, UpstreamError) else exc
                    await inbox.put(StreamEnd(error))
                    return
            except UpstreamError as exc:
                await inbox.put(StreamEnd(exc))
                return

    async def pump_resumed(self, rid: Any, inbox: Inbox, cursor: StreamCursor) -> None:
        """Continue another replica's call stream (GET + Last-Event-ID) into `inbox`."""
        try:
            async for item in self._resume(rid, cursor):
                await inbox.put(item)
        except UpstreamError as exc:
            await inbox.put(StreamEnd(exc))

    async def adopt(self, session_id: str, version: Version) -> None:
        """Take over a session another replica initialised (no handshake).

        Opens the standalone GET stream first, so a session the server has forgotten
        is known at once.

        Raises:
            SessionExpired: the server no longer knows the session.
            UpstreamError
        """
        self.id = session_id
        self.version = version
        headers = self._headers(accept="text/event-stream")
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.endpoint.timeout_s)
        try:
            resp = await self.http.get(self.endpoint.url, headers=headers, timeout=timeout)
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            raise UpstreamError(f"upstream unreachable: {exc}") from exc
        if resp.status == 404:
            resp.release()
            raise SessionExpired()
        self.alive = True
        self._get_task = spawn(
            self._standalone_stream(resp), name=f"upstream-get-{self.endpoint.name}"
        )

    async def reopen(self) -> None:
        """Initialise a new session in place of one the server no longer knows.

        Raises:
            UpstreamError, TimeoutError
        """
        await cancel_and_wait(self._get_task)
        self.id = None
        self.alive = False
        self._get_last_event_id = None
        await self.open()

    async def send(self, message: dict[str, Any]) -> None:
        """POST a response or notification; the server answers 202.

        Raises:
            UpstreamError
        """
        try:
            async with asyncio.timeout(self.endpoint.timeout_s):
                async with self.http.post(
                    self.endpoint.url, data=jsonrpc.dumps(message), headers=self._headers()
                ) as resp:
                    self._capture_session(resp)
                    await resp.read()
                    self._check_status(resp)
                    if resp.status >= 400:
                        raise UpstreamError(
                            f"upstream answered HTTP {resp.status} to a {_kind(message)}"
                        )
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            raise UpstreamError(f"upstream unreachable: {exc}") from exc
        except TimeoutError as exc:
            raise UpstreamError("upstream timed out") from exc

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None,
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """One request and its response, for methods that never ask the client anything.

        Server requests arriving meanwhile are answered by the orphan policy.

        Raises:
            UpstreamError
        """
        rid = self.next_id()
        response: dict[str, Any] | None = None
        async with asyncio.timeout(self.endpoint.timeout_s):
            # Read to the end (not just to the response) so the connection is reused.
            request = jsonrpc.request(rid, method, params)
            async for item in self._post(request, rid, StreamCursor(), headers):
                if "method" in item:
                    self._orphan(item)
                else:
                    response = item
        if response is None:
            raise UpstreamError(f"upstream closed {method} without a response")
        return response

    # -- transport ---------------------------------------------------------------------

    def _headers(self, *, accept: str = _ACCEPT) -> dict[str, str]:
        headers = dict(self.endpoint.headers)
        headers["Accept"] = accept
        headers["Content-Type"] = "application/json"
        if self.id is not None:
            headers[SESSION_HEADER] = self.id
            headers[VERSION_HEADER] = self.version.value
        return headers

    def _capture_session(self, resp: aiohttp.ClientResponse) -> None:
        if self.id is None and SESSION_HEADER in resp.headers:
            self.id = resp.headers[SESSION_HEADER]

    async def _post(
        self,
        message: dict[str, Any],
        rid: Any,
        cursor: StreamCursor,
        headers: Mapping[str, str] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """POST `message`; yield the messages of its answer until the response to `rid`."""
        self.last_used = time.monotonic()
        self.requests += 1
        self._inflight += 1
        self._quiet.clear()
        try:
            async for item in self._exchange(message, rid, cursor, headers):
                yield item
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._quiet.set()

    async def wait_quiet(self) -> None:
        """Until no request is in flight on this session."""
        await self._quiet.wait()

    async def _exchange(
        self,
        message: dict[str, Any],
        rid: Any,
        cursor: StreamCursor,
        extra: Mapping[str, str] | None,
    ) -> AsyncIterator[dict[str, Any]]:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.endpoint.timeout_s)
        try:
            async with self.http.post(
                self.endpoint.url,
                data=jsonrpc.dumps(message),
                headers={**self._headers(), **(extra or {})},
                timeout=timeout,
            ) as resp:
                self._capture_session(resp)
                self._check_status(resp)
                cursor.accepted = resp.status < 400
                ctype = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
                if resp.status >= 400:
                    body = await resp.read()
                    raise UpstreamError(
                        f"upstream answered HTTP {resp.status}: {_error_text(body)}"
                    )
                if ctype == "application/json":
                    yield _parse_json(await resp.read())
                    return
                if ctype != "text/event-stream":
                    raise UpstreamError(f"upstream answered with Content-Type {ctype!r}")
                async for item in self._read_stream(resp, rid, cursor):
                    yield item
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            raise UpstreamError(f"upstream unreachable: {exc}") from exc
        if cursor.answered:
            return
        if cursor.last_id is None:
            raise UpstreamError("upstream closed the stream before answering")
        async for item in self._resume(rid, cursor):
            yield item

    async def _resume(self, rid: Any, cursor: StreamCursor) -> AsyncIterator[dict[str, Any]]:
        """Continue a broken POST stream with GET + Last-Event-ID (2025-11-25 polling).

        A connection that cannot be made is tried again with a growing delay (a server
        restarting, a blip), up to `_MAX_RESUME_ATTEMPTS`; a 404 means the session is gone.
        """
        delay = (cursor.retry_ms or 0) / 1000
        for attempt in range(_MAX_RESUME_ATTEMPTS):
            await asyncio.sleep(delay)
            headers = self._headers(accept="text/event-stream")
            headers["Last-Event-ID"] = cursor.last_id or ""
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.endpoint.timeout_s)
            try:
                async with self.http.get(
                    self.endpoint.url, headers=headers, timeout=timeout
                ) as resp:
                    self._check_status(resp)
                    if resp.status != 200:
                        raise UpstreamError(
                            f"upstream refused to resume the stream: HTTP {resp.status}"
                        )
                    async for item in self._read_stream(resp, rid, cursor):
                        yield item
            except (aiohttp.ClientConnectionError, OSError) as exc:
                if attempt + 1 == _MAX_RESUME_ATTEMPTS:
                    raise UpstreamError(f"upstream unreachable while resuming: {exc}") from exc
            except (aiohttp.ClientError, ValueError) as exc:
                raise UpstreamError(f"upstream failed while resuming: {exc}") from exc
            if cursor.answered:
                return
            delay = max(delay * 2, 0.2)
        raise UpstreamError("upstream stream could not be resumed")

    def _check_status(self, resp: aiohttp.ClientResponse) -> None:
        """Raises: SessionExpired on a 404 for a request that carried the session id."""
        if resp.status == 404 and self.id is not None:
            self.alive = False
            raise SessionExpired()

    async def _read_stream(
        self, resp: aiohttp.ClientResponse, rid: Any, cursor: StreamCursor
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield a stream's messages until the response to `rid`, keeping the resume cursor."""
        parser = sse.Parser()
        async for chunk in resp.content.iter_any():
            for event in parser.feed(chunk):
                if event.retry is not None:
                    cursor.retry_ms = event.retry
                for item in self._handle_event(event):
                    yield item
                    if _is_response_to(item, rid):
                        cursor.answered = True
                        await _drain(resp)
                        return
            cursor.last_id = parser.last_event_id or cursor.last_id

    def _handle_event(self, event: sse.Event) -> list[dict[str, Any]]:
        if event.event != "message" or not event.data:
            return []  # priming events and foreign event types carry nothing
        try:
            item = json.loads(event.data)
        except ValueError:
            log.warning("upstream_sent_bad_json", upstream=self.endpoint.name)
            return []
        if not isinstance(item, dict):
            return []
        if item.get("method") == "ping" and "id" in item:
            spawn(self._answer_quietly(jsonrpc.result(item["id"], {})), name="upstream-pong")
            return []
        return [item]

    async def _answer_quietly(self, message: dict[str, Any]) -> None:
        try:
            await self.send(message)
        except UpstreamError as exc:
            log.warning("upstream_answer_failed", upstream=self.endpoint.name, error=str(exc))

    async def _standalone_stream(self, first: aiohttp.ClientResponse | None = None) -> None:
        """Hold the GET stream open for the session's life; reconnect when it drops."""
        while not self._closing:
            delay = _RECONNECT_DELAY_S
            try:
                if first is None:
                    headers = self._headers(accept="text/event-stream")
                    if self._get_last_event_id is not None:
                        headers["Last-Event-ID"] = self._get_last_event_id
                    timeout = aiohttp.ClientTimeout(
                        total=None, sock_connect=self.endpoint.timeout_s
                    )
                    resp = await self.http.get(self.endpoint.url, headers=headers, timeout=timeout)
                else:
                    resp, first = first, None
                async with resp:
                    if resp.status == 405:
                        log.info("upstream_has_no_get_stream", upstream=self.endpoint.name)
                        return
                    if resp.status == 404:
                        self.alive = False
                        log.info("upstream_session_gone", upstream=self.endpoint.name)
                        return
                    if resp.status != 200:
                        log.warning(
                            "upstream_get_stream_refused",
                            upstream=self.endpoint.name,
                            status=resp.status,
                        )
                    else:
                        parser = sse.Parser()
                        async for chunk in resp.content.iter_any():
                            for event in parser.feed(chunk):
                                if event.retry is not None:
                                    delay = event.retry / 1000
                                for item in self._handle_event(event):
                                    self._route(item)
                            self._get_last_event_id = (
                                parser.last_event_id or self._get_last_event_id
                            )
            except (aiohttp.ClientError, OSError, ValueError) as exc:
                log.info("upstream_get_stream_dropped", upstream=self.endpoint.name, error=str(exc))
            if not self._closing:
                await asyncio.sleep(delay)

    def _route(self, item: dict[str, Any]) -> None:
        if self._owner is not None:
            self._owner.put_nowait(item)
        else:
            self._orphan(item)

    def _orphan(self, item: dict[str, Any]) -> None:
        """A message no call owns: answer server requests so nothing upstream hangs."""
        if self._on_orphan is not None:
            self._on_orphan(self, item)
            return
        if "id" in item and isinstance(item.get("method"), str):
            spawn(self._answer_quietly(orphan_answer(item)), name="upstream-orphan-answer")


def orphan_answer(item: dict[str, Any]) -> dict[str, Any]:
    """The answer to a server request made outside any client request.

    No client can be asked, so: elicitation is cancelled, sampling refused, roots
    not available (the conventional -32601), anything else unknown.
    """
    rid, method = item["id"], item["method"]
    if method == "elicitation/create":
        return jsonrpc.result(rid, {"action": "cancel"})
    if method == "sampling/createMessage":
        return jsonrpc.error(
            rid, {"code": -1, "message": "No client request is in flight to sample for"}
        )
    return jsonrpc.error(
        rid, {"code": -32601, "message": f"{method} is not available outside a client request"}
    )


async def _drain(resp: aiohttp.ClientResponse) -> None:
    """Read what follows the response (normally just the end of the stream), briefly.

    A stream left unread closes its keep-alive connection; the server SHOULD end the
    stream after the response, so this usually returns at once.
    """
    try:
        async with asyncio.timeout(_DRAIN_S):
            async for _chunk in resp.content.iter_any():
                pass
    except TimeoutError:
        pass


def _kind(message: dict[str, Any]) -> str:
    return "notification" if "method" in message else "response"


def _is_response_to(item: dict[str, Any], rid: Any) -> bool:
    return "method" not in item and item.get("id") == rid and ("result" in item or "error" in item)


def _parse_json(body: bytes) -> dict[str, Any]:
    try:
        item = json.loads(body)
    except ValueError as exc:
        raise UpstreamError("upstream sent a body that is not JSON") from exc
    if not isinstance(item, dict):
        raise UpstreamError("upstream sent a JSON body that is not one message")
    return item


def _error_text(body: bytes) -> str:
    try:
        item = json.loads(body)
        return str(item["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return body[:200].decode("utf-8", "replace") or "no body"
