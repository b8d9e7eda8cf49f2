"""Questions a legacy server asked while no call of its session could take them.

A server may ask on a session no call holds: the official filesystem server asks for
`roots/list` right after `initialized`, before any call; another asks between calls,
or its question arrives as a call ends. Such a question belongs to the session's
caller (a session serves one caller, `gateway.upstream.pool`), so it is held here and
asked of that caller in the first round of the session's next call, before the call's
own request goes upstream (the server then works with what its caller answered).

A question nobody takes within the pool's bound (`pool.outside_question_s`) is answered
as outside any call (`gateway.protocol.outside`) and the session is retired: it
carries an answer its next caller never gave. Pings and anything that is not a
question for the client are answered at once by the transport, never held.

Data only: the transport holds and the pool times; no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.protocol.methods import INPUT as INPUT_METHODS


def is_question(message: dict[str, Any]) -> bool:
    """Whether a server message is a request of the client that only a person, a model or
    the client's roots can answer (one a call would turn into an input request)."""
    return "id" in message and message.get("method") in INPUT_METHODS


class HeldQuestions:
    """The questions held for one session's next call, in the order they came."""

    __slots__ = ("items", "generation", "lapsed", "on_held")

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []  # read, not changed, by others
        # Counts the takes: a bound armed for questions a call has taken since is void.
        self.generation = 0
        # A question lapsed unasked (answered as outside any call): the session is spent.
        self.lapsed = False
        # Told when a question is held while none was (the pool arms the bound).
        self.on_held: Callable[[], None] | None = None

    def __bool__(self) -> bool:
        return bool(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def hold(self, message: dict[str, Any]) -> None:
        first = not self.items
        self.items.append(message)
        if first and self.on_held is not None:
            self.on_held()

    def take(self) -> list[dict[str, Any]]:
        """Every question held, now the caller's to ask (none is held after)."""
        items, self.items = self.items, []
        if items:
            self.generation += 1
        return items

    def lapse(self) -> list[dict[str, Any]]:
        """Every question held, to be answered as outside any call: the session is spent."""
        items = self.take()
        if items:
            self.lapsed = True
        return items
