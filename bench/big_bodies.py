"""What a large upstream result costs the gateway, and how long it holds everyone else up.

    .venv/bin/python bench/big_bodies.py [--mb 48] [--shape text|prose|records]
        [--form sse|json] [--runs 3] [--tree DIR ...] [--loop auto|uvloop|asyncio] [--where]

The legacy test server's `big` tool answers `tools/call` with a result of about `--mb`
megabytes (`text`: one text block; `prose`: text whose JSON is dense with escapes;
`records`: `structuredContent` holding a table of small objects), as one SSE event
(`--form sse`, mcp 1.x's default) or as a JSON body (`--form json`). Each `--tree` (a
checkout; by default this one) serves it from a gateway process of its own, on the
event loop the CLI would pick (`--loop`), alone but for a monitor task that wakes every
millisecond and keeps the longest gap between two wake-ups (the loop's longest stall)
and the CPU the loop's thread spent in that gap (what the gateway itself held it for,
whatever else the machine ran). The clients are another process: one makes the large
call while another makes small calls (`echo`, on a second legacy server: not waiting
behind the first one's own work) back to back.

Printed per run: the gateway process's CPU for the large call (alone), the loop's
longest stall beside the small calls (wall, and the CPU in it) and the longest small
call. `--where` samples the loop's stack every 2 ms and prints where the longest stall
went (the sampling thread slows the loop: read the stall figures of a run without it).
The goal (issue 48): no other client waits more than 0.3 s behind a 48 MB result.
Compare checkouts in one run (`--tree A --tree B`): the machine's speed moves by the hour.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=48.0)
    parser.add_argument("--shape", default="text", choices=["text", "prose", "records"])
    parser.add_argument("--form", default="sse", choices=["sse", "json"])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tree", type=Path, action="append")
    parser.add_argument("--loop", default="auto", choices=["auto", "uvloop", "asyncio"])
    parser.add_argument("--where", action="store_true", help="where the longest stall went")
    parser.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)  # the gateway: 2 URLs
    parser.add_argument("--client", help=argparse.SUPPRESS)  # the clients: the gateway's URL
    parser.add_argument("--alone", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args()


# -- the clients' process ------------------------------------------------------------------


async def _clients(url: str, size: int, shape: str, alone: bool) -> dict[str, Any]:
    import aiohttp

    from tests.support.wire import default_headers, rpc

    other = url.removesuffix("/mcp") + "/other"

    async def call(http: aiohttp.ClientSession, body: dict[str, Any], to: str = url) -> bytes:
        async with http.post(to, json=body, headers=default_headers(body)) as resp:
            raw = await resp.read()
            assert resp.status == 200, (resp.status, raw[:300])
            return raw

    def echo(rid: int) -> dict[str, Any]:
        return rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, rid=rid)

    big = rpc("tools/call", {"name": "big", "arguments": {"size": size, "shape": shape}}, rid=0)
    async with aiohttp.ClientSession() as http, aiohttp.ClientSession() as small:
        for rid in range(1, 20):
            await call(small, echo(rid), other)
        waits: list[float] = []
        done = asyncio.Event()

        async def smalls() -> None:
            rid = 100
            while not done.is_set():
                started = time.perf_counter()
                await call(small, echo(rid), other)
                waits.append(time.perf_counter() - started)
                rid += 1

        started = time.perf_counter()
        beside = None if alone else asyncio.ensure_future(smalls())  # noqa: TID251
        raw = await call(http, big)
        took = time.perf_counter() - started
        done.set()
        if beside is not None:
            await beside
    reply = json.loads(raw[raw.index(b"{") :] if raw.startswith(b"event") else raw)
    assert reply["result"]["resultType"] == "complete", list(reply["result"])
    return {
        "bytes": len(raw),
        "big_s": took,
        "small_calls": len(waits),
        "small_max_s": max(waits, default=0.0),
    }


# -- the gateway's process -----------------------------------------------------------------


class LoopMonitor:
    """The loop's longest stall: the longest gap between two wake-ups of a task that
    sleeps a millisecond at a time, and the CPU this thread spent in that gap; with
    `where`, a thread samples the loop's stack every 2 ms, to tell where that gap went."""

    def __init__(self, where: bool) -> None:
        self.where = where
        self.longest = self.longest_cpu = 0.0
        self.gap = (0.0, 0.0)
        self.samples: list[tuple[float, str]] = []
        self._task: asyncio.Task[None] | None = None
        self._sampling = False

    async def _watch(self) -> None:
        last, last_cpu = time.perf_counter(), time.thread_time()
        while True:
            await asyncio.sleep(0.001)
            now, cpu = time.perf_counter(), time.thread_time()
            if now - last > self.longest:
                self.longest, self.longest_cpu = now - last, cpu - last_cpu
                self.gap = (last, now)
            last, last_cpu = now, cpu

    def _sample(self, ident: int) -> None:
        import traceback

        while self._sampling:
            frame = sys._current_frames().get(ident)
            if frame is not None:
                stack = traceback.extract_stack(frame)[-6:]
                line = " < ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in stack)
                self.samples.append((time.perf_counter(), line))
            time.sleep(0.002)

    def start(self) -> None:
        import threading

        self.longest = self.longest_cpu = 0.0
        self.samples = []
        self._task = asyncio.get_running_loop().create_task(self._watch())  # noqa: TID251
        if self.where:
            self._sampling = True
            ident = threading.get_ident()
            threading.Thread(target=self._sample, args=(ident,), daemon=True).start()

    async def stop(self) -> dict[str, Any]:
        assert self._task is not None
        self._task.cancel()
        self._sampling = False
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        from collections import Counter

        start, end = self.gap
        seen = Counter(line for at, line in self.samples if start <= at <= end)
        return {
            "stall_s": self.longest,
            "stall_cpu_s": self.longest_cpu,
            "where": [f"{n * 2:4d} ms  {line}" for line, n in seen.most_common(6)],
        }


