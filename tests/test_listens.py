"""The replica's open listens: the limits, a change handed to every listen of its
upstream once, a stalled client's listen cut short, draining, a credential's expiry on a
manual clock (no server needed)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.aio import spawn
from gateway.errors import Draining, UpstreamError
from gateway.listens import (
    DRAINING,
    MAX_WAITING,
    WRITE_TIMEOUT_S,
    ClientStalled,
    Listens,
    ListensFull,
    PrincipalListening,
    serve,
)
from gateway.protocol import listen
from gateway.protocol.translate import UpstreamInfo
from gateway.upstream.port import StreamEnd
from tests.fakes.clock import SETTLE_TURNS, ManualClock

TOOLS = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
PROMPTS = {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"}


def test_a_change_reaches_every_listen_of_its_upstream_once_while_it_waits() -> None:
    listens = Listens(4, 4)
    with (
        listens.opened("a", "p") as one,
        listens.opened("a", "p") as two,
        listens.opened("b", "p") as other,
    ):
        listens.publish("a", TOOLS)
        listens.publish("a", TOOLS)  # the same news, still waiting: nothing more to say
        listens.publish("a", PROMPTS)
        listens.publish("a", {"jsonrpc": "2.0", "method": "notifications/progress"})
        listens.publish("a", {**TOOLS, "id": 1})  # a request is no news
        assert one.waiting() == two.waiting() == (TOOLS, PROMPTS)
        assert other.empty()
    assert len(listens) == 0


def test_listens_beyond_the_limit_are_refused_and_a_closed_one_makes_room() -> None:
    listens = Listens(1, 4)
    with listens.opened("a", "p"):
        with pytest.raises(ListensFull), listens.opened("b", "p"):
            pass
    with listens.opened("b", "p"):
        assert len(listens) == 1


def test_a_listen_whose_client_does_not_read_is_cut_short_at_once_past_the_limit() -> None:
    """Whatever fills it (the listen's own session, or news from others), a backlog past
    `MAX_WAITING` is dropped for the one end that cuts the listen short, seen next."""
    listens = Listens(1, 1)
    with listens.opened("a", "p") as inbox:
        for n in range(MAX_WAITING):
            inbox.put_nowait({"jsonrpc": "2.0", "method": f"x/{n}"})  # what its session said
        assert len(inbox.waiting()) == MAX_WAITING
        listens.publish("a", TOOLS)
        listens.publish("a", PROMPTS)
        inbox.put_nowait({"jsonrpc": "2.0", "method": "x/late"})
        (end,) = inbox.waiting()
        assert isinstance(end, StreamEnd) and end.error is not DRAINING


def test_draining_ends_every_listen_gracefully_and_opens_none() -> None:
    listens = Listens(4, 4)
    with listens.opened("a", "p") as one, listens.opened("b", "p") as two:
        listens.end_all()
        for inbox in (one, two):
            (end,) = inbox.waiting()
            assert isinstance(end, StreamEnd) and end.error is DRAINING
        with pytest.raises(Draining), listens.opened("a", "p"):
            pass


def test_one_caller_holds_at_most_its_share_of_the_listens() -> None:
    listens = Listens(8, 2)
    with listens.opened("a", "p"), listens.opened("b", "p"):
        with pytest.raises(PrincipalListening), listens.opened("a", "p"):
            pass
        with listens.opened("a", "q"):  # another caller is still served
            assert len(listens) == 3
    with listens.opened("a", "p"), listens.opened("a", "p"):  # its share is back
        pass


def test_a_listen_of_several_upstreams_hears_each_and_counts_once() -> None:
    listens = Listens(8, 1)
    with listens.opened_each(("a", "b"), "p") as inboxes:
        assert len(listens) == 1
        with pytest.raises(PrincipalListening), listens.opened("a", "p"):
            pass
        listens.publish("a", TOOLS)
        listens.publish("b", PROMPTS)
        assert (inboxes["a"].waiting(), inboxes["b"].waiting()) == ((TOOLS,), (PROMPTS,))
    assert len(listens) == 0
    listens.publish("a", TOOLS)  # nobody listens now
    assert inboxes["a"].waiting() == (TOOLS,)


class InfoOnly:
    """A pool that says what the server declares, and has no session to give: a listen
    of list changes needs none."""

    def __init__(self, capabilities: dict) -> None:
        self.info = UpstreamInfo("2025-11-25", capabilities, {"name": "s", "version": "1"}, None)

    async def upstream_info(self) -> UpstreamInfo:
        return self.info

    async def open_alone(self, caps):  # pragma: no cover - a failure of the test if reached
        raise AssertionError("a listen of list changes opened a session")


LISTS = InfoOnly({"tools": {"listChanged": True}})
ASKED = listen.ListenFilter(frozenset({"toolsListChanged"}))


async def serve_collecting(inbox, pool=LISTS, asked=ASKED, *, clock=None, **kwargs):
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    clock = clock or ManualClock()
    result = await serve(
        pool, inbox, "l", asked, send, lambda uri: True, "u", clock=clock, **kwargs
    )
    return result, sent


async def test_a_listen_is_cut_short_when_its_callers_credential_expires() -> None:
    listens, clock = Listens(1, 1), ManualClock()
    with listens.opened("u", "p") as inbox:
        serving = spawn(serve_collecting(inbox, clock=clock, expires_in_s=600), name="listen")
        await clock.armed(600)
        clock.advance(599.9)
        for _ in range(SETTLE_TURNS):
            await asyncio.sleep(0)
        assert not serving.done()  # still open a moment before its credential expires
        clock.advance(0.1)
        result, sent = await asyncio.wait_for(serving, 5)
    assert result is None  # cut short: the client listens again, with a fresh token
    assert [m["method"] for m in sent] == [listen.ACKNOWLEDGED]


async def test_a_listen_whose_client_takes_no_write_is_cut_short_as_stalled() -> None:
    listens, clock = Listens(1, 1), ManualClock()

    async def stalled(message: dict) -> None:
        await asyncio.Event().wait()  # the client's connection open, nothing read

    with listens.opened("u", "p") as inbox:
        serving = spawn(
            serve(LISTS, inbox, "l", ASKED, stalled, lambda uri: True, "u", clock=clock),
            name="listen",
        )
        await clock.armed(WRITE_TIMEOUT_S)
        clock.advance(WRITE_TIMEOUT_S)
        with pytest.raises(ClientStalled):
            await asyncio.wait_for(serving, 5)


async def test_a_listen_drained_before_it_was_acknowledged_ends_with_its_result_alone() -> None:
    listens = Listens(1, 1)
    with listens.opened("u", "p") as inbox:
        listens.end_all()
        result, sent = await serve_collecting(inbox)
    assert result == listen.closing("l") and sent == []


async def test_a_listen_that_can_get_nothing_is_acknowledged_and_ended() -> None:
    listens = Listens(1, 1)
    with listens.opened("u", "p") as inbox:
        result, sent = await serve_collecting(inbox, pool=InfoOnly({"tools": {}}))
    assert result == listen.closing("l")
    assert sent == [listen.acknowledgement("l", listen.ListenFilter())]


async def test_news_from_the_pools_sessions_reaches_the_listen_stamped_and_once() -> None:
    listens = Listens(1, 1)
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)
        if message["method"] == listen.ACKNOWLEDGED:  # open: two pieces of news come
            listens.publish("u", {**TOOLS, "params": {"_meta": {"x": 1}}})
            listens.publish("u", TOOLS)
        else:
            listens.end_all()

    with listens.opened("u", "p") as inbox:
        result = await serve(
            LISTS, inbox, "l", ASKED, send, lambda uri: True, "u", clock=ManualClock()
        )
    assert result == listen.closing("l")
    assert sent[1:] == [{**TOOLS, "params": {"_meta": {listen.SUBSCRIPTION_ID: "l"}}}]


async def test_a_listen_whose_session_is_lost_before_its_acknowledgement_is_an_error() -> None:
    """Acknowledged and cut short at once, a client would listen again at once, and again."""
    listens = Listens(1, 1)
    with listens.opened("u", "p") as inbox:
        inbox.put_nowait(StreamEnd(UpstreamError("the session holds no GET stream")))
        with pytest.raises(UpstreamError, match="no GET stream"):
            await serve_collecting(inbox)
