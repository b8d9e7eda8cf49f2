"""The seam between the legacy lane and an upstream, and its Streamable HTTP implementation.

`LegacyUpstream` is what the lane asks of an upstream for one client session: open it
(`initialize`, the client's own request: its capabilities, client info and version),
then pass each POST, GET and DELETE of the session on, as the client's bytes and the
headers that cross (`crossing_headers`). Each returns an `UpstreamAnswer`: the status, the
headers the client may see, and the body, whole (`bytes`) or as the upstream's SSE
events one by one (`EventStream` of `gateway.protocol.sse.SseEvent`), which the lane relays
and closes. `initialize` also returns the upstream's session handle, which the lane
seals into the gateway's session id: for Streamable HTTP the upstream's own
`Mcp-Session-Id` (or None, for an upstream that gives none). An upstream whose sessions
live in one replica (`replica_bound`: stdio processes, 2024-11-05 HTTP+SSE streams)
has the lane seal this replica as the session's owner.

`HttpPassThrough` speaks to a Streamable HTTP upstream through the gateway's own client
(`gateway.http1`): the upstream's configured headers and the gateway's own OAuth token,
never the client's `Authorization` nor anything the client sent but what crosses.
Bounds: connecting and the head of an `initialize`, GET or DELETE answer take at most
the upstream's `timeout_s`; a POST's head (with a whole JSON answer, the tool's result)
at most `wait_s` (`limits.hold_timeout_s`); a body read whole, and each event of a
stream, at most `max_message_bytes` (`limits.max_upstream_message_bytes`). A GET the
upstream refuses as busy (409: a stream of the same session still open upstream, one
whose replica has just died) is asked again a few times (`BUSY_RETRY_S`) before the
409 is passed on. Redirects are never followed; the upstream refusing the gateway's
credentials, or failing (5xx but 503), is an `UpstreamError`, never passed on.

`reply_of` reads the response to a request out of an answer, whole or from its stream
(what the lane of an endpoint of several upstreams needs of an `initialize`).

Nothing here knows the client, its identity or its session id; it must not log bodies.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from gateway import clock as clocks
from gateway.clock import Clock
from gateway.errors import HttpError, UpstreamError
from gateway.http1 import Http1Client, Http1Response
from gateway.protocol import jsonrpc, sse
from gateway.protocol.inbound import trace_context
from gateway.upstream.http.wire import Endpoint
from gateway.upstream.transport import error_text, mapped_errors

log = structlog.get_logger("gateway.legacy")


class EventStream(Protocol):
    """An upstream's SSE answer, event by event; closed by whoever reads it. A wait for
    the next event that is cancelled loses none: the next wait returns it."""

    def __aiter__(self) -> AsyncIterator[sse.SseEvent]: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class UpstreamAnswer:
    """What an upstream answered one exchange."""

    status: int
    headers: Mapping[str, str]  # what the client may see (Content-Type, Allow, Retry-After)
    body: bytes | EventStream
    session: str | None = None  # `initialize` only: the upstream's session handle


class SessionNotFound(HttpError):
    """A session id that does not open here, or whose session its upstream does not hold
    (any more): the client must start a new session."""

    http_status = 404
    message = "Session not found: start a new session with initialize"


class SessionUpstream(Protocol):
    """Where an open session's requests go: its upstream, or the replica holding the
    session (`gateway.legacy_clients.forwarding.Remote`). Every method raises
    `UpstreamError` when the upstream cannot be reached, breaks the protocol or takes
    longer than its bounds."""

    async def post(
        self, session: str | None, body: bytes, headers: Mapping[str, str]
    ) -> UpstreamAnswer:
        """Pass a request, notification or response of the client's session on."""
        ...

    async def get(self, session: str | None, headers: Mapping[str, str]) -> UpstreamAnswer:
        """Open the session's standalone stream (or resume one: `last-event-id`)."""
        ...

    async def delete(self, session: str | None, headers: Mapping[str, str]) -> UpstreamAnswer:
        """End the session."""
        ...


class LegacyUpstream(SessionUpstream, Protocol):
    """One upstream as the legacy lane uses it: sessions opened, then passed on."""

    @property
    def name(self) -> str: ...

    @property
    def replica_bound(self) -> bool:
        """Whether a session lives in the replica that opened it (its owner)."""
        ...

    async def initialize(self, body: bytes, headers: Mapping[str, str]) -> UpstreamAnswer:
        """Open a session with the client's `initialize` request (`body`)."""
        ...


