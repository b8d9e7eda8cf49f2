"""The gateway under cProfile, timed by its CPU clock: the `--cpu` mode of bench/profile.py.

    .venv/bin/python bench/cpu_profiled.py STATS_FILE serve --config FILE --port N

Profiling starts at SIGUSR1 (after the warm-up); at SIGUSR2 the statistics are written to
STATS_FILE (and, in STATS_FILE.made, how many values of each dataclass were made: see
`write_made`) and the process exits. On the process's CPU clock, a function is charged for
what it computed only: time it spent runnable but off the CPU (preempted by the clients
or the server of the benchmark, on two shared cores) is not counted, whereas a sampler
reading a running thread's stack counts it.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The project's root, not bench/: bench/profile.py would stand in for the standard
# library's `profile`, on which cProfile is built.
sys.path[0] = str(Path(__file__).resolve().parents[1])

import cProfile  # noqa: E402
import dataclasses  # noqa: E402
import gc  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from gateway import cli  # noqa: E402


def write_made(profiler: cProfile.Profile, path: str) -> None:
    """How many values of each dataclass were made, one "count module.Class" line each.
    `pstats` keys a function by file, line and name, and every `__init__` a dataclass
    generates is `<string>:2(__init__)`: it keeps one of them and drops the others. The
    profiler's own entries are by code object, each found here back to its class."""
    classes = {}
    for made in gc.get_objects():
        if isinstance(made, type) and dataclasses.is_dataclass(made):
            init = made.__dict__.get("__init__")
            if init is not None and hasattr(init, "__code__"):
                classes[init.__code__] = f"{made.__module__}.{made.__qualname__}"
    with open(path, "w") as file:
        for entry in profiler.getstats():
            if entry.code in classes:
                file.write(f"{entry.callcount} {classes[entry.code]}\n")


def main() -> None:
    out, args = sys.argv[1], sys.argv[2:]
    profiler = cProfile.Profile(time.process_time)

    def start(*_: Any) -> None:
        profiler.enable()

    def stop(*_: Any) -> None:
        profiler.disable()
        profiler.dump_stats(out)
        write_made(profiler, out + ".made")
        os._exit(0)

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    sys.argv = ["mrtr-gateway", *args]
    cli.main()


if __name__ == "__main__":
    main()
