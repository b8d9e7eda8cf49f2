"""The fleet under fire: replicas, Redis, a balancer and legacy servers under load while
faults are injected; every outcome is counted by kind and the guarantees are checked.

    .venv/bin/python scripts/chaos.py            # 40 s, 24 clients, every fault
    .venv/bin/python scripts/chaos.py --short    # the CI form: 15 s, 8 clients
    .venv/bin/python scripts/chaos.py --scenario rollout   # a rolling upgrade and back

`--scenario rollout` runs tests/rollout/scenario.py's long form instead of the faults: a
fleet of the previous release (tests/rollout/PREVIOUS_RELEASE, built into a venv of its
own) rolled to this release replica by replica under load and rolled back (`--short`: the
suite's form; `--settle 0`: this release's `fleet.format_settle_s`, which lets the fleet
move on to this release's formats before the rollback, to see what that costs;
`--moved-on`: the fleet moves on, and the rollback is made as docs/operations.md says:
pinned to the previous formats first, then a suspension's lifetime later).

Three `mrtr-gateway serve` replicas share a real redis-server (persisting nothing, so
a restart loses every key) and sit behind a round-robin balancer that, like a
Service, skips a replica that refuses connections. Their replica ids are fixed
(`gw-0`...), as the Helm chart sets them from the pod name, so a restarted
replica comes back under the same name. Two mcp 1.x servers: `plain` (no event
store: a dead owner's call can only be replayed, and `register` is replay-safe) and
`resumable` (an event store: a dead owner's call is taken over).

Clients call `greet` (one round) and `register` (two rounds) on both and answer
every question; a request that fails on the way (its replica died under it) is
sent again once, as a client would. Faults: `kill -9` of a replica and a restart,
SIGTERM (drain) and a restart, a Redis restart with its data lost.

Checks, printed at the end (exit status 1 if any fails):
- no dirty failure (a 5xx without a JSON-RPC error, a wrong answer, a traceback), and
  no unhandled error in a gateway's log;
- no duplicated tool body where none may run twice (takeover never re-runs a body;
  a replay re-runs only a replay-safe one), and no completion whose body never ran;
- no call lost where the upstream allows takeover or the tool is replay-safe;
- no call failed by the Redis restart; no call still parked once the clients are done;
- the audit trail, every sink's events joined (each replica's log stream and file, and
  the fleet's Redis stream, which a Redis restart empties): no event id twice in a sink,
  a call that ended started and ended once, each round asked once and answered at most
  once; and every call a client completed is there under one call id (found by the
  `X-Request-Id` its first request carried), started once and ended `complete`, however
  many replicas, takeovers and replays it went through.
With `--store sentinel|cluster` (a failover), calls may fail with a documented error
(their numbers are printed); none may run twice, none may fail dirty.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import random
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp.test_utils import TestServer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gateway.aio import spawn  # noqa: E402
from gateway.config.audit import stream_key  # noqa: E402
from gateway.protocol.state import generate_key  # noqa: E402
from gateway.store.redis_client import connect  # noqa: E402
from tests.peers.balancer import RoundRobin  # noqa: E402
from tests.peers.redis_topologies import ClusterSet, SentinelSet  # noqa: E402
from tests.peers.tooling import GatewayProcess, LegacyServer, RedisServer  # noqa: E402
from tests.support import trail  # noqa: E402
from tests.support.legacy import LegacyClient  # noqa: E402
from tests.support.wire import default_headers, parse_sse_messages, rpc  # noqa: E402

ANSWERS = {
    "elicit.username": {"action": "accept", "content": {"username": "alice"}},
    "elicit.age+color": {"action": "accept", "content": {"age": 30, "color": "green"}},
}
EXPECTED = {
    "greet": "Hello, alice!",
    "register": "Registered alice (age 30) with favourite color green",
}
# (path, tool, whether a dead owner's call can go on: takeover or a replay-safe replay)
TARGETS = [
    ("/plain", "greet", False),
    ("/plain", "register", True),
    ("/resumable", "greet", True),
    ("/resumable", "register", True),
]


@dataclass
class Tally:
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    dirty: list[str] = field(default_factory=list)
    lost_where_recoverable: list[str] = field(default_factory=list)
    failed_in_redis_restart: list[str] = field(default_factory=list)
    completed: list[tuple[str, str, str]] = field(default_factory=list)  # path, tool, run id
    redis_down: tuple[float, float] | None = None
    started: float = field(default_factory=time.monotonic)
    when: collections.defaultdict[str, list[float]] = field(
        default_factory=lambda: collections.defaultdict(list)
    )


class Fleet:
    def __init__(self, folder: Path, store: str) -> None:
        self.replicas: list[GatewayProcess] = []
        self.redis: RedisServer | None = None
        self.topology: SentinelSet | ClusterSet | None = None
        self.plain = self.resumable = None
        self.lb: TestServer | None = None
        try:
            self._start(folder, store)
        except BaseException:
            self._stop_processes()  # whatever started is ended, even when a start fails
            raise

    def _start(self, folder: Path, store: str) -> None:
        self.store = store
        self.topology: SentinelSet | ClusterSet | None = None
        if store == "sentinel":
            self.topology = SentinelSet()
        elif store == "cluster":
            self.topology = ClusterSet()
        self.redis = RedisServer() if self.topology is None else None
        store_url = self.redis.url if self.redis is not None else self.topology.url
        self.plain = LegacyServer()
        self.resumable = LegacyServer(event_store=True)
        config = {
            # On Sentinel and Cluster, a record is on a replica before its client hears
            # of it, so a failover keeps it (standalone has none: WAIT is skipped).
            "store": {"url": store_url, "replicas_acked": 0 if store == "standalone" else 1},
            "fleet": {"heartbeat_s": 0.3, "drain_timeout_s": 10},
            "limits": {"max_parked_per_principal": 1000},
            "upstreams": [
                {
                    "name": "plain",
                    "url": self.plain.url,
                    "path": "/plain",
                    "tools": {"register": {"replay_safe": True}},
                },
                {"name": "resumable", "url": self.resumable.url, "path": "/resumable"},
            ],
        }
        self.store_url = store_url
        self.audit_files: list[Path] = []
        env = {"MRTR_GATEWAY_SEALING_KEYS": generate_key()}
        for i in range(3):
            # Each replica's trail: its log stream, a file of its own, the fleet's stream.
            audit_file = folder / f"audit-gw-{i}.jsonl"
            self.audit_files.append(audit_file)
            config["audit"] = {"log": True, "file": {"path": str(audit_file)}, "stream": {}}
            path = folder / f"gw-{i}.yaml"
            path.write_text(yaml.safe_dump(config))
            self.replicas.append(GatewayProcess(path, env, f"gw-{i}"))
        self.balancer = RoundRobin([r.base for r in self.replicas], skip_refused=True)

    async def start(self) -> str:
        self.lb = TestServer(self.balancer.app(), host="127.0.0.1")
        await self.lb.start_server()
        return str(self.lb.make_url(""))

    async def stop(self) -> None:
        if self.lb is not None:
            await self.lb.close()
        await asyncio.to_thread(self._stop_processes)

    def _stop_processes(self) -> None:
        for replica in self.replicas:
            replica.stop()
        for process in (self.plain, self.resumable, self.redis, self.topology):
            if process is not None:
                process.stop()


async def restart(replica: GatewayProcess) -> None:
    await asyncio.to_thread(replica.start)
    await asyncio.to_thread(replica.wait_for_line, GatewayProcess.READY, 30)


async def faults(fleet: Fleet, tally: Tally, short: bool, log: list[str]) -> None:
    """The fault schedule; each step logged with its time."""
    started = time.monotonic()

    def note(text: str) -> None:
        log.append(f"{time.monotonic() - started:5.1f}s  {text}")

    async def at(seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds - (time.monotonic() - started)))

    victim = fleet.replicas[1]
    await at(3 if short else 5)
    note(f"kill -9 {victim.replica_id}")
    victim.kill9()
    await asyncio.sleep(1.0)
    await restart(victim)
    note(f"{victim.replica_id} restarted (same replica id)")
    if not short:
        drained = fleet.replicas[2]
        await at(12)
        note(f"SIGTERM {drained.replica_id} (drain)")
        drained.send_signal(signal.SIGTERM)
        await asyncio.to_thread(drained.wait, 30)
        await restart(drained)
        note(f"{drained.replica_id} restarted")
    await at(8 if short else 20)
    down = time.monotonic()
    tally.redis_down = (down, float("inf"))
    if isinstance(fleet.topology, SentinelSet):
        note("Redis primary killed: Sentinel fails over to the replica")
        fleet.topology.kill_primary()
    elif isinstance(fleet.topology, ClusterSet):
        port = fleet.topology.kill_a_primary()
        note(f"Redis Cluster primary :{port} killed: its replica takes its slots over")
    else:
        assert fleet.redis is not None
        note("redis-server restarted, its data lost")
        fleet.redis.kill()
        await asyncio.sleep(0.5)
        await asyncio.to_thread(fleet.redis.start)
        note("redis-server back")
    tally.redis_down = (down, time.monotonic())
    if not short:
        victim = fleet.replicas[0]
        await at(28)
        note(f"kill -9 {victim.replica_id}")
        victim.kill9()
        await asyncio.sleep(1.0)
        await restart(victim)
        note(f"{victim.replica_id} restarted")


async def post(
    http: aiohttp.ClientSession, url: str, body: dict[str, Any], request_id: str
) -> tuple[int, Any]:
    headers = {**default_headers(body), "X-Request-Id": request_id}
    async with http.post(url, json=body, headers=headers) as resp:
        raw = await resp.read()
        if resp.headers.get("Content-Type", "").startswith("text/event-stream"):
            messages = parse_sse_messages(raw)
            return resp.status, messages[-1] if messages else None
        try:
            return resp.status, json.loads(raw)
        except ValueError:
            return resp.status, raw[:200].decode(errors="replace")


async def one_call(
    http: aiohttp.ClientSession, base: str, target: tuple[str, str, bool], tally: Tally
) -> None:
    path, tool, recoverable = target
    run_id = uuid.uuid4().hex
    params: dict[str, Any] = {"name": tool, "arguments": {"run_id": run_id}}
    rid = 0
    while True:
        rid += 1
        sent = time.monotonic()
        for attempt in range(1, 6):
            try:
                body = rpc("tools/call", params, rid=rid)
                status, reply = await post(http, base + path, body, f"{run_id}-{rid}-{attempt}")
                if status in (502, 503) and not isinstance(reply, dict):  # the balancer's
                    raise aiohttp.ClientError(str(reply))
                if status == 503 and attempt < 5:  # draining, busy: as it says, send it again
                    await asyncio.sleep(0.3 * attempt)  # backing off, as a client should
                    if "requestState" not in params:  # a first request starts a new run
                        run_id = uuid.uuid4().hex
                        params = {"name": tool, "arguments": {"run_id": run_id}}
                    continue
                break
            except (TimeoutError, aiohttp.ClientError) as exc:
                # The request died with its replica: sent again once. A first request may
                # have started its tool there: the new one is another run (a new run id).
                if attempt >= 2:
                    tally.outcomes[f"connection failed twice ({type(exc).__name__})"] += 1
                    return
                if "requestState" not in params:
                    run_id = uuid.uuid4().hex
                    params = {"name": tool, "arguments": {"run_id": run_id}}
        if not isinstance(reply, dict):
            tally.outcomes["dirty"] += 1
            tally.dirty.append(f"{path} {tool}: HTTP {status} {reply!r}")
            return
        if "error" in reply:
            error = reply["error"]
            kind = f"error {error.get('code')} ({status}): {error.get('message', '')[:70]}"
            tally.outcomes[kind] += 1
            tally.when[kind].append(round(sent - tally.started, 1))
            # A call that had started (a requestState was issued) and cannot go on is lost,
            # whatever the words: "lost", or its state no longer resumes anything.
            if recoverable and "requestState" in params:
                tally.lost_where_recoverable.append(f"{path} {tool}: {kind}")
            down = tally.redis_down
            if down is not None and down[0] - 1 <= sent <= down[1] + 2:
                tally.failed_in_redis_restart.append(f"{path} {tool}: {kind}")
            return
        result = reply["result"]
        if result.get("resultType") == "input_required":
            answers = {key: ANSWERS[key] for key in result["inputRequests"]}
            params = {**params, "requestState": result["requestState"], "inputResponses": answers}
            continue
        text = result.get("content", [{}])[0].get("text")
        if text != EXPECTED[tool]:
            tally.outcomes["dirty"] += 1
            tally.dirty.append(f"{path} {tool}: wrong answer {text!r}")
            return
        tally.outcomes[f"complete ({path} {tool})"] += 1
        tally.completed.append((path, tool, run_id))
        return


async def client(base: str, until: float, tally: Tally, seed: int) -> None:
    rng = random.Random(seed)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        while time.monotonic() < until:
            await one_call(http, base, rng.choice(TARGETS), tally)


async def body_runs(client: LegacyClient, tool: str, run_id: str) -> int:
    """How many times the body ran for `run_id`, asked of the legacy server directly."""
    result = await client.call_tool("runs", {"tool": tool, "run_id": run_id})
    return int(result["content"][0]["text"])


async def trail_sinks(fleet: Fleet) -> dict[str, list[trail.Event]]:
    """Every sink's events: each replica's log stream and file, and the fleet's stream."""
    sinks: dict[str, list[trail.Event]] = {}
    for replica, path in zip(fleet.replicas, fleet.audit_files, strict=True):
        sinks[f"{replica.replica_id} log"] = trail.from_log(replica.logs().splitlines())
        lines = path.read_bytes().splitlines() if path.exists() else []
        sinks[f"{replica.replica_id} file"] = trail.from_lines(lines)
    client = connect(fleet.store_url)
    try:
        entries = await client.xrange(stream_key("mrtr:", "audit"), "-", "+")
    except Exception as exc:  # noqa: BLE001 - a failover may still be under way: said
        print(f"the audit stream could not be read: {exc}")
        entries = []
    finally:
        await client.aclose()
    sinks["stream"] = trail.from_stream(entries)
    return sinks


