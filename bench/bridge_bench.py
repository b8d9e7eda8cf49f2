"""Benchmark: what the gateway costs, measured against baselines in the same run.

    .venv/bin/python bench/bridge_bench.py [--workers 16] [--requests 200] [--rounds 100]

1. Pass-through `tools/call echo` (no interaction): throughput and p50/p99 through the
   gateway (2026-07-28 client -> gateway -> mcp 1.x server) vs. direct to the same
   legacy server (its own stateful protocol, one session per worker).
2. An elicitation round trip (`greet`: call -> input_required -> retry -> complete)
   through gateway + legacy server vs. the official mcp 2.x SDK serving the same
   tool natively in MRTR style.

Everything runs on this machine (client, gateway, servers share the cores), so
absolute figures only compare within one run; the ratios are the result.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.lifetime import run  # noqa: E402
from tests.peers.tooling import LegacyServer, NativeServer, free_port, wait_for_port  # noqa: E402
from tests.support import legacy as legacy_support  # noqa: E402

PROTOCOL = "2026-07-28"
CAPS = {"elicitation": {"form": {}}}
ACCEPT = "application/json, text/event-stream"


def modern_request(
    rid: int, name: str, arguments: dict[str, Any], **extra: Any
) -> tuple[dict[str, Any], dict[str, str]]:
    params: dict[str, Any] = {"name": name, "arguments": arguments, **extra}
    params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": PROTOCOL,
        "io.modelcontextprotocol/clientCapabilities": CAPS,
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": ACCEPT,
        "MCP-Protocol-Version": PROTOCOL,
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
    }
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}, headers


async def read_reply(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    """The final JSON-RPC message of a JSON or SSE answer."""
    body = await resp.read()
    if resp.headers.get("Content-Type", "").startswith("text/event-stream"):
        datas = [
            line[5:].strip()
            for line in body.splitlines()
            if line.startswith(b"data:") and line[5:].strip()
        ]
        return json.loads(datas[-1])
    return json.loads(body)


class LegacyClient(legacy_support.LegacyClient):
    """The tests' minimal legacy (2025-11-25) client, with the two operations measured here."""

    async def open_with_elicitation(self) -> None:
        await self.open({"elicitation": {"form": {}}})

    async def echo(self) -> None:
        self.rid += 1
        body = {
            "jsonrpc": "2.0",
            "id": self.rid,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hi"}},
        }
        async with self.http.post(self.url, json=body, headers=self.headers) as resp:
            reply = await read_reply(resp)
        assert reply.get("result", {}).get("content", [{}])[0].get("text") == "hi", reply

    async def greet(self) -> None:
        """The legacy way: one POST whose SSE stream carries the question, answered by a second POST."""
        self.rid += 1
        call = {
            "jsonrpc": "2.0",
            "id": self.rid,
            "method": "tools/call",
            "params": {"name": "greet", "arguments": {}},
        }
        async with self.http.post(self.url, json=call, headers=self.headers) as resp:
            async for line in resp.content:
                if not line.startswith(b"data:") or not line[5:].strip():
                    continue
                message = json.loads(line[5:])
                if message.get("method") == "elicitation/create":
                    answer = {
                        "jsonrpc": "2.0",
                        "id": message["id"],
                        "result": {"action": "accept", "content": {"username": "bench"}},
                    }
                    async with self.http.post(self.url, json=answer, headers=self.headers) as ack:
                        await ack.read()
                elif message.get("id") == self.rid:
                    assert message["result"]["content"][0]["text"] == "Hello, bench!", message
                    break


class OnSession:
    """An operation on a legacy session of its own, ended (DELETE) by `measure` once its
    batch is done: a server keeps every session it is not told to end, and each session
    it keeps makes every call it serves cost it more (docs/performance.md), so a baseline
    that left its sessions behind would weigh on whatever is measured after it."""

    def __init__(self, client: LegacyClient, op: Callable[[], Awaitable[None]]) -> None:
        self.client = client
        self._op = op

    async def __call__(self, _rid: int) -> None:
        await self._op()


