"""The `subscriptions/listen` streams this replica serves.

At most `limits.max_listens` are open at once (0 turns the method off), and
`limits.max_listens_per_principal` of one caller. Which notifications a listen gets,
`gateway.protocol.listen` decides; where they come from:

- list changes (`notifications/tools/list_changed`, ...) from every session this replica
  holds with the upstream (`publish`): those of calls, and the pool's idle ones (a legacy
  server often tells a change only to the session whose call made it: mcp 1.x does), and
  on a fleet from every other replica's, about a heartbeat later (`gateway.fleet.changes`);
- resource updates from a session the listen opens for itself when it asks for resource
  subscriptions (`resources/subscribe` is bound to a session), outside `pool.max_sessions`
  and shared by no call.

Change notifications are level triggers ("this changed, fetch it again"): one waiting to
be sent makes an equal one behind it redundant, so a listen sends it once.

A listen ends when its client goes; when this replica drains (`end_all`: the stream ends
gracefully, with the `complete` result); when it cannot deliver anything (the server
declares none of what it asked for: acknowledged, then ended gracefully); or, cut short
(the stream ends without a result: the client should listen again and fetch what it
depends on), when its own session is lost (the server forgot it, its process exited, its
standalone stream dropped) or its client stopped reading.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import structlog
from prometheus_client import Gauge

from gateway import clock as clocks
from gateway.clock import Clock
from gateway.errors import CapacityExceeded, Draining, LimitExceeded, UpstreamError
from gateway.protocol import listen as wire
from gateway.protocol.capabilities import NO_CAPABILITIES
from gateway.protocol.jsonrpc import RequestId
from gateway.protocol.outside import answer_outside_call
from gateway.quota import Quota
from gateway.upstream.port import Inbox, InboxItem, PooledSession, StreamEnd, UpstreamPool

log = structlog.get_logger("gateway.listens")

#: Messages waiting in one listen: past this many (its client does not read them) the
#: listen is cut short, so a stalled client cannot grow the gateway's memory.
MAX_WAITING = 1024
#: A write to the client's stream that takes longer than this (its client stopped
#: reading, its connection still open) cuts the listen short and ends the connection.
WRITE_TIMEOUT_S = 30.0

#: What ends every listen when this replica drains: gracefully, with the `complete` result.
DRAINING = UpstreamError("this replica is draining")

Send = Callable[[dict[str, Any]], Awaitable[None]]
#: What takes a listen's acknowledgement in place of its stream (what the server will
#: honour of the filter): a listen of an endpoint of several upstreams sends one of all.
Acknowledge = Callable[[wire.ListenFilter], Awaitable[None]]


class ListensFull(CapacityExceeded):
    reason = "max_listens"
    default_message = "Too many subscriptions/listen streams are open on this replica; retry later"


class PrincipalListening(LimitExceeded):
    """This caller holds as many listen streams as it may; others are still served."""

    http_status = 429
    reason = "max_listens_per_principal"
    default_message = "This caller has too many subscriptions/listen streams open"


class ClientStalled(ConnectionResetError):
    """The listen's client took no write for `WRITE_TIMEOUT_S`: its connection is ended."""


class ListenInbox(Inbox):
    """A listen's inbox: an equal message already waiting is not put again, and a backlog
    past `MAX_WAITING` is dropped for the end that cuts the listen short."""

    __slots__ = ()

    def put_nowait(self, item: InboxItem) -> None:
        waiting = self.waiting()
        if isinstance(item, dict):
            if item in waiting or self.ended() is not None:
                return
            if len(waiting) >= MAX_WAITING:
                self._items.clear()
                item = StreamEnd(UpstreamError("the client does not read its listen stream"))
        super().put_nowait(item)


