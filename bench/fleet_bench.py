"""Benchmark: what a cross-replica resume costs against a same-replica resume, in one run.

    .venv/bin/python bench/fleet_bench.py [--rounds 200] [--workers 1]

A real redis-server, an mcp 1.x legacy server and two gateway replicas sharing the
store and the sealing key. Each sample is one `greet` retry (the resume): its first
round always goes to replica A; the retry goes to A (same replica) or to B, which
forwards it through A's Redis inbox and relays the outcome (cross replica).
"""

from __future__ import annotations

import argparse
import asyncio
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

from bench.bridge_bench import modern_request, read_reply  # noqa: E402
from bench.lifetime import run  # noqa: E402
from gateway.protocol.state import generate_key  # noqa: E402
from tests.peers.tooling import GatewayProcess, LegacyServer, RedisServer  # noqa: E402


async def first_round(http: aiohttp.ClientSession, url: str, rid: int) -> str:
    body, headers = modern_request(rid, "greet", {})
    async with http.post(url, json=body, headers=headers) as resp:
        result = (await read_reply(resp))["result"]
    assert result["resultType"] == "input_required", result
    return str(result["requestState"])


async def resume(http: aiohttp.ClientSession, url: str, rid: int, state: str) -> float:
    answers = {"elicit.username": {"action": "accept", "content": {"username": "bench"}}}
    body, headers = modern_request(rid, "greet", {}, inputResponses=answers, requestState=state)
    started = time.perf_counter()
    async with http.post(url, json=body, headers=headers) as resp:
        result = (await read_reply(resp))["result"]
    elapsed = time.perf_counter() - started
    assert result["content"][0]["text"] == "Hello, bench!", result
    return elapsed


async def measure(
    label: str, owner: str, resumer: str, rounds: int, workers: int, *, quiet: bool = False
) -> dict[str, Any]:
    samples: list[float] = []
    async with aiohttp.ClientSession() as http:
        for i in range(5):  # warm up
            await resume(http, resumer, 10_000 + i, await first_round(http, owner, i))

        async def worker(w: int) -> None:
            for i in range(rounds // workers):
                rid = 100 * (w * rounds + i)
                samples.append(
                    await resume(http, resumer, rid + 1, await first_round(http, owner, rid))
                )

        await asyncio.gather(*(worker(w) for w in range(workers)))
    samples.sort()
    out = {
        "p50": statistics.median(samples) * 1000,
        "p99": samples[max(int(len(samples) * 0.99) - 1, 0)] * 1000,
        "samples": [sample * 1000 for sample in samples],
    }
    if not quiet:
        print(
            f"  {label:<34} resume p50 {out['p50']:6.2f} ms   p99 {out['p99']:6.2f} ms   (n={len(samples)})"
        )
    return out


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    redis_server, legacy = RedisServer(), LegacyServer()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "gateway.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "store": {"url": redis_server.url},
                    "logging": {"level": "warning"},
                    "upstreams": [{"name": "legacy", "url": legacy.url, "path": "/mcp"}],
                }
            )
        )
        env = {"MRTR_GATEWAY_SEALING_KEYS": generate_key()}
        a = GatewayProcess(config, env, "bench-a")
        b = GatewayProcess(config, env, "bench-b")
        try:
            print(
                f"greet resumes, {args.workers} worker(s); redis, legacy server and 2 replicas on this machine"
            )
            same = await measure(
                "same replica (A -> A)", a.base + "/mcp", a.base + "/mcp", args.rounds, args.workers
            )
            cross = await measure(
                "cross replica (A -> B -> A)",
                a.base + "/mcp",
                b.base + "/mcp",
                args.rounds,
                args.workers,
            )
            print(
                f"  -> cross-replica resume adds p50 {cross['p50'] - same['p50']:+.2f} ms "
                f"({cross['p50'] / same['p50']:.2f}x), p99 {cross['p99'] - same['p99']:+.2f} ms"
            )
        finally:
            a.stop()
            b.stop()
            legacy.stop()
            redis_server.stop()


if __name__ == "__main__":
    run(main())
