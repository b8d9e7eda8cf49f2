"""A client that pipelines requests and reads no answers, against `mrtr-gateway serve` run
as its own process: the gateway's memory stays bounded and other clients are served.

The flood is what any client can send before authentication: a small POST to the MCP
path (answered 406), 40 MB of it on one connection. aiohttp stops reading a connection
that holds a few dozen requests not yet answered, and a handler's write waits while its
client reads nothing: the rest stays in the kernel's socket buffers and the flood's
sender is pushed back. The sender is given the whole 40 MB to send; the flood is over
when it has sent it all, or when it has made no progress while another client had 20
requests answered one after another (the gateway's loop turned, and took nothing more).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from gateway.aio import spawn
from tests.peers.tooling import GatewayProcess, LegacyServer
from tests.support.raw_http import read_response
from tests.support.wire import default_headers, rpc

pytestmark = pytest.mark.peers

FLOOD_REQUEST = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}"
FLOOD_BYTES = 40 * 1024 * 1024
#: Requests of the other client answered while the flood made no progress: it has stalled.
STALLED_AFTER = 20
#: The growth of the gateway's peak memory the flood may cause (a quarter of the flood).
MAX_GROWTH_BYTES = 10 * 1024 * 1024


def memory_kib(pid: int, field: str) -> int:
    """A `Vm*` figure of /proc/<pid>/status, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise LookupError(field)


class Flood:
    """One connection that sends `FLOOD_BYTES` of pipelined requests and reads nothing
    (its reader's buffer fills and stops the socket's reads, as a client that never reads)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sent = 0

    async def run(self) -> None:
        _, writer = await asyncio.open_connection("127.0.0.1", self.port)
        piece = FLOOD_REQUEST * 1024
        try:
            while self.sent < FLOOD_BYTES:
                writer.write(piece)
                await writer.drain()  # pushed back here once the gateway stops reading
                self.sent += len(piece)
        finally:
            writer.transport.abort()


async def tools_list(http: aiohttp.ClientSession, url: str) -> int:
    body = rpc("tools/list")
    async with http.post(url, json=body, headers=default_headers(body)) as resp:
        await resp.read()
        return resp.status


async def test_a_client_that_pipelines_and_never_reads_grows_no_memory_and_starves_no_one(
    legacy: LegacyServer,
) -> None:
    gateway = await asyncio.to_thread(GatewayProcess, argv=["--upstream", legacy.url])
    try:
        pid = gateway.proc.pid if gateway.proc is not None else 0
        async with aiohttp.ClientSession() as http:
            reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
            for _ in range(20):  # warm: every path the flood and the other client take
                assert await tools_list(http, gateway.url()) == 200
                writer.write(FLOOD_REQUEST)
                assert (await read_response(reader))[0] == 406
            writer.close()
            Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak starts from now
            before = memory_kib(pid, "VmRSS")
            flood = Flood(gateway.port)
            flooding = spawn(flood.run(), name="flood")
            answered = stalled = 0
            async with asyncio.timeout(300):  # generous: a busy machine, not a bound
                while not flooding.done() and stalled < STALLED_AFTER:
                    sent = flood.sent
                    assert await tools_list(http, gateway.url()) == 200
                    answered += 1
                    stalled = stalled + 1 if flood.sent == sent else 0
            peak = memory_kib(pid, "VmHWM")
            flooding.cancel()
            await asyncio.gather(flooding, return_exceptions=True)
        growth = (peak - before) * 1024
        assert growth < MAX_GROWTH_BYTES, (growth, flood.sent)
        assert answered >= STALLED_AFTER or flood.sent >= FLOOD_BYTES
    finally:
        gateway.stop()