class Listens:
    """The open listens of this replica, by upstream."""

    def __init__(
        self,
        max_listens: int,
        per_principal: int,
        gauge: Gauge | None = None,
        fleet: Callable[[str, str], None] = lambda upstream, method: None,
        changed: Callable[[str, str], None] = lambda upstream, method: None,
    ) -> None:
        """`fleet`: told of each list change heard here, for the other replicas' listens
        (`ChangeFeed.heard`; alone, nobody). `changed`: told of every list change, heard
        here or by another replica (the catalog fetches that list again)."""
        self.quota = Quota(max_listens, per_principal, full=ListensFull, busy=PrincipalListening)
        self.gauge = gauge
        self._open: dict[str, set[Inbox]] = {}
        self._draining = False
        self.fleet = fleet
        self.changed = changed

    def __len__(self) -> int:
        """How many listens are open (one of an endpoint of several upstreams counts once)."""
        return len(self.quota)

    @property
    def enabled(self) -> bool:
        return self.quota.total > 0

    @contextmanager
    def opened(self, upstream: str, principal: str) -> Iterator[Inbox]:
        """A listen of `principal` to `upstream` is open while this holds: its inbox.

        Raises:
            as `opened_each`.
        """
        with self.opened_each((upstream,), principal) as inboxes:
            yield inboxes[upstream]

    @contextmanager
    def opened_each(self, upstreams: Sequence[str], principal: str) -> Iterator[dict[str, Inbox]]:
        """One listen of `principal` to each of `upstreams` (those of an endpoint) is open
        while this holds, counted once against the limits: an inbox for each, by upstream.

        Raises:
            Draining: this replica is shutting down.
            ListensFull: `max_listens` are open already.
            PrincipalListening: `principal` holds `max_listens_per_principal` already.
        """
        if self._draining:
            raise Draining()
        with self.quota.held(principal):
            held = {upstream: ListenInbox() for upstream in upstreams}
            for upstream, inbox in held.items():
                self._open.setdefault(upstream, set()).add(inbox)
            self._count()
            try:
                yield dict(held)
            finally:
                for upstream, inbox in held.items():
                    self._open[upstream].discard(inbox)
                self._count()

    def _count(self) -> None:
        if self.gauge is not None:
            self.gauge.set(len(self))

    def publish(self, upstream: str, message: dict[str, Any]) -> None:
        """A list change one of this replica's sessions with `upstream` heard: every listen
        of `upstream` here hears it, and on a fleet every other replica's (`fleet`)."""
        if not wire.is_list_change(message):
            return
        self.relay(upstream, message["method"])
        self.fleet(upstream, message["method"])

    def relay(self, upstream: str, method: str) -> None:
        """Every listen of `upstream` here hears of a list change (heard here, or by
        another replica)."""
        self.changed(upstream, method)
        bare = {"jsonrpc": "2.0", "method": method}  # what a listen relays of it
        for inbox in self._open.get(upstream, ()):
            inbox.put_nowait(bare)

    def end_all(self) -> None:
        """This replica drains: every listen ends gracefully, and none opens from now on."""
        self._draining = True
        for inboxes in self._open.values():
            for inbox in inboxes:
                inbox.put_nowait(StreamEnd(DRAINING))


