"""The legacy server's side of a pass-through call: the same work behind a proxy, or more?

    .venv/bin/python bench/server_work.py [--quick] [--strace]

At 32 clients the legacy server runs one core at 100%, so the throughput the report
(bench/report.py) measures is one over the server's CPU per call, and behind the gateway
the server spends more per call than driven directly. This takes the server's side of
a call apart for the three ways of reaching it, the same legacy server driven directly,
through the gateway (shipped defaults) and through the floor (bench/floor_proxy.py):

- its CPU per call, user and system apart (/proc), and its context switches, in
  alternating batches (the order turned each time, as the report does);
- the Python function calls it makes per call, counted by cProfile in batches of their
  own (a count, which the machine's speed does not move);
- with `--strace`, its system calls per call (strace -c, in batches of their own).

The same counts with more user time mean the server does the same work, done slower.
The server runs under bench/profiled_legacy.py, unprofiled but for the counting batches.
"""

from __future__ import annotations

import argparse
import collections
import os
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bridge_bench import measure  # noqa: E402
from bench.lifetime import run  # noqa: E402
from bench.report import TICK, FloorProxy, Gateway, MakeOp, direct_echo, echo_to, upstream  # noqa: E402
from tests.peers.tooling import PEER_READY, LoggedProcess, ensure_venv  # noqa: E402

WORKERS = 32


class ProfiledLegacy(LoggedProcess):
    """The legacy test server under bench/profiled_legacy.py, on a free port."""

    def __init__(self, prefix: Path) -> None:
        python = ensure_venv("legacy")
        script = ROOT / "bench" / "profiled_legacy.py"
        super().__init__([str(python), str(script), str(prefix), "--port", "0"], name="legacy")
        self.start()
        port = int(self.wait_for_line(PEER_READY).rsplit(":", 1)[1])
        self.url = f"http://127.0.0.1:{port}/mcp"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def collected(self) -> tuple[float, int]:
        """CPU seconds its garbage collector took so far, and its full collections."""
        mark = self.mark()
        os.kill(self.pid, signal.SIGHUP)
        _, spent, full = self.wait_for_line(lambda line: line.startswith("gc "), since=mark).split()
        return float(spent), int(full)

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.terminate()
        self.proc.wait(10)


@dataclass
class Tally:
    calls: int = 0
    user_s: float = 0.0
    sys_s: float = 0.0
    switches: int = 0
    elapsed_s: float = 0.0
    gc_s: float = 0.0
    full_gcs: int = 0
    counted_calls: int = 0
    python_calls: int = 0
    traced_calls: int = 0
    syscalls: collections.Counter[str] = field(default_factory=collections.Counter)


def usage(pid: int) -> tuple[float, float, int]:
    """User and system CPU seconds and voluntary context switches of all of `pid`'s threads."""
    user = system = 0.0
    switches = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        task = Path(f"/proc/{pid}/task/{tid}")
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        user += int(fields[11]) / TICK
        system += int(fields[12]) / TICK
        for line in (task / "status").read_text().splitlines():
            if line.startswith("voluntary_ctxt_switches"):
                switches += int(line.split()[1])
    return user, system, switches


def around(before: Callable[[], None], after: Callable[[], None]) -> Callable[[], list[float]]:
    """`measure`'s `cpu_of` hook, called just before and just after its timed part (its
    clients' sessions opened and warmed up before, ended after): runs `before` at the first
    call and `after` at the second."""
    steps = iter((before, after))

    def hook() -> list[float]:
        next(steps)()
        return []

    return hook


async def timed(server: ProfiledLegacy, label: str, make: MakeOp, per: int, tally: Tally) -> None:
    marks: list[tuple[tuple[float, float, int], tuple[float, int]]] = []

    def read() -> None:
        marks.append((usage(server.pid), server.collected()))

    result = await measure(label, WORKERS, per, make, quiet=True, cpu_of=around(read, read))
    (start, gc_start), (end, gc_end) = marks
    tally.calls += result["ops"]
    tally.elapsed_s += result["elapsed"]
    tally.gc_s += gc_end[0] - gc_start[0]
    tally.full_gcs += gc_end[1] - gc_start[1]
    tally.user_s += end[0] - start[0]
    tally.sys_s += end[1] - start[1]
    tally.switches += end[2] - start[2]


