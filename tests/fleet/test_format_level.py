"""A replica learns the fleet's format level from the heartbeats as it beats, on a real
Redis: through the roll call every beat, and through a scan of every heartbeat key on its
first beat, every `SCAN_LOOKS` beats, and on the first beat after the store lost its data
(the roll call went with it)."""

from __future__ import annotations

from gateway.fleet.ledger import roll_call_key
from gateway.fleet.redis_bus import SCAN_LOOKS, RedisBus
from gateway.protocol.formats import LEVEL, PREVIOUS, FleetLevel
from gateway.store.redis_client import connect
from tests.fakes.clock import ManualClock
from tests.peers.tooling import RedisServer

BEAT = 1.0
OLD_BEAT = "1733450000000 e"  # as 0.1.0 writes it: no level


async def ignore(_payload: str) -> None:
    return None


async def test_a_replica_follows_the_fleets_oldest_level_as_it_beats(
    redis_server: RedisServer,
) -> None:
    clock = ManualClock()
    prefix = "format-level:"
    level = FleetLevel(settle_s=0.0)
    bus = RedisBus(
        connect(redis_server.url),
        prefix=prefix,
        replica_id="new",
        heartbeat_s=BEAT,
        clock=clock,
        level=level,
    )
    client = bus.client
    old = bus.replica_key("old")

    async def beat() -> None:
        """One more beat, and its look at the fleet, done."""
        clock.advance(BEAT)
        await clock.armed(clock.now + BEAT)

    await client.set(old, OLD_BEAT)  # a replica of 0.1.0 whose ledger has not named it yet
    assert level.level == PREVIOUS  # before any look: what every release reads
    bus.start(ignore)
    try:
        await clock.armed(clock.now + BEAT)  # the first beat scans: it finds the old one
        assert level.level == PREVIOUS
        await client.delete(old)
        await beat()  # the roll call: nobody else
        assert level.level == LEVEL
        await client.sadd(roll_call_key(prefix), "old")  # its ledger names it
        await client.set(old, OLD_BEAT)
        await beat()
        assert level.level == PREVIOUS
        await client.delete(old)
        await beat()
        assert level.level == LEVEL

        await client.set(old, OLD_BEAT)  # and the store lost its data (the roll call too)
        await client.delete(f"{prefix}fleet:epoch", roll_call_key(prefix))
        await beat()  # the loss seen: this look scans
        assert level.level == PREVIOUS
        await client.delete(old)
        await beat()
        assert level.level == LEVEL
        await client.set(old, OLD_BEAT)  # not on the roll call (its ledger not yet written)
        await beat()
        assert level.level == LEVEL  # unseen by the roll call ...
        for _ in range(SCAN_LOOKS):  # ... the scan every SCAN_LOOKS looks finds it
            await beat()
        assert level.level == PREVIOUS
        await beat()  # and it is looked at again, off the roll call, until it lapses
        assert level.level == PREVIOUS
        await client.delete(old)
        await beat()
        assert level.level == LEVEL
    finally:
        await bus.close()
        await client.aclose()
