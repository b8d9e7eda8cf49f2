"""The session pool, in process: sessions are made by a factory the test controls."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from gateway.aio import spawn
from gateway.config import PoolLimits
from gateway.errors import SessionsBusy, UpstreamError
from gateway.protocol.capabilities import ClientCaps
from gateway.protocol.translate import UpstreamInfo
from gateway.protocol.versions import UPSTREAM_VERSIONS, Version
from gateway.upstream.demand import Demand
from gateway.upstream.held import HeldQuestions
from gateway.upstream.pool import SessionPool
from gateway.upstream.port import Inbox, StreamCursor
from tests.fakes.clock import ManualClock

INFO = UpstreamInfo("2025-11-25", {}, {"name": "fake", "version": "1"}, None)


class FakeSession:
    """Opens when the test lets it (`Factory.gate`), or fails when told to."""

    def __init__(self, factory: Factory, caps: ClientCaps) -> None:
        self.factory = factory
        self.caps = caps
        self.version: Version = UPSTREAM_VERSIONS[0]
        self.info: UpstreamInfo | None = None
        self.id: str | None = f"s{len(factory.made)}"
        self.principal: str | None = None
        self.held = HeldQuestions()
        self.sent: list[dict[str, Any]] = []
        self.requests = 0
        self.last_used = 0.0
        self.closed = asyncio.Event()
        self._open = False

    @property
    def alive(self) -> bool:
        return self._open and not self.closed.is_set()

    async def open(self) -> UpstreamInfo:
        self.factory.opening.put_nowait(self)
        await self.factory.gate.wait()
        if self.factory.fail:
            raise UpstreamError("refused")
        self._open, self.info = True, INFO
        return INFO

    async def adopt(self, session_id: str, version: Version) -> None:
        self.id = session_id  # named before its GET stream is asked for, as a real one is
        self.factory.adopting.put_nowait(self)
        await self.factory.adopt_gate.wait()  # its GET stream's head, on the wire
        if self.factory.fail:
            raise UpstreamError("refused")
        self._open = True

    async def close(self, *, end: bool = True) -> None:
        self.ended = end
        self.closed.set()

    async def wait_quiet(self) -> None:
        return None

    def next_id(self) -> str:
        return "r"

    def attach(self, inbox: Inbox) -> None:
        pass

    def detach(self, inbox: Inbox) -> None:
        pass

    async def start(self, message: Any, inbox: Inbox, cursor: StreamCursor, headers=None) -> Any:
        raise AssertionError("not used")

    async def pump_resumed(self, rid: Any, inbox: Inbox, cursor: StreamCursor) -> None:
        raise AssertionError("not used")

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    async def request(
        self, method: str, params: Any, headers: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        self.requests += 1
        return {"jsonrpc": "2.0", "id": 1, "result": {"method": method}}


class Factory:
    def __init__(self) -> None:
        self.made: list[FakeSession] = []
        self.opening: asyncio.Queue[FakeSession] = asyncio.Queue()
        self.gate = asyncio.Event()
        self.adopting: asyncio.Queue[FakeSession] = asyncio.Queue()
        self.adopt_gate = asyncio.Event()
        self.adopt_gate.set()
        self.fail = False

    def __call__(self, caps: ClientCaps) -> FakeSession:
        session = FakeSession(self, caps)
        self.made.append(session)
        return session


async def until(condition: Callable[[], bool]) -> None:
    """Until `condition` holds, letting the other tasks run (bounded)."""
    async with asyncio.timeout(5):
        while not condition():
            await asyncio.sleep(0)


def pool(factory: Factory, **limits: Any) -> SessionPool:
    return SessionPool("fake", factory, PoolLimits(**{"min_idle": 0, **limits}))


async def test_a_caller_cancelled_while_its_session_opens_gives_the_slot_back() -> None:
    factory = Factory()
    sessions = pool(factory, max_sessions=1, acquire_timeout_s=30)
    opening = spawn(sessions.acquire(ClientCaps(), "alice"), name="acquire")
    half_open = await factory.opening.get()  # inside initialize, on the wire
    opening.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await opening
    await half_open.closed.wait()  # the half-open session is closed ...
    assert sessions.size == 0  # ... and its slot given back
    factory.gate.set()
    async with asyncio.timeout(5):  # without the slot this would wait 30 s, then refuse
        session = await sessions.acquire(ClientCaps(), "alice")
    assert session.alive and sessions.size == 1


async def test_a_session_given_back_clean_is_reused_and_a_spent_one_is_closed() -> None:
    factory = Factory()
    factory.gate.set()
    sessions = pool(factory, max_requests=2)
    first = await sessions.acquire(ClientCaps(roots=True), "alice")
    sessions.release(first, reuse=True)
    assert await sessions.acquire(ClientCaps(roots=True), "alice") is first
    assert await sessions.acquire(ClientCaps(), "alice") is not first  # another capability set
    first.requests = 2  # past max_requests: recycled
    sessions.release(first, reuse=True)
    await first.closed.wait()


async def test_a_full_pool_refuses_after_the_acquire_timeout_with_its_own_error() -> None:
    factory = Factory()
    factory.gate.set()
    sessions = pool(factory, max_sessions=1, acquire_timeout_s=0.01)
    await sessions.acquire(ClientCaps(), "alice")
    with pytest.raises(SessionsBusy) as busy:
        await sessions.acquire(ClientCaps(), "alice")
    assert busy.value.status == 503 and busy.value.data == {"reason": "upstream_sessions"}


async def test_an_upstream_that_refuses_to_open_is_not_ready_and_counts_an_error() -> None:
    factory = Factory()
    factory.gate.set()
    factory.fail = True
    errors: list[int] = []
    sessions = SessionPool(
        "fake", factory, PoolLimits(min_idle=0), on_error=lambda: errors.append(1)
    )
    with pytest.raises(UpstreamError):
        await sessions.acquire(ClientCaps(), "alice")
    assert errors == [1] and not sessions.reachable and sessions.size == 0
    factory.fail = False
    assert await sessions.check()


async def test_idle_sessions_beyond_min_idle_are_reaped_on_the_pools_clock() -> None:
    clock = ManualClock()
    factory = Factory()
    factory.gate.set()
    sessions = SessionPool("fake", factory, PoolLimits(min_idle=1, idle_timeout_s=60), clock=clock)
    sessions.start()  # opens the gateway's own session: never reaped
    try:
        caps = ClientCaps(sampling=True)
        one, two = await sessions.acquire(caps, "alice"), await sessions.acquire(caps, "alice")
        await asyncio.gather(*list(sessions._openers))  # the spares are open (at time 0)
        sessions.release(one, reuse=True)
        sessions.release(two, reuse=True)
        await clock.armed(30.0)  # the reaper's first look
        before = sessions.size  # own + one + two + pre-warmed spares
        assert before >= 4
        clock.advance(30.0)
        await clock.armed(60.0)  # it looked: nothing idle long enough yet
        assert sessions.size == before
        clock.advance(31.0)
        await clock.armed(clock.now + 30.0)  # it looked again
        assert sessions.size == 2  # own + min_idle
    finally:
        await sessions.close()


async def test_a_caller_waiting_for_a_slot_gets_the_session_a_prewarm_just_opened() -> None:
    factory = Factory()
    factory.gate.set()
    sessions = pool(factory, min_idle=1, max_sessions=2, acquire_timeout_s=30)
    factory.gate.clear()
    first = spawn(sessions.acquire(ClientCaps(), "alice"), name="first")
    await factory.opening.get()  # the first caller's session opens ...
    factory.gate.set()
    await first
    await factory.opening.get()  # ... then a pre-warmed one takes the second slot
    second = spawn(sessions.acquire(ClientCaps(), "alice"), name="second")
    async with asyncio.timeout(5):  # without a wake-up it would wait the full 30 s
        session = await second
    assert session.alive and sessions.size == 2


def test_the_reserve_is_the_recent_rate_times_the_time_to_open() -> None:
    demand = Demand()
    assert demand.reserve(1, 64) == 1  # nothing seen yet: min_idle
    demand.opened(0.5)
    for _ in range(9):
        demand.acquired(10.0)
    assert demand.reserve(1, 64) == 5  # 9/s x 0.5 s, rounded up
    assert demand.reserve(1, 4) == 4  # never past max_sessions
    demand.acquired(11.0)  # a second later, the burst is forgotten
    assert demand.reserve(1, 64) == 1
    demand.opened(30.0)  # a very slow start (the average is now 6.4 s) ...
    for _ in range(7):
        demand.acquired(11.5)
    assert demand.reserve(1, 64) == 8  # ... keeps no more spares than the recent calls


def test_calls_that_give_their_sessions_back_as_fast_as_they_take_them_keep_no_spares() -> None:
    demand = Demand()
    demand.opened(0.5)
    for i in range(600):  # 600 calls a second, each giving its session back a moment later
        demand.acquired(10.0 + i / 1000)
        demand.returned(10.0 + i / 1000 + 0.0005)
    assert demand.reserve(1, 64) == 1  # none kept: min_idle (by acquisitions, 300 ahead)
    for _ in range(10):  # then ten calls that park, keeping theirs
        demand.acquired(10.7)
    assert demand.reserve(1, 64) == 5  # 10 kept in the last second x 0.5 s
    demand.opened(100.0)  # a server taking seconds to start (the average is now 20.4 s) ...
    assert demand.reserve(1, 64) == 10  # ... is readied no more than the 10 calls kept


@pytest.mark.parametrize(("open_s", "ahead"), [(0.5, 4), (5.0, 8)])
async def test_a_pool_whose_calls_give_their_sessions_back_holds_only_what_they_use(
    open_s: float, ahead: int
) -> None:
    clock, factory = ManualClock(), Factory()
    factory.gate.set()
    sessions = SessionPool("fake", factory, PoolLimits(min_idle=1, max_sessions=64), clock=clock)
    sessions.demand.opened(open_s)  # what a session takes to open (a stdio server: seconds)
    sessions.demand.opened = lambda _took_s: None  # type: ignore[method-assign]  # fakes: at once
    for _ in range(50):  # 8 calls at a time, 400 in all, each giving its session back
        taken = [await sessions.acquire(ClientCaps(), "alice") for _ in range(8)]
        for session in taken:
            sessions.release(session, reuse=True)
        await asyncio.gather(*list(sessions._openers))
        clock.advance(0.01)
    # The 8 in use and, opened while they were taken, 8 kept x open_s ahead, never more
    # than the 8 kept; sized by the rate of acquisitions (400 in the last second) it would
    # hold all 64, and by the rate kept alone, 48 when a session takes 5 s to open.
    assert sessions.size <= 8 + ahead


async def test_sessions_ahead_of_demand_open_side_by_side_and_no_more_than_wanted() -> None:
    clock, factory = ManualClock(), Factory()
    limits = PoolLimits(min_idle=0, max_sessions=50, max_opening=5)
    sessions = SessionPool("fake", factory, limits, clock=clock)
    sessions.demand.opened(0.5)  # opening takes half a second ...
    for _ in range(7):
        sessions.demand.acquired(clock.now)  # ... and 8 calls come this second: keep 4 ready
    taken = spawn(sessions.acquire(ClientCaps(), "alice"), name="acquire")
    async with asyncio.timeout(5):
        opening = [await factory.opening.get() for _ in range(5)]  # its own, 4 ahead, at once
    assert sessions.size == 5 and factory.opening.empty()
    factory.gate.set()
    assert await taken in opening
    await asyncio.gather(*list(sessions._openers))
    assert sessions.size == 5  # no more were opened than were wanted


async def test_sessions_of_a_server_that_says_the_same_share_one_copy_of_it() -> None:
    factory = Factory()
    factory.gate.set()

    class FreshInfo(FakeSession):
        async def open(self) -> UpstreamInfo:
            await super().open()
            self.info = UpstreamInfo("2025-11-25", {}, {"name": "fake", "version": "1"}, None)
            return self.info  # equal to the last one, not the same object

    factory_call = factory.__call__

    def make(caps: ClientCaps) -> FakeSession:
        made = factory_call(caps)
        made.__class__ = FreshInfo
        return made

    sessions = SessionPool("fake", make, PoolLimits(min_idle=0, max_sessions=4))
    one, two = (
        await sessions.acquire(ClientCaps(), "alice"),
        await sessions.acquire(ClientCaps(), "alice"),
    )
    assert one is not two and one.info == two.info
    assert one.info is two.info is sessions.info  # a parked call holds no copy of its own


async def test_a_caller_waiting_on_a_full_pool_gets_a_session_given_back_or_its_slot() -> None:
    factory = Factory()
    factory.gate.set()
    sessions = pool(factory, max_sessions=1, acquire_timeout_s=30)
    first = await sessions.acquire(ClientCaps(), "alice")
    waiting = spawn(sessions.acquire(ClientCaps(), "alice"), name="waiting")
    await asyncio.sleep(0)  # it is waiting on the full pool now
    assert sessions._slots.waiting == 1
    sessions.release(first, reuse=True)  # given back clean: the waiter takes it
    async with asyncio.timeout(5):  # without a wake-up it would wait the full 30 s
        assert await waiting is first
    assert sessions._slots.waiting == 0
    waiting = spawn(sessions.acquire(ClientCaps(), "alice"), name="waiting-again")
    await asyncio.sleep(0)
    sessions.release(first, reuse=False)  # closed: its slot is free for a new session
    async with asyncio.timeout(5):
        second = await waiting
    assert second is not first and second.alive and first.closed.is_set()


async def test_a_session_given_back_with_nobody_waiting_costs_no_task() -> None:
    factory = Factory()
    factory.gate.set()
    sessions = pool(factory, max_sessions=4)
    session = await sessions.acquire(ClientCaps(), "alice")
    before = {t.get_name() for t in asyncio.all_tasks()}
    sessions.release(session, reuse=True)
    after = {t.get_name() for t in asyncio.all_tasks()}
    assert after - before == set()  # no pool-freed task: nobody was waiting


# -- sessions shared by several calls (calls_per_session) --------------------------------


async def test_calls_share_a_session_up_to_calls_per_session_before_another_opens() -> None:
    factory = Factory()
    factory.gate.set()
    sessions = pool(factory, calls_per_session=3)
    calls = [await sessions.acquire(ClientCaps(), "alice") for _ in range(7)]
    assert [factory.made.index(s) for s in calls] == [0, 0, 0, 1, 1, 1, 2]
    sessions.release(calls[0], reuse=True)  # room on the first session again
    assert await sessions.acquire(ClientCaps(), "alice") is calls[0]
    # Without sharing (the default), each call has a session of its own.
    single = Factory()
    alone = pool(single, calls_per_session=1)
    single.gate.set()
    assert len({id(await alone.acquire(ClientCaps(), "alice")) for _ in range(3)}) == 3


async def test_a_shared_session_closes_when_its_last_call_leaves_and_not_before() -> None:
    factory = Factory()
    factory.gate.set()
    sessions = pool(factory, calls_per_session=4)
    one, two = (
        await sessions.acquire(ClientCaps(), "alice"),
        await sessions.acquire(ClientCaps(), "alice"),
    )
    assert one is two
    sessions.release(one, reuse=False)  # this call failed: its sibling goes on
    assert not one.closed.is_set()
    third = await sessions.acquire(ClientCaps(), "alice")
    assert third is not one  # a session whose call failed takes no new calls
    sessions.release(two, reuse=True)
    async with asyncio.timeout(5):
        await one.closed.wait()  # its last call is gone: now it closes, ended upstream
    assert one.ended is True


async def test_a_shared_session_whose_call_went_elsewhere_is_not_ended_upstream() -> None:
    factory = Factory()
    factory.gate.set()
    sessions = pool(factory, calls_per_session=4)
    one, two = (
        await sessions.acquire(ClientCaps(), "alice"),
        await sessions.acquire(ClientCaps(), "alice"),
    )
    sessions.discard(one)  # another replica took this call over
    assert not one.closed.is_set()  # the other call still runs on it
    sessions.release(two, reuse=True)
    async with asyncio.timeout(5):
        await one.closed.wait()
    assert one.ended is False  # the other replica's call lives on upstream


async def test_calls_taken_over_from_one_session_share_one_adopted_session() -> None:
    factory = Factory()
    factory.gate.set()
    sessions = pool(factory, calls_per_session=4)
    first = await sessions.adopt(ClientCaps(), "alice", "upstream-1", UPSTREAM_VERSIONS[0])
    second = await sessions.adopt(ClientCaps(), "alice", "upstream-1", UPSTREAM_VERSIONS[0])
    assert first is second and sessions.size == 1  # one GET stream for the session
    fresh = await sessions.acquire(ClientCaps(), "alice")
    assert fresh is not first  # an adopted session carries only the calls taken over
    sessions.release(first, reuse=True)
    assert not first.closed.is_set()
    sessions.release(second, reuse=True)
    async with asyncio.timeout(5):
        await first.closed.wait()
    assert first.ended is False  # other replicas may carry more of its calls
    again = await sessions.adopt(ClientCaps(), "alice", "upstream-1", UPSTREAM_VERSIONS[0])
    assert again is not first  # the closed one is not handed out again


@pytest.mark.parametrize("calls_per_session", [1, 4])
@pytest.mark.parametrize("how", ["refused", "cancelled"])
async def test_a_session_whose_adoption_fails_is_let_go_of_not_ended_upstream(
    how: str, calls_per_session: int
) -> None:
    """The session is the dead owner's call's: a takeover that cannot adopt it now leaves
    it for the next retry's, so it must not be ended (DELETE) on the way out."""
    factory = Factory()
    sessions = pool(factory, max_sessions=1, calls_per_session=calls_per_session)
    factory.adopt_gate.clear()
    adopting = spawn(
        sessions.adopt(ClientCaps(), "alice", "upstream-1", UPSTREAM_VERSIONS[0]), name="a"
    )
    session = await factory.adopting.get()
    if how == "refused":
        factory.fail = True
        factory.adopt_gate.set()
        with pytest.raises(UpstreamError):
            await adopting
    else:
        adopting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await adopting
    async with asyncio.timeout(5):
        await session.closed.wait()
    assert session.ended is False
    assert sessions.size == 0  # its slot is free again


