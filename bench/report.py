"""The performance report: every goal figure of the gateway, measured in one run.

    .venv/bin/python bench/report.py [--quick] [--only passthrough,roundtrip,...]

Each figure is a ratio against a baseline measured in the same run on the same
machine (the same mcp 1.x legacy server driven directly by a legacy client), so
the figures compare across machines while the absolute numbers do not. The
gateways run with the shipped default logging, their stderr written to a file, as a
container runtime's log driver takes it.

Sections (each starts its own processes and stops them):
  passthrough  `tools/call echo` at 32 clients and at 1; CPU per call (/proc); beside
               it the floor: a bare proxy (bench/floor_proxy.py) on the same stack
  roundtrip    `greet` (call -> input_required -> retry -> complete), 1 and 16 clients
  parking      a burst of calls that all park, a session per call and then sessions
               shared (`pool.calls_per_session`); memory per parked call
  fleet        a resume on the owning replica against one forwarded by another
  stdio        the same server behind the gateway over stdio, against HTTP direct
  legacy       a 2025 client's `tools/call echo` on its session through the legacy lane,
               against the same server direct, the server answering in JSON and in SSE:
               32 clients and 1
  catalog      `tools/list` from the catalog against the same asked of the server
  callers      what a session per caller costs (`bench/callers.py`): `echo` and `greet` at 1
               and 32 callers isolated against shared (`pool.isolation: none`), and a cold
               burst of 32 new callers on a stdio upstream against its warm throughput
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bridge_bench import (  # noqa: E402
    ACCEPT,
    LegacyClient,
    OnSession,
    greet_round_trip,
    measure,
    modern_echo,
    modern_request,
    read_reply,
    summary,
)
from bench.lifetime import run  # noqa: E402
from gateway.protocol.state import generate_key  # noqa: E402
from tests.peers.tooling import (  # noqa: E402
    LegacyServer,
    RedisServer,
    free_port,
    legacy_stdio_command,
    wait_for_port,
)

Op = Callable[[int], Awaitable[None]]
MakeOp = Callable[[aiohttp.ClientSession], Awaitable[Op]]
TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Goal:
    name: str
    value: float
    target: float
    higher_is_better: bool
    unit: str = "x"

    @property
    def met(self) -> bool:
        return self.value >= self.target if self.higher_is_better else self.value <= self.target

    def line(self) -> str:
        sign = ">=" if self.higher_is_better else "<="
        mark = "met" if self.met else "SHORT"
        return f"  {self.name:<58} {self.value:8.2f}{self.unit:<3} goal {sign} {self.target:g}{self.unit}  {mark}"


GOALS: list[Goal] = []


def goal(name: str, value: float, target: float, higher: bool, unit: str = "x") -> None:
    GOALS.append(Goal(name, value, target, higher, unit))


def cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of a process's children and their descendants (the upstream servers a
    gateway started over stdio)."""
    total, todo = 0.0, [pid]
    while todo:
        parent = todo.pop()
        for child in Path(f"/proc/{parent}/task/{parent}/children").read_text().split():
            with contextlib.suppress(OSError):
                total += cpu_s(int(child))
                todo.append(int(child))
    return total


async def settled(pid: int, *, quiet: float = 0.05, within_s: float = 120.0) -> None:
    """Until the processes a gateway started have finished starting: their CPU use over a
    half second stays under `quiet` of a core (a stdio server imports for seconds)."""
    deadline = time.monotonic() + within_s
    before = tree_cpu_s(pid)
    while time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        now = tree_cpu_s(pid)
        if now - before < quiet * 0.5:
            return
        before = now
    raise RuntimeError(f"the gateway's children were still busy after {within_s:g} s")


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


class Gateway:
    """`mrtr-gateway serve` with the shipped defaults but for `config`; its stderr goes to
    a file, as a container runtime's log driver takes it (no reader in this busy process
    that could lag and block the gateway's writes)."""

    def __init__(
        self,
        config: dict[str, Any],
        folder: Path,
        name: str,
        env: dict[str, str] | None = None,
        launcher: list[str] | None = None,
    ) -> None:
        """`launcher` runs the gateway's command line (`python -m gateway` unless given)."""
        import subprocess

        self.port = free_port()
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        args = [*(launcher or [sys.executable, "-m", "gateway"]), "serve", "--config", str(path)]
        args += ["--port", str(self.port)]
        clean = {k: v for k, v in os.environ.items() if not k.startswith("MRTR_GATEWAY_")}
        self.log_path = folder / f"{name}.log"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                args, stdout=subprocess.DEVNULL, stderr=log, env={**clean, **(env or {})}
            )
        wait_for_port(self.port, self.proc)
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def log_bytes_per_request(self) -> float:
        """The mean size of its `request_served` lines (a request is one line at `info`)."""
        lines = [
            line for line in self.log_path.read_bytes().splitlines() if b"request_served" in line
        ]
        return sum(len(line) + 1 for line in lines) / max(len(lines), 1)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except Exception:
            self.proc.kill()
            self.proc.wait(10)


