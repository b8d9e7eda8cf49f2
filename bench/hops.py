"""Module hops of one request through the gateway: how often following it changes file.

    .venv/bin/python bench/hops.py [--tree DIR ...] [--op echo|greet]

For each `--tree` (a checkout of the gateway; by default this one) it starts the legacy
test server and a gateway from that tree whose process records, between two signals, the
module of every Python function of the gateway that is called (`sys.setprofile`, on the
event loop's thread; a coroutine resumed after an await, a property read and a dunder
method such as `__len__` or `__getitem__` are not calls a reader follows). It sends one request (`--op echo`: a pass-through `tools/call`;
`greet`: an elicitation round trip, the call and its retry; `legacy-echo`: a 2025
client's `tools/call echo` on its session, through the legacy lane), then prints, for the calls
the request made: how many times the module changed from one call to the next (hops),
how many of those went back to a module already left (returns), and how many modules were
visited. It is a measure of how far a reader must jump to follow a request: every helper
counts, so compare trees with it, not the figure with a reading of the code. `--only
calls,protocol.call` counts only the calls made in those modules (the others left out of
the sequence, as if a reader skipped them).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bridge_bench import LegacyClient, greet_round_trip  # noqa: E402
from bench.lifetime import run  # noqa: E402
from bench.report import Gateway, modern_echo, upstream  # noqa: E402
from tests.peers.tooling import LegacyServer  # noqa: E402

# The gateway's process: `python -c LAUNCH TREE OUT serve ...` records the gateway's
# modules called between SIGUSR1 and SIGUSR2 into OUT, one per line.
LAUNCH = r"""
import dis, runpy, signal, sys, threading
tree, out = sys.argv[1], sys.argv[2]
RESUME = dis.opmap.get("RESUME")
sys.path.insert(0, tree)
sys.argv = ["mrtr-gateway", *sys.argv[3:]]
seen = []
accessors = set()  # the code of property getters: reading an attribute is not a hop

def find_accessors():
    for name, module in list(sys.modules.items()):
        if not name.startswith("gateway.") or module is None:
            continue
        for owner in vars(module).values():
            if isinstance(owner, type) and owner.__module__ == name:
                for value in vars(owner).values():
                    if isinstance(value, property) and value.fget is not None:
                        accessors.add(getattr(value.fget, "__code__", None))

def profile(frame, event, arg):
    if event != "call":
        return
    module = frame.f_globals.get("__name__", "")
    if not module.startswith("gateway."):
        return
    if frame.f_code in accessors or frame.f_code.co_name.startswith("__"):
        return  # an attribute read, a container's protocol (len, in, [])
    code, at = frame.f_code.co_code, frame.f_lasti
    if RESUME is not None and 0 <= at < len(code) - 1 and code[at] == RESUME and code[at + 1]:
        return  # a coroutine resumed after an await: not a call a reader follows
    seen.append(module)

def start(*_):
    find_accessors()
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


async def one(
    tree: Path, op: str, legacy: LegacyServer, folder: Path, show: bool, only: tuple[str, ...]
) -> tuple[int, int, int]:
    out = folder / f"hops-{os.getpid()}-{tree.name}.txt"
    config = {**upstream("legacy", legacy.url), "sealing": {"audience": "hops"}}
    launcher = [sys.executable, "-c", LAUNCH, str(tree), str(out)]
    env = {"MRTR_GATEWAY_SEALING_KEYS": _key()}
    gateway = Gateway(config, folder, f"hops-{tree.name}", env=env, launcher=launcher)
    try:
        async with aiohttp.ClientSession() as http:
            send = await _sender(http, gateway.url, op)
            for rid in range(1, 20):  # warm: sessions open, caches filled
                await send(rid)
            os.kill(gateway.pid, signal.SIGUSR1)
            await asyncio.sleep(0.2)  # the signal's handler runs between two bytecodes
            await send(100)
            os.kill(gateway.pid, signal.SIGUSR2)
            for _ in range(100):
                if out.exists() and out.stat().st_size:
                    break
                await asyncio.sleep(0.05)
    finally:
        gateway.stop()
    modules = [m for m in out.read_text().split("\n") if not only or m.startswith(only)]
    if show:
        print(" > ".join(m for i, m in enumerate(modules) if i == 0 or modules[i - 1] != m))
    return count(modules)


async def _sender(
    http: aiohttp.ClientSession, url: str, op: str
) -> Callable[[int], Awaitable[None]]:
    """What sends one request of `op` (a 2025 client's on a session opened here)."""
    if op == "echo":
        return lambda rid: modern_echo(http, url, rid)
    if op == "greet":
        return lambda rid: greet_round_trip(http, url, rid)
    client = LegacyClient(http, url)
    await client.open()
    return lambda _rid: client.echo()


def _key() -> str:
    from gateway.protocol.state import generate_key

    return generate_key()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", action="append", type=Path, default=None)
    parser.add_argument("--op", choices=["echo", "greet", "legacy-echo"], default="echo")
    parser.add_argument("--show", action="store_true", help="print the modules in order")
    parser.add_argument(
        "--only", default="", help="comma-separated module prefixes to count (all: empty)"
    )
    args = parser.parse_args()
    trees = [t.resolve() for t in (args.tree or [ROOT])]
    only = tuple(f"gateway.{p}" for p in args.only.split(",") if p)
    legacy = LegacyServer()
    try:
        with tempfile.TemporaryDirectory(prefix="mrtr-hops-") as tmp:
            for tree in trees:
                hops, returns, modules = await one(
                    tree, args.op, legacy, Path(tmp), args.show, only
                )
                print(
                    f"{tree}: {args.op}: {hops} hops, {returns} back to a module already left, "
                    f"{modules} modules"
                )
    finally:
        legacy.stop()


if __name__ == "__main__":
    run(main())