async def test_with_sharing_the_pool_opens_ahead_for_calls_not_sessions() -> None:
    async def sessions_made(calls_per_session: int) -> tuple[int, int]:
        factory = Factory()
        factory.gate.set()
        sessions = pool(factory, calls_per_session=calls_per_session, min_idle=2)
        calls = [await sessions.acquire(ClientCaps(), "alice") for _ in range(9)]
        await asyncio.gather(*list(sessions._openers))  # the sessions opened ahead are open
        return len(factory.made), len({id(c) for c in calls})

    # Alone, 9 calls hold 9 sessions and 2 more wait idle; sharing 8 to a session, 9 calls
    # hold 2, and room is kept for 2 sessions' worth of calls: 7 places left and 2 more.
    assert await sessions_made(1) == (11, 9)
    assert await sessions_made(8) == (4, 2)


async def test_a_burst_joins_a_session_being_opened_instead_of_each_opening_one() -> None:
    factory = Factory()  # the gate is shut: sessions open when the test lets them
    sessions = pool(factory, calls_per_session=4)
    acquiring = [
        spawn(sessions.acquire(ClientCaps(), "alice"), name=f"acquire-{i}") for i in range(5)
    ]
    for _ in range(2):
        await factory.opening.get()
    await until(
        lambda: sessions._sharing.spare(("alice", ClientCaps().key)) == 3
    )  # 4 + 1 places taken
    assert len(factory.made) == 2  # the first call's session, which 3 more wait for, and
    acquiring[1].cancel()  # the fifth's; a call that gives up while it opens
    with contextlib.suppress(asyncio.CancelledError):
        await acquiring[1]
    factory.gate.set()
    async with asyncio.timeout(5):
        got = await asyncio.gather(*acquiring[:1], *acquiring[2:])
    first = factory.made[0]
    assert got[:3] == [first, first, first]  # three calls waited for it, not one each
    assert sessions._sharing.calls(first) == 3  # the one that gave up is not counted


