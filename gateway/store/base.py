"""The store interface every backend implements, and what it carries besides records.

The record itself and its life (park, claim, steal, take, give back, restore, forget,
lapse) are the sans-IO `gateway.protocol.record`: every backend carries out its table.
A record is written when a call suspends, claimed atomically when its retry arrives (a
round resumes at most once), and deleted when the call ends. Plain requests never touch
the store.
"""

from __future__ import annotations

from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from gateway.protocol.record import GRACE_MS, PARKED, RECORD_VERSION, RESUMING, SuspendedCall

if TYPE_CHECKING:
    from gateway.observability import Metrics

__all__ = [
    "GRACE_MS",
    "PARKED",
    "RECORD_VERSION",
    "RESUMING",
    "Delivery",
    "Kept",
    "Reply",
    "SuspendedCall",
    "SuspendedCallStore",
    "TimedStore",
]


@dataclass(frozen=True, slots=True)
class Kept:
    """A resumed round's outcome (its JSON), kept for `ttl_ms` with the write that ends
    the round: the next round's record, or the deletion of a call that completed. A
    replica killed in between cannot leave the round resumed without its outcome (see
    `gateway.calls.outcomes`)."""

    round: int
    outcome: bytes
    ttl_ms: int


@dataclass(frozen=True, slots=True)
class Reply:
    """A forwarded retry's reply (an encoded fleet message), pushed onto the list `key`
    that its receiving replica reads, kept there `ttl_ms`."""

    key: str
    payload: str
    ttl_ms: int


@dataclass(frozen=True, slots=True)
class Delivery:
    """A message for another replica's inbox (`inbox_key`), pushed with a claim
    (`SuspendedCallStore.claim_delivering`) only while that replica's heartbeat key
    exists: a retry forwarded to its call's owner in the claim's own round trip."""

    heartbeat_key: str
    inbox_key: str
    payload: str
    ttl_ms: int


class SuspendedCallStore(Protocol):
    """Backends: `MemoryStore` (one replica), Redis (a fleet)."""

    #: Whether every operation runs to its end without waiting (in this process): a
    #: request cancelled meanwhile cannot cut one short.
    in_process: bool

    async def park(self, record: SuspendedCall) -> None:
        """Create or replace the record; it lapses `GRACE_MS` after `record.deadline_ms`.

        Raises: StoreError.
        """
        ...

    async def get(self, call_id: str) -> SuspendedCall | None:
        """The live record, or None. Raises: StoreError."""
        ...

    async def claim(self, call_id: str, round_: int, claimer: str = "") -> SuspendedCall | None:
        """Atomically move a record parked at `round_` to resuming by `claimer`, and
        return it.

        Returns None when there is no such record, it waits in another round, or
        the round was already claimed: each round resumes at most once.
        Raises: StoreError.
        """
        ...

    async def claim_delivering(
        self, call_id: str, round_: int, claimer: str, delivery: Delivery
    ) -> tuple[SuspendedCall | None, bool | None]:
        """`claim`, and `delivery` pushed in the same step once the claim succeeds, if its
        replica has a heartbeat: (record, True) when it was pushed, (record, False) when
        the heartbeat is missing. (record, None) when this backend cannot do both in one
        step (a Cluster keeps the keys in different slots): nothing was pushed, the caller
        delivers. (None, None) when the claim fails, and nothing is pushed.

        Raises: StoreError.
        """
        ...

    async def steal(
        self, call_id: str, round_: int, dead: str, claimer: str
    ) -> SuspendedCall | None:
        """Atomically hand a round `dead` claimed (and died resuming) to `claimer`;
        None unless the record is resuming `round_` for `dead`. Raises: StoreError.
        """
        ...

    async def delete(self, call_id: str, kept: Kept | None = None) -> None:
        """Forget the record, keeping `kept` in the same step. Raises: StoreError."""
        ...

    async def forget(
        self, call_id: str, principal: str, kept: Kept | None = None, reply: Reply | None = None
    ) -> bool:
        """`delete` and `unhold` together, in one round trip where the backend can (a
        Cluster keeps the two keys in different slots), and `reply` pushed in the same
        write where it can: True when it was, else the caller sends it. Raises: StoreError."""
        ...

    async def hold(self, principal: str, call_id: str, until_ms: int, cap: int) -> bool:
        """Count `call_id` among `principal`'s parked calls (across the fleet) until
        `until_ms`, if fewer than `cap` are; False when the principal is at its cap.
        Holding a call already held only moves its time.

        Raises: StoreError.
        """
        ...

    async def unhold(self, principal: str, call_id: str) -> None:
        """The call no longer counts for its principal. Raises: StoreError."""
        ...

    async def park_held(
        self, record: SuspendedCall, until_ms: int, cap: int, kept: Kept | None = None
    ) -> bool:
        """`hold` for `record.principal`, then `park` (with `kept`, in the same write), in
        one step (one round trip where the backend can): False, and nothing parked, when
        the principal is at its cap.

        Raises: StoreError.
        """
        ...

    async def recall(self, call_id: str, round_: int) -> bytes | None:
        """The outcome kept for a round (`Kept`), if any. Raises: StoreError."""
        ...

    async def give_back(self, claim: SuspendedCall, *, untake: bool = False) -> bool:
        """Give back a round claimed but not resumed (its owner refused it untouched):
        `claim` is what `claim` or `steal` returned. Parked again, for the client's next
        retry, if that very claim (its claimer and attempt) still holds the round; False
        otherwise. With `untake`, the record names `claim.owner` again, in the same write:
        a takeover that failed after its `take` may have reached the store.

        Raises: StoreError."""
        ...

    async def take(self, record: SuspendedCall, owner: str) -> bool:
        """Name `owner` as the call's owner from now on (a takeover) while `record`, the
        claim its takeover was given, still holds the round; False if the record is gone
        or the round was ended meanwhile (its owner lived: it parked the next round or
        finished the call). The replica named before learns from it that the call is no
        longer its.

        Raises: StoreError.
        """
        ...

    async def restore(self, record: SuspendedCall, until_ms: int) -> bool:
        """Write back the record of a call its owner still holds, after the store lost it:
        only if no record of the call exists (one that does may be another replica's
        now), and held for its principal. False when one exists.

        Raises: StoreError.
        """
        ...

    async def ping(self) -> bool: ...

    async def close(self) -> None: ...


