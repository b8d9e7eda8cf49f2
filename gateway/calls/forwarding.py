"""How a retry reaches the replica holding its call: a `Forward`, the retry's message on
its way over the bus between replicas (`gateway.fleet.port.Bus`).

A retry whose call another replica holds is forwarded to that owner's inbox. The
message is made before the round is claimed, so that a store able to do both in one
step pushes it with the claim (`SuspendedCallStore.claim_delivering`): one round trip
where there were two. Otherwise `gateway.calls.routing` delivers it after the claim.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from gateway.fleet import messages
from gateway.fleet.port import Bus
from gateway.protocol.formats import Kind
from gateway.protocol.inbound import FrontRequest
from gateway.store.base import Delivery, SuspendedCall
from gateway.tracing import TRACING, Begun


class Forward:
    """A retry on its way to the replica that holds its call: the message, its reply key,
    and whether the store pushed it with the claim of its round (`delivered`: True or
    False as `Bus.deliver` answers, None when it was not pushed; `gateway.calls.admission`).
    The "mcp forward" span starts with the message, whose trace context names it."""

    def __init__(self, bus: Bus, front: FrontRequest) -> None:
        self.bus = bus
        self.front = front
        self.reply = bus.new_reply_key()
        self.delivered: bool | None = None
        self.relaying = False  # its reply is being read (which tells the owner if cut short)
        self.record: SuspendedCall | None = None  # the round it was made for
        self._payload: str | None = None
        self._span: Begun | None = None

    def payload(self, record: SuspendedCall) -> str:
        """The `Resume` of `record`'s round with this retry (made once)."""
        if self._payload is None:
            self.record = record
            self._span = TRACING.begin(
                "mcp forward",
                kind="client",
                attributes={"mcp.owner": record.owner, "mcp.forwarded": True},
            )
            front = self.front
            resume = messages.Resume(
                call=record.call_id,
                round=record.round,
                request_id=front.id,
                method=front.method,
                params=front.params,
                reply=self.reply,
                trace=self._span.carrier,
            )
            self._payload = messages.encode(resume, self.bus.level.version(Kind.MESSAGE))
        return self._payload

    def delivery(self, record: SuspendedCall) -> Delivery | None:
        """What to push with the claim of `record`'s round: None when its owner is this
        replica (nothing to forward)."""
        if record.owner == self.bus.replica_id:
            return None
        return self.bus.delivery(record.owner, self.payload(record))

    def left(self) -> tuple[str, messages.Cancel] | None:
        """The owner, and what to tell it, when the client leaves before the reply is read:
        once the message may have gone (with the claim, or by the bus), unless the store
        found the owner without a heartbeat. An owner that never got it ignores it."""
        if self.record is None or self.relaying or self.delivered is False:
            return None
        return self.record.owner, messages.Cancel(call=self.record.call_id, reply=self.reply)

    def span(self) -> AbstractContextManager[object]:
        return self._span.entered() if self._span is not None else nullcontext()

    def not_sent(self) -> None:
        """Its span says the owner never got it (gone: the call goes on without it)."""
        if self._span is not None:
            self._span.set(**{"mcp.forwarded": False})

    def close(self) -> None:
        """End the span if the forward never went ahead (its claim failed): it says so,
        where it would read as a forward that took no time."""
        if self._span is not None:
            self._span.end(**{"mcp.forwarded": False})
