"""Where the gateway's CPU goes: a sampling profile of one gateway under load.

    .venv/bin/python bench/profile.py [--op echo|greet|legacy-echo|legacy-echo-json]
        [--workers 32] [--requests 150] [--cpu]

Starts the legacy test server and a gateway with the shipped defaults, drives it
with `--workers` 2026-07-28 clients (`--op legacy-echo`: 2025 clients, each on a session
of its own, through the legacy lane; `legacy-echo-json` with the server answering in JSON
rather than SSE), and samples the gateway with py-spy (from the
`bench` extra) while they run. Prints the share of samples by package (asyncio,
aiohttp, structlog, the gateway's own modules, ...) and the functions with the
most self time; `--out FILE` keeps the collapsed stacks for a flame graph.

py-spy counts a thread that is runnable but off the CPU as busy where it stands: on
two shared cores a socket write that wakes the client shows up large. `--cpu` instead
runs the gateway under cProfile on its CPU clock (`bench/cpu_profiled.py`): the shares
are of CPU time computed, by package and by module of the gateway, and the functions
with the most of it. cProfile's own cost per Python call inflates call-heavy code, so
compare shares, not absolute times; `--out FILE` keeps the pstats file. It also prints
the dataclass values made per request, by class, which the pstats file cannot tell apart.
"""

from __future__ import annotations

import argparse
import collections
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bridge_bench import measure  # noqa: E402
from bench.lifetime import run  # noqa: E402
from bench.report import OPS, Gateway, upstream  # noqa: E402
from gateway.config.model import LimitsConfig  # noqa: E402
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


def summarise_cpu(stats_file: Path, top: int) -> None:
    """CPU time by package, by gateway module and by function, from cProfile's statistics."""
    stats = pstats.Stats(str(stats_file))
    raw: dict[tuple[str, int, str], tuple[Any, ...]] = stats.stats  # type: ignore[attr-defined]
    by_group: collections.Counter[str] = collections.Counter()
    by_module: collections.Counter[str] = collections.Counter()
    total = 0.0
    for (path, _, _), (_, _, own_s, _, _) in raw.items():
        total += own_s
        by_group[group_of(path)] += own_s
        if "/gateway/" in path:
            by_module[path.rsplit("/gateway/", 1)[1]] += own_s
    print(f"{total:.2f} s of CPU profiled; own time by package:")
    for name, own_s in by_group.most_common():
        print(f"  {name:<10} {100 * own_s / total:5.1f}%")
    print("the gateway's modules:")
    for name, own_s in by_module.most_common(15):
        print(f"  {100 * own_s / total:5.1f}%  {name}")
    print(f"top {top} functions by own CPU time:")
    ranked = sorted(raw.items(), key=lambda item: item[1][2], reverse=True)
    for (path, line, func), (_, calls, own_s, _, _) in ranked[:top]:
        where = path.rsplit("site-packages/", 1)[-1].rsplit("/work/", 1)[-1]
        print(f"  {100 * own_s / total:5.1f}%  {func} ({where}:{line}), {calls} calls")


def summarise_made(made_file: Path, requests: int) -> None:
    """The dataclass values made per request (bench/cpu_profiled.py's `write_made`: the
    statistics above count all of them as one function, `<string>:2(__init__)`)."""
    if not made_file.exists():
        return
    counts = [line.split(" ", 1) for line in made_file.read_text().splitlines()]
    print("dataclass values made per request:")
    for count, name in sorted(counts, key=lambda pair: -int(pair[0])):
        print(f"  {int(count) / requests:6.1f}  {name}")


def profiled_config(legacy: LegacyServer, workers: int) -> dict[str, Any]:
    """The shipped defaults, but for room: every worker (one principal) may have a call
    parked, and one more on its way out (the default is 16 per principal)."""
    default = LimitsConfig()
    limits = {
        "max_parked_per_principal": max(default.max_parked_per_principal, 2 * workers),
        "max_parked_calls": max(default.max_parked_calls, 4 * workers),
    }
    return {**upstream("legacy", legacy.url, pool={"min_idle": 4}), "limits": limits}


async def profile_cpu(args: argparse.Namespace, legacy: LegacyServer, tmp: Path) -> None:
    out = args.out or tmp / "gateway.pstats"
    launcher = [sys.executable, str(ROOT / "bench" / "cpu_profiled.py"), str(out)]
    config = profiled_config(legacy, args.workers)
    gateway = Gateway(config, tmp, "gw", launcher=launcher)
    make = OPS[args.op][0](gateway.url)
    try:
        await measure("warm-up", args.workers, 5, make)
        gateway.proc.send_signal(signal.SIGUSR1)
        await measure(f"profiled {args.op}", args.workers, args.requests, make)
        gateway.proc.send_signal(signal.SIGUSR2)  # writes the statistics and exits
        gateway.proc.wait(60)
    finally:
        gateway.stop()
    summarise_cpu(out, args.top)
    # Each worker's three warm-up operations run while the profiler is on too.
    summarise_made(Path(f"{out}.made"), args.workers * (args.requests + 3))


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--op", choices=sorted(OPS), default="echo")
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--requests", type=int, default=150)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out", type=Path, help="keep the collapsed stacks here")
    parser.add_argument("--cpu", action="store_true", help="cProfile on the CPU clock")
    args = parser.parse_args()
    if args.cpu:
        legacy = LegacyServer(json_response=OPS[args.op][1])
        try:
            with tempfile.TemporaryDirectory(prefix="mrtr-profile-") as tmp:
                await profile_cpu(args, legacy, Path(tmp))
        finally:
            legacy.stop()
        return
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    legacy = LegacyServer(json_response=OPS[args.op][1])
    with tempfile.TemporaryDirectory(prefix="mrtr-profile-") as tmp:
        out = args.out or Path(tmp) / "stacks.txt"
        gateway = Gateway(profiled_config(legacy, args.workers), Path(tmp), "gw")
        make = OPS[args.op][0](gateway.url)
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
    run(main())