async def _serve(urls: list[str], where: bool) -> None:
    """A gateway in front of the two servers; commands on stdin (`start`: the monitor
    from now; `stop`: its figures; `cpu`: this process's CPU so far), answers on stdout."""
    import gateway
    from gateway.app import build_app
    from gateway.config import parse_config
    from gateway.logging import configure
    from gateway.protocol.state import generate_key
    from gateway.web.serving import serve

    config = parse_config(
        {
            "upstreams": [
                {"name": "big", "url": urls[0], "path": "/mcp"},
                {"name": "other", "url": urls[1], "path": "/other"},
            ],
            "sealing": {"audience": "bench"},
            "logging": {"level": "warning", "format": "json"},
        },
        env={"MRTR_GATEWAY_SEALING_KEYS": generate_key()},
    )
    configure(config.logging.level, config.logging.format)
    server = await serve(build_app(config), "127.0.0.1", 0, idle_timeout_s=60)
    monitor = LoopMonitor(where)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    def say(value: Any) -> None:
        sys.stdout.write(json.dumps(value) + "\n")
        sys.stdout.flush()

    say({"url": str(server.make_url("/mcp")), "gateway": str(Path(gateway.__file__).parent)})
    try:
        while line := (await reader.readline()).decode().strip():
            if line == "start":
                monitor.start()
                say("started")
            elif line == "stop":
                say(await monitor.stop())
            elif line == "cpu":
                say(time.process_time())
    finally:
        await server.close()


# -- the parent: servers, gateways, clients ------------------------------------------------


class Served:
    def __init__(self, tree: Path, urls: list[str], args: argparse.Namespace) -> None:
        command = [sys.executable, "-P", __file__, "--serve", *urls, "--loop", args.loop]
        command += ["--where"] if args.where else []
        env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{ROOT}"}
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True
        )
        hello = self.ask(None)
        self.url, self.where = hello["url"], hello["gateway"]

    def ask(self, command: str | None) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if command is not None:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)


def clients(url: str, args: argparse.Namespace, *, alone: bool) -> dict[str, Any]:
    command = [sys.executable, __file__, "--client", url, "--mb", str(args.mb)]
    command += ["--shape", args.shape] + (["--alone"] if alone else [])
    out = subprocess.run(command, capture_output=True, check=True, cwd=str(ROOT)).stdout
    report: dict[str, Any] = json.loads(out)
    return report


def compare(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.peers.tooling import LegacyServer

    big = LegacyServer(json_response=args.form == "json")
    other = LegacyServer()  # the small calls' own: they wait behind no work of big's
    try:
        served = [Served(tree.resolve(), [big.url, other.url], args) for tree in args.tree]
        print(f"{args.mb:g} MB, {args.shape}, answered in {args.form.upper()}")
        try:
            for run in range(args.runs):
                for gateway in served:
                    cpu = gateway.ask("cpu")
                    alone = clients(gateway.url, args, alone=True)
                    cpu = gateway.ask("cpu") - cpu
                    gateway.ask("start")
                    beside = clients(gateway.url, args, alone=False)
                    stall = gateway.ask("stop")
                    print(
                        f"  {run + 1}. {gateway.where}: gateway CPU {cpu:.3f} s"
                        f" (the large call alone, {alone['big_s']:.2f} s);"
                        f" loop's longest stall {stall['stall_s']:.3f} s"
                        f" ({stall['stall_cpu_s']:.3f} s CPU);"
                        f" longest small call beside it {beside['small_max_s']:.3f} s"
                        f" ({beside['small_calls']} calls, {beside['bytes']:,} bytes)"
                    )
                    for line in stall["where"]:
                        print("     ", line)
        finally:
            for gateway in served:
                gateway.stop()
    finally:
        big.stop()
        other.stop()


def main() -> None:
    args = _args()
    if args.client:
        sys.path.insert(0, str(ROOT))
        size = int(args.mb * 1024 * 1024)
        print(json.dumps(asyncio.run(_clients(args.client, size, args.shape, args.alone))))
        return
    if args.serve:
        from gateway.cli import event_loop

        factory, _ = event_loop(args.loop)
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(_serve(args.serve, args.where))
        return
    args.tree = args.tree or [ROOT]
    compare(args)


if __name__ == "__main__":
    main()
