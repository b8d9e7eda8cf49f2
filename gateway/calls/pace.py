"""How long a round waits after a question for its siblings, learned per tool.

A legacy server asks the questions of one `asyncio.gather` back to back; a round
should carry all of them, but a tool that asks one question at a time should not
pay a wait for siblings that never come. `Pace` keeps, per upstream target, how
many rounds in a row carried a single question although the whole window was
waited out. A target is *solitary* once `learn_after` such rounds were seen: its
rounds close as soon as nothing more is buffered for the call (see
`Runner._read`). A sibling that shows up late (after a solitary round closed)
or inside a window makes the target *bursty* again, and it waits the window
until it has proved solitary anew. `limits.coalesce_ms` is the window, an upper
bound on any wait.

Pure bookkeeping: no I/O, no clock.
"""

from __future__ import annotations

from collections import OrderedDict

Target = tuple[str, str, str | None]  # (upstream, method, tool / prompt / resource)

#: Rounds in a row with a lone question before a target's rounds stop waiting.
LEARN_AFTER = 8
#: Targets remembered (least recently used forgotten first): bounds memory whatever
#: names clients send.
MAX_TARGETS = 4096


class Pace:
    def __init__(
        self, window_s: float, *, learn_after: int = LEARN_AFTER, max_targets: int = MAX_TARGETS
    ) -> None:
        self.window_s = window_s
        self.learn_after = learn_after
        self.max_targets = max_targets
        self._lone_rounds: OrderedDict[Target, int] = OrderedDict()

    def solitary(self, target: Target) -> bool:
        """Whether the target's rounds close without waiting the window."""
        return self._lone_rounds.get(target, 0) >= self.learn_after

    def grace_s(self, target: Target) -> float:
        """How long to wait after a question for the next one."""
        return 0.0 if self.solitary(target) else self.window_s

    def round_closed(self, target: Target, questions: int) -> None:
        """A round was answered with `questions` questions after its wait."""
        if questions > 1:
            self._set(target, 0)
        elif not self.solitary(target):
            self._set(target, self._lone_rounds.get(target, 0) + 1)

    def sibling_late(self, target: Target) -> None:
        """A question reached a call after its round had closed: wait for siblings again."""
        self._set(target, 0)

    def _set(self, target: Target, count: int) -> None:
        self._lone_rounds[target] = count
        self._lone_rounds.move_to_end(target)
        while len(self._lone_rounds) > self.max_targets:
            self._lone_rounds.popitem(last=False)