def trail_checks(
    sinks: dict[str, list[trail.Event]], completed: list[tuple[str, str, str]]
) -> tuple[list[str], list[str]]:
    """What the trail broke, and the calls clients completed that it does not hold whole."""
    broken = trail.problems(sinks)
    started: dict[str, list[str]] = collections.defaultdict(list)
    for events in sinks.values():
        for event in events:
            if event["kind"] == "call.started":
                run_id = str(event.get("request_id", "")).split("-", 1)[0]
                if event["call_id"] not in started[run_id]:
                    started[run_id].append(event["call_id"])
    ended = trail.completed(sinks)
    missing = []
    for path, tool, run_id in completed:
        calls = started.get(run_id, [])
        if len(calls) != 1 or calls[0] not in ended:
            found = {c: c in ended for c in calls}
            missing.append(f"{path} {tool} {run_id}: started as {found} (ended complete?)")
    return broken, missing


async def parked_now(
    http: aiohttp.ClientSession, replicas: list[GatewayProcess]
) -> dict[str, float]:
    counts = {}
    for replica in replicas:
        async with http.get(replica.base + "/metrics") as resp:
            for line in (await resp.text()).splitlines():
                if line.startswith(("mrtr_parked_calls ", "mrtr_live_calls ")):
                    name, value = line.split()
                    counts[f"{replica.replica_id} {name}"] = float(value)
    return counts