async def serve(
    pool: UpstreamPool,
    inbox: Inbox,
    listen_id: RequestId,
    asked: wire.ListenFilter,
    send: Send,
    may_read: Callable[[str], bool],
    upstream: str,
    expires_in_s: float | None = None,
    *,
    clock: Clock,
    acknowledge: Acknowledge | None = None,
) -> dict[str, Any] | None:
    """Serve one listen until it ends: its graceful result, or None when it is cut short.

    `send` writes a message on the client's stream; `may_read` says whether the caller
    may see a resource URI (its scopes); `expires_in_s`: when the caller's credential
    expires (the listen is cut short then, and its client, listening again, must show a
    fresh one). Both bounds, that and a write's, are on `clock`. `acknowledge`: what
    takes the acknowledgement instead of the stream (`gateway.joined_listen`).

    Raises:
        UpstreamError: before the stream was acknowledged (the server could not be
            reached, or failed a subscription); nothing was sent.
        ClientStalled: the client stopped reading.
    """
    deadline = None if expires_in_s is None else clock.monotonic() + expires_in_s
    info = await pool.upstream_info()
    honour = wire.honoured(asked, info.capabilities)
    session: PooledSession | None = None
    acknowledged = False
    try:
        if honour.resources:
            session = await pool.open_alone(NO_CAPABILITIES)
            session.attach(inbox)
            session.on_lost = lambda error: inbox.put_nowait(StreamEnd(error))
            honour = await _subscribe(session, honour, upstream)
        ended = inbox.ended()
        if ended is DRAINING:  # drained while it opened: nothing to acknowledge
            return wire.closing(listen_id)
        if ended is not None:  # its session lost already (no GET stream): an error, not a
            raise ended  # stream acknowledged and cut at once, which a client re-listens to
        if acknowledge is None:
            await write(send, wire.acknowledgement(listen_id, honour), clock)
        else:
            await acknowledge(honour)
        acknowledged = True
        log.info("listen_opened", upstream=upstream, asked=asked.wire(), honoured=honour.wire())
        if not honour.lists and not honour.resources:
            log.info("listen_ended", upstream=upstream, reason="nothing to deliver")
            return wire.closing(listen_id)
        while True:
            try:
                async with clocks.deadline(clock, deadline):
                    item = await inbox.get()
            except TimeoutError:
                log.info("listen_cut_short", upstream=upstream, error="the credential expired")
                return None
            if isinstance(item, StreamEnd):
                if item.error is DRAINING:
                    log.info("listen_ended", upstream=upstream, reason="draining")
                    return wire.closing(listen_id)
                log.info("listen_cut_short", upstream=upstream, error=str(item.error))
                return None
            answer = answer_outside_call(item)
            if answer is not None:  # the server asked something: nobody can be asked
                assert session is not None  # only a listen's own session asks
                await session.send(answer)
                continue
            note = wire.relayed(listen_id, honour, item)
            if note is None or _repeated(note, inbox, listen_id, honour):
                continue
            uri = note["params"].get("uri")
            if uri is not None and not may_read(uri):
                log.debug("listen_update_withheld", upstream=upstream)
                continue
            await write(send, note, clock)
    except asyncio.CancelledError:
        if acknowledged:
            log.info("listen_ended", upstream=upstream, reason="client left")
        raise
    except UpstreamError as exc:
        if not acknowledged:
            raise  # the client's answer is this error
        log.info("listen_cut_short", upstream=upstream, error=str(exc))
        return None
    finally:
        if session is not None:
            session.on_lost = None
            session.detach(inbox)
            pool.close_alone(session)  # its subscriptions were the listen's alone


async def write(send: Send, message: dict[str, Any], clock: Clock) -> None:
    """Write `message` on a listen's stream within `WRITE_TIMEOUT_S`.

    Raises:
        ClientStalled: the client took no write for that long.
    """
    try:
        async with clocks.timeout(clock, WRITE_TIMEOUT_S):
            await send(message)
    except TimeoutError:
        log.info("listen_cut_short", error="the client stopped reading its stream")
        raise ClientStalled("the client stopped reading its listen stream") from None


def _repeated(
    note: dict[str, Any], inbox: Inbox, listen_id: RequestId, honour: wire.ListenFilter
) -> bool:
    """Whether an equal notification waits behind `note`: that one is sent instead."""
    return any(
        isinstance(item, dict) and wire.relayed(listen_id, honour, item) == note
        for item in inbox.waiting()
    )


async def _subscribe(
    session: PooledSession, honour: wire.ListenFilter, upstream: str
) -> wire.ListenFilter:
    """Subscribe the session to each URI `honour` names: the filter without those the
    server refused."""
    kept = []
    for uri in honour.resources:
        reply = await session.request("resources/subscribe", {"uri": uri})
        error = reply.get("error")
        if isinstance(error, dict):
            log.info(
                "listen_subscription_refused",
                upstream=upstream,
                code=error.get("code"),
                error=str(error.get("message", ""))[:200],
            )
            continue
        kept.append(uri)
    return wire.ListenFilter(honour.lists, tuple(kept))
