"""Module hops of one request through the gateway: how often following it changes file.

    .venv/bin/python bench/hops.py [--tree DIR ...] [--op echo|greet]

For each `--tree` (a checkout of the gateway; by default this one) it starts the legacy
test server and a gateway from that tree whose process records, between two signals, the
module of every Python function of the gateway that is called (`sys.setprofile`, on the
event loop's thread). It sends one request (`--op echo`: a pass-through `tools/call`;
`greet`: an elicitation round trip, the call and its retry), then prints, for the calls
the request made: how many times the module changed from one call to the next (hops),
how many of those went back to a module already left (returns), and how many modules were
visited. It is a measure of how far a reader must jump to follow a request: every helper
counts, so compare trees with it, not the figure with a reading of the code.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bridge_bench import greet_round_trip  # noqa: E402
from bench.report import Gateway, modern_echo, upstream  # noqa: E402
from tests.peers.tooling import LegacyServer  # noqa: E402

# The gateway's process: `python -c LAUNCH TREE OUT serve ...` records the gateway's
# modules called between SIGUSR1 and SIGUSR2 into OUT, one per line.
LAUNCH = r"""
import runpy, signal, sys, threading
tree, out = sys.argv[1], sys.argv[2]
sys.path.insert(0, tree)
sys.argv = ["mrtr-gateway", *sys.argv[3:]]
seen = []
main = threading.main_thread()

def profile(frame, event, arg):
    if event == "call":
        module = frame.f_globals.get("__name__", "")
        if module.startswith("gateway."):
            seen.append(module)

def start(*_):
    seen.clear()
    sys.setprofile(profile)

def stop(*_):
    sys.setprofile(None)
    with open(out, "w") as fh:
        fh.write("\n".join(seen))

signal.signal(signal.SIGUSR1, start)
signal.signal(signal.SIGUSR2, stop)
runpy.run_module("gateway", run_name="__main__")
"""


def count(modules: list[str]) -> tuple[int, int, int]:
    """(hops, returns, modules visited) of a sequence of calls' modules."""
    hops = returns = 0
    left: set[str] = set()
    for before, after in zip(modules, modules[1:], strict=False):
        if before == after:
            continue
        hops += 1
        left.add(before)
        if after in left:
            returns += 1
    return hops, returns, len(set(modules))


async def one(tree: Path, op: str, legacy: LegacyServer, folder: Path) -> tuple[int, int, int]:
    out = folder / f"hops-{os.getpid()}-{tree.name}.txt"
    config = {
        "upstreams": [upstream("legacy", legacy.url)],
        "sealing": {"audience": "hops"},
        "logging": {"level": "info"},
    }
    launcher = [sys.executable, "-c", LAUNCH, str(tree), str(out)]
    env = {"MRTR_GATEWAY_SEALING_KEYS": _key()}
    gateway = Gateway(config, folder, f"hops-{tree.name}", env=env, launcher=launcher)
    try:
        async with aiohttp.ClientSession() as http:
            for rid in range(1, 20):  # warm: sessions open, caches filled
                await _request(http, gateway.url, op, rid)
            os.kill(gateway.pid, signal.SIGUSR1)
            await asyncio.sleep(0.2)  # the signal's handler runs between two bytecodes
            await _request(http, gateway.url, op, 100)
            os.kill(gateway.pid, signal.SIGUSR2)
            for _ in range(100):
                if out.exists() and out.stat().st_size:
                    break
                await asyncio.sleep(0.05)
    finally:
        gateway.stop()
    return count(out.read_text().split("\n"))


async def _request(http: aiohttp.ClientSession, url: str, op: str, rid: int) -> None:
    if op == "echo":
        await modern_echo(http, url, rid)
    else:
        await greet_round_trip(http, url, rid)


def _key() -> str:
    from gateway.protocol.state import generate_key

    return generate_key()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", action="append", type=Path, default=None)
    parser.add_argument("--op", choices=["echo", "greet"], default="echo")
    args = parser.parse_args()
    trees = [t.resolve() for t in (args.tree or [ROOT])]
    legacy = LegacyServer()
    try:
        with tempfile.TemporaryDirectory(prefix="mrtr-hops-") as tmp:
            for tree in trees:
                hops, returns, modules = await one(tree, args.op, legacy, Path(tmp))
                print(
                    f"{tree}: {args.op}: {hops} hops, {returns} back to a module already left, "
                    f"{modules} modules"
                )
    finally:
        legacy.stop()


if __name__ == "__main__":
    asyncio.run(main())