def tree_pythons(
    parser: argparse.ArgumentParser, trees: list[Path], pythons: list[str] | None
) -> list[tuple[Path, str, str]]:
    """Each `--tree` (resolved) with its `--python` (this interpreter where none is given)
    and the name to print it by; a count that does not pair, or an interpreter that is not
    there, is the command line's error."""
    pythons = pythons or [sys.executable] * len(trees)
    if len(pythons) != len(trees):
        parser.error(f"{len(pythons)} --python for {len(trees)} --tree: give one for each")
    for python in pythons:
        if not os.access(python, os.X_OK):
            parser.error(f"--python {python}: not an executable file")
    resolved = [tree.resolve() for tree in trees]
    return [
        (tree, py, str(tree) if py == sys.executable else f"{tree} on {py}")
        for tree, py in zip(resolved, pythons, strict=True)
    ]


def upstream(name: str, url: str, **extra: Any) -> dict[str, Any]:
    return {"upstreams": [{"name": name, "url": url, **extra}]}


def echo_to(url: str) -> MakeOp:
    async def make(http: aiohttp.ClientSession) -> Op:
        return lambda rid: modern_echo(http, url, rid)

    return make


def greet_at(url: str) -> MakeOp:
    async def make(http: aiohttp.ClientSession) -> Op:
        return lambda rid: greet_round_trip(http, url, rid)

    return make


async def modern_list(http: aiohttp.ClientSession, url: str, rid: int) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "tools/list",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        },
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": ACCEPT,
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/list",
    }
    async with http.post(url, json=body, headers=headers) as resp:
        reply = await read_reply(resp)
    assert reply.get("result", {}).get("tools"), reply


def list_at(url: str) -> MakeOp:
    async def make(http: aiohttp.ClientSession) -> Op:
        return lambda rid: modern_list(http, url, rid)

    return make


def direct_echo(url: str) -> MakeOp:
    async def make(http: aiohttp.ClientSession) -> Op:
        client = LegacyClient(http, url)
        await client.open()
        return OnSession(client, client.echo)

    return make


def legacy_echo(url: str) -> MakeOp:
    """`tools/call echo` by a 2025 client on an initialized session of its own at `url`:
    the legacy server itself, or the gateway's legacy lane in front of it."""

    async def make(http: aiohttp.ClientSession) -> Op:
        client = LegacyClient(http, url)
        await client.open()
        return OnSession(client, client.echo)

    return make


def direct_greet(url: str) -> MakeOp:
    async def make(http: aiohttp.ClientSession) -> Op:
        client = LegacyClient(http, url)
        client.headers["Accept"] = ACCEPT
        await client.open_with_elicitation()
        return OnSession(client, client.greet)

    return make


#: The operations the tools that drive one gateway offer (`--op` of bench/instructions.py
#: and bench/profile.py): what drives the gateway at its url, and whether the legacy
#: server answers POSTs in JSON (else in SSE, mcp 1.x's default).
OPS: dict[str, tuple[Callable[[str], MakeOp], bool]] = {
    "echo": (echo_to, False),
    "greet": (greet_at, False),
    "legacy-echo": (legacy_echo, False),
    "legacy-echo-json": (legacy_echo, True),
    "list": (list_at, False),  # `tools/list` from the catalog
    "list-passthrough": (list_at, False),  # the same asked of the server (catalog.ttl_s 0)
}
#: What an op's gateway is configured with beyond the defaults.
OP_UPSTREAM: dict[str, dict[str, Any]] = {"list-passthrough": {"catalog": {"ttl_s": 0}}}


@dataclass(frozen=True)
class Variant:
    label: str
    make: MakeOp
    pids: tuple[int, ...] = ()  # processes whose CPU its batches are charged