def crash_summary(line: str) -> str:
    """A crash's event and the end of its traceback (where it failed), from its log line."""
    try:
        entry = json.loads(line)
    except ValueError:
        return line.strip()[:400]
    trace = str(entry.get("exception", "")).strip().splitlines()
    where = " | ".join(part.strip() for part in trace[-6:])
    return f"{entry.get('event')} {entry.get('path', entry.get('task', ''))}: {where}"[:1500]


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--short", action="store_true", help="the CI form")
    parser.add_argument("--clients", type=int)
    parser.add_argument("--seconds", type=float)
    parser.add_argument(
        "--store",
        choices=("standalone", "sentinel", "cluster"),
        default="standalone",
        help="standalone: Redis restarted empty; sentinel: primary killed, failover; "
        "cluster: a primary killed, its replica takes over",
    )
    parser.add_argument("--keep-logs", type=Path, help="copy every replica's log here")
    parser.add_argument("--scenario", choices=("faults", "rollout"), default="faults")
    parser.add_argument("--settle", type=float, help="rollout: fleet.format_settle_s")
    parser.add_argument(
        "--moved-on",
        action="store_true",
        help="rollout: the fleet moves on to this release's formats, and the rollback "
        "follows docs/operations.md (pin, wait, roll back)",
    )
    args = parser.parse_args()
    if args.scenario == "rollout":
        return await rollout(args)
    clients = args.clients or (8 if args.short else 24)
    seconds = args.seconds or (15.0 if args.short else 40.0)
    tally, log = Tally(), []
    with tempfile.TemporaryDirectory(prefix="mrtr-chaos-") as tmp:
        fleet = Fleet(Path(tmp), args.store)
        try:
            base = await fleet.start()
            until = time.monotonic() + seconds
            chaos = spawn(faults(fleet, tally, args.short, log), name="faults")
            await asyncio.gather(*(client(base, until, tally, seed) for seed in range(clients)))
            await chaos
            async with aiohttp.ClientSession() as http:
                duplicated, never_ran = [], []
                servers = {"/plain": LegacyClient(http, fleet.plain.url)}
                servers["/resumable"] = LegacyClient(http, fleet.resumable.url)
                for each in servers.values():
                    await each.open()
                for path, tool, run_id in tally.completed:
                    runs = await body_runs(servers[path], tool, run_id)
                    replay_safe = path == "/plain" and tool == "register"
                    if runs == 0:
                        never_ran.append(f"{path} {tool} {run_id}")
                    elif runs > 1 and not replay_safe:
                        duplicated.append(f"{path} {tool} {run_id} ran {runs} times")
                # Every client is done: nothing may stay parked (bounded wait for endings).
                deadline = time.monotonic() + 10
                while True:
                    left = {k: v for k, v in (await parked_now(http, fleet.replicas)).items() if v}
                    if not left or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.5)
            sinks = await trail_sinks(fleet)
            trail_broken, not_in_trail = trail_checks(sinks, tally.completed)
        finally:
            if args.keep_logs:
                args.keep_logs.mkdir(parents=True, exist_ok=True)
                for replica in fleet.replicas:
                    (args.keep_logs / f"{replica.replica_id}.log").write_text(replica.logs())
            await fleet.stop()
    print(f"store: {args.store}; faults:")
    for line in log:
        print("  " + line)
    print(f"outcomes ({sum(tally.outcomes.values())} calls, {clients} clients, {seconds:g} s):")
    for kind, count in sorted(tally.outcomes.items(), key=lambda kv: -kv[1]):
        at = tally.when.get(kind)
        print(f"  {count:6d}  {kind}" + (f"  at {sorted(at)[:8]} s" if at else ""))
    counts = {name: len(events) for name, events in sinks.items()}
    print(f"audit events by sink: {counts}")
    print(
        f"facts recorded by two replicas around a crash (one id, kept once): "
        f"{trail.around_a_crash(sinks)}"
    )
    logged = "".join(replica.logs() for replica in fleet.replicas)
    moved = {e: logged.count(f'"event":"{e}"') for e in ("call_taken_over", "call_replayed")}
    print(f"calls that went on elsewhere (their events under their own call id): {moved}")
    for problem in trail_broken[:3]:  # what the trail holds of a call it broke a promise for
        call_id = problem.split()[1].rstrip(":")
        held = {
            e["id"]: e for events in sinks.values() for e in events if e.get("call_id") == call_id
        }
        print(f"  {problem}:")
        for event in sorted(held.values(), key=lambda e: e["time"]):
            fields = ("time", "replica", "kind", "round", "outcome", "request_id", "error")
            print("    " + " ".join(str(event.get(f, "")) for f in fields))
    crashes = [
        f"{replica.replica_id}: {crash_summary(line)}"
        for replica in fleet.replicas
        for line in replica.logs().splitlines()
        if "unhandled_error" in line or "background_task_failed" in line
    ]
    if crashes:
        print("gateway errors (their logs; the frames nearest the error):")
        for line in crashes[:10]:
            print("  " + line)
    checks = {
        "no dirty failure": tally.dirty,
        "no duplicated tool body": duplicated,
        "no completion that never ran": never_ran,
        # A failover (Sentinel, Cluster) may fail calls with a documented error (counted
        # above, none run twice); a restart of a standalone Redis and replica deaths may not.
        "no call lost where takeover or replay was possible": (
            tally.lost_where_recoverable if args.store == "standalone" else None
        ),
        # A restart of a second is ridden out; a failover may fail calls, with a
        # documented error (counted above) and nothing run twice.
        "no call failed by the Redis restart": (
            tally.failed_in_redis_restart if args.store == "standalone" else None
        ),
        "nothing parked once the clients are done": (
            [f"{k}={v:g}" for k, v in left.items()] if args.store == "standalone" else None
        ),
        "no unhandled error in a gateway": crashes,
        "the audit trail: one start and one end a call, a round asked once and answered "
        "at most once, no event id twice": trail_broken,
        "every completed call in the audit trail, under one call id": not_in_trail,
    }
    if args.store != "standalone":
        print(
            f"(a failover may fail calls with a documented error: lost where recoverable "
            f"{len(tally.lost_where_recoverable)}, parked at the end {sum(left.values()):g})"
        )
    print("checks:")
    failed = False
    for name, problems in checks.items():
        if problems is None:  # not a guarantee under this fault
            print(f"  n/a   {name}")
            continue
        detail = f": {problems[:5]}" if problems else ""
        print(f"  {'ok  ' if not problems else 'FAIL'}  {name}{detail}")
        failed = failed or bool(problems)
    return 1 if failed else 0


async def rollout(args: argparse.Namespace) -> int:
    """A rolling upgrade from the previous release and a rollback, under load."""
    from tests.rollout import scenario

    report = await scenario.run(
        replicas=3,
        clients=args.clients or (6 if args.short else 24),
        sessions=2 if args.short else 6,
        calls_per_step=12 if args.short else 600,
        held=3 if args.short else 8,
        settle_s=args.settle,
        moved_on=args.moved_on,
    )
    print("\n".join(report.lines()))
    return 1 if any(report.failures().values()) else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
