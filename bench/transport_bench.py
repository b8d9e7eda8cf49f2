"""Benchmark: the same legacy server behind the gateway over stdio and over Streamable HTTP.

    .venv/bin/python bench/transport_bench.py [--workers 8] [--requests 200] [--rounds 50]

In one run, two gateways front the same mcp 1.x test server: one starts it as stdio
processes (a process per session), the other reaches one HTTP instance of it. Each is
driven the 2026-07-28 way: pass-through `tools/call echo`, and an elicitation round trip
(`greet`: call -> input_required -> retry -> complete). The ratios stdio/HTTP are the
result; absolute figures compare only within a run (everything shares the cores).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bridge_bench import greet_round_trip, measure, modern_echo, start  # noqa: E402
from bench.lifetime import run  # noqa: E402
from tests.peers.tooling import LegacyServer, free_port, legacy_stdio_command  # noqa: E402


def gateway(upstream: dict[str, object], folder: Path, name: str) -> tuple[object, str]:
    port = free_port()
    config = folder / f"{name}.yaml"
    config.write_text(yaml.safe_dump({"upstreams": [{"name": name, **upstream}]}))
    env = {**os.environ, "MRTR_GATEWAY_LOG_FORMAT": "json", "MRTR_GATEWAY_LOG_LEVEL": "warning"}
    args = [sys.executable, "-m", "gateway", "serve", "--config", str(config), "--port", str(port)]
    return start(args, port, env), f"http://127.0.0.1:{port}/mcp"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    legacy = LegacyServer()
    folder = Path(tempfile.mkdtemp(prefix="transport-bench-"))
    pool = {"min_idle": args.workers, "max_sessions": 4 * args.workers}
    http_gw, http_url = gateway({"url": legacy.url, "pool": pool}, folder, "http")
    stdio_gw, stdio_url = gateway(
        {"command": legacy_stdio_command(folder), "pool": pool}, folder, "stdio"
    )
    results = {}
    try:
        print(f"workers={args.workers}  cores={os.cpu_count()}  (everything shares the cores)")
        for label, url in (("streamable HTTP", http_url), ("stdio", stdio_url)):

            async def echo(http: aiohttp.ClientSession, url: str = url):  # type: ignore[no-untyped-def]
                return lambda rid: modern_echo(http, url, rid)

            async def greet(http: aiohttp.ClientSession, url: str = url):  # type: ignore[no-untyped-def]
                return lambda rid: greet_round_trip(http, url, rid)

            results[label, "echo"] = await measure(
                f"pass-through echo over {label}", args.workers, args.requests, echo
            )
            results[label, "greet"] = await measure(
                f"round trip greet over {label}", args.workers, args.rounds, greet
            )
        for op in ("echo", "greet"):
            http, stdio = results["streamable HTTP", op], results["stdio", op]
            print(
                f"  -> {op}: stdio/HTTP throughput {stdio['per_s'] / http['per_s']:.2f}x, "
                f"p50 {stdio['p50_ms']:.2f} vs {http['p50_ms']:.2f} ms "
                f"({stdio['p50_ms'] / http['p50_ms']:.2f}x)"
            )
    finally:
        for proc in (http_gw, stdio_gw):
            proc.terminate()  # type: ignore[attr-defined]
            proc.wait(30)  # type: ignore[attr-defined]
        legacy.stop()


if __name__ == "__main__":
    run(main())
