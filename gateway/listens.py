"""The `subscriptions/listen` streams this replica serves, each on a legacy session of its own.

A listen holds an upstream session for as long as it is open (so at most
`limits.max_listens` are open at once, 0 turning the method off, and
`limits.max_listens_per_principal` of one caller), sends `resources/subscribe`
on it for each URI it can honour, and relays what the server then says on that session
(`gateway.protocol.listen` decides what). A legacy server often tells a list change
only to the session whose call changed it: such a notification, arriving on a call's
session, is handed to every listen of that upstream here as well (`publish`). On a
fleet, that reaches the listens of the replica that ran the call.

Change notifications are level triggers ("this changed, fetch it again"): one waiting
to be sent makes an equal one behind it redundant, so a listen sends it once.

A listen ends when its client goes, when its session is lost (the stream is cut short:
the client should listen again and fetch what it depends on), or when this replica drains
(`end_all`: the stream ends gracefully, with the `complete` result).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

import structlog
from prometheus_client import Gauge

from gateway.errors import Draining, ListensFull, PrincipalListening, UpstreamError
from gateway.protocol import listen as wire
from gateway.protocol.capabilities import NO_CAPABILITIES
from gateway.protocol.jsonrpc import RequestId
from gateway.protocol.outside import answer_outside_call
from gateway.upstream.port import Inbox, PooledSession, StreamEnd, UpstreamPool

log = structlog.get_logger("gateway.listens")

#: Messages waiting in one listen for a client that does not read: past this many the
#: listen is cut short (its client listens again), so a stalled client cannot grow the
#: gateway's memory without bound.
MAX_WAITING = 1024

#: What ends every listen when this replica drains: gracefully, with the `complete` result.
DRAINING = UpstreamError("this replica is draining")

Send = Callable[[dict[str, Any]], Awaitable[None]]


class Listens:
    """The open listens of this replica, by upstream."""

    def __init__(self, max_listens: int, per_principal: int, gauge: Gauge | None = None) -> None:
        self.max_listens = max_listens
        self.per_principal = per_principal
        self.gauge = gauge
        self._open: dict[str, set[Inbox]] = {}
        self._principals: Counter[str] = Counter()
        self._draining = False

    def __len__(self) -> int:
        return sum(len(inboxes) for inboxes in self._open.values())

    @property
    def enabled(self) -> bool:
        return self.max_listens > 0

    @contextmanager
    def opened(self, upstream: str, principal: str) -> Iterator[Inbox]:
        """A listen of `principal` to `upstream` is open while this holds: its inbox.

        Raises:
            Draining: this replica is shutting down.
            ListensFull: `max_listens` are open already.
            PrincipalListening: `principal` holds `max_listens_per_principal` already.
        """
        if self._draining:
            raise Draining()
        if len(self) >= self.max_listens:
            raise ListensFull()
        if self._principals[principal] >= self.per_principal:
            raise PrincipalListening()
        inbox = Inbox()
        inboxes = self._open.setdefault(upstream, set())
        inboxes.add(inbox)
        self._principals[principal] += 1
        self._count()
        try:
            yield inbox
        finally:
            inboxes.discard(inbox)
            self._principals[principal] -= 1
            if not self._principals[principal]:
                del self._principals[principal]
            self._count()

    def _count(self) -> None:
        if self.gauge is not None:
            self.gauge.set(len(self))

    def publish(self, upstream: str, message: dict[str, Any]) -> None:
        """A list change a call's session carried: every listen of `upstream` hears it."""
        if message.get("method") not in wire.LIST_CHANGED or "id" in message:
            return
        for inbox in self._open.get(upstream, ()):
            offer(inbox, message)

    def end_all(self) -> None:
        """This replica drains: every listen ends gracefully, and none opens from now on."""
        self._draining = True
        for inboxes in self._open.values():
            for inbox in inboxes:
                inbox.put_nowait(StreamEnd(DRAINING))


def offer(inbox: Inbox, message: dict[str, Any]) -> None:
    """Put `message` in a listen's inbox, unless an equal one waits there already, or the
    listen's client has let too many pile up (then it is cut short)."""
    waiting = inbox.waiting()
    if message in waiting:
        return
    if len(waiting) >= MAX_WAITING:
        if inbox.ended() is None:
            inbox.put_nowait(StreamEnd(UpstreamError("the client does not read its listen stream")))
        return
    inbox.put_nowait(message)


async def serve(
    pool: UpstreamPool,
    inbox: Inbox,
    listen_id: RequestId,
    asked: wire.Filter,
    send: Send,
    may_read: Callable[[str], bool],
    upstream: str,
) -> dict[str, Any] | None:
    """Serve one listen until it ends: its graceful result, or None when it is cut short.

    `send` writes a message on the client's stream; `may_read` says whether the caller
    may see a resource URI (its scopes).

    Raises:
        UpstreamError, CapacityExceeded: before the stream was acknowledged (no session
            could be had, or the server failed a subscription); nothing was sent.
    """
    session = await pool.acquire(NO_CAPABILITIES)
    session.attach(inbox)
    acknowledged = False
    try:
        info = session.info or pool.info
        honour = wire.honoured(asked, info.capabilities if info is not None else {})
        honour = await _subscribe(cast(PooledSession, session), honour, upstream)
        await send(wire.acknowledgement(listen_id, honour))
        acknowledged = True
        log.info(
            "listen_opened",
            upstream=upstream,
            asked=asked.wire(),
            honoured=honour.wire(),
        )
        while True:
            item = await inbox.get()
            if isinstance(item, StreamEnd):
                if item.error is DRAINING:
                    log.info("listen_ended", upstream=upstream, reason="draining")
                    return wire.closing(listen_id)
                log.info("listen_cut_short", upstream=upstream, error=str(item.error))
                return None
            answer = answer_outside_call(item)
            if answer is not None:  # the server asked something: nobody can be asked
                await session.send(answer)
                continue
            note = wire.relayed(listen_id, honour, item)
            if note is None or _repeated(note, inbox, listen_id, honour):
                continue
            uri = note["params"].get("uri")
            if uri is not None and not may_read(uri):
                log.debug("listen_update_withheld", upstream=upstream)
                continue
            await send(note)
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
        session.detach(inbox)
        pool.release(session, reuse=False)  # its subscriptions are the listen's alone


def _repeated(
    note: dict[str, Any], inbox: Inbox, listen_id: RequestId, honour: wire.Filter
) -> bool:
    """Whether an equal notification waits behind `note`: that one is sent instead."""
    return any(
        isinstance(item, dict) and wire.relayed(listen_id, honour, item) == note
        for item in inbox.waiting()
    )


async def _subscribe(session: PooledSession, honour: wire.Filter, upstream: str) -> wire.Filter:
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
    return wire.Filter(honour.lists, tuple(kept))
