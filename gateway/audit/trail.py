"""`Audit`: what the call core, the lanes and tasks are handed to record what happens.

`emit(event)` stamps the event (an id unique across the fleet, the time, this replica),
writes it as one JSON object with the content the configuration keeps
(`gateway.protocol.audit.record`), and hands it to every sink. It returns at once and
never raises: an event that cannot be made is a log line and a count
(`mrtr_audit_dropped_total{sink="trail"}`), a sink that fails is that sink's business.
Without sinks (no `audit` section) it is `OFF`, whose `on` is false, so a caller can skip
making an event at all.
"""

from __future__ import annotations

import asyncio
import contextvars
import signal
from collections.abc import Callable, Sequence

import orjson
import structlog

from gateway.audit.metrics import AuditMetrics
from gateway.audit.sinks import Sink
from gateway.auth.principal import Identity, parsed
from gateway.clock import Clock, SystemClock
from gateway.protocol import audit_record
from gateway.protocol.audit import NO_CONTENT, AuditEvent, ContentPolicy, Who
from gateway.protocol.state import log_id_of

log = structlog.get_logger("gateway.audit")

#: Callers whose `Who` is kept made (`Audit.act_for`), at most; then made again.
CALLERS_KEPT = 4096


class Audit:
    def __init__(
        self,
        *,
        replica: str,
        sinks: Sequence[Sink] = (),
        policy: ContentPolicy = NO_CONTENT,
        clock: Clock | None = None,
        metrics: AuditMetrics | None = None,
        log_salt: bytes = b"",
    ) -> None:
        """`log_salt`: what keys callers' log ids (`state.log_salt`), for `act_for`."""
        self.replica = replica
        self.log_salt = log_salt
        self._whos: dict[str, Who] = {}
        self.sinks = tuple(sinks)
        self.policy = policy
        self.clock = clock or SystemClock()
        self.on = bool(self.sinks)
        self._unmade = (metrics or AuditMetrics()).dropped.labels("trail")
        self._ids = audit_record.EventIds()
        self._times = audit_record.IsoTimes()

    def emit(self, event: AuditEvent) -> str | None:
        """Record `event` in every sink; its id, or None when it was not recorded."""
        if not self.on:
            return None
        try:
            wall_ms = self.clock.wall_ms()
            fact = event.fact()
            event_id = self._ids.next(wall_ms) if fact is None else audit_record.fact_id(fact)
            data = audit_record.record(
                event,
                event_id=event_id,
                wall_ms=wall_ms,
                replica=self.replica,
                policy=self.policy,
                time=self._times.of(wall_ms),
            )
            line = orjson.dumps(data)
        except Exception as exc:  # noqa: BLE001 - a defect must not fail the client's call
            log.error("audit_event_unmade", kind=type(event).__name__, exc_info=exc)
            self._unmade.inc()
            return None
        for sink in self.sinks:
            try:
                sink.write(data, line)
            except Exception as exc:  # noqa: BLE001 - as above
                log.error("audit_sink_failed", sink=sink.name, exc_info=exc)
        return event_id

    def act_for(self, principal: str) -> None:
        """The request being served is `principal`'s (its key, as requestState binds it),
        unless the front door said who it is already (`act_as`)."""
        if not self.on or _ACTING.get() is not None:
            return
        found = self._whos.get(principal)
        if found is None:
            if len(self._whos) >= CALLERS_KEPT:
                self._whos.clear()
            found = self._whos[principal] = who(principal, log_id_of(principal, self.log_salt))
        _ACTING.set(found)

    def start(self) -> None:
        """Start every sink (on the running loop)."""
        for sink in self.sinks:
            sink.start()

    def reopen(self) -> None:
        """Open anew what the sinks write to (a file logrotate moved): on SIGHUP."""
        for sink in self.sinks:
            sink.reopen()

    async def close(self) -> None:
        """Write what the sinks hold (each within its bound), then let them go."""
        for sink in self.sinks:
            await sink.close()


#: No audit trail: `emit` records nothing.
OFF = Audit(replica="")


def reopen_on_sighup(audit: Audit) -> Callable[[], None]:
    """Reopen `audit`'s sinks at every SIGHUP the process gets (where signals can be
    handled: the main thread, not Windows); returns what undoes it."""
    if not audit.on or not hasattr(signal, "SIGHUP"):
        return lambda: None
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGHUP, audit.reopen)

    def undo() -> None:
        loop.remove_signal_handler(signal.SIGHUP)

    return undo


def who(principal: str, log_id: str, identity: Identity | None = None) -> Who:
    """The principal of an event, from a caller as the front door knows it
    (`gateway.web.front_door.Caller`: its principal's key, its log id, its identity): the
    identity's parts under `auth` (read from the key when no identity is at hand);
    without, whether a credential came (its keyed hash is `log_id`; never the
    credential)."""
    p = identity.principal if identity is not None else parsed(principal)
    if p is not None:
        if p.kind == "jwt":
            return Who(
                kind="jwt", log_id=log_id, issuer=p.issuer, subject=p.subject, client=p.client
            )
        if p.kind == "key":
            return Who(kind="key", log_id=log_id, subject=p.subject)
    if principal == "anonymous":
        return ANONYMOUS
    return Who(kind="unauthenticated", log_id=log_id)


ANONYMOUS = Who(kind="anonymous")

#: Who the request being served is from, as the front door established it: what an event
#: made while serving it names (`acting`). Bound per request, as log lines' context is; a
#: task started with a copy of the context keeps it.
_ACTING: contextvars.ContextVar[Who | None] = contextvars.ContextVar("audit_who", default=None)


def act_as(who: Who | None) -> None:
    """The request being served is `who`'s (the front door, once it knows)."""
    _ACTING.set(who)


def acting() -> Who | None:
    """Who the request being served is from, if the front door said."""
    return _ACTING.get()
