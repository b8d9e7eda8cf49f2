"""How long a session holds a question for its next call, and what becomes of one no
call came to ask.

A session holds the questions its server asked while no call of it ran
(`gateway.upstream.held`); its caller's next call asks them. One that no call asks
within `pool.outside_question_s` is answered as outside any call
(`gateway.protocol.outside`), so the server never waits for ever, and the session is
retired (`retire`: the pool closes it now if it is idle, else when its call gives it
back): it carries an answer its caller never gave. A session that closes answers what
it still holds the same way first: every question the server asked gets one answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from gateway.aio import spawn
from gateway.clock import Clock
from gateway.errors import UpstreamError
from gateway.protocol.outside import answer_outside_call
from gateway.upstream.port import PooledSession

log = structlog.get_logger("gateway.upstream")


class Unasked:
    def __init__(
        self,
        name: str,
        clock: Clock,
        bound_s: float,
        retire: Callable[[PooledSession], None],
    ) -> None:
        self.name = name  # the upstream's, for logs
        self.clock = clock
        self.bound_s = bound_s
        self.retire = retire

    def watch(self, session: PooledSession) -> None:
        """Bound how long the session holds a question for its next call (one may have
        come already, while it opened)."""
        session.held.on_held = lambda: self._arm(session)
        if session.held:
            self._arm(session)

    def _arm(self, session: PooledSession) -> None:
        asked = session.held.generation
        self.clock.call_at(
            self.clock.monotonic() + self.bound_s, lambda: self._lapse(session, asked)
        )

    def _lapse(self, session: PooledSession, asked: int) -> None:
        if session.held.generation != asked:
            return  # taken by a call meanwhile (a later question has a bound of its own)
        questions = session.held.lapse()
        if not questions:
            return
        log.info(
            "upstream_question_unasked",
            upstream=self.name,
            methods=sorted({str(q.get("method")) for q in questions}),
            waited_s=self.bound_s,
            detail="no call of the session's caller came to ask it: answered as outside "
            "any call, and the session retired",
        )
        spawn(self.answer(session, questions), name=f"upstream-unasked-{self.name}")
        self.retire(session)

    async def answer(self, session: PooledSession, questions: list[dict[str, Any]]) -> None:
        """Answer `questions` as outside any call, on the session that asked them."""
        for question in questions:
            answer = answer_outside_call(question)
            if answer is None:
                continue
            try:
                await session.send(answer)
            except UpstreamError as exc:
                log.info("upstream_answer_failed", upstream=self.name, error=str(exc))
                return

    async def close(self, session: PooledSession, *, end: bool = True) -> None:
        """Close a session, its held questions answered first."""
        await self.answer(session, session.held.lapse())
        await session.close(end=end)
