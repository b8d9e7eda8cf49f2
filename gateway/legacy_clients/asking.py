"""The gateway's own questions to a 2025 client, asked before its call goes upstream.

A `calling` seam (`gateway.seams`) may ask a 2025 client something itself (an
approval's `elicitation/create`) through `RequestServed.asker`, a `StreamAsker` the lane
hands it for a call of a client whose session can be asked (`Questions.open`: every live
replica knows the gateway's questions, `formats.Kind.GATEWAY_QUESTION`). Asking opens the
POST's answer as an SSE stream (a 2025 client accepts both JSON and SSE) and sends the
question on it as a server would, with an id of the gateway's own that names the replica
waiting (`gateway.protocol.legacy_asking`); the call then goes upstream as usual and its
answer follows on the same stream (the lane's `_onto`).

The client answers with a POST of its own (a JSON-RPC response, with its session id),
which may reach any replica: the lane recognises the id, never sends it upstream, and
hands it here (`Questions.hand`, answered 202 as a server answers a response): to the
question waiting on this replica, or over the fleet bus to the replica the id names
(`messages.ClientAnswer`, served by `Questions.serve`). An answer nobody waits for (the
question ended, another session's, a replica gone) is logged and dropped.

A question waits `limits.suspension_ttl_s` at most (the bound of any question to a
client), then `ask` raises `QuestionExpired`; a stream the client has left raises
`QuestionUndelivered`. Both are `Unanswered`, which the lane answers on the stream as the
call's error. Nothing here decides whether to ask, nor what an answer means.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import structlog

from gateway import clock as clocks
from gateway.clock import Clock
from gateway.errors import RpcError, StoreError
from gateway.fleet import messages
from gateway.fleet.port import Bus
from gateway.legacy_clients.relay import Relay
from gateway.protocol import formats, jsonrpc, sse
from gateway.protocol.formats import Kind
from gateway.protocol.legacy_asking import QuestionId, new_question, question_of

log = structlog.get_logger("gateway.legacy")


class Unanswered(RpcError):
    """The gateway asked a 2025 client a question of its own and got no answer: the call
    it was asked for does not go upstream."""

    http_status = 408
    default_message = "The client did not answer the gateway's question"
    reason: ClassVar[str] = ""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message, {"reason": self.reason})


class QuestionExpired(Unanswered):
    reason = "suspension_ttl_s"
    default_message = "The client did not answer the gateway's question in time"


class QuestionUndelivered(Unanswered):
    reason = "client_gone"
    default_message = "The client's stream ended before it answered the gateway's question"


class Questions:
    """The gateway's questions waiting for their answers on this replica, and where an
    answer that came here goes."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.replica = bus.replica_id
        self._waiting: dict[str, tuple[str, asyncio.Future[dict[str, Any]]]] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def open(self) -> bool:
        """Whether a client may be asked now: every live replica would hand its answer on
        (none of the previous release, which would pass it on to the server)."""
        return self.bus.level.served(Kind.GATEWAY_QUESTION)

    def waiting(self, session: str) -> tuple[QuestionId, asyncio.Future[dict[str, Any]]]:
        """A new question, asked on `session` (its log stand-in), and its answer to come."""
        question = new_question(self.replica)
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[str(question)] = (session, answer)
        return question, answer

    def forget(self, question: QuestionId) -> None:
        self._waiting.pop(str(question), None)

    def take(self, question: str, session: str, answer: dict[str, Any]) -> bool:
        """Give `answer` to `question` if it waits here and was asked on `session`."""
        waiting = self._waiting.get(question)
        if waiting is None or waiting[0] != session or waiting[1].done():
            return False
        waiting[1].set_result(answer)
        return True

    async def hand(self, rid: str, session: str, answer: dict[str, Any]) -> str:
        """A client's answer to the gateway question `rid`, on `session`, taken here or
        passed to the replica waiting for it; how it went: `taken`, `passed` or
        `unclaimed` (nobody waits for it, or the bus failed)."""
        question = question_of(rid)
        if question is None:
            how = "unclaimed"
        elif question.replica == self.replica:
            how = "taken" if self.take(rid, session, answer) else "unclaimed"
        else:
            how = await self._pass(question, messages.ClientAnswer(rid, session, answer))
        if how == "unclaimed":
            log.info("legacy_answer_unclaimed", session=session)
        return how

    async def _pass(self, question: QuestionId, message: messages.ClientAnswer) -> str:
        bus = self.bus
        level = bus.level.level if bus.level.known(Kind.GATEWAY_QUESTION) else formats.LEVEL
        payload = messages.encode(message, formats.written(Kind.GATEWAY_QUESTION, level))
        try:
            delivered = await bus.deliver(question.replica, payload)
        except StoreError as exc:
            log.warning("legacy_answer_not_passed", error=str(exc))
            return "unclaimed"
        return "passed" if delivered else "unclaimed"

    async def serve(self, message: messages.ClientAnswer) -> None:
        """An answer another replica passed here (this replica's inbox)."""
        if not self.take(message.question, message.session, message.answer):
            log.info("legacy_answer_unclaimed", session=message.session, passed=True)


class StreamAsker:
    """What a `calling` seam asks a 2025 client with, for one call's POST
    (`gateway.seams.Asker`): its questions go on `relay`, opened at the first."""

    __slots__ = ("questions", "relay", "session", "wait_s", "clock", "_declared", "asked")

    def __init__(
        self,
        questions: Questions,
        relay: Relay,
        *,
        declared: tuple[str, ...] | None,
        session: str,
        wait_s: float,
        clock: Clock,
    ) -> None:
        """`relay`: the POST's answer as a stream, not yet started; `declared`: what the
        client declared at `initialize` (`legacy_session.declared_of`; None: its session id
        does not say); `session`: its
        log stand-in; `wait_s`: how long a question waits for its answer."""
        self.questions = questions
        self.relay = relay
        self.session = session
        self.wait_s = wait_s
        self.clock = clock
        self._declared = None if declared is None else frozenset(declared)
        self.asked = 0

    def declared(self, capability: str) -> bool | None:
        """Whether the client declared `capability` at `initialize` (`elicitation`: with
        form mode allowed; `elicitation.url`: URL mode); None when its session id does not
        say (one minted while the fleet wrote the previous release's format)."""
        return None if self._declared is None else capability in self._declared

    async def ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send the client the request `method` with `params` on the call's stream and
        wait for its JSON-RPC response (a dict with `result` or `error`).

        Raises:
            QuestionExpired: no answer within `wait_s`.
            QuestionUndelivered: the client's stream is gone.
        """
        relay = self.relay
        question, answer = self.questions.waiting(self.session)
        rid = str(question)
        try:
            try:
                if not relay.started:
                    await relay.start()
                request = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
                await relay.write(sse.encode(jsonrpc.dumps(request).decode()))
            except ConnectionResetError as exc:
                raise QuestionUndelivered() from exc
            self.asked += 1
            log.info("legacy_question_asked", method=method, session=self.session)
            try:
                async with clocks.timeout(self.clock, self.wait_s):
                    given = await answer
            except TimeoutError:
                log.info("legacy_question_expired", method=method, session=self.session)
                raise QuestionExpired() from None
        finally:
            self.questions.forget(question)
        log.info("legacy_question_answered", method=method, error="error" in given)
        return given
