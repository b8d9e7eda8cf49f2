"""Benchmark: what a 2025 client's session on an endpoint of two servers costs, against the
same server on a path of its own, in the same run.

    .venv/bin/python bench/endpoint_sessions.py [--clients 8] [--calls 200] [--rounds 3]

One gateway process and two mcp 1.x servers (Streamable HTTP): `solo` (server A) on
/solo, and the endpoint /mcp of `notes` (server A again, as an upstream of its own) and
`tickets` (server B). Each round times, for /solo and then /mcp (the order alternating
between rounds, so the minutes' drift weighs on both alike):

1. sessions opened per second: `--clients` clients at once, each `initialize` and
   `notifications/initialized`, then DELETE (an endpoint's session opens, and ends, one
   session at each of its two servers);
2. calls per second: `--clients` clients, each on a session of its own, `--calls`
   `tools/call echo` (`notes_echo` on the endpoint) back to back, with p50 and p99.

It prints each figure and the ratios endpoint / solo (medians of the rounds). Everything
shares this machine's cores; the ratios within one run are the result.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bridge_bench import start  # noqa: E402
from tests.peers.tooling import LegacyServer, free_port  # noqa: E402
from tests.support.legacy_wire import HEADERS, VERSION, call, initialize  # noqa: E402
from tests.support.wire import parse_sse_messages  # noqa: E402

INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


async def post(
    http: aiohttp.ClientSession, url: str, body: dict[str, Any], session: str | None = None
) -> tuple[str | None, Any]:
    headers = dict(HEADERS)
    if session is not None:
        headers.update({"Mcp-Session-Id": session, "MCP-Protocol-Version": VERSION})
    async with http.post(url, json=body, headers=headers) as resp:
        raw = await resp.read()
        assert resp.status in (200, 202), (resp.status, raw[:200])
        kind = resp.headers.get("Content-Type", "")
        messages = parse_sse_messages(raw) if kind.startswith("text/event-stream") else []
        if kind.startswith("application/json") and raw:
            messages = [json.loads(raw)]
        return resp.headers.get("Mcp-Session-Id"), (messages[-1] if messages else None)


async def opened(http: aiohttp.ClientSession, url: str) -> str:
    session, _ = await post(http, url, initialize())
    assert session is not None
    await post(http, url, INITIALIZED, session)
    return session


async def ended(http: aiohttp.ClientSession, url: str, session: str) -> None:
    async with http.delete(url, headers={"Mcp-Session-Id": session}) as resp:
        assert resp.status == 200, resp.status


async def sessions_per_s(url: str, clients: int, each: int) -> float:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:

        async def client() -> None:
            for _ in range(each):
                await ended(http, url, await opened(http, url))

        began = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        return clients * each / (time.perf_counter() - began)


async def calls(url: str, tool: str, clients: int, each: int) -> dict[str, float]:
    latencies: list[float] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        sessions = [await opened(http, url) for _ in range(clients)]

        async def client(session: str) -> None:
            await post(http, url, call(tool, text="warm"), session)
            for rid in range(each):
                began = time.perf_counter()
                _, reply = await post(http, url, call(tool, rid=rid + 2, text="hi"), session)
                latencies.append(time.perf_counter() - began)
                assert reply["result"]["content"][0]["text"] == "hi", reply

        began = time.perf_counter()
        await asyncio.gather(*(client(s) for s in sessions))
        elapsed = time.perf_counter() - began
        await asyncio.gather(*(ended(http, url, s) for s in sessions))
    latencies.sort()
    return {
        "per_s": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[max(int(len(latencies) * 0.99) - 1, 0)] * 1000,
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--calls", type=int, default=200, help="calls per client")
    parser.add_argument("--opens", type=int, default=20, help="sessions per client")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    a, b = LegacyServer(), LegacyServer()
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="bench-endpoint-"))
    config = {
        "upstreams": [
            {"name": "solo", "url": a.url, "path": "/solo"},
            {"name": "notes", "url": a.url},
            {"name": "tickets", "url": b.url},
        ],
        "endpoints": [{"path": "/mcp", "upstreams": ["notes", "tickets"]}],
    }
    (folder / "gateway.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "MRTR_GATEWAY_LOG_FORMAT": "json"}
    command = [sys.executable, "-m", "gateway", "serve", "--config", str(folder / "gateway.yaml")]
    gateway = start([*command, "--port", str(port)], port, env)
    base = f"http://127.0.0.1:{port}"
    routes = {"solo": (f"{base}/solo", "echo"), "endpoint": (f"{base}/mcp", "notes_echo")}
    figures: dict[str, dict[str, list[float]]] = {name: {} for name in routes}
    try:
        print(
            f"clients={args.clients} cores={os.cpu_count()} (clients, gateway, servers share them)"
        )
        for round_ in range(args.rounds):
            order = list(routes) if round_ % 2 == 0 else list(reversed(routes))
            for name in order:
                url, tool = routes[name]
                opens = await sessions_per_s(url, args.clients, args.opens)
                timed = await calls(url, tool, args.clients, args.calls)
                got = {"sessions_per_s": opens, **timed}
                for key, value in got.items():
                    figures[name].setdefault(key, []).append(value)
                shown = "  ".join(f"{k} {v:,.1f}" for k, v in got.items())
                print(f"round {round_ + 1} {name:8s} {shown}")
        print("medians, endpoint / solo:")
        for key in figures["solo"]:
            solo = statistics.median(figures["solo"][key])
            joined = statistics.median(figures["endpoint"][key])
            print(f"  {key:15s} solo {solo:9,.1f}  endpoint {joined:9,.1f}  {joined / solo:.2f}x")
    finally:
        gateway.terminate()
        gateway.wait(timeout=30)
        a.stop()
        b.stop()


if __name__ == "__main__":
    asyncio.run(main())
