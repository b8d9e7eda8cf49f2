"""A call held by this replica, and the registry of them.

`LiveCall` ties a `CallMachine` to the upstream session and stream it owns, and
writes its own store record. `Registry` knows every live call, how many are parked (in
total and per principal) and which lost their stream; only `gateway.calls.lifecycle`
changes it, as it changes the calls' phases, so the counts never drift from the phases.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.aio import Once
from gateway.clock import Later
from gateway.config import UpstreamConfig
from gateway.protocol.call import CallMachine, Phase
from gateway.protocol.record import PARKED, SuspendedCall
from gateway.protocol.state import RequestDigest
from gateway.store.base import Reply
from gateway.upstream.port import Inbox, Pumping, StreamCursor, UpstreamPool, UpstreamSession


@dataclass(eq=False, slots=True)
class LiveCall:
    """A call whose upstream stream lives in this process."""

    machine: CallMachine
    upstream: UpstreamConfig
    pool: UpstreamPool
    session: UpstreamSession
    inbox: Inbox
    cursor: StreamCursor
    principal: str
    digest: RequestDigest  # of the request it serves
    target: str | None
    started: float  # on the core's clock
    stateless: bool = False  # replay mode: nothing parked, the journal rides in requestState
    pump: Pumping | None = None  # its stream being read into the inbox
    expiry: Later | None = None  # the suspension deadline, while parked
    parked_ms: tuple[int, int] = (0, 0)  # the round's issue time and deadline (wall ms)
    stored: bool = False  # its record for this round is written (checks of ownership wait)
    lease_term: int | None = None  # this replica's lease term when it started or parked
    resumed: int | None = None  # the round last resumed here, whose outcome is kept
    ended: Once = field(default_factory=Once)
    # A forwarded retry's reply, made from the call's result (`gateway.calls.routing`): the
    # store pushes it with the write that forgets the call where it can (then `replied`).
    reply_with: Callable[[dict[str, Any]], Reply] | None = None
    replied: bool = False
    # Its session given back to the pool already (`Lifecycle`, the one place): at its
    # end, or earlier when its stream was lost while it was parked.
    session_released: bool = False

    @property
    def id(self) -> str:
        return self.machine.call_id

    @property
    def phase(self) -> Phase:
        return self.machine.phase

    @property
    def in_store(self) -> bool:
        """Whether the call has a record (and a hold) in the store: it parked a round."""
        return bool(self.machine.round) and not self.stateless

    def record(self, owner: str) -> SuspendedCall:
        """Its store record for the round it waits in, owned by `owner`."""
        machine = self.machine
        issued, deadline = self.parked_ms
        return SuspendedCall(
            call_id=self.id,
            round=machine.round,
            status=PARKED,
            owner=owner,
            upstream=self.upstream.name,
            method=machine.method,
            target=self.target,
            principal=self.principal,
            digest=self.digest.value,
            upstream_request_id=machine.upstream_id,
            session_id=self.session.id,
            protocol_version=self.session.version.value,
            caps=self.session.caps.key,
            last_event_id=self.cursor.last_id,
            pending=[p.to_record() for p in machine.pending.values()],
            journal=list(machine.journal),
            deadline_ms=deadline,
            created_ms=issued,
        )


class Registry(Mapping[str, LiveCall]):
    """The live calls of this replica by id; a read-only mapping to everyone else."""

    def __init__(self) -> None:
        self._calls: dict[str, LiveCall] = {}
        self.parked = 0
        self._parked_by: Counter[str] = Counter()
        self._lost: set[str] = set()  # parked calls whose upstream stream is gone
        # Set while no call here could still complete (none, or only lost ones): a drain
        # waits for it.
        self.idle = asyncio.Event()
        self.idle.set()

    def __getitem__(self, call_id: str) -> LiveCall:
        return self._calls[call_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._calls)

    def __len__(self) -> int:
        return len(self._calls)

    def add(self, call: LiveCall) -> None:
        self._calls[call.id] = call
        self.idle.clear()

    def remove(self, call: LiveCall) -> None:
        """Forget the call; `settled` once its ending is complete."""
        self._calls.pop(call.id, None)
        self._lost.discard(call.id)

    def settled(self) -> None:
        """An ending is complete: with no call left that could complete, the replica is
        idle (drain waits on it)."""
        self._check_idle()

    @property
    def lost(self) -> int:
        """Parked calls here whose upstream stream is gone."""
        return len(self._lost)

    def is_lost(self, call: LiveCall) -> bool:
        return call.id in self._lost

    def mark_lost(self, call: LiveCall) -> None:
        """A parked call that lost its stream can never complete: a drain does not wait
        for it."""
        self._lost.add(call.id)
        self._check_idle()

    def _check_idle(self) -> None:
        if self._calls.keys() <= self._lost:
            self.idle.set()

    def parked_for(self, principal: str) -> int:
        return self._parked_by[principal]

    @property
    def principals_parked(self) -> dict[str, int]:
        return dict(self._parked_by)

    def moved(self, call: LiveCall, before: Phase) -> None:
        """The call moved from `before` to its phase now: the parked counts follow."""
        if before is Phase.SUSPENDED:
            self.parked -= 1
            self._parked_by[call.principal] -= 1
            if self._parked_by[call.principal] <= 0:
                del self._parked_by[call.principal]
        if call.phase is Phase.SUSPENDED:
            self.parked += 1
            self._parked_by[call.principal] += 1
