"""One listen of several members (`JoinedListen`), with members the test plays: one
acknowledgement after every member answered, what a member relayed meanwhile after it,
one member cut short cutting the whole, every member ending gracefully ending it
gracefully, and a member failing after the acknowledgement failing the listen."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.errors import UpstreamError
from gateway.joined_listen import JoinedListen, Member
from gateway.listens import Acknowledge, ClientStalled, Send
from gateway.protocol import listen
from gateway.protocol.listen import ListenFilter
from tests.fakes.clock import ManualClock

ASKED = ListenFilter(frozenset({"toolsListChanged", "promptsListChanged"}), ("a://1",))
TOOLS = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": {}}


def member(
    honour: ListenFilter | None,
    then: Any = None,
    *,
    before: asyncio.Event | None = None,
    says: tuple[dict[str, Any], ...] = (),
) -> Member:
    """A member that acknowledges `honour` (None: it fails to open) once `before` is set,
    says `says`, then ends with `then` (an exception is raised; an Event: awaited first,
    then it is cut short)."""

    async def serve(send: Send, acknowledge: Acknowledge) -> dict[str, Any] | None:
        if honour is None:
            raise UpstreamError("unreachable")
        for message in says:  # said before its own acknowledgement is written anywhere
            await send(message)
        if before is not None:
            await before.wait()
        await acknowledge(honour)
        if isinstance(then, BaseException):
            raise then
        if isinstance(then, asyncio.Event):
            await then.wait()
            return None
        return then

    return serve


async def run(members: dict[str, Member], *, omit: bool = True) -> tuple[Any, list[Any]]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    joined = JoinedListen(5, ASKED, send, ManualClock())
    return await joined.serve(members, omit=omit), sent


async def test_one_acknowledgement_of_what_some_member_honours_then_what_they_said() -> None:
    slow = asyncio.Event()
    asyncio.get_running_loop().call_soon(slow.set)
    tools_only = ListenFilter(frozenset({"toolsListChanged"}), ())
    members = {
        "a": member(tools_only, listen.closing(5), says=(TOOLS,)),
        "b": member(ListenFilter(frozenset(), ("a://1",)), listen.closing(5), before=slow),
    }
    result, sent = await run(members)
    assert sent == [
        listen.acknowledgement(5, ListenFilter(frozenset({"toolsListChanged"}), ("a://1",))),
        TOOLS,
    ]
    assert result == listen.closing(5)  # every member ended gracefully


async def test_one_member_cut_short_cuts_the_whole_listen_short() -> None:
    never = asyncio.Event()
    members = {"a": member(ListenFilter(), never), "b": member(ListenFilter(), None)}
    result, sent = await run(members)
    assert result is None and len(sent) == 1


async def test_an_unreachable_member_is_left_out_or_fails_the_listen() -> None:
    members = {"a": member(ASKED, None), "b": member(None)}
    result, sent = await run(members)
    assert result is None and sent == [listen.acknowledgement(5, ASKED)]
    with pytest.raises(UpstreamError):
        await run(members, omit=False)
    with pytest.raises(UpstreamError):
        await run({"a": member(None), "b": member(None)})


async def test_a_member_that_fails_after_the_acknowledgement_fails_the_listen() -> None:
    members = {
        "a": member(ASKED, ClientStalled("gone")),
        "b": member(ASKED, asyncio.Event()),
    }
    with pytest.raises(ClientStalled):
        await run(members)
