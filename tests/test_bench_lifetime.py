"""A bench script stopped by SIGTERM ends what it started (`bench.lifetime.run`): its main
task is cancelled, its `finally` blocks run, and it exits 143, leaving no child behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import asyncio, subprocess, sys
sys.path.insert(0, sys.argv[1])
from bench.lifetime import run

async def main() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        print(child.pid, flush=True)
        await asyncio.sleep(600)
    finally:
        child.terminate()
        child.wait(10)

run(main())
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie has ended; only its entry is left
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_sigterm_ends_the_script_and_what_it_started() -> None:
    with subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(ROOT)], stdout=subprocess.PIPE, text=True
    ) as bench:
        try:
            assert bench.stdout is not None
            child = int(bench.stdout.readline())  # started, and the main task awaits
            bench.send_signal(signal.SIGTERM)
            assert bench.wait(30) == 143
            assert not alive(child)
        finally:
            if bench.poll() is None:
                bench.kill()
                bench.wait()
