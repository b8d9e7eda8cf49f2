"""The legacy lane's handlers: a 2025 client's POST, GET and DELETE on the MCP endpoint.

The request pipeline (`gateway.web.pipeline`) has classified the request
(`gateway.protocol.era`), checked its HTTP layer (Origin, Host, Accept, media type, body
size) and admitted its caller (authentication, route scopes, the per-principal rate)
before it gets here, and hands it on with its record (`gateway.seams.RequestServed`).
Then:

- `initialize` opens an upstream session of the caller's own (`LegacyUpstream.initialize`,
  the client's request as it came) and answers with the upstream's answer and the
  gateway's `Mcp-Session-Id`, which seals the upstream's session handle and the caller
  (`gateway.protocol.legacy_session`);
- any other POST, a GET or a DELETE needs that id (400 "Missing session ID" without
  one); one that does not open, has expired, names another route or another principal
  gets 404 (the client starts over). A refreshed token of the same principal keeps it.
- a call goes through the `calling` seam (`gateway.seams`) and a request is held to the
  route's per-target scopes read from its body (`tools/call`, `prompts/get`,
  `resources/read`, `completion/complete`, a resource subscription): 403 with the
  `insufficient_scope` challenge; list results leave out what the caller may not see and
  go through the `listing` seam, in a JSON answer and inside a stream;
- the upstream's answer passes on: its status and body (JSON as it came, `_whole`), or
  its stream event by event (`_streamed`, `gateway.legacy_clients.relay`), with the
  gateway's session id and never the upstream's. A POST's stream whose first message,
  within a keepalive's wait, is the response (most are) is sent whole, as a body, the
  rest of the upstream's stream read in the background. A POST's stream whose upstream
  fails, or says nothing for `limits.hold_timeout_s`, before its response and without an
  event id to resume from, ends with a JSON-RPC error for the request;
- a GET stream counts against the caller's streams (`gateway.legacy_clients.streams`) and
  ends at the session's expiry, the credential's, or when the replica drains.

A session of a stdio or HTTP+SSE upstream is held by the replica that opened it (its
id names that owner, `gateway.legacy_clients.bound`); a request of it that reaches
another replica is checked here all the same and then passed to the owner over the
fleet bus (`remote`, `gateway.legacy_clients.forwarding`). With no bus, or the owner
gone, its id gets 404 (the client starts over).

What a POST was and how it ended is noted on its record (its method, a keyed hash of
its session id, never the id nor the upstream's; its status and outcome); its
`request_served` line, its metrics and an error's answer are the pipeline's. Nothing is
kept per session but the replica-bound sessions' links, in their owner, and, to serve a
session's next requests sooner, what its id opened to (`OpenedSessions`, bounded: the id
alone is the session). It must not import the web part (`gateway.web`) nor the call
core (`gateway.calls`).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import structlog
from aiohttp import web

from gateway.clock import Clock
from gateway.config import LegacyConfig, LimitsConfig
from gateway.errors import (
    Draining,
    HttpError,
    MethodNotAllowed,
    NotAcceptable,
    UpstreamError,
    UpstreamTimeout,
)
from gateway.legacy_clients.answers import AnswerView, Listed, outcome_of
from gateway.legacy_clients.metrics import LaneMetrics
from gateway.legacy_clients.relay import (
    ENDED,
    IDLE,
    Prelude,
    Relay,
    StreamHooks,
    drain,
    read_prelude,
)
from gateway.legacy_clients.streams import Streams
from gateway.legacy_clients.trail import LaneTrail, LegacyCall, untag
from gateway.legacy_clients.upstream import (
    EventStream,
    LegacyUpstream,
    SessionNotFound,
    SessionUpstream,
    UpstreamAnswer,
    crossing_headers,
)
from gateway.protocol import inbound, jsonrpc, sse
from gateway.protocol import legacy_session as sessions
from gateway.protocol.lists import MaySee
from gateway.protocol.rendering import rendered
from gateway.protocol.state import StateCodec
from gateway.seams import CALLING, NO_SEAMS, Answered, Caller, RequestServed, Seams

log = structlog.get_logger("gateway.legacy")

SESSION_HEADER = "Mcp-Session-Id"
_SESSION_KEY = SESSION_HEADER.lower()
SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache, no-transform",
    "X-Accel-Buffering": "no",
}


class MissingSession(HttpError):
    http_status = 400
    message = "Bad Request: Missing session ID"


class LegacyMethodNotAllowed(MethodNotAllowed):
    message = "The MCP endpoint serves POST, GET and DELETE"
    headers: ClassVar[dict[str, str]] = {"Allow": "GET, POST, DELETE"}


class NoGetStreams(MethodNotAllowed):
    message = "GET streams are not served here (legacy.max_streams_per_principal is 0)"
    headers: ClassVar[dict[str, str]] = {"Allow": "POST, DELETE"}


class Door(Protocol):
    """What the lane asks of its route's front door (`gateway.web.front_door.FrontDoor`)."""

    def check_request(self, caller: Caller, method: str, params: dict[str, Any]) -> None: ...

    def check_result(self, caller: Caller, method: str, result: dict[str, Any]) -> None: ...

    def list_filter(self, caller: Caller) -> MaySee | None: ...


