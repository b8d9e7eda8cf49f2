"""The legacy lane of an endpoint of several upstreams: a 2025 client's POST, GET and
DELETE there, served by each upstream's own lane behind one session.

The client holds one session (`gateway.protocol.endpoint_session`); behind it the
gateway holds one upstream session per server, each opened at `initialize` with the
client's request as it came, and each served as its upstream's own lane serves a session
(`LegacyLane.serve`, with the claims of that upstream's session): the `calling` seam,
scopes, the audit trail, the gateway's own questions, replica-bound sessions reached
through their owner. What the client sees:

- `initialize`: one answer from every upstream's (`merging.merged_initialize`: the oldest
  revision any agreed to, every capability, the endpoint's `serverInfo`). An upstream
  that cannot open a session is left out of it (`on_upstream_down: omit`: its calls then
  fail clearly until the client initializes again) or fails it (`fail`, or when none
  opened; the sessions that opened are ended);
- a call, a prompt, a read, a completion or a resource subscription goes to the upstream
  whose name or URI it is, as a 2026 client's does (`EndpointLane.owner_of`, names
  prefixed or bare); the lists are the endpoint's merged lists, the same as a 2026
  client's (`EndpointLane.legacy_list`, from the catalog); `ping` is answered here;
  `logging/setLevel` and every notification go to every upstream;
- a request a server sends the client, and the events of its streams, carry ids marked
  with their upstream (`AnswerView`), so that the client's answer, on any replica, goes
  back to that server with its own id, and a resumption (`Last-Event-ID`) to its stream;
- a GET stream is every upstream's standalone stream, merged
  (`gateway.legacy_clients.merged`), counted once against the caller's streams; a
  DELETE ends every upstream's session and marks the session ended, fleet-wide
  (`SessionEnds`): its id then gets 404 on every replica, also for what reaches no
  server's session;
- what the endpoint answers itself (`initialize`, `ping`, the lists, a request it
  cannot route) comes in a 200, as one SSE event where some server answered
  `initialize` with a stream (`EndpointClaims.streams`), else as JSON; a name no upstream
  shows gets what a server answers a name it does not know.

It must not import the web part (`gateway.web`) nor the call core (`gateway.calls`): what
it needs of the endpoint's 2026 lane is handed to it (`Owner`, `Lister`).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NoReturn, Protocol

import structlog
from aiohttp import web

from gateway import logging as log_context
from gateway.clock import Clock
from gateway.config import DOWN_FAIL, EndpointConfig
from gateway.errors import (
    Draining,
    GatewayError,
    MethodNotFound,
    NotAcceptable,
    RpcError,
    UpstreamError,
    UpstreamRpcError,
)
from gateway.legacy_clients.lane import (
    LegacyLane,
    MissingSession,
    NoGetStreams,
    noted,
    stream_end,
)
from gateway.legacy_clients.merged import merged_stream
from gateway.legacy_clients.passing import SESSION_HEADER, SSE_HEADERS, discard
from gateway.legacy_clients.upstream import (
    SessionNotFound,
    crossing_headers,
    reply_of,
)
from gateway.protocol import endpoint_session, inbound, jsonrpc, legacy_asking, merging, sse
from gateway.protocol import legacy_session as sessions
from gateway.protocol.endpoint_session import EndpointClaims, MemberSession
from gateway.protocol.methods import LISTS
from gateway.protocol.rendering import rendered
from gateway.protocol.state import StateCodec
from gateway.seams import CALLING, Answered, RequestServed

log = structlog.get_logger("gateway.legacy")

#: The upstream a request about one target is for (`EndpointLane.legacy_owner`); raises
#: `Answered` where a name no upstream shows gets a server's result.
Owner = Callable[[str, dict[str, Any], str], Awaitable[str | None]]
#: A merged list for a 2025 client (`EndpointLane.legacy_list`).
Lister = Callable[[RequestServed, str, dict[str, Any]], Awaitable[dict[str, Any]]]

#: Requests served by the upstream whose name or URI they carry.
_TARGETED = CALLING | {"resources/subscribe", "resources/unsubscribe"}
_SESSION_KEY = SESSION_HEADER.lower()
_JSON = {"Content-Type": "application/json"}


class SessionEnds(Protocol):
    """Where the sessions ended are marked, fleet-wide (`gateway.store.ended`)."""

    async def end(self, session: str, until_ms: int) -> None: ...

    async def ended(self, session: str) -> bool: ...


class NotInSession(UpstreamError):
    """An upstream of the endpoint that did not open a session when the client's began."""

    public_detail = True
    kind = "not_in_session"