async def test_concurrent_takeovers_of_one_session_adopt_it_once() -> None:
    factory = Factory()
    factory.gate.set()
    sessions = pool(factory, calls_per_session=4)
    adopted = await asyncio.gather(
        *(
            sessions.adopt(ClientCaps(), "alice", "upstream-1", UPSTREAM_VERSIONS[0])
            for _ in range(3)
        )
    )
    assert len({id(s) for s in adopted}) == 1 and len(factory.made) == 1
    assert sessions._sharing.calls(adopted[0]) == 3


async def test_a_call_waiting_for_a_slot_gets_the_room_a_session_opened_with() -> None:
    factory = Factory()  # the gate is shut
    sessions = pool(factory, calls_per_session=4, max_sessions=1, acquire_timeout_s=30)
    acquiring = [
        spawn(sessions.acquire(ClientCaps(), "alice"), name=f"acquire-{i}") for i in range(5)
    ]
    await factory.opening.get()
    await until(lambda: sessions._slots.waiting == 1)  # four count on the opening session
    acquiring[1].cancel()  # a place on the opening session is free again; the fifth waits
    with contextlib.suppress(asyncio.CancelledError):
        await acquiring[1]
    factory.gate.set()
    async with asyncio.timeout(5):  # without the wake-up it would wait 30 s, then refuse
        got = await asyncio.gather(*acquiring[:1], *acquiring[2:])
    assert len({id(s) for s in got}) == 1 and len(factory.made) == 1


