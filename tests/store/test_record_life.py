"""Both store backends carry out the record's transition table (`gateway.protocol.record`):
a walk through every row and every guard a store checks, each step done on the store and
on the table's `step` alike, their records compared after each."""

from __future__ import annotations

from dataclasses import replace

from gateway.protocol import record as life
from gateway.protocol.record import SuspendedCall
from gateway.store.memory import MemoryStore
from gateway.store.redis import RedisStore
from tests.fakes.clock import ManualClock
from tests.store.test_stores import clock, record, store  # noqa: F401 (fixtures)


class Walk:
    """The store and the table side by side: each step is made on both, then compared."""

    def __init__(self, backend: MemoryStore | RedisStore) -> None:
        self.store = backend
        self.model: SuspendedCall | None = None
        self.steps = 0

    def expect(self, event: life.Event) -> bool:
        done = life.step(self.model, event)
        self.model = done.record
        return done.done

    async def same(self) -> None:
        self.steps += 1
        got = await self.store.get("c1")
        if self.model is None:
            assert got is None, f"step {self.steps}: the table has no record"
            return
        assert got is not None, f"step {self.steps}: the store lost the record"
        seen = (got.status, got.round, got.owner, got.claimer)
        want = (self.model.status, self.model.round, self.model.owner, self.model.claimer)
        assert seen == want, f"step {self.steps}"

    async def park(self, parked: SuspendedCall, cap: int = 10) -> bool:
        held = await self.store.park_held(parked, parked.deadline_ms, cap)
        assert held == self.expect(life.Park(parked, held=held))
        await self.same()
        return held

    async def claim(self, round_: int, claimer: str) -> SuspendedCall | None:
        claim = await self.store.claim("c1", round_, claimer)
        attempt = claim.attempt if claim is not None else "refused"
        assert (claim is not None) == self.expect(life.Claim(round_, claimer, attempt))
        await self.same()
        return claim

    async def steal(self, round_: int, dead: str, claimer: str) -> SuspendedCall | None:
        stolen = await self.store.steal("c1", round_, dead, claimer)
        attempt = stolen.attempt if stolen is not None else "refused"
        assert (stolen is not None) == self.expect(life.Steal(round_, dead, claimer, attempt))
        await self.same()
        return stolen

    async def take(self, claim: SuspendedCall, owner: str) -> bool:
        taken = await self.store.take(claim, owner)
        assert taken == self.expect(life.Take(claim, owner))
        await self.same()
        return taken

    async def give_back(self, claim: SuspendedCall, untake: bool = False) -> bool:
        given = await self.store.give_back(claim, untake=untake)
        assert given == self.expect(life.GiveBack(claim, untake))
        await self.same()
        return given

    async def restore(self, parked: SuspendedCall) -> bool:
        restored = await self.store.restore(parked, parked.deadline_ms)
        assert restored == self.expect(life.Restore(parked))
        await self.same()
        return restored

    async def forget(self) -> None:
        await self.store.forget("c1", "anonymous")
        assert self.expect(life.Forget())
        await self.same()


async def test_a_store_walks_the_records_table_step_for_step_with_it(store) -> None:  # noqa: F811
    walk = Walk(store)
    first = record("c1", round_=1)
    assert await walk.park(first)
    assert await walk.claim(2, "b") is None  # round
    claim = await walk.claim(1, "b")
    assert claim is not None
    assert await walk.claim(1, "c") is None  # a round is claimed once
    assert await walk.steal(1, "x", "c") is None  # claimed by the dead: not x's
    assert await walk.steal(2, "b", "c") is None  # round
    stolen = await walk.steal(1, "b", "c")
    assert stolen is not None
    assert not await walk.give_back(claim)  # that claim lost the round
    assert not await walk.take(claim, "b")  # nor may it take the call over
    assert await walk.take(stolen, "c")
    assert await walk.give_back(stolen, untake=True)  # the owner it had comes back
    assert not await walk.take(stolen, "c")  # no row: nobody claims the round now
    again = await walk.claim(1, "c")
    assert again is not None
    assert await walk.park(replace(first, round=2, owner="c"))  # the next round
    assert not await walk.restore(replace(first, round=2))  # no row over a record
    await walk.forget()
    assert await walk.restore(replace(first, round=2, owner="c"))
    await walk.forget()
    assert await walk.claim(2, "c") is None  # no row: gone
    assert not await walk.park(record("c1"), cap=0)  # held: the principal is at its cap
    await walk.forget()
    assert walk.steps == 21


async def test_a_memory_record_lapses_as_the_table_says(clock: ManualClock) -> None:  # noqa: F811
    backend = MemoryStore(clock)
    parked = record("c1", deadline_in_ms=1_000)
    await backend.park(parked)
    clock.advance((1_000 + life.GRACE_MS - 1) / 1000)
    assert await backend.get("c1") is not None  # lapsed is refused: within its grace
    assert not life.step(parked, life.Lapse(clock.wall_ms())).done
    clock.advance(0.001)
    assert life.step(parked, life.Lapse(clock.wall_ms())).done
    assert await backend.get("c1") is None
