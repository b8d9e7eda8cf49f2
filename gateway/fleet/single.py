"""A replica alone is a fleet of one: `SingleReplica`, the `Bus` it is handed, so the call
core, tasks and the legacy lane never ask whether there is a fleet.

A replica alone keeps its records in its own process (`memory://`): nobody else holds a
call, a task or a session of its, and its store never loses a record without the replica
losing its calls with it. So, as its bus:
- its lease never lapses (no heartbeat to miss): one term for the process's life;
- nobody is taken for dead (`alive`): without heartbeats nobody's death can be judged,
  and there is nobody else, so nothing is claimed from the dead or taken over;
- every replica's records are in the store as it is now (`written_back`);
- nothing reaches another replica: `deliver` finds nobody, `send` and `reply` go nowhere,
  and no reply ever comes (`receive`);
- it writes its own release's formats, or those the operator pinned (`level`).

What the call core does differently alone (no forwarding, no outcome kept, no wait
counted in heartbeats) is chosen with it, once, where the gateway is composed
(`gateway.calls.replicas`, `gateway.compose`). No I/O here.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from gateway.errors import StoreError
from gateway.fleet import messages
from gateway.protocol import formats
from gateway.protocol.formats import FleetLevel
from gateway.store.base import Delivery

#: The one lease term of a replica alone.
TERM = 0


class SingleReplica:
    """The fleet of one (implements `gateway.fleet.port.Bus`)."""

    reply_ttl_ms = 0  # no reply ever travels

    def __init__(self, replica_id: str, level: FleetLevel | None = None) -> None:
        self.replica_id = replica_id
        self.level = level or formats.single()

    def new_reply_key(self) -> str:
        return f"reply:{self.replica_id}"

    async def alive(self, replica_id: str) -> bool:
        return True  # nobody is taken for dead

    async def written_back(self, replica_id: str) -> bool | None:
        return True  # the store loses nothing its replica keeps

    async def send(self, replica_id: str, payload: str) -> None:
        return None  # nobody else to hear it

    async def deliver(self, replica_id: str, payload: str) -> bool:
        return False  # nobody took it

    def delivery(self, replica_id: str, payload: str) -> Delivery:
        """Never asked: a retry is forwarded only in a fleet (`gateway.calls.replicas`).

        Raises:
            StoreError: always; there is no other replica to push a retry to.
        """
        raise StoreError("a replica alone forwards nothing")

    async def retract(self, replica_id: str, payload: str) -> bool:
        return False

    def holds_lease(self) -> bool:
        return True

    def lease_term(self) -> int | None:
        return TERM

    async def reply(self, key: str, payload: str) -> None:
        return None

    async def receive(self, key: str) -> str | None:
        return None

    # -- as a resource of the gateway (`gateway.app`), as `RedisBus` is ---------------------

    def start(
        self,
        handler: Callable[[messages.Message], Coroutine[Any, Any, None]],
        *,
        on_data_loss: Callable[[], Coroutine[Any, Any, None]],
        on_lease_regained: Callable[[], Coroutine[Any, Any, None]],
    ) -> None:
        """Nothing comes in: no inbox, no store to lose its data, no lease to regain."""

    async def close(self) -> None:
        return None