class TimedStore:
    """A store whose every operation is timed and counted (see `gateway.observability`).
    Each hands on the coroutine of `Metrics.timed_store`, not one of its own around it."""

    def __init__(self, inner: SuspendedCallStore, metrics: Metrics) -> None:
        self.inner = inner
        self.metrics = metrics
        self.in_process = inner.in_process

    def park(self, record: SuspendedCall) -> Coroutine[Any, Any, None]:
        return self.metrics.timed_store("park", self.inner.park(record))

    def get(self, call_id: str) -> Coroutine[Any, Any, SuspendedCall | None]:
        return self.metrics.timed_store("get", self.inner.get(call_id))

    def claim(
        self, call_id: str, round_: int, claimer: str = ""
    ) -> Coroutine[Any, Any, SuspendedCall | None]:
        return self.metrics.timed_store("claim", self.inner.claim(call_id, round_, claimer))

    def claim_delivering(
        self, call_id: str, round_: int, claimer: str, delivery: Delivery
    ) -> Coroutine[Any, Any, tuple[SuspendedCall | None, bool | None]]:
        return self.metrics.timed_store(
            "claim", self.inner.claim_delivering(call_id, round_, claimer, delivery)
        )

    def steal(
        self, call_id: str, round_: int, dead: str, claimer: str
    ) -> Coroutine[Any, Any, SuspendedCall | None]:
        return self.metrics.timed_store("steal", self.inner.steal(call_id, round_, dead, claimer))

    def delete(self, call_id: str, kept: Kept | None = None) -> Coroutine[Any, Any, None]:
        return self.metrics.timed_store("delete", self.inner.delete(call_id, kept))

    def forget(
        self, call_id: str, principal: str, kept: Kept | None = None, reply: Reply | None = None
    ) -> Coroutine[Any, Any, bool]:
        return self.metrics.timed_store(
            "forget", self.inner.forget(call_id, principal, kept, reply)
        )

    def hold(
        self, principal: str, call_id: str, until_ms: int, cap: int
    ) -> Coroutine[Any, Any, bool]:
        return self.metrics.timed_store("hold", self.inner.hold(principal, call_id, until_ms, cap))

    def unhold(self, principal: str, call_id: str) -> Coroutine[Any, Any, None]:
        return self.metrics.timed_store("unhold", self.inner.unhold(principal, call_id))

    def park_held(
        self, record: SuspendedCall, until_ms: int, cap: int, kept: Kept | None = None
    ) -> Coroutine[Any, Any, bool]:
        return self.metrics.timed_store("park", self.inner.park_held(record, until_ms, cap, kept))

    def recall(self, call_id: str, round_: int) -> Coroutine[Any, Any, bytes | None]:
        return self.metrics.timed_store("recall", self.inner.recall(call_id, round_))

    def give_back(self, claim: SuspendedCall, *, untake: bool = False) -> Coroutine[Any, Any, bool]:
        return self.metrics.timed_store("give_back", self.inner.give_back(claim, untake=untake))

    def take(self, record: SuspendedCall, owner: str) -> Coroutine[Any, Any, bool]:
        return self.metrics.timed_store("take", self.inner.take(record, owner))

    def restore(self, record: SuspendedCall, until_ms: int) -> Coroutine[Any, Any, bool]:
        return self.metrics.timed_store("restore", self.inner.restore(record, until_ms))

    async def ping(self) -> bool:
        return await self.inner.ping()

    async def close(self) -> None:
        await self.inner.close()
