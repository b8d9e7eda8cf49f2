"""Where the gateway's CPU goes: a sampling profile of one gateway under load.

    .venv/bin/python bench/profile.py [--op echo|greet] [--workers 32] [--requests 150]

Starts the legacy test server and a gateway with the shipped defaults, drives it
with `--workers` 2026-07-28 clients, and samples the gateway with py-spy (from the
`bench` extra) while they run. Prints the share of samples by package (asyncio,
aiohttp, structlog, the gateway's own modules, ...) and the functions with the
most self time; `--out FILE` keeps the collapsed stacks for a flame graph.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bridge_bench import measure  # noqa: E402
from bench.report import Gateway, echo_to, greet_at, upstream  # noqa: E402
from tests.peers.tooling import LegacyServer  # noqa: E402

GROUPS = (
    ("gateway/", "gateway"),
    ("aiohttp/", "aiohttp"),
    ("yarl/", "aiohttp"),
    ("multidict/", "aiohttp"),
    ("structlog/", "logging"),
    ("logging/", "logging"),
    ("prometheus_client/", "metrics"),
    ("asyncio/", "asyncio"),
    ("uvloop/", "asyncio"),
    ("json/", "json"),
    ("orjson", "json"),
    ("cryptography/", "crypto"),
)


def group_of(frame: str) -> str:
    for marker, name in GROUPS:
        if marker in frame:
            return name
    return "other"


def summarise(collapsed: Path, top: int) -> None:
    """Self time by group and by function, from py-spy's collapsed stacks."""
    by_group: collections.Counter[str] = collections.Counter()
    by_frame: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        count = int(count_text)
        frames = stack.split(";")
        leaf = frames[-1]
        total += count
        by_frame[leaf] += count
        by_group[group_of(leaf)] += count
        for name in {group_of(f) for f in frames if "gateway/" in f or "structlog/" in f}:
            inclusive[name] += count
    print(f"{total} samples; self time by package:")
    for name, count in by_group.most_common():
        print(f"  {name:<10} {100 * count / total:5.1f}%")
    print(f"  (inclusive: logging {100 * inclusive['logging'] / total:.1f}% of samples)")
    print(f"top {top} functions by self time:")
    for frame, count in by_frame.most_common(top):
        print(f"  {100 * count / total:5.1f}%  {frame}")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--op", choices=("echo", "greet"), default="echo")
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--requests", type=int, default=150)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out", type=Path, help="keep the collapsed stacks here")
    args = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    legacy = LegacyServer()
    with tempfile.TemporaryDirectory(prefix="mrtr-profile-") as tmp:
        out = args.out or Path(tmp) / "stacks.txt"
        gateway = Gateway(upstream("legacy", legacy.url, pool={"min_idle": 4}), Path(tmp), "gw")
        make = echo_to(gateway.url) if args.op == "echo" else greet_at(gateway.url)
        try:
            await measure("warm-up", args.workers, 5, make)
            sampler = subprocess.Popen(
                [
                    spy,
                    "record",
                    "--pid",
                    str(gateway.pid),
                    "--format",
                    "raw",
                    "--rate",
                    "250",
                    "--output",
                    str(out),
                    "--nonblocking",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            await measure(f"profiled {args.op}", args.workers, args.requests, make)
            sampler.send_signal(2)  # SIGINT: py-spy writes what it has and stops
            _, err = sampler.communicate(timeout=60)
            if not out.exists():
                raise SystemExit(f"py-spy wrote nothing: {err.decode(errors='replace')}")
        finally:
            gateway.stop()
            legacy.stop()
        summarise(out, args.top)


if __name__ == "__main__":
    asyncio.run(main())