async def modern_echo(http: aiohttp.ClientSession, url: str, rid: int) -> None:
    body, headers = modern_request(rid, "echo", {"text": "hi"})
    async with http.post(url, json=body, headers=headers) as resp:
        reply = await read_reply(resp)
    assert reply.get("result", {}).get("content", [{}])[0].get("text") == "hi", reply


async def greet_round_trip(http: aiohttp.ClientSession, url: str, rid: int) -> None:
    body, headers = modern_request(rid, "greet", {})
    async with http.post(url, json=body, headers=headers) as resp:
        reply = await read_reply(resp)
    first = reply.get("result", {})
    assert first.get("resultType") == "input_required", reply
    (key,) = first["inputRequests"]
    answers = {key: {"action": "accept", "content": {"username": "bench"}}}
    body, headers = modern_request(
        rid + 1, "greet", {}, inputResponses=answers, requestState=first["requestState"]
    )
    async with http.post(url, json=body, headers=headers) as resp:
        final = (await read_reply(resp))["result"]
    assert final["content"][0]["text"] == "Hello, bench!", final


def summary(
    label: str, latencies: list[float], elapsed: float, *, quiet: bool = False
) -> dict[str, Any]:
    """Throughput and latency percentiles of `latencies` (seconds) taken over `elapsed`."""
    latencies = sorted(latencies)
    result = {
        "label": label,
        "ops": len(latencies),
        "elapsed": elapsed,
        "latencies": latencies,
        "per_s": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[max(int(len(latencies) * 0.99) - 1, 0)] * 1000,
    }
    if not quiet:
        print(
            f"  {label:<44} {result['per_s']:8.0f}/s   p50 {result['p50_ms']:6.2f} ms   p99 {result['p99_ms']:6.2f} ms",
            flush=True,
        )
    return result


async def measure(
    label: str,
    workers: int,
    per_worker: int,
    make_op: Callable[[aiohttp.ClientSession], Awaitable[Callable[[int], Awaitable[None]]]],
    *,
    quiet: bool = False,
    cpu_of: Callable[[], list[float]] | None = None,
) -> dict[str, Any]:
    """`workers` clients doing `per_worker` operations each, after a warm-up; `cpu_of`
    (CPU seconds of the processes measured) is read around the timed part only."""
    latencies: list[float] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        ops = [await make_op(http) for _ in range(workers)]
        for op in ops:  # warm up every worker's connection and the server's pools
            for i in range(3):
                await op(10_000 + 2 * i)

        async def worker(op: Callable[[int], Awaitable[None]]) -> None:
            for i in range(per_worker):
                start = time.perf_counter()
                await op(2 * i)
                latencies.append(time.perf_counter() - start)

        cpu_before = cpu_of() if cpu_of is not None else []
        started = time.perf_counter()
        await asyncio.gather(*(worker(op) for op in ops))
        elapsed = time.perf_counter() - started
        cpu = [b - a for a, b in zip(cpu_before, cpu_of(), strict=True)] if cpu_of else []
        for op in ops:
            if isinstance(op, OnSession):
                await op.client.close()
    return {**summary(label, latencies, elapsed, quiet=quiet), "cpu_s": cpu}