async def test_a_pool_closed_while_a_shared_session_opens_closes_cleanly() -> None:
    factory = Factory()  # the gate is shut
    sessions = pool(factory, calls_per_session=4)
    acquiring = spawn(sessions.acquire(ClientCaps(), "alice"), name="acquire")
    await factory.opening.get()
    closing = spawn(sessions.close(), name="close")
    await until(lambda: sessions._closing)
    factory.gate.set()
    async with asyncio.timeout(5):
        await closing
        await asyncio.gather(acquiring, return_exceptions=True)
    assert not acquiring.cancelled() and acquiring.exception() is None, acquiring


async def test_a_session_of_ones_own_takes_no_slot_is_in_the_ledger_and_backs_off() -> None:
    """A listen's session: beside `max_sessions`, shared by no call, listed for the fleet's
    ledger (ended if this replica dies), and not started again at once after a failed
    start."""
    factory = Factory()
    factory.gate.set()
    sessions = pool(factory, max_sessions=1, calls_per_session=4)
    call = await sessions.acquire(ClientCaps(), "alice")
    own = await sessions.open_alone(ClientCaps())
    assert own is not call and sessions.size == 1
    assert (
        await sessions.acquire(ClientCaps(), "alice") is call
    )  # calls share theirs, never this one
    assert own.id in sessions.idle_ids()
    sessions.close_alone(own)
    await own.closed.wait()
    assert own.ended is True and own.id not in sessions.idle_ids()
    backing_off = SessionPool("fake", factory, PoolLimits(min_idle=0), restart_backoff_s=30.0)
    factory.fail = True
    with pytest.raises(UpstreamError):
        await backing_off.open_alone(ClientCaps())
    made = len(factory.made)
    with pytest.raises(UpstreamError, match="the next try is in"):
        await backing_off.open_alone(ClientCaps())
    assert len(factory.made) == made  # nothing started while it backs off


