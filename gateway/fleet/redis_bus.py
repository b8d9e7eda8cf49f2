"""Cross-replica plumbing on Redis: who is alive, and how a retry reaches a call's owner.

Each replica writes `<prefix>{replica:<id>}:beat` every `heartbeat_s` with a TTL of
two heartbeats, so a replica that dies is known to be gone within about two
heartbeats. The beat also says which of the store's epochs (`<prefix>fleet:epoch`, made
anew by the first beat after the store lost its data) the replica has written back the
records of its parked calls in: a retry that finds no record knows whether to wait.
Each replica reads its own inbox list `<prefix>{replica:<id>}:inbox` (BLMOVE into its
`:taken` list, cleared of each message once handled); a retry that lands on another
replica is pushed there only while the owner beats: by the store's script that claims
its round (`delivery`; off a Cluster), or here in one round trip that checks the
heartbeat too (both keys share a cluster slot).
The owner answers on a per-request reply list that the receiving replica reads. Every
wait is bounded; reply lists expire.

The beat's value also carries the replica's format level (`gateway.protocol.formats`, read
by the previous release as it always was): at each beat a replica looks at the heartbeats
of the replicas on the fleet's roll call (`gateway.fleet.ledger.roll_call_key`), and now
and then at every heartbeat key, and so learns which versions of the fleet's data to write
(`level`).

This module moves payloads (`gateway.fleet.messages`, encoded by their senders) and
decodes each message of its inbox once, handing it over as its type (a malformed one is
logged and dropped, `fleet_bad_message`); what they mean is the business of those it
hands them to (`gateway.calls`, `gateway.tasks`, `gateway.legacy_clients.forwarding`).
It implements `gateway.fleet.port.Bus`.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import Any

import structlog

from gateway import clock as clocks
from gateway.aio import spawn
from gateway.clock import Clock
from gateway.errors import StoreError
from gateway.fleet import messages
from gateway.fleet.ledger import roll_call_key
from gateway.protocol import formats
from gateway.protocol.formats import FleetLevel
from gateway.store.base import Delivery
from gateway.store.redis_client import (
    RedisClient,
    from_redis,
    last_word,
    ride_out,
    stop_if_cancelled,
    stop_loops,
    text,
)

log = structlog.get_logger("gateway.fleet")

#: What serves this replica's inbox: each message, decoded.
Handler = Callable[[messages.Message], Coroutine[Any, Any, None]]
_REPLY_TTL_MS = 120_000
_POLL_S = 1.0

# KEYS[1] the owner's heartbeat, KEYS[2] its inbox; ARGV payload, ttl. Pushed only while
# the owner beats: a message never waits in the inbox of a replica known to be gone.
_DELIVER = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1
"""

# KEYS[1] an inbox, KEYS[2] the forward's mark; ARGV payload, the mark's ttl. Taken out, the
# forward leaves a mark, so the same retraction run again (its reply lost with a
# connection) still says it took it back, not that the owner read it.
_RETRACT = """
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 1 then
  redis.call('SET', KEYS[2], 1, 'PX', ARGV[2])
  return 1
end
return redis.call('EXISTS', KEYS[2])
"""
_RETRACTED_TTL_MS = 60_000
#: How often, in heartbeats, the inbox loop looks for messages taken and never handled.
TAKE_UP_BEATS = 2.0
#: How often, in looks at the fleet (one a heartbeat), a look scans the whole keyspace for
#: heartbeats rather than reading the roll call (100,000 keys: about 160 ms of Redis).
SCAN_LOOKS = 30


