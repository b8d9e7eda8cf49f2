"""Replicas in one process: an in-memory bus (implements `gateway.fleet.port.Bus`).

`Network` knows which replicas are alive and hands each inbox message, decoded once, to
the owning replica's handler (`serve_forwarded`, an `OwnerSide`'s `serve`) in a task of its
own, as the Redis bus does (one that does not decode is dropped, as there);
`OneTripStore` pushes a forward with the claim of its round, as the Redis store does.
A replica that is `kill`ed stops beating and receives nothing more; its calls
stay where they were, as after `kill -9`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import defaultdict
from collections.abc import Callable, Coroutine
from typing import Any

from gateway import clock as clocks
from gateway.aio import spawn
from gateway.clock import Clock
from gateway.fleet import messages
from gateway.protocol import formats
from gateway.store.base import Delivery, SuspendedCall
from gateway.store.memory import MemoryStore

POLL_S = 1.0

Handler = Callable[[messages.Message], Coroutine[Any, Any, None]]


class Network:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.handlers: dict[str, Handler] = {}
        self.alive: set[str] = set()
        self.cut_off: set[str] = set()  # alive, but unable to renew their lease
        self.terms: defaultdict[str, int] = defaultdict(int)  # lease terms (`reconnect`)
        self.stalled: set[str] = set()  # replicas whose inbox holds what it is sent
        self.held: defaultdict[str, list[str]] = defaultdict(list)
        self.replies: defaultdict[str, asyncio.Queue[str]] = defaultdict(asyncio.Queue)
        self.delivered: list[tuple[str, messages.Message]] = []
        self.undecoded: list[tuple[str, str]] = []  # dropped: no replica reads them
        self.polls: asyncio.Queue[str] = asyncio.Queue()  # reply keys a receiver found empty
        self.bus_deliveries: list[str] = []  # replicas a bus `deliver` was asked to reach
        # Replicas still writing back their records after the store lost its data.
        self.writing_back: set[str] = set()
        self._keys = itertools.count(1)

    def join(self, replica_id: str, handler: Handler) -> None:
        self.handlers[replica_id] = handler
        self.alive.add(replica_id)

    def kill(self, replica_id: str) -> None:
        self.alive.discard(replica_id)

    def data_lost(self) -> None:
        """The store lost its data: every live replica has its records to write back."""
        self.writing_back |= self.alive

    def written_back(self, replica_id: str) -> None:
        """`replica_id` wrote back its records (its heartbeat says so, as the bus's does)."""
        self.writing_back.discard(replica_id)

    def reconnect(self, replica_id: str) -> None:
        """Back from being cut off: its lease regained, in a new term."""
        self.cut_off.discard(replica_id)
        self.terms[replica_id] += 1

    def bus(self, replica_id: str) -> MemoryBus:
        return MemoryBus(self, replica_id)

    def push(self, replica_id: str, payload: str) -> None:
        """Into a replica's inbox: read at once in a task of its own, held while it is
        stalled, dropped once it is dead (as nobody reads a dead replica's inbox)."""
        try:
            message = messages.decode(payload)
        except ValueError:
            self.undecoded.append((replica_id, payload))
            return
        self.delivered.append((replica_id, message))
        if replica_id in self.stalled:  # alive, but not reading its inbox yet
            self.held[replica_id].append(payload)
        elif replica_id in self.alive:
            spawn(self.handlers[replica_id](message), name=f"inbox-{replica_id}")


class MemoryBus:
    def __init__(self, network: Network, replica_id: str) -> None:
        self.network = network
        self.replica_id = replica_id
        self.reply_ttl_ms = 120_000
        self.level = formats.single()  # one release: its own formats

    def new_reply_key(self) -> str:
        return f"reply:{self.replica_id}:{next(self.network._keys)}"

    async def alive(self, replica_id: str) -> bool:
        return replica_id in self.network.alive

    async def written_back(self, replica_id: str) -> bool | None:
        if replica_id not in self.network.alive:
            return None
        return replica_id not in self.network.writing_back

    async def send(self, replica_id: str, payload: str) -> None:
        self.network.push(replica_id, payload)

    async def deliver(self, replica_id: str, payload: str) -> bool:
        self.network.bus_deliveries.append(replica_id)
        if replica_id not in self.network.alive:
            return False
        await self.send(replica_id, payload)
        return True

    def delivery(self, replica_id: str, payload: str) -> Delivery:
        return Delivery(f"beat:{replica_id}", f"inbox:{replica_id}", payload, self.reply_ttl_ms)

    def holds_lease(self) -> bool:
        return self.replica_id not in self.network.cut_off

    def lease_term(self) -> int | None:
        return self.network.terms[self.replica_id] if self.holds_lease() else None

    async def retract(self, replica_id: str, payload: str) -> bool:
        held = self.network.held[replica_id]
        if payload in held:
            held.remove(payload)
            return True
        return False

    async def reply(self, key: str, payload: str) -> None:
        self.network.replies[key].put_nowait(payload)

    async def receive(self, key: str) -> str | None:
        """The next reply, or None after `POLL_S` on the network's clock (as BLPOP does)."""
        queue = self.network.replies[key]
        if not queue.empty():
            return queue.get_nowait()
        self.network.polls.put_nowait(key)
        try:
            async with clocks.timeout(self.network.clock, POLL_S):
                return await queue.get()
        except TimeoutError:
            return None


class OneTripStore(MemoryStore):
    """A store the replicas share that pushes a forwarded retry with the claim of its
    round, as the Redis store does in one script (`claim_delivering`)."""

    def __init__(self, clock: Clock, network: Network) -> None:
        super().__init__(clock)
        self.network = network
        self.stall: asyncio.Event | None = None  # set: a claim's reply waits for it

    async def claim_delivering(
        self, call_id: str, round_: int, claimer: str, delivery: Delivery
    ) -> tuple[SuspendedCall | None, bool | None]:
        claimed = await self.claim(call_id, round_, claimer)
        if claimed is None:
            return None, None
        owner = delivery.inbox_key.removeprefix("inbox:")
        if owner not in self.network.alive:  # its heartbeat is missing: nothing pushed
            return claimed, False
        self.network.push(owner, delivery.payload)
        if self.stall is not None:  # the reply is slow to come back; the push is done
            await self.stall.wait()
        return claimed, True