async def test_a_server_that_says_something_else_when_a_session_opens_has_changed_lists() -> None:
    factory = Factory()
    factory.gate.set()
    sessions = pool(factory)
    heard: list[dict[str, Any]] = []
    sessions.on_change = heard.append
    await sessions.acquire(ClientCaps(), "alice")
    await sessions.acquire(ClientCaps(), "alice")  # the same server, saying the same: nothing
    assert heard == []
    sessions.info = INFO.__class__("2025-06-18", {}, {"name": "old", "version": "0"}, None)
    await sessions.acquire(ClientCaps(), "alice")  # redeployed: its lists may have changed
    assert [m["method"] for m in heard] == [
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
    ]


async def test_a_session_the_server_forgot_tells_of_changed_lists_once_until_one_opens() -> None:
    factory = Factory()
    factory.gate.set()
    sessions = pool(factory)
    heard: list[dict[str, Any]] = []
    sessions.on_change = heard.append
    first = await sessions.acquire(ClientCaps(), "alice")
    first.on_forgotten()  # a 404 on its GET stream: the server restarted
    first.on_forgotten()  # another session of the same restart: told already
    assert [m["method"] for m in heard] == [
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
    ]
    sessions.info = INFO.__class__("2025-06-18", {}, {"name": "old", "version": "0"}, None)
    await sessions.acquire(ClientCaps(), "alice")  # says something else, but that was told
    assert len(heard) == 3
    (await sessions.acquire(ClientCaps(), "alice")).on_forgotten()  # a restart after that one
    assert len(heard) == 6