class RedisBus:
    def __init__(
        self,
        client: RedisClient,
        *,
        prefix: str,
        replica_id: str,
        heartbeat_s: float,
        clock: Clock,
        level: FleetLevel | None = None,
    ) -> None:
        """`level`: the fleet's format level, kept up to date from the heartbeats (a
        replica alone writes its own by default)."""
        self.level = level or FleetLevel(settle_s=0.0)
        self.client = client
        self.clock = clock
        self.prefix = prefix
        self.replica_id = replica_id
        self.reply_ttl_ms = _REPLY_TTL_MS
        self.heartbeat_s = heartbeat_s
        self._tasks: list[asyncio.Task[None]] = []
        self.healthy = False
        self._deliver = client.register_script(_DELIVER)
        self._retract = client.register_script(_RETRACT)
        self._handling: Counter[str] = Counter()  # taken from the inbox, being handled
        # The fleet's epoch: a key every replica reads as it beats. Missing or changed, the
        # Redis it names lost its data (a restart without persistence, a failover to an
        # empty replica): the owners write back the records of the calls they hold.
        self._epoch: bytes | None = None
        # The epoch whose records this replica has all written (its heartbeat says so): a
        # retry that finds no record waits while its owner's lags the store's.
        self._written: bytes | None = None
        self.on_data_loss: Callable[[], Coroutine[Any, Any, None]] | None = None
        self.on_lease_regained: Callable[[], Coroutine[Any, Any, None]] | None = None
        # The lease: this replica may serve its calls only while its heartbeat is surely
        # in Redis. Others judge it dead only after the heartbeat's TTL and their patience
        # (`alive`), so it stops strictly before anyone can take a call over.
        self._lease_until = 0.0
        self._term = 0
        self._looks = 0  # looks at the fleet's heartbeats (`look_at_fleet`)
        self._watched: set[str] = set()  # heartbeat keys found beating at the last look

    def holds_lease(self) -> bool:
        """Whether this replica's last heartbeat is recent enough to serve its calls."""
        return self.clock.monotonic() < self._lease_until

    def lease_term(self) -> int | None:
        return self._term if self.holds_lease() else None

    def epoch_key(self) -> str:
        return f"{self.prefix}fleet:epoch"

    def replica_key(self, replica_id: str) -> str:
        return f"{self.prefix}{{replica:{replica_id}}}:beat"

    def inbox_key(self, replica_id: str) -> str:
        return f"{self.prefix}{{replica:{replica_id}}}:inbox"

    def new_reply_key(self) -> str:
        return f"{self.prefix}reply:{self.replica_id}:{secrets.token_hex(8)}"

    def start(
        self,
        handler: Handler,
        *,
        on_data_loss: Callable[[], Coroutine[Any, Any, None]] | None = None,
        on_lease_regained: Callable[[], Coroutine[Any, Any, None]] | None = None,
    ) -> None:
        """Beat and read the inbox: each message to `handler`; told when the store lost
        its data (`on_data_loss`: write back the records held here) and when the lease
        is back after a lapse (`on_lease_regained`)."""
        self.on_data_loss = on_data_loss
        self.on_lease_regained = on_lease_regained
        self._tasks = [
            spawn(self._heartbeat(), name="fleet-heartbeat"),
            spawn(self._inbox(handler), name="fleet-inbox"),
        ]

    async def close(self) -> None:
        """Stop the heartbeat and the inbox loop, and take the heartbeat out (the others
        know this replica is gone at once). Bounded, whatever state the client is in: a
        read blocked in the inbox's BLMOVE, Redis not answering."""
        await stop_loops(self.client, self._tasks)
        beat = self.replica_key(self.replica_id)
        await last_word(self.client, lambda: self.client.delete(beat), what="fleet-leave")

    async def _heartbeat(self) -> None:
        ttl_ms = int(self.heartbeat_s * 2000)
        while True:
            try:
                sent, first = self.clock.monotonic(), self._epoch is None
                lost_data = await self._beat(ttl_ms)
                if lost_data:  # the roll call went with the data: the next look scans
                    self._looks = 0
                # Held if the lease had not run out by the time the beat came back: a beat
                # slower than what was left of the lease may have reached Redis after the
                # key expired, and another replica may have judged this one dead meanwhile.
                held = self.holds_lease()
                # The TTL counts from when Redis set the key, which is after we sent it.
                self._lease_until = sent + ttl_ms / 1000
                if not held:
                    self._term += 1  # a new stretch: a call parked before it may be taken
                # Regained: held before, lost, and held again now (a beat slower than the
                # whole TTL brings back no lease).
                regained = not first and not held and self.holds_lease()
                if regained and not lost_data:
                    log.warning("fleet_lease_regained", replica=self.replica_id)
                    if self.on_lease_regained is not None:
                        spawn(self.on_lease_regained(), name="fleet-hand-over")
                if not self.healthy:
                    log.info("fleet_joined", replica=self.replica_id)
                self.healthy = True
                await self._look_quietly()
            except Exception as exc:
                if not from_redis(exc):
                    raise
                stop_if_cancelled(exc)
                if self.healthy:
                    log.warning("fleet_heartbeat_failed", error=str(exc))
                self.healthy = False
            stop_if_cancelled()  # a cancellation the client dropped (see there)
            await clocks.sleep(self.clock, self.heartbeat_s)

    def _beat_value(self) -> str:
        """The heartbeat's value: when it was written, this release's format level, and
        the epoch whose records this replica has all written (empty before its first beat)."""
        written = text(self._written) if self._written is not None else ""
        return formats.beat_value(self.clock.wall_ms(), written)

    def _beat_pattern(self) -> str:
        """A SCAN pattern for every replica's heartbeat key."""
        prefix = "".join("\\" + c if c in "*?[]\\" else c for c in self.prefix)
        return f"{prefix}{{replica:*}}:beat"

    async def _look_quietly(self) -> None:
        """`look_at_fleet`, its failure logged: the level stays as it was until a look
        works (a lease is not lost for it)."""
        try:
            await self.look_at_fleet()
        except Exception as exc:
            if not from_redis(exc):
                raise
            stop_if_cancelled(exc)
            log.info("fleet_look_failed", error=str(exc))

    async def look_at_fleet(self) -> int:
        """Read the level of every live heartbeat; the level to write from now on.

        Whose: the replicas on the fleet's roll call (`roll_call_key`, one set) and those
        found beating at the last look; once every `SCAN_LOOKS` looks (the first among
        them, and the first after the store lost its data), every heartbeat key there is
        (a SCAN of the whole keyspace: a replica started a moment ago, before its ledger
        named it, or a roll call lost with the store's data).

        Raises: RedisError.
        """
        if self._looks % SCAN_LOOKS == 0:
            pattern = self._beat_pattern()
            keys = {text(k) async for k in self.client.scan_iter(match=pattern, count=1000)}
        else:
            members = await self.client.smembers(roll_call_key(self.prefix))
            keys = {self.replica_key(text(m)) for m in members} | self._watched
        self._looks += 1
        levels = [formats.LEVEL]  # this replica's own, whether its beat landed or not
        beating: set[str] = set()
        if keys:
            async with self.client.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.get(key)
                values = await pipe.execute()
            for key, value in zip(keys, values, strict=True):
                if value is not None:
                    beating.add(key)
                    levels.append(formats.read_beat(text(value)).level)
        # Every heartbeat found is looked at again until it lapses, on the roll call or not.
        self._watched = beating
        before = self.level.level
        after = self.level.observe(levels, self.clock.monotonic())
        if after != before:
            log.info("fleet_format_level", writes=after, oldest=self.level.oldest)
        return after

    async def _beat(self, ttl_ms: int) -> bool:
        """Renew the heartbeat; True when the store has lost its data since the last one."""
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.set(self.replica_key(self.replica_id), self._beat_value(), px=ttl_ms)
            pipe.set(self.epoch_key(), secrets.token_hex(8), nx=True)
            pipe.get(self.epoch_key())
            pipe.pexpire(self.taken_key(), _REPLY_TTL_MS)  # gone a while after its replica
            _, created, epoch, _ = await pipe.execute()
        known, self._epoch = self._epoch, epoch
        if known is None or (not created and epoch == known):
            if self._written != epoch:  # nothing to write back: said at the next beat
                self._written = epoch
            return False
        log.warning("store_data_lost", detail="writing back the records of the calls held here")
        spawn(self._write_back(epoch, ttl_ms), name="fleet-restore")
        return True

    async def _write_back(self, epoch: bytes, ttl_ms: int) -> None:
        """Write back the records of the calls held here, then say so in the heartbeat at
        once: retries that found no record wait for it (`written_back`)."""
        try:
            if self.on_data_loss is not None:
                await self.on_data_loss()
        finally:
            if self._epoch == epoch:  # not if the store lost its data again meanwhile
                self._written = epoch
                try:
                    await ride_out(
                        self.clock,
                        lambda: self.client.set(
                            self.replica_key(self.replica_id), self._beat_value(), px=ttl_ms
                        ),
                    )
                except StoreError as exc:
                    log.warning("fleet_heartbeat_failed", error=str(exc))  # the next beat says it

    def taken_key(self) -> str:
        """This replica's messages taken from its inbox and not yet handled to their end."""
        return f"{self.prefix}{{replica:{self.replica_id}}}:taken"

    async def _inbox(self, handler: Handler) -> None:
        """Each message is moved from the inbox to the taken list and removed from there
        once handled: one whose move's reply was lost with a connection is still found
        (`_take_up_stranded`), where a pop's would be gone, its retry resumed by nobody."""
        key, taken = self.inbox_key(self.replica_id), self.taken_key()
        look_again = self.clock.monotonic() + TAKE_UP_BEATS * self.heartbeat_s
        while True:
            stop_if_cancelled()  # a cancellation the client dropped (see there)
            if self.clock.monotonic() >= look_again:
                # The client may have sent a move again itself after its reply was lost
                # (redis-py's own retry), with no error to tell: looked for now and then.
                look_again = self.clock.monotonic() + TAKE_UP_BEATS * self.heartbeat_s
                await self._take_up_stranded(handler)
            try:
                moved = await self.client.blmove(key, taken, int(_POLL_S), "LEFT", "RIGHT")
            except Exception as exc:
                if not from_redis(exc):
                    raise
                stop_if_cancelled(exc)
                log.warning("fleet_inbox_failed", error=str(exc))
                await clocks.sleep(self.clock, _POLL_S)
                await self._take_up_stranded(handler)
                continue
            if moved is not None:
                self._handle(handler, text(moved))

    def _handle(self, handler: Handler, payload: str) -> None:
        self._handling[payload] += 1
        spawn(self._handled(handler, payload), name="fleet-forwarded")

    async def _handled(self, handler: Handler, payload: str) -> None:
        taken = self.taken_key()
        try:
            message = _decoded(payload)
            if message is not None:
                await handler(message)
        finally:
            try:  # one copy: another still being handled has its own removal to come
                await ride_out(self.clock, lambda: self.client.lrem(taken, 1, payload))
            except StoreError as exc:  # taken up again later: the handler knows it did it
                log.warning("fleet_taken_not_cleared", error=str(exc))
            finally:  # handling until cleared, so that no take-up runs it meanwhile
                self._handling[payload] -= 1
                if not self._handling[payload]:
                    del self._handling[payload]

    async def _take_up_stranded(self, handler: Handler) -> None:
        """Handle what was moved to the taken list but never handed over (its move's
        reply was lost), best effort: after a failure, and every `TAKE_UP_BEATS`."""
        try:
            stranded = await self.client.lrange(self.taken_key(), 0, -1)
        except Exception as exc:
            if not from_redis(exc):
                raise
            return
        handling = Counter(self._handling)
        for raw in stranded:
            payload = text(raw)
            if handling[payload]:
                handling[payload] -= 1  # this copy is being handled
                continue
            log.info("fleet_message_taken_up")
            self._handle(handler, payload)

    async def alive(self, replica_id: str) -> bool:
        """Whether `replica_id` is alive: its heartbeat key exists now, or reappears
        within one and a half heartbeats (a restarted Redis has lost every key until the
        replicas beat again, and a live owner must not be taken for dead).

        Raises:
            StoreError
        """
        key = self.replica_key(replica_id)
        patience = self.clock.monotonic() + 1.5 * self.heartbeat_s
        while not await ride_out(self.clock, lambda: self.client.exists(key)):
            if self.clock.monotonic() > patience:
                return False
            await clocks.sleep(self.clock, self.heartbeat_s / 4)
        return True

    async def written_back(self, replica_id: str) -> bool | None:
        """See `gateway.calls.forwarding.Bus.written_back`. Raises: StoreError."""

        async def look() -> tuple[Any, Any]:
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.get(self.epoch_key())
                pipe.get(self.replica_key(replica_id))
                epoch, beat = await pipe.execute()
            return epoch, beat

        epoch, beat = await ride_out(self.clock, look)
        if beat is None:
            return None
        written = formats.read_beat(text(beat)).epoch
        return epoch is not None and written == text(epoch)

    async def send(self, replica_id: str, payload: str) -> None:
        """Push `payload` into a replica's inbox. Raises: StoreError."""
        await self._push(self.inbox_key(replica_id), payload)

    async def deliver(self, replica_id: str, payload: str) -> bool:
        """Push `payload` into a replica's inbox if it beats now (one round trip); False,
        with nothing pushed, when its heartbeat is missing. Raises: StoreError."""
        keys = [self.replica_key(replica_id), self.inbox_key(replica_id)]
        # Run twice (a reply lost with its connection), the owner ignores the duplicate.
        delivered = await ride_out(
            self.clock, lambda: self._deliver(keys=keys, args=[payload, _REPLY_TTL_MS])
        )
        return bool(delivered)

    def delivery(self, replica_id: str, payload: str) -> Delivery:
        """`deliver`'s push, for the store to make with a claim (its script checks the
        heartbeat as `_DELIVER` does)."""
        keys = self.replica_key(replica_id), self.inbox_key(replica_id)
        return Delivery(*keys, payload=payload, ttl_ms=_REPLY_TTL_MS)

    async def retract(self, replica_id: str, payload: str) -> bool:
        """Take `payload` back out of a replica's inbox; False if it was read already.

        Raises: StoreError.
        """
        mark = hashlib.sha256(payload.encode()).hexdigest()[:32]
        keys = [self.inbox_key(replica_id), f"{self.prefix}{{replica:{replica_id}}}:back:{mark}"]
        args: list[str | int] = [payload, _RETRACTED_TTL_MS]
        return bool(await ride_out(self.clock, lambda: self._retract(keys=keys, args=args)))

    async def reply(self, key: str, payload: str) -> None:
        """Push one reply event for a forwarded request. Raises: StoreError."""
        await self._push(key, payload)

    async def _push(self, key: str, payload: str) -> None:
        """Run twice, a reply is read once (the reader stops at the outcome) and a
        forwarded message is recognised as a duplicate by its reply key."""

        async def push() -> None:
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.rpush(key, payload)
                pipe.pexpire(key, _REPLY_TTL_MS)
                await pipe.execute()

        await ride_out(self.clock, push)

    async def receive(self, key: str) -> str | None:
        """The next reply event on `key`, or None after a second. Raises: StoreError."""
        popped = await ride_out(self.clock, lambda: self.client.blpop([key], timeout=_POLL_S))
        return None if popped is None else text(popped[1])


def _decoded(payload: str) -> messages.Message | None:
    """An inbox message, decoded once; None, logged, when nobody here could read it (a
    newer release's, or garbage)."""
    try:
        return messages.decode(payload)
    except ValueError as exc:
        log.warning("fleet_bad_message", error=str(exc))
        return None