class EndpointLegacyLane:
    """The legacy lane of one endpoint of several upstreams."""

    def __init__(
        self,
        *,
        endpoint: EndpointConfig,
        members: Mapping[str, LegacyLane],
        codec: StateCodec,
        server_info: dict[str, Any],
        owner_of: Owner,
        lists: Lister,
        ended: SessionEnds,
    ) -> None:
        """`members`: each upstream's lane, in the endpoint's order (each marking what its
        upstream sends); `codec`: seals under `ENDPOINT_SESSION_PREFIX`; `ended`: where
        the sessions ended are marked, fleet-wide."""
        self.endpoint = endpoint
        self.members = dict(members)
        self.first = next(iter(self.members.values()))
        self.codec = codec
        self.server_info = server_info
        self.owner_of = owner_of
        self.lists = lists
        self.ended = ended
        self.settings = self.first.settings
        self.metrics = self.first.metrics
        self.clock: Clock = self.first.clock

    # -- POST ------------------------------------------------------------------------

    async def post(
        self,
        request: web.Request,
        served: RequestServed,
        headers: Mapping[str, str],
        body: bytes,
        decoded: Any,
    ) -> web.StreamResponse:
        """Serve one legacy POST (as `LegacyLane.post`).

        Raises:
            HttpError, RpcError: the pipeline answers them (an upstream's failure counted).
        """
        try:
            return await self._post(request, served, headers, body, decoded)
        except UpstreamError as exc:
            self.metrics.upstream_errors.labels(served.upstream, exc.kind).inc()
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
            return await self._initialize(served, headers, body, message)
        token, claims = self._session(headers, served)
        if not _to_a_server(message):  # what a server would answer 404 to, once ended
            await self._still_open(token, served)
        if isinstance(message, jsonrpc.Request):
            return await self._request(
                request, served, headers, body, decoded, message, (token, claims)
            )
        if isinstance(message, jsonrpc.Response):
            return await self._answered(request, served, headers, decoded, message, (token, claims))
        await self._everywhere(served, headers, body, claims)
        served.status, served.outcome = 202, "accepted"
        return web.Response(status=202)

    async def _request(
        self,
        request: web.Request,
        served: RequestServed,
        headers: Mapping[str, str],
        body: bytes,
        decoded: Any,
        message: jsonrpc.Request,
        session: tuple[str, EndpointClaims],
    ) -> web.StreamResponse:
        token, claims = session
        method, params = message.method, message.params
        if method == "ping":
            return self._reply(served, jsonrpc.result(message.id, {}), session)
        if method in LISTS:
            listed = await self.lists(served, method, params)
            return self._reply(served, jsonrpc.result(message.id, listed), session)
        if method == "logging/setLevel":
            replies = await self._everywhere(served, headers, body, claims)
            refused = [r for r in replies if isinstance(r, dict) and "error" in r]
            if refused and len(refused) == len(replies):  # none took it: as a server refuses
                return self._reply(served, {**refused[0], "id": message.id}, session)
            return self._reply(served, jsonrpc.result(message.id, {}), session)
        try:
            if method not in _TARGETED:
                raise MethodNotFound(f"Method not found: {method}")
            upstream = await self.owner_of(method, params, served.caller.principal)
            upstream = upstream or next(iter(self.members))  # malformed: its checks answer it
            lane, member = self._member(upstream, claims, served)
        except Answered as answered:  # a name no upstream shows: as a server answers it
            await self._still_open(token, served)
            reply = jsonrpc.result(message.id, answered.result)
            return self._reply(served, reply, session)
        except RpcError as refused_here:
            if isinstance(refused_here, UpstreamError) and not isinstance(
                refused_here, NotInSession
            ):
                raise  # a server could not be asked: answered as on an upstream's own path
            await self._still_open(token, served)
            # Answered as a server answers what it does not serve: an error, in a 200.
            served.failed(refused_here, status=200)
            error = rendered(refused_here, message.id).message
            assert error is not None
            return self._reply(served, error, session, outcome="error")
        return await lane.serve(request, served, headers, body, decoded, message, token, member)

    async def _answered(
        self,
        request: web.Request,
        served: RequestServed,
        headers: Mapping[str, str],
        decoded: Any,
        message: jsonrpc.Response,
        session: tuple[str, EndpointClaims],
    ) -> web.StreamResponse:
        """The client's answer to a question: the gateway's own (`answered_question`), or a
        server's, back to that server with the id it gave."""
        if legacy_asking.is_question(message.id):
            return await self.first.answered_question(served, message.id, decoded)
        token, claims = session
        found = endpoint_session.unmarked(message.id)
        if found is None or found[0] not in self.members or claims.member(found[0]) is None:
            log.info("legacy_answer_unclaimed", session=served.session)
            served.status, served.outcome = 202, "accepted"
            return web.Response(status=202)
        upstream, own = found
        lane, member = self._member(upstream, claims, served)
        decoded = {**decoded, "id": own}
        answer = jsonrpc.parse_message(decoded)
        body = jsonrpc.dumps(decoded)
        return await lane.serve(request, served, headers, body, decoded, answer, token, member)

    async def _everywhere(
        self,
        served: RequestServed,
        headers: Mapping[str, str],
        body: bytes,
        claims: EndpointClaims,
    ) -> list[dict[str, Any] | None]:
        """Send `body` (a notification, `logging/setLevel`) to every upstream's session:
        the reply of each that answered (None for a notification's, or none read); one
        that fails is told in the log and the rest still get it."""
        crossing = crossing_headers(headers)
        rid, wait_s = served.rid, self.settings.limits.hold_timeout_s

        async def send(upstream: str) -> dict[str, Any] | None:
            lane, member = self._member(upstream, claims, served, bind=False)
            answer = await lane.reach(member, served).post(member.session, body, crossing)
            if rid is None:
                await discard(answer)
                return None
            return await reply_of(answer, rid, self.clock, wait_s)

        names = claims.upstreams
        sent = await asyncio.gather(*(send(n) for n in names), return_exceptions=True)
        replies: list[dict[str, Any] | None] = []
        for upstream, outcome in zip(names, sent, strict=True):
            if isinstance(outcome, GatewayError):
                _omitted(upstream, served.method, outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                replies.append(outcome)
        return replies

    def _reply(
        self,
        served: RequestServed,
        reply: dict[str, Any],
        session: tuple[str, EndpointClaims],
        outcome: str = "complete",
    ) -> web.Response:
        """An answer of the endpoint's own (200), as the session's servers answer: one SSE
        event, or JSON."""
        token, claims = session
        if outcome == "complete":
            served.status, served.outcome = 200, "complete"
        data = jsonrpc.dumps(reply)
        if claims.streams:
            headers = {**SSE_HEADERS, SESSION_HEADER: token}
            return web.Response(status=200, body=sse.encode(data.decode()), headers=headers)
        return web.Response(status=200, body=data, headers={**_JSON, SESSION_HEADER: token})

    # -- initialize ------------------------------------------------------------------

    async def _initialize(
        self,
        served: RequestServed,
        headers: Mapping[str, str],
        body: bytes,
        message: jsonrpc.Request,
    ) -> web.StreamResponse:
        """Open a session of the client's with every upstream, and answer for them all."""
        lanes = self.members
        if self.first.streams.draining and any(m.upstream.replica_bound for m in lanes.values()):
            raise Draining("This replica is draining; send initialize again")
        crossing = crossing_headers(headers)
        names = list(lanes)
        opened = await asyncio.gather(
            *(self._open(n, body, crossing, message.id) for n in names), return_exceptions=True
        )
        results: dict[str, dict[str, Any]] = {}
        members: list[MemberSession] = []
        failed: GatewayError | None = None
        streams = False
        for name, got in zip(names, opened, strict=True):
            if isinstance(got, GatewayError):
                failed = failed or got
                _omitted(name, "initialize", got)
            elif isinstance(got, BaseException):
                raise got
            else:
                session, results[name], streamed = got
                streams = streams or streamed
                owner = self.settings.replica if lanes[name].upstream.replica_bound else ""
                members.append(MemberSession(name, session, owner))
        now = self.clock.wall_ms()
        claims = EndpointClaims(
            path=self.endpoint.path,
            members=tuple(members),
            principal=sessions.principal_tag(served.caller.principal),
            audience=self.settings.audience,
            created_ms=now,
            expires_ms=now + int(self.settings.legacy.session_ttl_s * 1000),
            declared=sessions.declared_of(message.params.get("capabilities")),
            streams=streams,
        )
        if failed is not None and (self.endpoint.on_upstream_down == DOWN_FAIL or not results):
            await self._end_all(served, headers, claims)
            raise failed
        token = endpoint_session.seal(self.codec, claims)
        served.session = self.first.log_id(token)
        for name in results:
            lanes[name].trail.opened(served, message.params)
        merged = merging.merged_initialize(results, self.server_info)
        return self._reply(served, jsonrpc.result(message.id, merged), (token, claims))

    async def _open(
        self, upstream: str, body: bytes, headers: Mapping[str, str], rid: jsonrpc.RequestId
    ) -> tuple[str | None, dict[str, Any], bool]:
        """`upstream`'s session for the client, its `initialize` result, and whether it
        answered with a stream.

        Raises:
            UpstreamRpcError: the server's own refusal; UpstreamError: any other failure.
        """
        answer = await self.members[upstream].upstream.initialize(body, headers)
        reply = await reply_of(answer, rid, self.clock, self.settings.limits.hold_timeout_s)
        if isinstance(reply, dict) and isinstance(reply.get("error"), dict):
            error = reply["error"]
            code, said = error.get("code"), error.get("message")
            if isinstance(code, int) and not isinstance(code, bool) and isinstance(said, str):
                raise UpstreamRpcError(code, said, error.get("data"))
        if answer.status != 200 or not isinstance(reply, dict):
            raise UpstreamError(f"{upstream} did not open a session (HTTP {answer.status})")
        result = reply.get("result")
        if not isinstance(result, dict):
            raise UpstreamError(f"{upstream} answered initialize without a result")
        if not sessions.valid_upstream_session(answer.session):
            raise UpstreamError(f"{upstream} gave a session id that is not visible ASCII")
        return answer.session, result, not isinstance(answer.body, bytes)

    # -- GET and DELETE --------------------------------------------------------------

    async def get(
        self, request: web.Request, served: RequestServed, headers: Mapping[str, str]
    ) -> web.StreamResponse:
        """Every upstream's standalone stream, merged; or one upstream's stream resumed
        (`Last-Event-ID`, as the events were marked)."""
        if not inbound.accepts(headers.get("accept", ""), "text/event-stream"):
            raise NotAcceptable("Accept must list text/event-stream")
        if self.settings.legacy.max_streams_per_principal == 0:
            raise NoGetStreams()
        token, claims = self._session(headers, served)
        last = headers.get("last-event-id")
        found = None if last is None else endpoint_session.unmarked_event(last)
        if found is not None and claims.member(found[0]) is not None:
            upstream, own = found
            lane, member = self._member(upstream, claims, served)
            resumed = {**headers, "last-event-id": own}
            return await lane.stream(request, served, resumed, token, member)
        if last is not None:  # no stream of this session's gave it: the streams anew
            log.info("legacy_resumption_unknown", session=served.session)
        fresh = {k: v for k, v in headers.items() if k != "last-event-id"}
        opened = {n: self._member(n, claims, served, bind=False) for n in claims.upstreams}
        end_at = stream_end(self.clock, claims.expires_ms, served.caller)
        return await merged_stream(request, served, fresh, token, self.first, opened, end_at)

    async def delete(
        self, request: web.Request, served: RequestServed, headers: Mapping[str, str]
    ) -> web.StreamResponse:
        """End every upstream's session; the id then leads to 404 wherever it is used."""
        token, claims = self._session(headers, served)
        await self.ended.end(self._digest(token), claims.expires_ms)
        statuses = await self._end_all(served, headers, claims)
        status = statuses[0] if statuses and len(set(statuses)) == 1 else 200
        return web.Response(status=status)

    async def _end_all(
        self, served: RequestServed, headers: Mapping[str, str], claims: EndpointClaims
    ) -> list[int]:
        """End each upstream's session of `claims`: the statuses of those that answered."""

        async def end(upstream: str) -> int:
            lane, member = self._member(upstream, claims, served, bind=False)
            return (await lane.end(served, headers, member)).status

        ended = await asyncio.gather(*(end(n) for n in claims.upstreams), return_exceptions=True)
        statuses = []
        for upstream, outcome in zip(claims.upstreams, ended, strict=True):
            if isinstance(outcome, int):
                statuses.append(outcome)
            elif isinstance(outcome, GatewayError):
                log.warning("endpoint_session_not_ended", upstream=upstream, error=str(outcome))
            else:
                raise outcome
        return statuses

    # -- the session -----------------------------------------------------------------

    def _session(
        self, headers: Mapping[str, str], served: RequestServed
    ) -> tuple[str, EndpointClaims]:
        """The session id sent and its claims (its log stand-in noted on `served`). Whether
        it has ended is the servers' to say where a request reaches one (their 404), and
        `_still_open`'s where the gateway answers itself.

        Raises:
            MissingSession (400), SessionNotFound (404)
        """
        token = headers.get(_SESSION_KEY)
        if token is None:
            raise MissingSession()
        served.session = self.first.log_id(token)
        claims = endpoint_session.open_session(
            self.codec,
            token,
            now_ms=self.clock.wall_ms(),
            principal=sessions.principal_tag(served.caller.principal),
            path=self.endpoint.path,
            audience=self.settings.audience,
        )
        if isinstance(claims, sessions.SessionIdRefusal):
            self._refuse(served, claims.reason)
        return token, claims

    async def _still_open(self, token: str, served: RequestServed) -> None:
        """Refuse a session the client ended (DELETE, on any replica): asked only where
        no server's session would say so (a store lookup, not on a call's path).

        Raises:
            SessionNotFound (404)
        """
        if await self.ended.ended(self._digest(token)):
            self._refuse(served, "ended")

    def _refuse(self, served: RequestServed, reason: str) -> NoReturn:
        self.metrics.refusals.labels(reason).inc()
        log.info("legacy_session_refused", reason=reason, session=served.session)
        self.first.trail.refused(served, reason)
        raise SessionNotFound()

    def _digest(self, token: str) -> str:
        """A session id's key in the marks of ended sessions: a keyed digest (the id is a
        bearer of the session)."""
        return hmac.new(self.settings.log_salt, token.encode(), hashlib.sha256).hexdigest()

    def _member(
        self, upstream: str, claims: EndpointClaims, served: RequestServed, *, bind: bool = True
    ) -> tuple[LegacyLane, sessions.SessionClaims]:
        """`upstream`'s lane and the claims of its session behind `claims` (`bind`: the
        request is `upstream`'s, on its record and in the log context).

        Raises:
            NotInSession: it did not open a session when the client's began.
        """
        member = claims.member(upstream)
        if member is None:
            raise NotInSession(
                f"upstream {upstream} could not be reached when this session began: "
                "send initialize again to reach it"
            )
        if bind:
            served.upstream = upstream
            log_context.bind(upstream=upstream)
        return self.members[upstream], member


def _omitted(upstream: str, method: str, error: GatewayError) -> None:
    log.warning(
        "endpoint_upstream_omitted",
        upstream=upstream,
        method=method,
        kind=type(error).__name__,
        error=str(error),
    )


def _to_a_server(message: jsonrpc.Message) -> bool:
    """Whether `message` goes to one server's session, which answers it 404 once ended: a
    request about one target, or an answer to a server's question."""
    if isinstance(message, jsonrpc.Request):
        return message.method in _TARGETED
    return (
        isinstance(message, jsonrpc.Response) and endpoint_session.unmarked(message.id) is not None
    )


def _as_it_is(event: sse.SseEvent) -> sse.SseEvent:
    return event  # each member's events were looked at as they were merged