async def counted(server: ProfiledLegacy, label: str, make: MakeOp, per: int, tally: Tally) -> None:
    """A batch with the server's profiler on for its timed part: its Python calls."""
    mark: list[int] = []

    def begin() -> None:
        mark.append(server.mark())
        os.kill(server.pid, signal.SIGUSR1)

    def end() -> None:
        os.kill(server.pid, signal.SIGUSR2)

    result = await measure(label, WORKERS, per, make, quiet=True, cpu_of=around(begin, end))
    path = server.wait_for_line("profile written", since=mark[0]).split()[-1]
    stats = pstats.Stats(path).stats  # type: ignore[attr-defined]
    tally.counted_calls += result["ops"]
    tally.python_calls += sum(entry[1] for entry in stats.values())


async def traced(server: ProfiledLegacy, label: str, make: MakeOp, per: int, tally: Tally) -> None:
    """A batch with strace counting the server's system calls in its timed part."""
    fd, name = tempfile.mkstemp(suffix=".strace")
    os.close(fd)
    out = Path(name)
    spy: list[subprocess.Popen[str]] = []

    def begin() -> None:
        args = ["strace", "-c", "-f", "-o", str(out), "-p", str(server.pid)]
        proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        proc.stderr.readline()  # "Process N attached": counting from here
        spy.append(proc)

    def end() -> None:
        spy[0].send_signal(signal.SIGINT)
        spy[0].wait(30)

    result = await measure(label, WORKERS, per, make, quiet=True, cpu_of=around(begin, end))
    tally.traced_calls += result["ops"]
    for line in out.read_text().splitlines():
        words = line.split()
        if len(words) >= 5 and words[0][0].isdigit() and words[-1] != "total":
            tally.syscalls[words[-1]] += int(words[3])
    out.unlink()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer samples (a smoke run)")
    parser.add_argument("--strace", action="store_true", help="count system calls too")
    args = parser.parse_args()
    if args.strace and shutil.which("strace") is None:
        parser.error("--strace: strace is not installed")
    batches, per = (2, 20) if args.quick else (4, 60)
    with tempfile.TemporaryDirectory(prefix="mrtr-server-work-") as tmp:
        folder = Path(tmp)
        server = ProfiledLegacy(folder / "legacy")
        gateway = Gateway(upstream("legacy", server.url), folder, "gateway")
        floor = FloorProxy(server.url)
        ways: dict[str, MakeOp] = {
            "direct": direct_echo(server.url),
            "gateway": echo_to(gateway.url),
            "floor": echo_to(floor.url),
        }
        tallies = {label: Tally() for label in ways}
        labels = list(ways)
        try:
            for batch in range(batches):
                turn = batch % len(labels)
                for label in labels[turn:] + labels[:turn]:
                    await timed(server, label, ways[label], per, tallies[label])
            for label in labels:
                await counted(server, label, ways[label], per // 2, tallies[label])
                if args.strace:
                    await traced(server, label, ways[label], per // 2, tallies[label])
        finally:
            floor.stop()
            gateway.stop()
            server.stop()
    report(tallies, args.strace)


def report(tallies: dict[str, Tally], strace: bool) -> None:
    print(f"the legacy server's side of a pass-through tools/call, {WORKERS} clients, per call:")
    print(
        f"  {'':8} {'calls/s':>8} {'user ms':>8} {'of it GC':>9} {'full GCs':>9} {'sys ms':>7} "
        f"{'switches':>9} {'Python calls':>13}"
    )
    for label, t in tallies.items():
        print(
            f"  {label:8} {t.calls / t.elapsed_s:8.0f} {1000 * t.user_s / t.calls:8.3f} "
            f"{1000 * t.gc_s / t.calls:9.3f} {1000 * t.full_gcs / t.calls:9.2f} "
            f"{1000 * t.sys_s / t.calls:7.3f} {t.switches / t.calls:9.2f} "
            f"{t.python_calls / t.counted_calls:13.1f}"
        )
    print("  (full GCs per thousand calls)")
    direct = tallies["direct"]
    for label in ("gateway", "floor"):
        t = tallies[label]
        rate = (t.calls / t.elapsed_s) / (direct.calls / direct.elapsed_s)
        user = (t.user_s / t.calls) / (direct.user_s / direct.calls)
        work = (t.python_calls / t.counted_calls) / (direct.python_calls / direct.counted_calls)
        print(
            f"  {label} / direct: throughput {rate:.3f}x; the server's user CPU {user:.3f}x "
            f"for {work:.3f}x the Python calls"
        )
    if strace:
        names = sorted(
            {name for t in tallies.values() for name in t.syscalls},
            key=lambda name: -direct.syscalls[name],
        )
        print("  system calls per call:")
        for name in names:
            counts = [t.syscalls[name] / t.traced_calls for t in tallies.values()]
            if max(counts) >= 0.05:
                print(f"    {name:12} " + "  ".join(f"{c:8.2f}" for c in counts))


if __name__ == "__main__":
    run(main())
