"""The legacy lane's handlers: a 2025 client's POST, GET and DELETE on the MCP endpoint.

The request pipeline (`gateway.web.pipeline`) has classified the request
(`gateway.protocol.era`), checked its HTTP layer (Origin, Host, Accept, media type, body
size) and admitted its caller (authentication, route scopes, the per-principal rate)
before it gets here, and hands it on with its record (`gateway.seams.RequestServed`).
Then:

- `initialize` opens an upstream session of the caller's own (`LegacyUpstream.initialize`,
  the client's request as it came) and answers with the upstream's answer and the
  gateway's `Mcp-Session-Id`, which seals the upstream's session handle, the caller and
  what the client declared (`gateway.protocol.legacy_session`);
- any other POST, a GET or a DELETE needs that id (400 "Missing session ID" without
  one); one that does not open, has expired, names another route or another principal
  gets 404 (the client starts over). A refreshed token of the same principal keeps it.
- a call goes through the `calling` seam (`gateway.seams`) and a request is held to the
  route's per-target scopes read from its body (`tools/call`, `prompts/get`,
  `resources/read`, `completion/complete`, a resource subscription): 403 with the
  `insufficient_scope` challenge. The seam may first ask the client a question of the
  gateway's own (`RequestServed.asker`, a `gateway.legacy_clients.asking.StreamAsker`):
  the POST's answer becomes an SSE stream at the first question, and the call's refusal
  or the upstream's answer ends it. A client's answer to such a question (its id the
  gateway's, `gateway.protocol.legacy_asking`), on whichever replica, is handed to the
  question (`Questions.hand`) and answered 202; it never goes upstream;
- the upstream's answer passes on (`gateway.legacy_clients.passing`): its status and
  body, or its stream event by event, with the gateway's session id and never the
  upstream's; list results leave out what the caller may not see and go through the
  `listing` seam, in a JSON answer and inside a stream;
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

import hashlib
import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import structlog
from aiohttp import web

from gateway.clock import Clock
from gateway.config import LegacyConfig, LimitsConfig
from gateway.errors import (
    Draining,
    GatewayError,
    HttpError,
    MethodNotAllowed,
    NotAcceptable,
    UpstreamError,
)
from gateway.legacy_clients.answers import AnswerView, outcome_of
from gateway.legacy_clients.asking import Questions, StreamAsker
from gateway.legacy_clients.metrics import LaneMetrics
from gateway.legacy_clients.passing import (
    SESSION_HEADER,
    SSE_HEADERS,
    Door,
    Passing,
    discard,
    plain,
    started,
)
from gateway.legacy_clients.relay import Relay, StreamHooks
from gateway.legacy_clients.streams import Streams
from gateway.legacy_clients.trail import LaneTrail, untag
from gateway.legacy_clients.upstream import (
    LegacyUpstream,
    SessionNotFound,
    SessionUpstream,
    UpstreamAnswer,
    crossing_headers,
)
from gateway.protocol import formats, inbound, jsonrpc, legacy_asking
from gateway.protocol import legacy_session as sessions
from gateway.protocol.formats import FleetLevel, Kind
from gateway.protocol.state import StateCodec
from gateway.seams import CALLING, NO_SEAMS, Answered, Caller, RequestServed, Seams

log = structlog.get_logger("gateway.legacy")

_SESSION_KEY = SESSION_HEADER.lower()


class MissingSession(HttpError):
    http_status = 400
    message = "Bad Request: Missing session ID"


class LegacyMethodNotAllowed(MethodNotAllowed):
    message = "The MCP endpoint serves POST, GET and DELETE"
    headers: ClassVar[dict[str, str]] = {"Allow": "GET, POST, DELETE"}


class NoGetStreams(MethodNotAllowed):
    message = "GET streams are not served here (legacy.max_streams_per_principal is 0)"
    headers: ClassVar[dict[str, str]] = {"Allow": "POST, DELETE"}


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
    level: FleetLevel | None = None  # which session id claims the fleet reads (None: ours)


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
        questions: Questions | None = None,
        marks: str | None = None,
    ) -> None:
        """`route`: the name of the route's upstream; `clock`: every time the lane reads or
        waits for (sessions' expiry, streams' bounds, durations). `remote`:
        the upstream as another replica (named) holds its sessions, over the fleet bus;
        None for an owner that cannot be reached (any other, for a replica alone).
        `seams`: the gateway's, as the 2026 lane's; `trail`: what the audit trail records
        of the route's 2025 clients (`gateway.legacy_clients.trail`); `questions`: the
        gateway's own questions to 2025 clients waiting on this replica (None: a
        `calling` seam cannot ask any); `marks`: the upstream's name when it is one of
        an endpoint's several (`gateway.legacy_clients.endpoint` serves the session, and
        what the upstream sends the client is marked with it)."""
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
        self.questions = questions
        self.marks = marks
        self.passing = Passing(
            door=door, seams=seams, limits=settings.limits, hooks=hooks, clock=clock, marks=marks
        )
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
        message = noted(served, decoded)
        if isinstance(message, jsonrpc.Request) and message.method == "initialize":
            return await self._initialize(request, served, headers, body, message.params)
        token, claims = self._session(headers, served)
        return await self.serve(request, served, headers, body, decoded, message, token, claims)

    async def serve(
        self,
        request: web.Request,
        served: RequestServed,
        headers: Mapping[str, str],
        body: bytes,
        decoded: Any,
        message: jsonrpc.Message,
        token: str,
        claims: sessions.SessionClaims,
    ) -> web.StreamResponse:
        """Serve a POST of an opened session (`claims`, under the client's id `token`):
        a request, a notification, or the client's answer to a question."""
        if isinstance(message, jsonrpc.Response) and legacy_asking.is_question(message.id):
            return await self.answered_question(served, message.id, decoded)
        upstream = self.reach(claims, served)
        call = asker = None
        if isinstance(message, jsonrpc.Request):
            asker = served.asker = self._asker(request, served, token, claims, message.method)
        try:
            if isinstance(message, jsonrpc.Request):
                try:
                    body = await self._entering(served, message, decoded, body)
                except Answered as answered:  # by a seam, as the upstream would have
                    reply = jsonrpc.dumps(jsonrpc.result(message.id, answered.result))
                    answer = UpstreamAnswer(200, {"Content-Type": "application/json"}, reply)
                    return await self.passing.answer(request, answer, served, token)
                call = self.trail.call(served, message)
            elif isinstance(message, jsonrpc.Response):
                # An answer to a question of a call goes back to its server with its own id.
                answer_to, tag = untag(decoded)
                if tag is not None:
                    body = jsonrpc.dumps(answer_to)
                    self.trail.answered(served, tag, answer_to)
            answer = await upstream.post(claims.session, body, crossing_headers(headers))
        except GatewayError as failed:
            if asker is None or not asker.relay.started:
                raise  # answered as any refusal
            # The gateway asked the client first: the stream is open, the error ends it.
            return await self.passing.refused_on(asker.relay, failed, served)
        except BaseException:
            if asker is not None:
                await asker.relay.close()  # its keepalives end with the request
            raise
        return await self.passing.answer(request, answer, served, token, call)

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

    def _asker(
        self,
        request: web.Request,
        served: RequestServed,
        token: str,
        claims: sessions.SessionClaims,
        method: str,
    ) -> StreamAsker | None:
        """How a `calling` seam may ask the client of a call something (None: not a call,
        no seam to ask, or not while a replica of the previous release lives)."""
        questions = self.questions
        if questions is None or not self.seams.calling or method not in CALLING:
            return None
        if not questions.open():
            return None
        head = {**SSE_HEADERS, SESSION_HEADER: token}
        relay = Relay(request, head, self.hooks, keepalive_s=self._keepalive, clock=self.clock)
        return StreamAsker(
            questions,
            relay,
            declared=claims.declared,
            session=served.session or "",
            wait_s=self.settings.limits.suspension_ttl_s,
            clock=self.clock,
        )

    async def answered_question(
        self, served: RequestServed, rid: Any, decoded: Any
    ) -> web.Response:
        """A client's answer to a question of the gateway's own: handed to the question,
        here or on the replica waiting for it, never to the server; 202 as a server
        answers a response, whoever took it."""
        if self.questions is None or served.session is None:
            log.info("legacy_answer_unclaimed", session=served.session)
        else:
            await self.questions.hand(rid, served.session, decoded)
        served.status, served.outcome = 202, outcome_of(202)
        return web.Response(status=202)

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
                await discard(answer)
                raise UpstreamError("upstream gave a session id that is not visible ASCII")
            now = self.clock.wall_ms()
            settings = self.settings
            level = settings.level
            version = sessions.CLAIMS_VERSION
            if level is not None:
                version = formats.written(Kind.LEGACY_SESSION, level.level)
            claims = sessions.SessionClaims(
                upstream=self.upstream.name,
                session=answer.session,
                principal=sessions.principal_tag(served.caller.principal),
                owner=settings.replica if self.upstream.replica_bound else "",
                audience=settings.audience,
                created_ms=now,
                expires_ms=now + int(settings.legacy.session_ttl_s * 1000),
                declared=sessions.declared_of(params.get("capabilities")),
            )
            token = sessions.seal_session(self.codec, claims, version)
            served.session = self.log_id(token)
            self.trail.opened(served, params)
        return await self.passing.answer(request, answer, served, token)

    # -- GET and DELETE --------------------------------------------------------------

    async def get(
        self, request: web.Request, served: RequestServed, headers: Mapping[str, str]
    ) -> web.StreamResponse:
        """The session's standalone stream (or its resumption: `Last-Event-ID`)."""
        if not inbound.accepts(headers.get("accept", ""), "text/event-stream"):
            raise NotAcceptable("Accept must list text/event-stream")
        if self.settings.legacy.max_streams_per_principal == 0:
            raise NoGetStreams()
        token, claims = self._session(headers, served)
        return await self.stream(request, served, headers, token, claims)

    async def stream(
        self,
        request: web.Request,
        served: RequestServed,
        headers: Mapping[str, str],
        token: str,
        claims: sessions.SessionClaims,
    ) -> web.StreamResponse:
        """The standalone stream of an opened session (`claims`, under the client's id
        `token`), or its resumption."""
        caller = served.caller
        upstream = self.reach(claims, served)
        head = {**SSE_HEADERS, SESSION_HEADER: token}
        relay = Relay(request, head, self.hooks, keepalive_s=self._keepalive, clock=self.clock)
        with self.streams.opened(caller.principal, relay.stop):
            answer = await upstream.get(claims.session, crossing_headers(headers))
            if isinstance(answer.body, bytes):
                return plain(answer, token)
            await started(relay, answer.body)
            await relay.standalone(
                answer.body,
                self.stream_view(served).see,
                end_at=stream_end(self.clock, claims.expires_ms, caller),
                principal=caller.log_id,
                session=served.session,
            )
            return await relay.finish()

    def stream_view(self, served: RequestServed) -> AnswerView:
        """What is looked at in a standalone stream's events (lists filtered and shown as
        the `listing` seam shows them; marked on an endpoint of several upstreams)."""
        return AnswerView(
            rid=None,
            method=None,
            may_see=self.door.list_filter(served.caller),
            listed=self.passing.listed(served),
            marks=self.marks,
        )

    async def delete(
        self, request: web.Request, served: RequestServed, headers: Mapping[str, str]
    ) -> web.StreamResponse:
        """End the session upstream; its id then leads to the upstream's 404."""
        token, claims = self._session(headers, served)
        self.opened.forget(token, served.caller.principal)
        return plain(await self.end(served, headers, claims), None)

    async def end(
        self, served: RequestServed, headers: Mapping[str, str], claims: sessions.SessionClaims
    ) -> UpstreamAnswer:
        """End an opened session upstream: the upstream's answer (a whole body).

        Raises:
            UpstreamError: it answered with a stream.
        """
        answer = await self.reach(claims, served).delete(claims.session, crossing_headers(headers))
        if not isinstance(answer.body, bytes):
            await answer.body.aclose()
            raise UpstreamError("upstream answered DELETE with a stream")
        log.info("legacy_session_deleted", session=served.session, status=answer.status)
        self.trail.closed(served, "deleted")
        return answer

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
            served.session = self.log_id(token)
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

    def reach(self, claims: sessions.SessionClaims, served: RequestServed) -> SessionUpstream:
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

    @property
    def _keepalive(self) -> float:
        return self.settings.limits.keepalive_s

    def log_id(self, token: str) -> str:
        """A session id's stand-in in logs: a keyed hash (the id is a bearer of the session)."""
        digest = hmac.new(self.settings.log_salt, token.encode(), hashlib.sha256).hexdigest()
        return "s_" + digest[:16]


def noted(served: RequestServed, decoded: Any) -> jsonrpc.Message:
    """A 2025 client's POST body as its message, and what it is noted on its record: a
    request's method, id and target, a notification's method, `response` for an answer.

    Raises:
        InvalidRequest: not one JSON-RPC message (a batch too).
    """
    message = jsonrpc.parse_message(decoded)
    if isinstance(message, jsonrpc.Request):
        served.method, served.rid = message.method, message.id
        served.target = inbound.logged_target(message.method, message.params)
    else:
        served.method = message.method if isinstance(message, jsonrpc.Notification) else "response"
    return message


def stream_end(clock: Clock, expires_ms: int, caller: Caller) -> float:
    """When a GET stream ends, on `clock`: its session's expiry, or the credential's if
    sooner (what outlives the request that showed it ends then)."""
    until_s = expires_ms / 1000
    identity = caller.identity
    if identity is not None and identity.expires_at is not None:
        until_s = min(until_s, identity.expires_at)
    return clock.monotonic() + max(0.0, until_s - clock.wall_s())