#: Batches each variant of a comparison is measured in (see `interleaved`).
BATCHES = 4


async def interleaved(
    variants: list[Variant], workers: int, per: int, batches: int = BATCHES
) -> list[dict[str, Any]]:
    """Every variant measured in `batches` batches, the order turned each time (A B C,
    B C A, C A B, ...): a shared machine that speeds up or slows down during the run weighs
    on every variant alike, where measuring one after the other would favour whichever ran
    in the quieter minute. Each result's `cpu_s` lists the CPU seconds of its `pids`, and
    its `batches` the throughput and p50 of each batch (`spread` compares two variants)."""
    latencies: dict[str, list[float]] = {v.label: [] for v in variants}
    elapsed = dict.fromkeys(latencies, 0.0)
    cpu = {v.label: [0.0] * len(v.pids) for v in variants}
    each: dict[str, list[tuple[float, float]]] = {v.label: [] for v in variants}
    for batch in range(batches):
        turn = batch % len(variants)
        for v in variants[turn:] + variants[:turn]:
            result = await measure(
                v.label,
                workers,
                max(per // batches, 1),
                v.make,
                quiet=True,
                cpu_of=lambda v=v: [cpu_s(pid) for pid in v.pids],  # type: ignore[misc]
            )
            for i, used in enumerate(result["cpu_s"]):
                cpu[v.label][i] += used
            latencies[v.label] += result["latencies"]
            elapsed[v.label] += result["elapsed"]
            each[v.label].append((result["per_s"], result["p50_ms"]))
    return [
        {
            **summary(v.label, latencies[v.label], elapsed[v.label]),
            "cpu_s": cpu[v.label],
            "batches": each[v.label],
        }
        for v in variants
    ]


def spread(through: dict[str, Any], direct: dict[str, Any]) -> str:
    """The lowest and highest of the batch-by-batch figures of `through` against `direct`
    (`interleaved`'s batches, measured side by side): throughput ratio and p50 difference."""
    pairs = list(zip(through["batches"], direct["batches"], strict=True))
    ratios = [t[0] / d[0] for t, d in pairs]
    added = [t[1] - d[1] for t, d in pairs]
    return (
        f"batch by batch {min(ratios):.2f}x to {max(ratios):.2f}x throughput, "
        f"{min(added):+.2f} to {max(added):+.2f} ms p50"
    )


class FloorProxy:
    """`bench/floor_proxy.py`: the least any proxy on this HTTP stack costs (no gateway work)."""

    def __init__(self, upstream_url: str) -> None:
        import subprocess

        self.port = free_port()
        script = str(ROOT / "bench" / "floor_proxy.py")
        self.proc = subprocess.Popen([sys.executable, script, upstream_url, str(self.port)])
        wait_for_port(self.port, self.proc)
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


async def passthrough(args: argparse.Namespace, folder: Path) -> None:
    print("passthrough: tools/call echo")
    legacy = LegacyServer()
    gw = Gateway(upstream("legacy", legacy.url, pool={"min_idle": 4}), folder, "pass")
    floor = FloorProxy(legacy.url)
    n, seq = (40, 200) if args.quick else (160, 600)
    server = legacy.proc.pid
    try:
        direct, through, least = await interleaved(
            [
                Variant("direct, 32 clients", direct_echo(legacy.url), (server,)),
                Variant("gateway, 32 clients", echo_to(gw.url), (gw.pid, server)),
                Variant("floor proxy, 32 clients", echo_to(floor.url), (floor.proc.pid, server)),
            ],
            32,
            n,
        )
        direct1, through1, least1 = await interleaved(
            [
                Variant("direct, 1 client", direct_echo(legacy.url), (server,)),
                Variant("gateway, 1 client", echo_to(gw.url), (gw.pid, server)),
                Variant("floor proxy, 1 client", echo_to(floor.url), (floor.proc.pid, server)),
            ],
            1,
            seq,
        )
    finally:
        floor.stop()
        gw.stop()
        legacy.stop()
    gw_per = through["cpu_s"][0] / through["ops"] * 1000
    legacy_per = direct["cpu_s"][0] / direct["ops"] * 1000
    legacy_gw_per = through["cpu_s"][1] / through["ops"] * 1000
    floor_per = least["cpu_s"][0] / least["ops"] * 1000
    legacy_floor_per = least["cpu_s"][1] / least["ops"] * 1000
    gw1_per = through1["cpu_s"][0] / through1["ops"] * 1000
    floor1_per = least1["cpu_s"][0] / least1["ops"] * 1000
    legacy1_per = direct1["cpu_s"][0] / direct1["ops"] * 1000
    print(
        f"  CPU per call: gateway {gw_per:.3f} ms, legacy server {legacy_per:.3f} ms direct "
        f"({legacy_gw_per:.3f} ms behind the gateway, {legacy_floor_per:.3f} ms behind the "
        f"floor); gateway logs {gw.log_bytes_per_request():.0f} B/call\n"
        f"  the floor (a bare proxy on the same stack): {floor_per:.3f} ms CPU per call "
        f"({floor_per / legacy_per:.2f}x the server's), sequential p50 "
        f"+{least1['p50_ms'] - direct1['p50_ms']:.2f} ms, throughput {least['per_s'] / direct['per_s']:.2f}x direct; "
        f"the gateway's own work on top: {gw_per - floor_per:.3f} ms CPU, "
        f"+{through1['p50_ms'] - least1['p50_ms']:.2f} ms p50\n"
        f"  at 1 client, where every process waits between calls and its code runs cold: "
        f"gateway {gw1_per:.3f} ms CPU per call, floor {floor1_per:.3f}, legacy server "
        f"{legacy1_per:.3f} direct ({gw1_per / gw_per:.2f}x, {floor1_per / floor_per:.2f}x "
        f"and {legacy1_per / legacy_per:.2f}x their CPU per call at 32 clients)"
    )
    goal(
        "pass-through throughput, 32 clients (gateway/direct)",
        through["per_s"] / direct["per_s"],
        0.95,
        True,
    )
    goal(
        "pass-through sequential p50 (gateway - direct)",
        through1["p50_ms"] - direct1["p50_ms"],
        0.4,
        False,
        "ms",
    )
    goal("gateway CPU per pass-through call (/ legacy server's)", gw_per / legacy_per, 0.25, False)


async def roundtrip(args: argparse.Namespace, folder: Path) -> None:
    print("roundtrip: greet (call -> input_required -> retry -> complete)")
    legacy = LegacyServer()
    gw = Gateway(upstream("legacy", legacy.url, pool={"min_idle": 4}), folder, "round")
    n1, n16 = (100, 20) if args.quick else (320, 64)
    try:
        direct1, through1 = await interleaved(
            [
                Variant("direct legacy client, 1 client", direct_greet(legacy.url)),
                Variant("gateway, 1 client", greet_at(gw.url)),
            ],
            1,
            n1,
        )
        direct16, through16 = await interleaved(
            [
                Variant("direct legacy client, 16 clients", direct_greet(legacy.url)),
                Variant("gateway, 16 clients", greet_at(gw.url)),
            ],
            16,
            n16,
        )
    finally:
        gw.stop()
        legacy.stop()
    goal(
        "round trip p50, 1 client (gateway/direct)",
        through1["p50_ms"] / direct1["p50_ms"],
        1.5,
        False,
    )
    goal(
        "round-trip throughput, 16 clients (gateway/direct)",
        through16["per_s"] / direct16["per_s"],
        0.9,
        True,
    )


async def burst(
    count: int, concurrency: int, op: Callable[[aiohttp.ClientSession, int], Awaitable[None]]
) -> float:
    """Calls per second of `count` operations, `concurrency` at a time."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        queue = iter(range(count))

        async def worker() -> None:
            for i in queue:
                await op(http, i)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return count / (time.perf_counter() - started)


#: Calls per legacy session in the parking section's second burst (`pool.calls_per_session`).
SHARED_CALLS = 8


async def parking(args: argparse.Namespace, folder: Path) -> None:
    count = 400 if args.quick else 2000
    concurrency = 32
    print(f"parking: a burst of {count} calls that all park, {concurrency} at a time")
    for share in (1, SHARED_CALLS):
        rate, per_call_kb = await park_burst(count, concurrency, share, folder)
        how = "a session per call" if share == 1 else f"calls_per_session {share}"
        goal(f"parking burst of {count}, {how} (gateway / session opens)", rate, 0.8, True)
        goal(f"gateway memory per parked call, {how}", per_call_kb, 40, False, "KB")


async def park_burst(count: int, concurrency: int, share: int, folder: Path) -> tuple[float, float]:
    """One burst on a fresh legacy server, against the rate it opens sessions at alone:
    the ratio, and the gateway's memory per parked call (KB)."""
    print(f"  with pool.calls_per_session {share}:")
    legacy = LegacyServer()
    limits = {"max_parked_calls": 4 * count, "max_parked_per_principal": 4 * count}
    pool = {"max_sessions": 4 * count, "calls_per_session": share}
    gw = Gateway(
        {**upstream("legacy", legacy.url, pool=pool), "limits": limits}, folder, f"park-{share}"
    )
    try:

        async def open_session(http: aiohttp.ClientSession, _i: int) -> None:
            await LegacyClient(http, legacy.url).open({"elicitation": {"form": {}}})

        async def park(http: aiohttp.ClientSession, i: int) -> None:
            body, headers = modern_request(i, "greet", {})
            async with http.post(gw.url, json=body, headers=headers) as resp:
                result = (await read_reply(resp))["result"]
            assert result["resultType"] == "input_required", result

        warm = 50
        await burst(warm, 8, park)  # the gateway's first calls: imports, caches
        base_rss = rss_kb(gw.pid)
        server, gateway = legacy.proc.pid, gw.pid
        before = time.perf_counter(), cpu_s(server), cpu_s(gateway)
        gw_rate = await burst(count, concurrency, park)
        after = time.perf_counter(), cpu_s(server), cpu_s(gateway)
        per_call_kb = (rss_kb(gw.pid) - base_rss) / count
        direct_rate = await burst(count, concurrency, open_session)
        done = time.perf_counter(), cpu_s(server)
        wall = after[0] - before[0]
        per_park, per_open = (after[1] - before[1]) / count, (done[1] - after[1]) / count
        print(
            f"    while parking: legacy server busy {100 * (after[1] - before[1]) / wall:.0f}% of "
            f"a core, gateway {100 * (after[2] - before[2]) / wall:.0f}%; while opening sessions "
            f"alone: server {100 * (done[1] - after[1]) / (done[0] - after[0]):.0f}%\n"
            f"    legacy server CPU: {1000 * per_park:.2f} ms per parked call, "
            f"{1000 * per_open:.2f} ms per bare session open: a server-bound burst parks at "
            f"most {per_open / per_park:.2f}x the open rate"
        )
    finally:
        gw.stop()
        legacy.stop()
    print(
        f"    legacy server opens {direct_rate:.0f} sessions/s; the gateway parks "
        f"{gw_rate:.0f} calls/s; {per_call_kb:.1f} KB of gateway memory per parked call"
    )
    return gw_rate / direct_rate, per_call_kb


async def fleet(args: argparse.Namespace, folder: Path) -> None:
    from bench.fleet_bench import measure as resumes

    rounds = 60 if args.quick else 200
    print("fleet: resume on the owner against a resume forwarded by another replica")
    redis_server, legacy = RedisServer(), LegacyServer()
    config = {**upstream("legacy", legacy.url), "store": {"url": redis_server.url}}
    env = {"MRTR_GATEWAY_SEALING_KEYS": generate_key()}
    a = Gateway(config, folder, "fleet-a", {**env, "MRTR_GATEWAY_REPLICA_ID": "a"})
    b = Gateway(config, folder, "fleet-b", {**env, "MRTR_GATEWAY_REPLICA_ID": "b"})
    try:
        # In alternating batches, as `interleaved` does: the difference is the figure.
        same_ms: list[float] = []
        cross_ms: list[float] = []
        batches = 2 * BATCHES  # short batches: the difference of two close figures
        for batch in range(batches):
            pair = [(same_ms, a.url), (cross_ms, b.url)]
            for into, resumer in pair if batch % 2 == 0 else pair[::-1]:
                label = "same" if resumer == a.url else "cross"
                result = await resumes(label, a.url, resumer, rounds // batches, 1, quiet=True)
                into += result["samples"]
        same = {"p50": statistics.median(same_ms)}
        cross = {"p50": statistics.median(cross_ms)}
        print(
            f"  same replica (A -> A)        resume p50 {same['p50']:6.2f} ms (n={len(same_ms)})\n"
            f"  cross replica (A -> B -> A)  resume p50 {cross['p50']:6.2f} ms (n={len(cross_ms)})"
        )
    finally:
        a.stop()
        b.stop()
        legacy.stop()
        redis_server.stop()
    goal("cross-replica resume p50 (cross - same)", cross["p50"] - same["p50"], 1.0, False, "ms")


async def stdio(args: argparse.Namespace, folder: Path) -> None:
    print("stdio: the gateway over stdio against the same server over HTTP, direct")
    legacy = LegacyServer()
    workers = 8
    pool = {"min_idle": workers, "max_sessions": 4 * workers}
    command = legacy_stdio_command(folder)
    gw = Gateway(
        {"upstreams": [{"name": "stdio", "command": command, "pool": pool}]}, folder, "stdio"
    )
    n, rounds = (40, 20) if args.quick else (150, 60)
    try:
        # Steady state, as for the server measured directly: the pool has started the
        # processes this load needs (each takes seconds to import) before it is measured.
        await measure(f"warm-up, {workers} clients", workers, 5, echo_to(gw.url))
        await settled(gw.pid)
        direct, through = await interleaved(
            [
                Variant(f"echo direct HTTP, {workers} clients", direct_echo(legacy.url)),
                Variant(f"echo gateway stdio, {workers} clients", echo_to(gw.url)),
            ],
            workers,
            n,
        )
        direct1, through1 = await interleaved(
            [
                Variant("greet direct HTTP, 1 client", direct_greet(legacy.url)),
                Variant("greet gateway stdio, 1 client", greet_at(gw.url)),
            ],
            1,
            rounds,
        )
    finally:
        gw.stop()
        legacy.stop()
    goal(
        "stdio pass-through throughput (gateway stdio / direct HTTP)",
        through["per_s"] / direct["per_s"],
        0.95,
        True,
    )
    goal(
        "stdio round trip p50, 1 client (gateway stdio / direct HTTP)",
        through1["p50_ms"] / direct1["p50_ms"],
        1.5,
        False,
    )


#: The legacy server's answer forms the legacy section measures: (name, `json_response`).
LEGACY_FORMS = (("JSON", True), ("SSE", False))


async def legacy(args: argparse.Namespace, folder: Path) -> None:
    print("legacy: a 2025 client's tools/call echo on its session, through the legacy lane")
    n, seq = (40, 200) if args.quick else (160, 600)
    for form, json_response in LEGACY_FORMS:
        server = LegacyServer(json_response=json_response)
        gw = Gateway(upstream("legacy", server.url), folder, f"legacy-{form}")
        assert server.proc is not None
        pid = server.proc.pid
        try:
            direct, through = await interleaved(
                [
                    Variant(f"direct, 32 clients, {form}", legacy_echo(server.url), (pid,)),
                    Variant(f"legacy lane, 32 clients, {form}", legacy_echo(gw.url), (gw.pid, pid)),
                ],
                32,
                n,
            )
            direct1, through1 = await interleaved(
                [
                    Variant(f"direct, 1 client, {form}", legacy_echo(server.url)),
                    Variant(f"legacy lane, 1 client, {form}", legacy_echo(gw.url)),
                ],
                1,
                seq,
            )
        finally:
            gw.stop()
            server.stop()
        gw_per = through["cpu_s"][0] / through["ops"] * 1000
        server_per = direct["cpu_s"][0] / direct["ops"] * 1000
        print(
            f"  {form} answers: at 32 clients {spread(through, direct)}; at 1 client "
            f"{spread(through1, direct1)}; p99 at 1 client {through1['p99_ms']:.2f} ms "
            f"through, {direct1['p99_ms']:.2f} direct\n"
            f"  CPU per call: gateway {gw_per:.3f} ms, legacy server {server_per:.3f} ms "
            f"direct ({through['cpu_s'][1] / through['ops'] * 1000:.3f} ms behind the gateway)"
        )
        goal(
            f"legacy pass-through throughput, 32 clients, {form} (gateway/direct)",
            through["per_s"] / direct["per_s"],
            0.9,
            True,
        )
        goal(
            f"legacy pass-through p50, 1 client, {form} (gateway - direct)",
            through1["p50_ms"] - direct1["p50_ms"],
            0.5,
            False,
            "ms",
        )


async def callers(args: argparse.Namespace, folder: Path) -> None:
    from bench import callers as bench

    n, calls, rounds = 32, (100 if args.quick else 300), (30 if args.quick else 100)
    print("callers: a session per caller against sessions shared by every caller")
    legacy = LegacyServer()
    started: list[bench.Gateway] = []

    def gateway(name: str, upstream: dict[str, Any]) -> bench.Gateway:
        started.append(bench.Gateway(folder, name, upstream))
        return started[-1]

    try:
        isolated = gateway("isolated", {"url": legacy.url})
        shared = gateway("shared", {"url": legacy.url, "pool": {"isolation": "none"}})
        ratios = {}
        for label, op, per in (("echo", bench.echo, calls), ("greet", bench.greet, rounds)):
            for count in (1, n):
                a = await bench.timed(isolated.url, op, count, per if count > 1 else per * 4)
                b = await bench.timed(shared.url, op, count, per if count > 1 else per * 4)
                ratios[label, count] = a["per_s"] / b["per_s"]
                print(
                    f"  {label} at {count:>2} callers: isolated {a['per_s']:.0f}/s p50 "
                    f"{a['p50_ms']:.2f} ms, shared {b['per_s']:.0f}/s p50 {b['p50_ms']:.2f} ms"
                )
        for label, count in ratios:
            goal(
                f"{label} throughput at {count} callers, isolated / shared",
                ratios[label, count],
                0.9,
                True,
            )
        cold = gateway("cold", {"command": legacy_stdio_command(folder)})
        seconds = 10.0 if args.quick else 15.0
        burst = await bench.burst(cold, n, seconds)
        warm = await bench.timed(cold.url, bench.echo, n, calls // 3, warm=False, name="new")
        print(
            f"  a cold burst of {n} new callers on stdio: {burst['per_second']} calls per "
            f"second; warm {warm['per_s']:.0f}/s; p99 {burst['p99_ms']:.0f} ms; "
            f"{burst['processes']} processes; {burst['busy']} answered 503"
        )
        best = max(burst["per_second"][:10]) / warm["per_s"]
        goal(
            f"cold burst of {n} stdio callers, best second of the first 10 / warm", best, 0.5, True
        )
    finally:
        for each in started:
            each.stop()
        legacy.stop()


async def catalog(args: argparse.Namespace, folder: Path) -> None:
    n = 100 if args.quick else 400
    print("catalog: tools/list from the catalog against the same asked of the server")
    legacy = LegacyServer()
    cached = Gateway(upstream("legacy", legacy.url), folder, "catalog")
    asked = Gateway(
        upstream("legacy", legacy.url, catalog={"ttl_s": 0}), folder, "catalog-passthrough"
    )
    try:
        served, passed = await interleaved(
            [
                Variant("tools/list from the catalog, 1 client", list_at(cached.url)),
                Variant("tools/list asked of the server, 1 client", list_at(asked.url)),
            ],
            1,
            n,
        )
    finally:
        cached.stop()
        asked.stop()
        legacy.stop()
    goal(
        "tools/list p50, catalog / asked of the server",
        served["p50_ms"] / passed["p50_ms"],
        1.0,
        False,
    )


SECTIONS = {
    "passthrough": passthrough,
    "roundtrip": roundtrip,
    "parking": parking,
    "fleet": fleet,
    "stdio": stdio,
    "legacy": legacy,
    "callers": callers,
    "catalog": catalog,
}


#: Ten million additions at a module's top level, timed: the yardstick of the runs in docs/performance.md.
SPEED_CHECK = (
    "import time\nt = time.perf_counter()\ns = 0\nfor i in range(10_000_000):\n    s += i\n"
    "print(time.perf_counter() - t)"
)


def machine_speed_s() -> float:
    """Seconds a fresh Python takes for `SPEED_CHECK`: how fast the hour is (a shared
    machine's speed changes by the hour, and a slower one moves every ratio against the
    gateway). Printed before and after the sections."""
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", SPEED_CHECK], capture_output=True, text=True, check=True
    )
    return float(done.stdout)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer samples (a smoke run)")
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    args = parser.parse_args()
    print(f"cores={os.cpu_count()}  (clients, gateways and servers share them)")
    before = machine_speed_s()
    with tempfile.TemporaryDirectory(prefix="mrtr-report-") as tmp:
        for name in args.only.split(","):
            await SECTIONS[name](args, Path(tmp))
    print(
        f"machine: ten million additions in a plain loop took {before:.2f} s before the "
        f"sections and {machine_speed_s():.2f} s after (compare runs of similar speed)"
    )
    print("goals:")
    for g in GOALS:
        print(g.line())


if __name__ == "__main__":
    run(main())
