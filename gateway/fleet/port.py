"""How replicas reach each other: the `Bus`, the one port that the call core, tasks and
the legacy lane are handed.

Messages (`gateway.fleet.messages`, encoded) go into a replica's inbox (`send`,
`deliver`; its replica hands each over decoded, once, to whoever serves its type), and
answers come back on a reply list of the sender's own (`new_reply_key`, `reply`,
`receive`). The legacy lane's forwarding uses that much, with `alive` and the fleet's
format `level`; the call core also needs the store's side of a forward (`delivery`,
`retract`), the lease and what a store that lost its data has been given back
(`holds_lease`, `lease_term`, `written_back`).

`gateway.fleet.redis_bus.RedisBus` implements it; `gateway.fleet.single.SingleReplica`
is a replica alone's (the fleet of one); `tests.fakes.fleet.MemoryBus` is its in-memory
twin. A port, not a transport: no I/O here.
"""

from __future__ import annotations

from typing import Protocol

from gateway.protocol.formats import FleetLevel
from gateway.store.base import Delivery


class Bus(Protocol):
    """How replicas reach each other. Every method may raise StoreError."""

    replica_id: str
    reply_ttl_ms: int  # how long a reply waits on its key to be read
    level: FleetLevel  # the fleet's format level: which version of a message to write

    def new_reply_key(self) -> str: ...

    async def alive(self, replica_id: str) -> bool: ...

    async def written_back(self, replica_id: str) -> bool | None:
        """Whether `replica_id`'s records are all in the store as it is now: True once it
        has written them back since the store last lost its data (or never had to),
        False while it is still at it or has not yet noticed the loss, None while it has
        no heartbeat (gone, or not yet beaten since the loss)."""
        ...

    async def send(self, replica_id: str, payload: str) -> None:
        """Into `replica_id`'s inbox."""
        ...

    async def deliver(self, replica_id: str, payload: str) -> bool:
        """Into `replica_id`'s inbox if it is alive now; False, and nothing sent, if not."""
        ...

    def delivery(self, replica_id: str, payload: str) -> Delivery:
        """`deliver`'s push, for a store to make in the step that claims the round
        (`SuspendedCallStore.claim_delivering`)."""
        ...

    async def retract(self, replica_id: str, payload: str) -> bool:
        """Take back a message `replica_id` has not read; False once it has."""
        ...

    def holds_lease(self) -> bool:
        """Whether this replica's heartbeat is surely in the store: it may serve its calls."""
        ...

    def lease_term(self) -> int | None:
        """While this replica holds its lease, which unbroken stretch of it this is (a new
        one each time the lease is regained after a lapse); None without it. Within one
        term no other replica can have judged this one dead and taken a call over."""
        ...

    async def reply(self, key: str, payload: str) -> None: ...

    async def receive(self, key: str) -> str | None:
        """The next reply on `key`, or None after a short wait."""
        ...
