"""Where a replica-bound session sends what its server says (`BoundSession.heard`), as
transcripts: a response to its request's stream, which ends there; a progress
notification to the stream of the request that gave its token; any other server message
to the newest request still waiting, else to the GET stream, else kept for the next one."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.clock import SystemClock
from gateway.errors import InvalidRequest, UpstreamError
from gateway.legacy_clients.bound import BACKLOG, MAX_PENDING, BoundSession, Channel
from gateway.protocol import jsonrpc
from gateway.protocol.capabilities import ClientCaps
from gateway.upstream.stdio.session import Command, StdioSession


def session() -> BoundSession:
    link = StdioSession(
        Command(name="local", argv=("unused",)), ClientCaps(), clock=SystemClock()
    )  # never started
    return BoundSession("handle", link, now=0.0)


def request(rid: int, method: str = "tools/call", **meta: Any) -> jsonrpc.Request:
    params: dict[str, Any] = {"name": "t"}
    if meta:
        params["_meta"] = meta
    return jsonrpc.Request(rid, method, params)


def server_request(rid: str, method: str = "elicitation/create") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": {}}


def response(rid: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": {}}


async def read_all(channel: Channel) -> list[Any]:
    return [jsonrpc.loads(event.data) async for event in channel]


async def test_a_response_ends_its_own_requests_stream_and_no_other() -> None:
    bound = session()
    first, second = bound.expect(request(1)), bound.expect(request(2))
    bound.heard(response(1))
    assert await read_all(first) == [response(1)]
    assert second.open and list(bound.waiting) == [2]


async def test_server_messages_go_to_the_newest_waiting_request_and_progress_by_token() -> None:
    bound = session()
    older = bound.expect(request(1, progressToken="p1"))
    newer = bound.expect(request(2))
    progress = {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": "p1", "progress": 1},
    }
    bound.heard(server_request("s1"))
    bound.heard(progress)
    bound.heard(response(2))
    bound.heard(response(1))
    assert await read_all(newer) == [server_request("s1"), response(2)]
    assert await read_all(older) == [progress, response(1)]


async def test_with_no_request_waiting_the_get_stream_gets_them_or_the_next_one_does() -> None:
    bound = session()
    for n in range(BACKLOG + 3):  # none open: kept, the oldest dropped past BACKLOG
        bound.heard(server_request(f"s{n}", "roots/list"))
    stream = bound.listen()
    bound.heard(server_request("live", "sampling/createMessage"))
    bound.lost(UpstreamError("the stdio server exited"))
    seen = []
    with pytest.raises(UpstreamError, match="exited"):
        async for event in stream:
            seen.append(jsonrpc.loads(event.data)["id"])
    assert seen == [f"s{n}" for n in range(3, BACKLOG + 3)] + ["live"]


async def test_a_new_get_stream_replaces_the_open_one_with_what_it_had_not_sent() -> None:
    bound = session()
    old = bound.listen()
    bound.heard(server_request("read", "roots/list"))
    first = await anext(old)
    assert jsonrpc.loads(first.data)["id"] == "read"
    bound.heard(server_request("unread", "sampling/createMessage"))
    new = bound.listen()  # the client reconnected: its old stream's relay may be gone
    assert await read_all(old) == []  # ended, what it held moved on
    bound.heard(server_request("later", "roots/list"))
    await old.aclose()  # its relay closing it late takes nothing from the new one
    bound.heard(response(1))  # nobody's: dropped
    bound.lost(UpstreamError("closed"))
    got = []
    with pytest.raises(UpstreamError):
        async for event in new:
            got.append(jsonrpc.loads(event.data)["id"])
    assert got == ["unread", "later"]


async def test_a_closed_stream_is_skipped_and_a_repeated_id_refused() -> None:
    bound = session()
    kept = bound.expect(request(1))
    gone = bound.expect(request(2))
    await gone.aclose()  # its client went: not a place for the server's questions
    bound.heard(server_request("s1"))
    bound.heard(response(1))
    assert await read_all(kept) == [server_request("s1"), response(1)]
    bound.expect(request(3))
    with pytest.raises(InvalidRequest):
        bound.expect(request(3))
    bound.heard(response(99))  # nobody's: dropped
    assert list(bound.waiting) == [3]


async def test_a_stream_whose_client_does_not_read_ends_rather_than_grow() -> None:
    bound = session()
    stream = bound.listen()
    for n in range(MAX_PENDING + 5):
        bound.heard(server_request(f"s{n}", "roots/list"))
    got = []
    with pytest.raises(UpstreamError, match="keep up"):
        async for event in stream:
            got.append(jsonrpc.loads(event.data)["id"])
    assert got == [f"s{n}" for n in range(MAX_PENDING)]
    assert bound.listen().open  # the client reconnects: a new stream