def start(
    args: list[str], port: int, env: dict[str, str] | None = None, *, out: Any = None
) -> subprocess.Popen[bytes]:
    """The gateway, its logs to /dev/null (or to the file `out`): not `GatewayProcess`,
    whose log reader would run in this (measuring) process and could slow the gateway on
    a full pipe."""
    sink = out if out is not None else subprocess.DEVNULL
    proc = subprocess.Popen(args, stdout=sink, stderr=sink, env=env)
    wait_for_port(port, proc)
    return proc


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument(
        "--requests", type=int, default=200, help="pass-through requests per worker"
    )
    parser.add_argument(
        "--rounds", type=int, default=100, help="elicitation round trips per worker"
    )
    args = parser.parse_args()

    legacy = LegacyServer()
    native = NativeServer()
    gateway_port = free_port()
    env = {**os.environ, "MRTR_GATEWAY_LOG_FORMAT": "json"}
    gateway = start(
        [
            sys.executable,
            "-m",
            "gateway",
            "serve",
            "--upstream",
            legacy.url,
            "--port",
            str(gateway_port),
        ],
        gateway_port,
        env,
    )
    gateway_url = f"http://127.0.0.1:{gateway_port}/mcp"
    native_url = native.url
    try:
        print(
            f"workers={args.workers}  cores={os.cpu_count()}  (client, gateway and servers share the cores)"
        )
        print("1. pass-through tools/call echo")

        async def direct_legacy(http: aiohttp.ClientSession) -> Callable[[int], Awaitable[None]]:
            client = LegacyClient(http, legacy.url)
            await client.open()
            return OnSession(client, client.echo)

        def modern_to(
            url: str,
        ) -> Callable[[aiohttp.ClientSession], Awaitable[Callable[[int], Awaitable[None]]]]:
            async def make(http: aiohttp.ClientSession) -> Callable[[int], Awaitable[None]]:
                return lambda rid: modern_echo(http, url, rid)

            return make

        direct = await measure(
            "direct to legacy server (mcp 1.x session)", args.workers, args.requests, direct_legacy
        )
        through = await measure(
            "through gateway (2026-07-28)", args.workers, args.requests, modern_to(gateway_url)
        )
        native_echo = await measure(
            "native mcp 2.x server (2026-07-28)", args.workers, args.requests, modern_to(native_url)
        )
        print(
            f"  -> gateway/direct throughput {through['per_s'] / direct['per_s']:.2f}x, "
            f"p50 +{through['p50_ms'] - direct['p50_ms']:.2f} ms ({through['p50_ms'] / direct['p50_ms']:.2f}x); "
            f"gateway/native throughput {through['per_s'] / native_echo['per_s']:.2f}x"
        )

        print("2. elicitation round trip (greet: call -> input_required -> retry -> complete)")

        def greet_at(
            url: str,
        ) -> Callable[[aiohttp.ClientSession], Awaitable[Callable[[int], Awaitable[None]]]]:
            async def make(http: aiohttp.ClientSession) -> Callable[[int], Awaitable[None]]:
                return lambda rid: greet_round_trip(http, url, rid)

            return make

        async def direct_greet(http: aiohttp.ClientSession) -> Callable[[int], Awaitable[None]]:
            client = LegacyClient(http, legacy.url)
            client.headers["Accept"] = ACCEPT
            await client.open_with_elicitation()
            return OnSession(client, client.greet)

        legacy_rt = await measure(
            "direct legacy client (inline, one stream)", args.workers, args.rounds, direct_greet
        )
        bridged = await measure(
            "gateway + legacy server (inline ctx.elicit)",
            args.workers,
            args.rounds,
            greet_at(gateway_url),
        )
        native_rt = await measure(
            "native mcp 2.x server (MRTR resolver)", args.workers, args.rounds, greet_at(native_url)
        )
        print(
            f"  -> gateway+legacy/native: p50 {bridged['p50_ms'] / native_rt['p50_ms']:.2f}x, "
            f"p99 {bridged['p99_ms'] / native_rt['p99_ms']:.2f}x, throughput {bridged['per_s'] / native_rt['per_s']:.2f}x; "
            f"gateway+legacy/direct legacy: p50 {bridged['p50_ms'] / legacy_rt['p50_ms']:.2f}x"
        )
    finally:
        gateway.terminate()
        gateway.wait(10)
        native.stop()
        legacy.stop()


if __name__ == "__main__":
    run(main())
