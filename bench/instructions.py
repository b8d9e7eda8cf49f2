"""Instructions per call, counted by callgrind: a figure that does not drift.

    .venv/bin/python bench/instructions.py [--tree DIR [--python PY] ...] [--op echo|greet|...]
        [--calls 400] [--by-function] [--log-level info]

Timings on two shared cores move by the hour; a count of instructions does not
(`valgrind --tool=callgrind` gives the same total for the same code and inputs, whatever
else the machine is doing). For each `--tree` (a checkout of the gateway, by default this
one: give two to compare a change with what it changes) it starts the legacy test server
and, twice, a gateway from that tree under callgrind, with the shipped defaults and a
fixed hash seed. It drives both alike, the second with `--calls` more calls, and prints
(difference of the totals) / (difference of the calls): what one call costs, start-up
and shut-down cancelled out. `--python` (one for each `--tree`, paired in order) runs that
tree's gateway on another interpreter (a virtual environment's with the gateway's
dependencies), to count what a Python version changes. `--op echo` (the default) is a
pass-through call, `--op greet` an elicitation round trip: the call, its question parked,
the retry that answers it; `--op legacy-echo` a 2025 client's `tools/call echo` on its
session through the legacy lane (the server answering in SSE; `legacy-echo-json`: in JSON).
`--by-function` prints the C functions that difference is made of (the interpreter's
loop, dict lookups, the regular-expression engine, ...), which says what kind of work a
call is, not which Python line did it.

What it does not count: the kernel's side of each syscall, and time waiting. Use it to
keep or drop a change to the hot path, and `bench/report.py` for the goals themselves.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from bench.bridge_bench import measure  # noqa: E402
from bench.lifetime import run  # noqa: E402
from bench.report import OPS, Gateway, upstream  # noqa: E402
from tests.peers.tooling import LegacyServer  # noqa: E402

#: Calls of each of the 4 clients in both runs (beside the warm-up `measure` makes).
WARM = 10
#: Python under callgrind starts some fifty times slower than it does alone.
START_S = 600.0


def totals_by_function(out: Path) -> tuple[int, Counter[str]]:
    """The run's total and its instructions by C function (`callgrind_annotate`)."""
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=no", "--threshold=100", str(out)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    total, by_function = 0, Counter[str]()
    for line in text.splitlines():
        match = re.match(r"\s*([\d,]+) \([^)]*\)\s+(.+?)(?: \[.*\])?$", line)
        if match is None:
            continue
        count = int(match.group(1).replace(",", ""))
        if "PROGRAM TOTALS" in line:
            total = count
        else:
            by_function[match.group(2).rsplit("/", 1)[-1]] += count
    return total, by_function


async def counted_run(
    tree: Path, python: str, legacy: LegacyServer, op: str, calls: int, level: str, folder: Path
) -> Path:
    """A gateway of `tree` under callgrind, driven by 4 clients with `WARM` calls each and
    then `calls` more in all: its callgrind output file, once it has stopped."""
    out = folder / f"callgrind.{calls}.out"
    launcher = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        python,
        "-P",  # not the working directory's gateway: the tree's, from PYTHONPATH
        "-m",
        "gateway",
    ]
    env = {"PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    extra = report.OP_UPSTREAM.get(op, {})
    config = {
        **upstream("legacy", legacy.url, pool={"min_idle": 4}, **extra),
        "logging": {"level": level},
    }
    gateway = Gateway(config, folder, f"counted-{calls}", env=env, launcher=launcher)
    try:
        await measure("counted", 4, WARM + calls // 4, OPS[op][0](gateway.url), quiet=True)
        gateway.proc.send_signal(signal.SIGTERM)  # an orderly stop writes the counts
        await asyncio.to_thread(gateway.proc.wait, START_S)
    finally:
        if gateway.proc.poll() is None:
            gateway.proc.kill()
            gateway.proc.wait(10)
    return out


async def per_call(
    tree: Path, python: str, name: str, op: str, calls: int, level: str, by_function: bool
) -> None:
    folder = Path(tempfile.mkdtemp(prefix="instructions-"))
    legacy = LegacyServer(json_response=OPS[op][1])
    try:
        base = totals_by_function(await counted_run(tree, python, legacy, op, 0, level, folder))
        more = totals_by_function(await counted_run(tree, python, legacy, op, calls, level, folder))
    finally:
        legacy.stop()
        shutil.rmtree(folder, ignore_errors=True)
    print(f"{name}: {(more[0] - base[0]) / calls:,.0f} instructions per {op}")
    if by_function:
        diff = more[1]
        diff.subtract(base[1])
        for name, count in diff.most_common(25):
            print(f"  {count / calls:10,.0f}  {name}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", type=Path, help="a gateway checkout")
    parser.add_argument("--python", action="append", help="the interpreter of each tree's gateway")
    parser.add_argument("--op", choices=sorted(OPS), default="echo")
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--by-function", action="store_true")
    parser.add_argument("--log-level", default="info", help="the gateway's (default: info)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    wait_for_port = report.wait_for_port
    report.wait_for_port = lambda port, proc: wait_for_port(port, proc, timeout=START_S)
    for tree, python, name in report.tree_pythons(parser, args.tree or [ROOT], args.python):
        await per_call(
            tree, python, name, args.op, args.calls // 4 * 4, args.log_level, args.by_function
        )


if __name__ == "__main__":
    run(main(), fast=True)