# -- a session serves one caller -------------------------------------------------------


async def test_a_session_serves_one_caller_and_one_opened_ahead_is_bound_at_first_use() -> None:
    factory = Factory()
    factory.gate.set()
    sessions = pool(factory, min_idle=1)
    alices = await sessions.acquire(ClientCaps(), "alice")
    await asyncio.gather(*list(sessions._openers))  # one opened ahead, for nobody yet
    (ahead,) = [s for s in factory.made if s is not alices]
    assert (alices.principal, ahead.principal) == ("alice", None)
    sessions.release(alices, reuse=True)
    bobs = await sessions.acquire(ClientCaps(), "bob")
    assert bobs is ahead and bobs.principal == "bob"  # his from now on
    sessions.release(bobs, reuse=True)
    assert await sessions.acquire(ClientCaps(), "alice") is alices
    assert await sessions.acquire(ClientCaps(), "bob") is bobs
    assert sessions.sessions_per_caller() == {"alice": 1, "bob": 1}


async def test_without_isolation_every_caller_shares_the_sessions() -> None:
    factory = Factory()
    factory.gate.set()
    sessions = pool(factory, isolation="none")
    first = await sessions.acquire(ClientCaps(), "alice")
    sessions.release(first, reuse=True)
    assert await sessions.acquire(ClientCaps(), "bob") is first
    assert first.principal is None and sessions.sessions_per_caller() == {}


