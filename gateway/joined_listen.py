"""One `subscriptions/listen` of an endpoint of several upstreams: a listen of each member
upstream (`gateway.listens.serve`, each on its own inbox and, for resource updates, its
own session), written to the one stream.

- **The acknowledgement** is one, sent once every member has acknowledged its part or
  failed to open: what some member honours (`gateway.protocol.listen.joined`). Nothing
  a member hears is written before it (the spec: no notification of the subscription
  before its acknowledgement); what comes meanwhile is held and written after it, in
  order.
- **A member that cannot be reached** (`UpstreamError` before it acknowledged) is left
  out with `on_upstream_down: omit`, its part not acknowledged; with `fail`, or when
  every member failed, the listen fails with its error, nothing sent.
- **The ends**: a member with nothing to deliver ends at once, the others go on; the
  listen ends gracefully (its `complete` result) when every member has (they all do
  when the replica drains). One member cut short (its session lost, the credential
  expired) cuts the whole listen short: its client listens again and fetches what it
  depends on, as with one upstream. A client that stops reading, or leaves, ends every
  member.

Notifications are relayed as each member relays them: list changes carry no names (so
none to prefix), resource updates their URI as the server gives it (never prefixed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog

from gateway.aio import cancel_and_wait, spawn
from gateway.clock import Clock
from gateway.errors import UpstreamError
from gateway.listens import Acknowledge, Send, write
from gateway.protocol import listen as wire
from gateway.protocol.jsonrpc import RequestId

log = structlog.get_logger("gateway.listens")

#: One member's listen, started with the `send` and `acknowledge` it is to use: its
#: graceful result, or None when it is cut short (as `gateway.listens.serve`).
Member = Callable[[Send, Acknowledge], Awaitable[dict[str, Any] | None]]


class JoinedListen:
    """The one stream of a listen of several members, while it opens and after."""

    def __init__(
        self, listen_id: RequestId, asked: wire.ListenFilter, send: Send, clock: Clock
    ) -> None:
        self.listen_id = listen_id
        self.asked = asked
        self.clock = clock
        self._send = send
        self._writing = asyncio.Lock()  # one message at a time on the stream
        self.honoured: dict[str, wire.ListenFilter] = {}  # by member, as each acknowledged
        self.failed: dict[str, Exception] = {}  # by member: what ended it before its time
        self._opening: set[str] = set()  # members yet to acknowledge (or to end)
        self._settled = asyncio.Event()  # every member acknowledged or ended
        self._held: list[dict[str, Any]] | None = []  # None once acknowledged

    async def serve(self, members: Mapping[str, Member], *, omit: bool) -> dict[str, Any] | None:
        """Serve the listen until it ends: its graceful result, or None when cut short.
        `omit`: a member that cannot be reached is left out (`on_upstream_down: omit`).

        Raises:
            UpstreamError: a member's, before the stream was acknowledged (`omit` false,
                or every member failed); nothing was sent.
            ClientStalled: the client stopped reading.
        """
        self._opening = set(members)
        if not self._opening:
            self._settled.set()
        tasks = [
            spawn(self._member(name, member), name=f"listen:{name}")
            for name, member in members.items()
        ]
        try:
            await self._settled.wait()
            self._raise_failed(omit=omit)
            if not self.honoured:  # none acknowledged: drained while it opened
                return wire.closing(self.listen_id)
            await self._acknowledge()
            running = set(tasks)
            while running:
                done, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                self._raise_failed(omit=omit)
                if any(task.result() is None for task in done):
                    return None  # one member cut short: the whole is
            return wire.closing(self.listen_id)
        finally:
            for task in tasks:
                await cancel_and_wait(task)

    async def _member(self, name: str, member: Member) -> dict[str, Any] | None:
        """`member`'s listen; what failed it is kept (`failed`) for the listen's own task
        to raise, and it then counts as ended."""

        async def acknowledge(honour: wire.ListenFilter) -> None:
            self.honoured[name] = honour
            self._settle(name)

        try:
            return await member(self._relay, acknowledge)
        except Exception as exc:  # noqa: BLE001 - raised by the listen's own task
            self.failed[name] = exc
            return wire.closing(self.listen_id)
        finally:
            self._settle(name)

    def _settle(self, name: str) -> None:
        self._opening.discard(name)
        if not self._opening:
            self._settled.set()

    def _raise_failed(self, *, omit: bool) -> None:
        """Raise what failed a member, but an unreachable member's (before it
        acknowledged) while others are served and `omit` says to leave it out."""
        for name, error in list(self.failed.items()):
            unreachable = isinstance(error, UpstreamError) and name not in self.honoured
            if not (unreachable and omit and self.honoured):
                raise error
            log.warning(
                "listen_upstream_omitted",
                upstream=name,
                kind=type(error).__name__,
                error=str(error),
            )
            del self.failed[name]

    async def _acknowledge(self) -> None:
        """Write the one acknowledgement, then what members relayed meanwhile."""
        honour = wire.joined(self.asked, self.honoured.values())
        async with self._writing:
            await write(self._send, wire.acknowledgement(self.listen_id, honour), self.clock)
            held, self._held = self._held or [], None
            for message in held:
                await write(self._send, message, self.clock)
        log.info("listen_joined", members=sorted(self.honoured), honoured=honour.wire())

    async def _relay(self, message: dict[str, Any]) -> None:
        """A member's notification: held until the acknowledgement, written after it."""
        if self._held is not None:
            self._held.append(message)
            return
        async with self._writing:
            await self._send(message)
