"""Benchmark: what a session per caller costs, measured against the same gateway sharing
its sessions between callers (`pool.isolation: none`), in the same run.

    .venv/bin/python bench/callers.py [--callers 32] [--seconds 15] [--quick]

1. Streamable HTTP upstream (the mcp 1.x test server): pass-through `echo` and the
   `greet` round trip, at 1 caller and at `--callers` callers (each its own bearer
   credential, so its own principal), isolated and shared.
2. What one more caller costs: the sessions, the gateway's memory and, over stdio, the
   server processes (a process per session) with their memory.
3. A cold burst: `--callers` new callers at once on a stdio upstream, each calling `echo`
   back to back for `--seconds`: calls per second, second by second, against the warm
   throughput of the same callers once every session is open; the processes started and
   the memory of the gateway with its servers at the peak.

Everything shares this machine's cores; the ratios within one run are the result.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bridge_bench import modern_request, read_reply, start  # noqa: E402
from bench.lifetime import run  # noqa: E402
from tests.peers.tooling import LegacyServer, free_port, legacy_stdio_command  # noqa: E402


def descendants(pid: int) -> list[int]:
    """`pid` and every process under it (the stdio servers under their keepers)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        each = todo.pop()
        found.append(each)
        todo.extend(children.get(each, []))
    return found


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


class Gateway:
    """A gateway process on one upstream; its log (JSON lines) in a file, read afterwards."""

    def __init__(self, folder: Path, name: str, upstream: dict[str, Any]) -> None:
        self.port = free_port()
        config = folder / f"{name}.yaml"
        config.write_text(yaml.safe_dump({"upstreams": [{"name": name, **upstream}]}))
        self.log = folder / f"{name}.log"
        env = {
            **os.environ,
            "MRTR_GATEWAY_LOG_FORMAT": "json",
            "MRTR_GATEWAY_LOG_LEVEL": "info",
        }
        argv = [sys.executable, "-m", "gateway", "serve", "--config", str(config)]
        with self.log.open("wb") as out:
            argv += ["--port", str(self.port)]
            self.proc = start(argv, self.port, env, out=out)
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def processes_started(self) -> int:
        return self.log.read_text().count('"upstream_process_started"')

    def memory_mb(self, *others: int) -> float:
        """The gateway's memory with its servers' (and `others`', e.g. an HTTP server)."""
        return rss_mb(descendants(self.proc.pid) + list(others))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


class Busy(Exception):
    """503: the gateway had no session for the caller in time (a client retries)."""


async def echo(http: aiohttp.ClientSession, url: str, who: str, rid: int) -> None:
    body, headers = modern_request(rid, "echo", {"text": "hi"})
    headers["Authorization"] = f"Bearer {who}"
    async with http.post(url, json=body, headers=headers) as resp:
        reply = await read_reply(resp)
    if reply.get("error", {}).get("data", {}).get("reason") == "upstream_sessions":
        raise Busy()
    assert reply.get("result", {}).get("content", [{}])[0].get("text") == "hi", reply


async def greet(http: aiohttp.ClientSession, url: str, who: str, rid: int) -> None:
    body, headers = modern_request(rid, "greet", {})
    headers["Authorization"] = f"Bearer {who}"
    async with http.post(url, json=body, headers=headers) as resp:
        first = (await read_reply(resp))["result"]
    (key,) = first["inputRequests"]
    answers = {key: {"action": "accept", "content": {"username": "bench"}}}
    body, headers = modern_request(
        rid + 1, "greet", {}, inputResponses=answers, requestState=first["requestState"]
    )
    headers["Authorization"] = f"Bearer {who}"
    async with http.post(url, json=body, headers=headers) as resp:
        final = (await read_reply(resp))["result"]
    assert final["content"][0]["text"] == "Hello, bench!", final


Op = Callable[[aiohttp.ClientSession, str, str, int], Awaitable[None]]