async def test_a_callers_idle_sessions_fall_to_the_bound_at_the_pools_next_look() -> None:
    clock, factory = ManualClock(), Factory()
    factory.gate.set()
    limits = PoolLimits(min_idle=0, max_idle_per_caller=2)
    sessions = SessionPool("fake", factory, limits, clock=clock)
    sessions.start()
    try:
        await clock.armed(30.0)  # the pool's first look, to come
        held = [await sessions.acquire(ClientCaps(), "alice") for _ in range(3)]
        bobs = await sessions.acquire(ClientCaps(), "bob")
        for session in held:
            clock.advance(1.0)
            sessions.release(session, reuse=True)
        sessions.release(bobs, reuse=True)
        # Between two calls of a busy caller all its sessions may be idle: none goes yet.
        assert await sessions.acquire(ClientCaps(), "alice") is held[2]
        sessions.release(held[2], reuse=True)
        assert not any(s.closed.is_set() for s in factory.made)
        clock.advance(30.0 - clock.now)  # it looks
        await until(lambda: held[0].closed.is_set())  # the least recently used of alice's
        assert not any(s.closed.is_set() for s in (held[1], held[2], bobs))
        assert sessions.sessions_per_caller() == {"alice": 2, "bob": 1}
    finally:
        await sessions.close()


async def test_a_full_pool_closes_another_callers_least_recently_used_idle_session() -> None:
    clock, factory = ManualClock(), Factory()
    factory.gate.set()
    sessions = SessionPool("fake", factory, PoolLimits(min_idle=0, max_sessions=2), clock=clock)
    alices, bobs = (
        await sessions.acquire(ClientCaps(), "alice"),
        await sessions.acquire(ClientCaps(), "bob"),
    )
    sessions.release(alices, reuse=True)
    clock.advance(1.0)
    sessions.release(bobs, reuse=True)
    carols = await sessions.acquire(ClientCaps(), "carol")  # no slot left: room is made
    await until(lambda: alices.closed.is_set())
    assert not bobs.closed.is_set()
    assert carols not in (alices, bobs) and carols.principal == "carol"