def _unreachable(owner: str) -> None:
    """A replica alone reaches no other replica's session."""
    return None


#: Session ids kept opened for their later requests, per route (`OpenedSessions`).
OPENED_SESSIONS = 4096


@dataclass(frozen=True, slots=True, kw_only=True)
class LaneSettings:
    """What the lane of one route works with, besides its upstream and its door."""

    legacy: LegacyConfig
    limits: LimitsConfig
    audience: str  # sealing.audience: the deployment its session ids belong to
    replica: str  # this replica and incarnation: the owner of replica-bound sessions
    log_salt: bytes  # keys the session ids' hashes in logs


class LegacyLane:
    """The legacy lane of one route (one upstream)."""

    def __init__(
        self,
        *,
        route: str,
        upstream: LegacyUpstream,
        door: Door,
        codec: StateCodec,
        settings: LaneSettings,
        streams: Streams,
        metrics: LaneMetrics,
        hooks: StreamHooks,
        clock: Clock,
        remote: Callable[[str], SessionUpstream | None] = _unreachable,
        seams: Seams = NO_SEAMS,
        trail: LaneTrail | None = None,
    ) -> None:
        """`route`: the name of the route's upstream; `clock`: every time the lane reads or
        waits for (sessions' expiry, streams' bounds, durations). `remote`:
        the upstream as another replica (named) holds its sessions, over the fleet bus;
        None for an owner that cannot be reached (any other, for a replica alone).
        `seams`: the gateway's, as the 2026 lane's; `trail`: what the audit trail records
        of the route's 2025 clients (`gateway.legacy_clients.trail`)."""
        self.route = route
        self.upstream = upstream
        self.door = door
        self.codec = codec
        self.settings = settings
        self.streams = streams
        self.metrics = metrics
        self.hooks = hooks
        self.clock = clock
        self.remote = remote
        self.seams = seams
        self.trail = trail or LaneTrail()
        self.opened = sessions.OpenedSessions(OPENED_SESSIONS)

    # -- POST ------------------------------------------------------------------------

    async def post(
        self,
        request: web.Request,
        served: RequestServed,
        headers: Mapping[str, str],
        body: bytes,
        decoded: Any,
    ) -> web.StreamResponse:
        """Serve one legacy POST: `body` as it came, `decoded` its JSON; what it is and how
        it ends are noted on `served`.

        Raises:
            HttpError, RpcError: the pipeline answers them (an upstream's failure counted).
        """
        try:
            return await self._post(request, served, headers, body, decoded)
        except UpstreamError as exc:
            self.metrics.upstream_errors.labels(self.upstream.name, exc.kind).inc()
            raise

    async def _post(
        self,
        request: web.Request,
        served: RequestServed,
        headers: Mapping[str, str],
        body: bytes,
        decoded: Any,
    ) -> web.StreamResponse:
        message = jsonrpc.parse_message(decoded)  # InvalidRequest: batches too
        if isinstance(message, jsonrpc.Request):
            served.method, served.rid = message.method, message.id
            served.target = inbound.logged_target(message.method, message.params)
            if message.method == "initialize":
                return await self._initialize(request, served, headers, body, message.params)
        else:
            served.method = (
                message.method if isinstance(message, jsonrpc.Notification) else "response"
            )
        token, claims = self._session(headers, served)
        upstream = self._reach(claims, served)
        call = None
        if isinstance(message, jsonrpc.Request):
            try:
                body = await self._entering(served, message, decoded, body)
            except Answered as answered:  # by a seam, as the upstream would have
                reply = jsonrpc.dumps(jsonrpc.result(message.id, answered.result))
                answer = UpstreamAnswer(200, {"Content-Type": "application/json"}, reply)
                return await self._answer(request, answer, served, token)
            call = self.trail.call(served, message)
        elif isinstance(message, jsonrpc.Response):
            # An answer to a question of a call goes back to its server with its own id.
            answer_to, tag = untag(decoded)
            if tag is not None:
                body = jsonrpc.dumps(answer_to)
                self.trail.answered(served, tag, answer_to)
        answer = await upstream.post(claims.session, body, crossing_headers(headers))
        return await self._answer(request, answer, served, token, call)

    async def _entering(
        self, served: RequestServed, message: jsonrpc.Request, decoded: Any, body: bytes
    ) -> bytes:
        """The body a request goes upstream with, once a call has passed the `calling`
        seam (which may change its params) and the request its target's scopes.

        Raises:
            InsufficientScope (403), and what a seam refuses a call with
        """
        params = message.params
        if self.seams.calling and message.method in CALLING:
            params = await self.seams.called(served, params)
            if params is not message.params:
                body = jsonrpc.dumps({**decoded, "params": params})
        self.door.check_request(served.caller, *sessions.scoped(message.method, params))
        return body

    async def _initialize(
        self,
        request: web.Request,
        served: RequestServed,
        headers: Mapping[str, str],
        body: bytes,
        params: dict[str, Any],
    ) -> web.StreamResponse:
        if self.upstream.replica_bound and self.streams.draining:
            # Its process or connection would end with this replica in a moment.
            raise Draining("This replica is draining; send initialize again")
        answer = await self.upstream.initialize(body, crossing_headers(headers))
        token = None
        if answer.status == 200:
            if not sessions.valid_upstream_session(answer.session):
                await _discard(answer)
                raise UpstreamError("upstream gave a session id that is not visible ASCII")
            now = self.clock.wall_ms()
            settings = self.settings
            claims = sessions.SessionClaims(
                upstream=self.upstream.name,
                session=answer.session,
                principal=sessions.principal_tag(served.caller.principal),
                owner=settings.replica if self.upstream.replica_bound else "",
                audience=settings.audience,
                created_ms=now,
                expires_ms=now + int(settings.legacy.session_ttl_s * 1000),
            )
            token = sessions.seal_session(self.codec, claims)
            served.session = self._log_id(token)
            self.trail.opened(served, params)
        return await self._answer(request, answer, served, token)

    # -- GET and DELETE --------------------------------------------------------------

    async def get(
        self, request: web.Request, served: RequestServed, headers: Mapping[str, str]
    ) -> web.StreamResponse:
        """The session's standalone stream (or its resumption: `Last-Event-ID`)."""
        if not inbound.accepts(headers.get("accept", ""), "text/event-stream"):
            raise NotAcceptable("Accept must list text/event-stream")
        if self.settings.legacy.max_streams_per_principal == 0:
            raise NoGetStreams()
        caller = served.caller
        token, claims = self._session(headers, served)
        upstream = self._reach(claims, served)
        head = {**SSE_HEADERS, SESSION_HEADER: token}
        relay = Relay(request, head, self.hooks, keepalive_s=self._keepalive, clock=self.clock)
        with self.streams.opened(caller.principal, relay.stop):
            answer = await upstream.get(claims.session, crossing_headers(headers))
            if isinstance(answer.body, bytes):
                return self._plain(answer, token)
            await _started(relay, answer.body)
            started = self.clock.monotonic()
            log.info("legacy_stream_opened", principal=caller.log_id, session=served.session)
            view = AnswerView(
                rid=None,
                method=None,
                may_see=self.door.list_filter(caller),
                listed=self._listed(served),
            )
            how = "client_gone"
            try:
                how = await relay.run(answer.body, view.see, end_at=self._end_at(claims, caller))
            finally:
                await relay.close()
                log.info(
                    "legacy_stream_ended",
                    how=how,
                    principal=caller.log_id,
                    session=served.session,
                    duration_s=round(self.clock.monotonic() - started, 1),
                )
            return await relay.finish()

    async def delete(
        self, request: web.Request, served: RequestServed, headers: Mapping[str, str]
    ) -> web.StreamResponse:
        """End the session upstream; its id then leads to the upstream's 404."""
        token, claims = self._session(headers, served)
        self.opened.forget(token, served.caller.principal)
        answer = await self._reach(claims, served).delete(claims.session, crossing_headers(headers))
        if not isinstance(answer.body, bytes):
            await answer.body.aclose()
            raise UpstreamError("upstream answered DELETE with a stream")
        log.info("legacy_session_deleted", session=served.session, status=answer.status)
        self.trail.closed(served, "deleted")
        return self._plain(answer, None)

    # -- the session -----------------------------------------------------------------

    def _session(
        self, headers: Mapping[str, str], served: RequestServed
    ) -> tuple[str, sessions.SessionClaims]:
        """The session id sent and its claims (its log stand-in noted on `served`).

        Raises:
            MissingSession (400), SessionNotFound (404)
        """
        token = headers.get(_SESSION_KEY)
        if token is None:
            raise MissingSession()
        principal = served.caller.principal
        now_ms = self.clock.wall_ms()
        known = self.opened.get(token, principal, now_ms)
        if known is None:
            served.session = self._log_id(token)
            claims = sessions.open_session(
                self.codec,
                token,
                now_ms=now_ms,
                principal=sessions.principal_tag(principal),
                upstream=self.upstream.name,
                audience=self.settings.audience,
            )
            if isinstance(claims, sessions.SessionIdRefusal):
                self.metrics.refusals.labels(claims.reason).inc()
                log.info("legacy_session_refused", reason=claims.reason, session=served.session)
                self.trail.refused(served, claims.reason)
                raise SessionNotFound()
            known = sessions.Opened(claims, served.session)
            self.opened.put(token, principal, known)
        served.session = known.log_id
        return token, known.claims

    def _reach(self, claims: sessions.SessionClaims, served: RequestServed) -> SessionUpstream:
        """Where the session's requests go: its upstream, through the replica holding the
        session if that is another one.

        Raises:
            SessionNotFound (404): the session's owner cannot be reached (a replica alone).
        """
        if not claims.owner or claims.owner == self.settings.replica:
            return self.upstream
        upstream = self.remote(claims.owner)
        if upstream is None:  # a replica alone: another incarnation's session, gone with it
            self.metrics.refusals.labels("owned elsewhere").inc()
            log.info("legacy_session_refused", reason="owned elsewhere", session=served.session)
            self.trail.refused(served, "owned elsewhere")
            raise SessionNotFound()
        return upstream

    def _log_id(self, token: str) -> str:
        """A session id's stand-in in logs: a keyed hash (the id is a bearer of the session)."""
        digest = hmac.new(self.settings.log_salt, token.encode(), hashlib.sha256).hexdigest()
        return "s_" + digest[:16]

    def _end_at(self, claims: sessions.SessionClaims, caller: Caller) -> float:
        """When a GET stream ends, on the lane's clock: the session's expiry, or the
        credential's if sooner (what outlives the request that showed it ends then)."""
        until_s = claims.expires_ms / 1000
        identity = caller.identity
        if identity is not None and identity.expires_at is not None:
            until_s = min(until_s, identity.expires_at)
        return self.clock.monotonic() + max(0.0, until_s - self.clock.wall_s())

    # -- answers ---------------------------------------------------------------------

    @property
    def _keepalive(self) -> float:
        return self.settings.limits.keepalive_s

    def _listed(self, served: RequestServed) -> Listed | None:
        """The `listing` seam for `served`'s answer, None when nothing is plugged in."""
        if not self.seams.listing:
            return None
        return functools.partial(self.seams.listed, served)

    async def _answer(
        self,
        request: web.Request,
        answer: UpstreamAnswer,
        served: RequestServed,
        token: str | None,
        call: LegacyCall | None = None,
    ) -> web.StreamResponse:
        """The upstream's answer to a POST, passed on: whole, or its stream (a call's
        questions and response followed by the audit trail, `call`)."""
        served.status = answer.status
        caller = served.caller
        view = AnswerView(
            rid=served.rid,
            method=served.method,
            may_see=self.door.list_filter(caller),
            check=functools.partial(self.door.check_result, caller, served.method),
            listed=self._listed(served),
            call=call,
        )
        if isinstance(answer.body, bytes):
            return self._whole(answer, served, token, view)
        headers = dict(SSE_HEADERS)
        if token is not None:
            headers[SESSION_HEADER] = token
        return await self._streamed(request, answer.body, headers, served, view)

    def _whole(
        self, answer: UpstreamAnswer, served: RequestServed, token: str | None, view: AnswerView
    ) -> web.Response:
        """A JSON answer (or any whole body), as the caller may see it.

        Raises:
            InsufficientScope: a result the caller may not see (nothing was sent yet).
        """
        assert isinstance(answer.body, bytes)
        served.outcome = outcome_of(answer.status)
        body = answer.body
        if answer.status == 200 and served.rid is not None:
            body, served.outcome = view.whole(body)
        elif view.call is not None:  # the server refused the call's POST
            view.call.ended({"error": {"code": -32603, "message": f"HTTP {answer.status}"}})
        return self._plain(answer, token, body)

    async def _streamed(
        self,
        request: web.Request,
        events: EventStream,
        headers: dict[str, str],
        served: RequestServed,
        view: AnswerView,
    ) -> web.StreamResponse:
        """An SSE answer: sent whole when its response comes first, else relayed."""
        prelude = Prelude(self.clock.monotonic())
        if served.rid is not None:
            # Its head waits for the first message, as long as a keepalive would: a
            # response that comes first (most answers) is sent whole, no stream relayed.
            hold_s = self.settings.limits.hold_timeout_s
            wait_s = min(self._keepalive, hold_s)
            prelude = await read_prelude(
                events,
                view.see,
                wait_s,
                gave_up=IDLE if wait_s == hold_s else None,
                clock=self.clock,
            )
            if view.has_answer():
                drain(events, self.clock)
                served.outcome = view.outcome
                body = b"".join(sse.encode_event(event) for event in prelude.events)
                return web.Response(status=200, body=body, headers=headers)
        relay = Relay(request, headers, self.hooks, keepalive_s=self._keepalive, clock=self.clock)
        await _started(relay, events)
        try:
            await self._relay(relay, events, prelude, served, view)
        finally:
            await relay.close()
            served.outcome = view.outcome  # also when the client went first
        return await relay.finish()

    async def _relay(
        self,
        relay: Relay,
        events: EventStream,
        prelude: Prelude,
        served: RequestServed,
        view: AnswerView,
    ) -> None:
        """Relay a POST's stream (its prelude first) to its end; one that ends
        before its response, with no event id to resume from, ends with an error for it."""
        try:
            for event in prelude.events:
                await relay.write(sse.encode_event(event))
        except BaseException:
            await events.aclose()
            raise
        how = prelude.how
        if how is None:
            how = await relay.run(
                events,
                view.see,
                idle_s=self.settings.limits.hold_timeout_s,
                done=view.has_answer,
                quiet_since=prelude.heard,
            )
        else:
            await events.aclose()
            relay.error = prelude.error
        if how == ENDED or served.rid is None or view.answered:
            return
        log.info("legacy_stream_cut", how=how, error=str(relay.error or ""))
        if not view.resumable:  # the client has no way to get the rest: it is told
            failure = relay.error or UpstreamTimeout(
                "The upstream MCP server said nothing for limits.hold_timeout_s"
            )
            reply = rendered(failure, served.rid).message
            if view.call is not None:
                view.call.ended(reply)
            await relay.write(sse.encode(jsonrpc.dumps(reply).decode()))

    def _plain(
        self, answer: UpstreamAnswer, token: str | None, body: bytes | None = None
    ) -> web.Response:
        """`answer` whole (its body, or `body` in its place), with the gateway's session id."""
        assert isinstance(answer.body, bytes)
        headers = dict(answer.headers)
        if token is not None:
            headers[SESSION_HEADER] = token
        return web.Response(
            status=answer.status, body=answer.body if body is None else body, headers=headers
        )


async def _started(relay: Relay, events: EventStream) -> None:
    """Send the stream's head; if it cannot be sent (the client has gone), `events` is
    closed: nothing else would let its upstream connection go."""
    try:
        await relay.start()
    except BaseException:
        await events.aclose()
        raise


async def _discard(answer: UpstreamAnswer) -> None:
    body: bytes | EventStream = answer.body
    if not isinstance(body, bytes):
        await body.aclose()
