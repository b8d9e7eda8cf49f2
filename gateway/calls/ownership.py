"""Whether this replica may still act for a call it holds.

On a fleet, a replica cut off from Redis for longer than its lease may be judged dead,
and another replica may take its calls over (`gateway.calls.takeover`) while it still
holds them: it must then say nothing upstream for them and write nothing of theirs.
A call parked within the lease term that is still running cannot have been taken
(`surely`); after a break of the lease the store says (`still`). Off a fleet, every call
is this replica's.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from gateway.calls.live import LiveCall
from gateway.errors import StoreError
from gateway.store.base import SuspendedCallStore

log = structlog.get_logger("gateway.calls")


class Ownership:
    def __init__(
        self,
        store: SuspendedCallStore,
        replica_id: str,
        lease_term: Callable[[], int | None] | None = None,
    ) -> None:
        self.store = store
        self.replica_id = replica_id
        # On a fleet, this replica's lease term (`Bus.lease_term`): None while it is lost.
        self.lease_term = lease_term

    def stamp(self, call: LiveCall) -> None:
        """The call starts here or parks now: within this lease term, nobody else can
        take it."""
        call.lease_term = self.lease_term() if self.lease_term is not None else None

    def surely(self, call: LiveCall) -> bool:
        """Whether no other replica can have taken `call` over, by this replica's lease
        alone (with no store to ask): held without a break since the call last parked
        (or started, replayed or was taken over here)."""
        if self.lease_term is None:
            return True  # no fleet: nobody else serves its calls
        term = self.lease_term()
        return term is not None and term == call.lease_term

    async def still(self, call: LiveCall) -> bool:
        """Whether the store still names this replica the call's owner.

        Raises: StoreError.
        """
        record = await self.store.get(call.id)
        return record is not None and record.owner == self.replica_id

    def doubtful(self, call: LiveCall) -> bool:
        """Whether `lost` must ask the store: a call resumed or taken over here, whose
        stamp this replica's lease no longer vouches for. A call in its first run here has
        no record another replica could have claimed (a parked call's own ways out check
        for themselves)."""
        return call.resumed is not None and not call.stateless and not self.surely(call)

    async def lost(self, call: LiveCall) -> bool:
        """Whether another replica may hold `call`, `doubtful`, now, so this one must let
        it go without a word, as the store says. A record that names another owner, a
        record that is gone and a store that cannot say all count as lost: a record can
        be gone while a new owner still runs the call (the store lost its data, which
        writes back parked calls only, or the record's grace ran out mid-round), and
        saying nothing cannot harm another's call, where a cancellation would end it."""
        try:
            return not await self.still(call)
        except StoreError as exc:
            log.warning("ownership_check_failed", call_id=call.id, error=str(exc))
            return True
