"""A 48 MB result from a real legacy server holds no other client of the gateway up.

The gateway reads a large result in steps (`gateway.protocol.large`) and writes its
bulk out as the bytes it came in: no step of its event loop parses or encodes the whole
result. Timed as what the loop's thread spent between two wake-ups of a task that sleeps
a millisecond at a time (CPU, so that a busy machine's wait for a core is not counted),
while a second client makes small calls back to back; the longest such step is held
against what parsing that result once and writing it once costs the same thread at the
same time (the gateway did both, in one step, before it read large results in steps).
The figures themselves (under 0.3 s of stall for 48 MB, every shape and answer form) are
`bench/big_bodies.py`'s.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest

from gateway.protocol import jsonrpc
from tests.peers.tooling import LegacyServer
from tests.support.inprocess import Gateway
from tests.support.wire import default_headers, rpc

pytestmark = pytest.mark.peers

SIZE = 48 * 1024 * 1024


class LoopSteps:
    """The most CPU the loop's thread spent between two wake-ups of a task that sleeps a
    millisecond at a time: the longest any other client waited behind the gateway's work."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _watch(self) -> None:
        last = time.thread_time()
        while True:
            await asyncio.sleep(0.001)
            now = time.thread_time()
            self.longest = max(self.longest, now - last)
            last = now

    def __enter__(self) -> LoopSteps:
        self._task = asyncio.get_running_loop().create_task(self._watch())  # noqa: TID251
        return self

    def __exit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()


def whole_read_and_write(body: bytes) -> float:
    """The CPU of reading `body` whole and writing it once, as the gateway did."""
    started = time.thread_time()
    jsonrpc.dumps(jsonrpc.loads(body))
    return time.thread_time() - started


@pytest.fixture(scope="module")
def answering_in_json() -> Iterator[LegacyServer]:
    server = LegacyServer(json_response=True)
    yield server
    server.stop()


@pytest.mark.parametrize("form", ["sse", "json"])
async def test_a_48_mb_result_holds_no_other_client_up(
    form: str,
    make_gateway: Callable[..., Any],
    legacy: LegacyServer,
    answering_in_json: LegacyServer,
) -> None:
    server = legacy if form == "sse" else answering_in_json
    other = {"name": "other", "url": legacy.url, "path": "/other"}
    gateway: Gateway = await make_gateway(server.url, upstreams_extra=[other])
    small_url = gateway.url.removesuffix("/mcp") + "/other"
    big = rpc("tools/call", {"name": "big", "arguments": {"size": SIZE, "shape": "records"}})

    async def call(body: dict[str, Any], url: str) -> bytes:
        async with gateway.http.post(url, json=body, headers=default_headers(body)) as resp:
            assert resp.status == 200
            return await resp.read()

    done = asyncio.Event()
    answered = 0

    async def small_calls() -> None:
        nonlocal answered
        while not done.is_set():
            body = rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, rid=answered)
            assert b'"hi"' in await call(body, small_url)
            answered += 1

    await call(rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}}), gateway.url)
    with LoopSteps() as steps:
        beside = asyncio.get_running_loop().create_task(small_calls())  # noqa: TID251
        raw = await call(big, gateway.url)
        done.set()
        await beside
    # Read once the measure is over: this process is the gateway's too.
    reply = json.loads(raw[raw.index(b"{") :])  # a JSON body, or one SSE event
    result = reply["result"]
    rows = result["structuredContent"]["items"]
    assert len(rows) == SIZE // 64 and rows[-1]["name"] == f"item-{len(rows) - 1}"
    assert result["resultType"] == "complete" and result["isError"] is False
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "peers-legacy-py"
    assert answered > 0

    the_same = orjson.dumps(
        {"jsonrpc": "2.0", "id": 1, "result": {"structuredContent": {"items": rows}}}
    )
    whole = min(whole_read_and_write(the_same) for _ in range(2))
    assert steps.longest < whole / 2, (steps.longest, whole)
