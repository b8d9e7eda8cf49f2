"""A call's inbox: what its server says, in order, to its one reader."""

from __future__ import annotations

import asyncio

from gateway.aio import spawn
from gateway.errors import UpstreamError
from gateway.upstream.port import Inbox, StreamEnd


async def test_items_come_out_in_the_order_they_went_in_and_stay_until_read() -> None:
    inbox = Inbox()
    assert inbox.empty()
    end = StreamEnd(UpstreamError("gone"))
    for item in ({"id": 1}, {"method": "notifications/progress"}, end):
        inbox.put_nowait(item)
    assert inbox.waiting() == ({"id": 1}, {"method": "notifications/progress"}, end)
    assert not inbox.empty()  # looking does not take
    assert [await inbox.get() for _ in range(3)] == [
        {"id": 1},
        {"method": "notifications/progress"},
        end,
    ]
    assert inbox.empty()


async def test_a_waiting_reader_wakes_for_the_next_item() -> None:
    inbox = Inbox()
    reader = spawn(inbox.get(), name="reader")
    await asyncio.sleep(0)
    assert not reader.done()  # nothing yet: it waits
    inbox.put_nowait({"id": 7})
    async with asyncio.timeout(5):
        assert await reader == {"id": 7}


async def test_a_reader_cancelled_while_waiting_leaves_the_inbox_usable() -> None:
    inbox = Inbox()
    reader = spawn(inbox.get(), name="reader")
    await asyncio.sleep(0)
    reader.cancel()
    await asyncio.gather(reader, return_exceptions=True)
    inbox.put_nowait({"id": 8})  # no waiter left to wake: nothing breaks
    async with asyncio.timeout(5):
        assert await inbox.get() == {"id": 8}
