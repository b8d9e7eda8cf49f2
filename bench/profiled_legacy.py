"""The legacy test server with cProfile switched on and off by signals (bench/server_work.py).

    LEGACY_VENV_PYTHON bench/profiled_legacy.py STATS_PREFIX [legacy_server.py's arguments]

Runs `tests/peers/legacy_server.py` in the legacy (mcp 1.x) environment. SIGUSR1 starts a
fresh profile; SIGUSR2 stops it, writes STATS_PREFIX.N.prof (N counting from 0) and says
`profile written PATH` on stderr. Between the two the server runs unprofiled, at its own
speed. It always times its garbage collector (two clock reads per collection): SIGHUP
says `gc SECONDS FULL` on stderr, the CPU seconds its collections took so far and how
many of them were full ones.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The peer scripts' folder, not bench/: bench/profile.py would stand in for the standard
# library's `profile`, on which cProfile is built, and legacy_server imports its siblings.
sys.path[0] = str(Path(__file__).resolve().parents[1] / "tests" / "peers")

import cProfile  # noqa: E402
import gc  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import legacy_server  # noqa: E402


def main() -> None:
    prefix = sys.argv[1]
    sys.argv = ["legacy_server.py", *sys.argv[2:]]
    profiler: cProfile.Profile | None = None
    written = 0

    def start(*_: Any) -> None:
        nonlocal profiler
        profiler = cProfile.Profile()
        profiler.enable()

    def stop(*_: Any) -> None:
        nonlocal written
        if profiler is None:
            return
        profiler.disable()
        path = f"{prefix}.{written}.prof"
        profiler.dump_stats(path)
        written += 1
        print(f"profile written {path}", file=sys.stderr, flush=True)

    collecting = {"since": 0.0, "spent": 0.0, "full": 0}

    def timed_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collecting["since"] = time.process_time()
            return
        collecting["spent"] += time.process_time() - collecting["since"]
        collecting["full"] += info["generation"] == 2

    def say_gc(*_: Any) -> None:
        print(f"gc {collecting['spent']:.6f} {collecting['full']}", file=sys.stderr, flush=True)

    gc.callbacks.append(timed_gc)
    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    signal.signal(signal.SIGHUP, say_gc)
    legacy_server.main()


if __name__ == "__main__":
    main()