#: The client headers that cross to the upstream, by lower-case name, with the name they
#: are sent under. The trace context crosses too (`crossing_headers`); `Accept` and
#: `Content-Type` are the transport's own, written by whoever speaks it (the client's were
#: checked at the front door).
CROSSING = {
    "mcp-protocol-version": "MCP-Protocol-Version",
    "last-event-id": "Last-Event-ID",
}
#: The longest value of a crossing header (a version, an event id).
MAX_CROSSING_CHARS = 256


def crossing_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """What of a client's headers (by lower-case name) goes upstream: the protocol version,
    `Last-Event-ID` and valid trace context, each visible ASCII and short. Never
    `Authorization`, cookies, the session id (the upstream's is sealed in the gateway's) or
    anything else."""
    crossing = {
        sent: value
        for name, sent in CROSSING.items()
        if (value := headers.get(name)) is not None
        and len(value) <= MAX_CROSSING_CHARS
        and value.isascii()
        and value.isprintable()
    }
    crossing.update(trace_context({}, headers))
    return crossing


SESSION_HEADER = "Mcp-Session-Id"
#: What a Streamable HTTP request accepts and carries, by HTTP method.
_TRANSPORT_HEADERS = {
    "POST": {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"},
    "GET": {"Accept": "text/event-stream"},
    "DELETE": {"Accept": "application/json, text/event-stream"},
}
#: Upstream answer headers the client sees (the rest is the upstream's business).
_RELAYED = {"content-type": "Content-Type", "allow": "Allow", "retry-after": "Retry-After"}
#: Between the tries of a GET the upstream refuses as busy (409), before it is passed on.
BUSY_RETRY_S = (0.05, 0.1, 0.2, 0.4, 0.8)
#: The most of an error body (4xx) passed on.
MAX_ERROR_BODY_BYTES = 64 * 1024
_SSE = "text/event-stream"


class HttpPassThrough:
    """`LegacyUpstream` over Streamable HTTP, one client session to one upstream session."""

    replica_bound = False

    def __init__(
        self, http: Http1Client, endpoint: Endpoint, *, wait_s: float, clock: Clock
    ) -> None:
        self.http = http
        self.endpoint = endpoint
        self.wait_s = wait_s
        self.clock = clock  # the bounds above, and the busy GET's tries

    @property
    def name(self) -> str:
        return self.endpoint.name

    async def initialize(self, body: bytes, headers: Mapping[str, str]) -> UpstreamAnswer:
        answer = await self._exchange("POST", None, headers, body, self.endpoint.timeout_s)
        if answer.status in (404, 405):
            # Without a session that means no MCP endpoint here, or an HTTP+SSE one.
            await _discard(answer)
            raise UpstreamError(f"upstream answered initialize with HTTP {answer.status}")
        return answer

    async def post(
        self, session: str | None, body: bytes, headers: Mapping[str, str]
    ) -> UpstreamAnswer:
        return await self._exchange("POST", session, headers, body, self.wait_s)

    async def get(self, session: str | None, headers: Mapping[str, str]) -> UpstreamAnswer:
        for delay in (*BUSY_RETRY_S, None):
            answer = await self._exchange("GET", session, headers, b"", self.endpoint.timeout_s)
            if answer.status != 409 or delay is None:
                return answer
            log.debug("upstream_get_busy", upstream=self.name, retry_in_s=delay)
            await clocks.sleep(self.clock, delay)
        raise AssertionError("unreachable")  # pragma: no cover

    async def delete(self, session: str | None, headers: Mapping[str, str]) -> UpstreamAnswer:
        return await self._exchange("DELETE", session, headers, b"", self.endpoint.timeout_s)

    async def _exchange(
        self,
        method: str,
        session: str | None,
        headers: Mapping[str, str],
        body: bytes,
        wait_s: float,
    ) -> UpstreamAnswer:
        """Send one request and take its answer: a whole body read within `wait_s`, or an
        event stream (its head within `wait_s`). A 401 the gateway's own token may be the
        cause of is sent once more with a fresh token (nothing ran upstream).

        Raises:
            UpstreamError
        """
        endpoint = self.endpoint
        for attempt in (1, 2):
            sent = await endpoint.request_headers()
            sent.update(_TRANSPORT_HEADERS[method])
            sent.update(headers)
            if session is not None:
                sent[SESSION_HEADER] = session
            with mapped_errors(f"passing a {method} on"):
                async with clocks.timeout(self.clock, wait_s):
                    resp = await self.http.request(
                        method,
                        endpoint.url,
                        sent,
                        body,
                        connect_timeout_s=endpoint.timeout_s,
                        max_body_bytes=endpoint.max_message_bytes,
                    )
                    try:
                        answer = await self._answer(resp)
                    except BaseException:
                        resp.release()
                        raise
            if answer.status != 401 or endpoint.authorization is None or attempt == 2:
                break
            endpoint.refused(401)  # drops the cached token: the next try fetches one
            await _discard(answer)
        return self._checked(answer)

    async def _answer(self, resp: Http1Response) -> UpstreamAnswer:
        status = resp.status
        headers = {
            sent: value
            for name, sent in _RELAYED.items()
            if (value := resp.headers.get(name)) and value.isascii() and value.isprintable()
        }
        session = resp.headers.get(SESSION_HEADER.lower())
        ctype = resp.headers.get("content-type", "").split(";")[0].strip().lower()
        if status == 200 and ctype == _SSE:
            events = ResponseEvents(resp, self.endpoint.max_message_bytes)
            return UpstreamAnswer(status, headers, events, session)
        if status >= 400:
            resp.max_body_bytes = MAX_ERROR_BODY_BYTES
        async with resp:
            body = await resp.read()
        return UpstreamAnswer(status, headers, body, session)

    def _checked(self, answer: UpstreamAnswer) -> UpstreamAnswer:
        """`answer`, unless it is the upstream's trouble rather than the client's.

        Raises:
            UpstreamError
        """
        status = answer.status
        if 300 <= status < 400:
            raise UpstreamError(
                f"upstream redirected (HTTP {status}); set its url to where it points"
            )
        if status in (401, 403, 407):
            detail = error_text(answer.body) if isinstance(answer.body, bytes) else ""
            raise UpstreamError(f"upstream refused the gateway (HTTP {status}): {detail}")
        if status >= 500 and status != 503:
            detail = error_text(answer.body) if isinstance(answer.body, bytes) else ""
            raise UpstreamError(f"upstream failed (HTTP {status}): {detail}")
        return answer


class ResponseEvents:
    """`EventStream` over an SSE response: its events as they arrive, each at most
    `max_event_bytes`. Closing it gives the connection back for the next request when the
    body has ended, and closes it otherwise (read or not, started or not).

    Raises (iterating): UpstreamError, the stream broken or an event too large.
    """

    __slots__ = ("_resp", "_parser", "_ready")

    def __init__(self, resp: Http1Response, max_event_bytes: int) -> None:
        self._resp = resp
        self._parser = sse.Parser(max_event_bytes)
        self._ready: deque[sse.SseEvent] = deque()

    def __aiter__(self) -> ResponseEvents:
        return self

    async def __anext__(self) -> sse.SseEvent:
        while not self._ready:
            with mapped_errors("relaying a stream"):
                chunk = await self._resp.next_chunk()
                if chunk is not None:
                    self._ready.extend(self._parser.feed(chunk))
            if chunk is None:
                self._resp.release()  # ended: its connection serves the next request
                raise StopAsyncIteration
        return self._ready.popleft()

    async def aclose(self) -> None:
        self._resp.release()


async def _discard(answer: UpstreamAnswer) -> None:
    if not isinstance(answer.body, bytes):
        await answer.body.aclose()


async def reply_of(
    answer: UpstreamAnswer, rid: jsonrpc.RequestId, clock: Clock, wait_s: float
) -> dict[str, Any] | None:
    """The response to `rid` in an upstream's answer, whole or the first of its stream
    (read for at most `wait_s`, the rest let go); None if none came."""
    body = answer.body
    if isinstance(body, bytes):
        try:
            reply = jsonrpc.loads(body)
        except (ValueError, RecursionError):
            return None
        return reply if isinstance(reply, dict) else None
    try:
        async with clocks.timeout(clock, wait_s):
            async for event in body:
                try:
                    reply = jsonrpc.loads(event.data) if event.data else None
                except (ValueError, RecursionError):
                    continue
                if isinstance(reply, dict) and reply.get("id") == rid and "method" not in reply:
                    return reply
    except (TimeoutError, UpstreamError):
        return None
    finally:
        await body.aclose()
    return None
