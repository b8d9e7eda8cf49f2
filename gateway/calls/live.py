"""A call held by this replica: its machine, the upstream session and stream it owns,
what its store record says of it, and what the audit trail knows of it (`Traced`).

Data only: `gateway.calls.lifecycle` changes a call's phase and keeps the registry of
them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.aio import Once
from gateway.clock import Later
from gateway.config import UpstreamConfig
from gateway.protocol.audit import Who
from gateway.protocol.call import CallMachine, Phase
from gateway.protocol.record import PARKED, SuspendedCall
from gateway.protocol.state import RequestDigest
from gateway.store.base import Reply
from gateway.upstream.port import Inbox, Pumping, StreamCursor, UpstreamPool, UpstreamSession


@dataclass(slots=True)
class Traced:
    """What the audit trail knows of a call beside what the call core does
    (`gateway.calls.trail`): its id in the trail, kept across replays that run it again
    under another id, who it is for, and the request that brought it here."""

    id: str
    who: Who | None
    request_id: str | None


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
    # Its request, not yet sent: the server's questions held for its caller come first.
    deferred: dict[str, Any] | None = None
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
    # What the audit trail knows of it (None: no trail, or not yet begun there).
    trail: Traced | None = None
    # Its machine's call id, for its whole life: an attribute, read at every step of a
    # call (a property read is a call of its own on Python 3.11).
    id: str = field(init=False)

    def __post_init__(self) -> None:
        self.id = self.machine.call_id

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
