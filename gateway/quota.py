"""How many of one kind of thing this replica holds at once: in all, and per principal.

Listens (`gateway.listens`), the legacy lane's GET streams
(`gateway.legacy_clients.streams`) and tasks (`gateway.tasks.service`) each cap what
their callers hold here twice: a total for the replica (past it, 503: another replica
may serve) and a share per principal (past it, 429: one caller cannot take the whole
replica while others are still served). `Quota` is that count, written once: its owner
names the two refusals.

It counts and refuses at once; it must not wait, nor know what it counts. (Parked calls
are counted in the store, fleet-wide: not here.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Quota:
    """A count of what is held, capped at `total` in all and `per_principal` for each."""

    __slots__ = ("total", "per_principal", "_full", "_busy", "_held", "_by")

    def __init__(
        self,
        total: int,
        per_principal: int,
        *,
        full: Callable[[], Exception],
        busy: Callable[[], Exception],
    ) -> None:
        """`full`: the refusal once `total` are held; `busy`: once the principal holds
        `per_principal` (each a no-argument callable, an error class most often)."""
        self.total = total
        self.per_principal = per_principal
        self._full = full
        self._busy = busy
        self._held = 0
        self._by: Counter[str] = Counter()

    def __len__(self) -> int:
        return self._held

    def of(self, principal: str) -> int:
        """How many `principal` holds."""
        return self._by[principal]

    def take(self, principal: str) -> None:
        """Count one more of `principal`'s, within both caps.

        Raises:
            the `full` error: `total` are held already (checked first).
            the `busy` error: `principal` holds `per_principal` already.
        """
        if self._held >= self.total:
            raise self._full()
        if self._by[principal] >= self.per_principal:
            raise self._busy()
        self.add(principal)

    def add(self, principal: str) -> None:
        """Count one more of `principal`'s whatever the caps: for what is held here already
        and cannot be refused (a task carried on from a replica that died)."""
        self._held += 1
        self._by[principal] += 1

    def release(self, principal: str) -> None:
        """One of `principal`'s is let go."""
        self._held -= 1
        left = self._by[principal] - 1
        if left > 0:
            self._by[principal] = left
        else:
            del self._by[principal]

    @contextmanager
    def held(self, principal: str) -> Iterator[None]:
        """One of `principal`'s is counted while the block runs (`take`, then `release`).

        Raises:
            as `take`.
        """
        self.take(principal)
        try:
            yield
        finally:
            self.release(principal)
