"""The gateway under cProfile, timed by its CPU clock: the `--cpu` mode of bench/profile.py.

    .venv/bin/python bench/cpu_profiled.py STATS_FILE serve --config FILE --port N

Profiling starts at SIGUSR1 (after the warm-up); at SIGUSR2 the statistics are written to
STATS_FILE and the process exits. On the process's CPU clock, a function is charged for
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
import os  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from gateway import cli  # noqa: E402


def main() -> None:
    out, args = sys.argv[1], sys.argv[2:]
    profiler = cProfile.Profile(time.process_time)

    def start(*_: Any) -> None:
        profiler.enable()

    def stop(*_: Any) -> None:
        profiler.disable()
        profiler.dump_stats(out)
        os._exit(0)

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    sys.argv = ["mrtr-gateway", *args]
    cli.main()


if __name__ == "__main__":
    main()