async def test_calls_of_two_callers_never_share_a_session() -> None:
    factory = Factory()
    factory.gate.set()
    sessions = pool(factory, calls_per_session=4)
    alices = [await sessions.acquire(ClientCaps(), "alice") for _ in range(2)]
    bobs = await sessions.acquire(ClientCaps(), "bob")
    assert alices[0] is alices[1] and bobs is not alices[0]
    assert (alices[0].principal, bobs.principal) == ("alice", "bob")


async def test_a_burst_of_new_callers_opens_at_most_max_opening_sessions_at_once() -> None:
    factory = Factory()  # the gate is shut: sessions open when the test lets them
    sessions = pool(factory, max_opening=2, max_sessions=16, acquire_timeout_s=30)
    acquiring = [
        spawn(sessions.acquire(ClientCaps(), f"caller-{i}"), name=f"acquire-{i}") for i in range(6)
    ]
    for _ in range(2):
        await factory.opening.get()
    await until(lambda: sessions.maker.starting == 6)  # four wait their turn
    assert len(factory.made) == 2
    factory.gate.set()
    got = await asyncio.gather(*acquiring)
    assert len({id(s) for s in got}) == 6
    assert [s.principal for s in got] == [f"caller-{i}" for i in range(6)]


async def test_a_plain_request_rides_on_an_idle_session_of_its_caller() -> None:
    factory = Factory()
    factory.gate.set()
    sessions = pool(factory)
    alices = await sessions.acquire(ClientCaps(), "alice")
    sessions.release(alices, reuse=True)
    reply = await sessions.request(ClientCaps(), "alice", "tools/list", None)
    assert reply["result"] == {"method": "tools/list"} and alices.requests == 1
    await sessions.request(ClientCaps(), "bob", "tools/list", None)  # bob has none: his own
    assert len(factory.made) == 2 and sessions.sessions_per_caller() == {"alice": 1, "bob": 1}


# -- questions asked outside any call --------------------------------------------------

ROOTS_ASKED = {"jsonrpc": "2.0", "id": 5, "method": "roots/list"}


async def test_a_question_no_call_asks_in_time_is_answered_and_its_session_retired() -> None:
    clock, factory = ManualClock(), Factory()
    factory.gate.set()
    limits = PoolLimits(min_idle=0, outside_question_s=30)
    sessions = SessionPool("fake", factory, limits, clock=clock)
    session = await sessions.acquire(ClientCaps(roots=True), "alice")
    sessions.release(session, reuse=True)
    session.held.hold(ROOTS_ASKED)  # asked between calls
    await clock.armed(30.0)
    clock.advance(30.0)
    await until(lambda: session.closed.is_set())
    assert session.sent == [
        {
            "jsonrpc": "2.0",
            "id": 5,
            "error": {
                "code": -32601,
                "message": "roots/list is not available outside a client request",
            },
        }
    ]
    assert await sessions.acquire(ClientCaps(roots=True), "alice") is not session


async def test_a_question_a_call_took_is_not_answered_when_the_bound_passes() -> None:
    clock, factory = ManualClock(), Factory()
    factory.gate.set()
    sessions = SessionPool("fake", factory, PoolLimits(min_idle=0), clock=clock)
    session = await sessions.acquire(ClientCaps(roots=True), "alice")
    session.held.hold(ROOTS_ASKED)
    assert session.held.take() == [ROOTS_ASKED]  # the next call asks it of its caller
    await clock.armed(clock.now + sessions.limits.outside_question_s)
    clock.advance(sessions.limits.outside_question_s)
    sessions.release(session, reuse=True)
    assert session.sent == [] and await sessions.acquire(ClientCaps(roots=True), "alice") is session


async def test_a_session_that_closes_answers_what_it_holds_first() -> None:
    factory = Factory()
    factory.gate.set()
    sessions = pool(factory)
    session = await sessions.acquire(ClientCaps(roots=True), "alice")
    session.held.hold(ROOTS_ASKED)
    sessions.release(session, reuse=False)
    await until(lambda: session.closed.is_set())
    assert [m["id"] for m in session.sent] == [5]
