"""The replica's open listens: the limits, a change handed to every listen of its
upstream once, a stalled client's listen cut short, draining (no server needed)."""

from __future__ import annotations

import pytest

from gateway.errors import Draining, ListensFull, PrincipalListening
from gateway.listens import DRAINING, MAX_WAITING, Listens
from gateway.upstream.port import StreamEnd

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


def test_a_listen_whose_client_does_not_read_is_cut_short_once() -> None:
    listens = Listens(1, 4)
    with listens.opened("a", "p") as inbox:
        for n in range(MAX_WAITING + 5):
            listens.publish("a", {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            inbox.put_nowait({"jsonrpc": "2.0", "method": f"x/{n}"})  # what its session said
        listens.publish("a", PROMPTS)
        ends = [item for item in inbox.waiting() if isinstance(item, StreamEnd)]
        assert len(ends) == 1 and ends[0].error is not DRAINING


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