async def timed(
    url: str, op: Op, callers: int, per_caller: int, *, warm: bool = True, name: str = "caller"
) -> dict[str, Any]:
    """`callers` callers (`name`-0, `name`-1, ...) doing `per_caller` operations each:
    throughput, p50 and p99."""
    latencies: list[float] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        if warm:  # every caller's session open, and the code paths warm
            await asyncio.gather(*(op(http, url, f"{name}-{c}", 90_000) for c in range(callers)))

        async def caller(who: str) -> None:
            for i in range(per_caller):
                began = time.perf_counter()
                await op(http, url, who, 2 * i)
                latencies.append(time.perf_counter() - began)

        started = time.perf_counter()
        await asyncio.gather(*(caller(f"{name}-{c}") for c in range(callers)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "per_s": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[max(int(len(latencies) * 0.99) - 1, 0)] * 1000,
    }


async def burst(gateway: Gateway, callers: int, seconds: float) -> dict[str, Any]:
    """`callers` new callers at once, each calling back to back for `seconds`."""
    done: list[tuple[float, float]] = []  # (when it completed, its latency), from the start
    peak = 0.0
    started = time.perf_counter()

    busy = 0

    async def caller(http: aiohttp.ClientSession, who: str) -> None:
        nonlocal busy
        i = 0
        while (now := time.perf_counter()) - started < seconds:
            try:
                await echo(http, gateway.url, who, i)
            except Busy:  # as a client does on 503 with Retry-After: 1, a little sooner
                busy += 1
                await asyncio.sleep(0.5)
                continue
            done.append((time.perf_counter() - started, time.perf_counter() - now))
            i += 2

    async def sample() -> None:
        nonlocal peak
        while True:
            peak = max(peak, gateway.memory_mb())
            await asyncio.sleep(0.5)

    sampler = asyncio.create_task(sample())  # noqa: TID251 - a bench script, cancelled below
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            await asyncio.gather(*(caller(http, f"new-{c}") for c in range(callers)))
    finally:
        sampler.cancel()
    per_second = [0] * int(seconds + 1)
    for when, _ in done:
        per_second[min(int(when), len(per_second) - 1)] += 1
    latencies = sorted(latency for _, latency in done)
    return {
        "per_second": per_second[: int(seconds)],
        "p99_ms": latencies[max(int(len(latencies) * 0.99) - 1, 0)] * 1000,
        "peak_mb": peak,
        "processes": gateway.processes_started(),
        "busy": busy,
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--callers", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--quick", action="store_true", help="fewer calls, a shorter burst")
    parser.add_argument("--sections", default="123", help="which of 1, 2, 3 to run")
    parser.add_argument(
        "--max-opening", type=int, default=None, help="the burst's pool.max_opening"
    )
    args = parser.parse_args()
    n, calls, rounds = args.callers, (100 if args.quick else 300), (30 if args.quick else 100)
    seconds = 10.0 if args.quick else args.seconds
    folder = Path(tempfile.mkdtemp(prefix="callers-bench-"))
    legacy = LegacyServer()
    started: list[Gateway] = []

    def gateway(name: str, upstream: dict[str, Any]) -> Gateway:
        started.append(Gateway(folder, name, upstream))
        return started[-1]

    try:
        print(f"callers={n}  cores={os.cpu_count()}  (everything shares the cores)")
        if "1" in args.sections:
            await same_minutes(gateway, legacy, n, calls, rounds)
        if "2" in args.sections:
            await one_more(gateway, legacy, folder, n, started)
        if "3" in args.sections:
            await cold_burst(gateway, folder, n, seconds, calls, args.max_opening)
    finally:
        for each in started:
            each.stop()
        legacy.stop()


async def same_minutes(
    gateway: Callable[[str, dict[str, Any]], Gateway],
    legacy: LegacyServer,
    n: int,
    calls: int,
    rounds: int,
) -> None:
    if True:
        print("1. Streamable HTTP: isolated (a session per caller) / shared (isolation: none)")
        isolated = gateway("isolated", {"url": legacy.url})
        shared = gateway("shared", {"url": legacy.url, "pool": {"isolation": "none"}})
        for label, op, per in (("echo", echo, calls), ("greet", greet, rounds)):
            for count in (1, n):
                a = await timed(isolated.url, op, count, per if count > 1 else per * 4)
                b = await timed(shared.url, op, count, per if count > 1 else per * 4)
                print(
                    f"  {label:<5} at {count:>2}: isolated {a['per_s']:7.0f}/s p50 "
                    f"{a['p50_ms']:5.2f} ms | shared {b['per_s']:7.0f}/s p50 {b['p50_ms']:5.2f} ms"
                    f" | throughput {a['per_s'] / b['per_s']:.2f}x, p50 "
                    f"{a['p50_ms'] - b['p50_ms']:+.2f} ms",
                    flush=True,
                )


async def one_more(
    gateway: Callable[[str, dict[str, Any]], Gateway],
    legacy: LegacyServer,
    folder: Path,
    n: int,
    started: list[Gateway],
) -> None:
    if True:
        print("2. what one more caller costs")
        for name, upstream in (
            ("http", {"url": legacy.url, "pool": {"min_idle": 0}}),
            ("stdio", {"command": legacy_stdio_command(folder), "pool": {"min_idle": 0}}),
        ):
            each = gateway(f"cost-{name}", upstream)
            server = [legacy.proc.pid] if name == "http" else []
            await timed(each.url, echo, 1, 5, name=name)
            one = each.memory_mb(*server)
            await timed(each.url, echo, n, 5, name=name)
            many = each.memory_mb(*server)
            print(
                f"  {name:<5}: {n - 1} callers more cost {(many - one) / (n - 1):.1f} MB each "
                f"(the gateway and the server: {one:.0f} MB at 1 caller, {many:.0f} MB at {n}); "
                f"processes started: {each.processes_started()}",
                flush=True,
            )
            each.stop()
            started.remove(each)


async def cold_burst(
    gateway: Callable[[str, dict[str, Any]], Gateway],
    folder: Path,
    n: int,
    seconds: float,
    calls: int,
    max_opening: int | None,
) -> None:
    if True:
        pool = {} if max_opening is None else {"max_opening": max_opening}
        print(f"3. a cold burst of {n} new callers on a stdio upstream, {seconds:g} s ({pool})")
        cold = gateway("cold", {"command": legacy_stdio_command(folder), "pool": pool})
        result = await burst(cold, n, seconds)
        # The same callers, every session of theirs open now.
        warm = await timed(cold.url, echo, n, calls // 3, warm=False, name="new")
        half = warm["per_s"] / 2
        reached = next((s for s, c in enumerate(result["per_second"]) if c >= half), None)
        first10 = sum(result["per_second"][:10])
        print(f"  calls per second: {result['per_second']}")
        print(
            f"  warm: {warm['per_s']:.0f}/s; half of it first reached in second "
            f"{reached if reached is not None else 'never'}; the first 10 s served "
            f"{first10} calls ({first10 / 10 / warm['per_s']:.2f}x warm); p99 "
            f"{result['p99_ms']:.0f} ms; {result['busy']} answered 503 (retried); "
            f"{result['processes']} processes started; "
            f"peak {result['peak_mb']:.0f} MB (gateway and servers)",
            flush=True,
        )


if __name__ == "__main__":
    run(main())
