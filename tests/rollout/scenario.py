"""A rolling upgrade and a rollback under load: a fleet of the previous release replaced
replica by replica with this release, then back, as a Deployment's rollout does.

A real redis-server, an mcp 1.x legacy server (no event store: a parked call whose owner
is gone could only fail, so none may be left behind), and replicas of two releases, each
in its own venv (`tests/rollout/previous.py` builds the previous one from its commit),
behind the round-robin balancer. Each step of a rollout (maxSurge 1, maxUnavailable 0):
the new replica starts and, once it serves, takes the old one's place in the balancer (a
Service's endpoints follow readiness); the old one gets SIGTERM, drains (serves the
retries of the calls it holds, forwarded to it by the others) and exits.

The load: 2026-07-28 clients calling `greet` (parks one round), `register` (two rounds)
and `echo` (passes through), answering every question and sending a request again when
told (503) or when its connection died; 2025-11-25 clients each holding one legacy
session through the balancer from start to end. A watcher reads every record the fleet
writes (keyspace notifications) and notes its version.

`run` returns a `Report`: the counts per outcome and what each guarantee found wrong.
tests/rollout/test_rollout.py runs the short form, scripts/chaos.py --scenario rollout
the long one. Every process started here is ended here, by its PID.
"""

from __future__ import annotations

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
import redis.asyncio as aioredis
import yaml
from aiohttp.test_utils import TestServer

from gateway import __version__
from gateway.aio import spawn
from gateway.protocol import formats
from gateway.protocol.state import generate_key
from tests.peers.balancer import RoundRobin
from tests.peers.tooling import GatewayProcess, LegacyServer, RedisServer
from tests.rollout.previous import previous
from tests.support.legacy import LegacyClient
from tests.support.wire import default_headers, parse_sse_messages, rpc

ANSWERS = {
    "elicit.username": {"action": "accept", "content": {"username": "alice"}},
    "elicit.age+color": {"action": "accept", "content": {"age": 30, "color": "green"}},
}
EXPECTED = {
    "greet": "Hello, alice!",
    "register": "Registered alice (age 30) with favourite color green",
}
TOOLS = ["greet", "register", "echo"]
#: How long a parked call waits for its retry (the clients answer at once).
SUSPENSION_TTL_S = 15.0
#: A request told to come again (503: draining, busy) or cut off with its replica is sent
#: again, up to this many times, backing off: as a client of the spec does.
SENDS = 8


@dataclass(frozen=True, slots=True)
class Release:
    version: str
    python: str
    config: Path


@dataclass
class Report:
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    steps: list[str] = field(default_factory=list)
    dirty: list[str] = field(default_factory=list)  # no JSON-RPC error, a wrong answer
    lost: list[str] = field(default_factory=list)  # a parked call (a retry) that failed
    sessions_lost: list[str] = field(default_factory=list)  # a legacy session's call failed
    ran_twice: list[str] = field(default_factory=list)
    never_ran: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)  # an unhandled error in a log
    phase: str = "rollout"  # what the fleet is doing now (records are counted by it)
    # The versions of the records written, by the phase they were written in.
    record_versions: dict[str, collections.Counter[int]] = field(
        default_factory=lambda: collections.defaultdict(collections.Counter)
    )
    beat_levels: dict[str, int] = field(default_factory=dict)  # at the end of the rollout
    forwards: dict[str, int] = field(default_factory=dict)  # by each step's replacement
    runs: list[tuple[str, str]] = field(default_factory=list)  # (tool, run id) started
    completed: set[tuple[str, str]] = field(default_factory=set)
    counted: asyncio.Condition = field(default_factory=asyncio.Condition, repr=False)

    async def tally(self, kind: str) -> None:
        """Count one outcome, and wake whoever waits for the load to make progress."""
        self.outcomes[kind] += 1
        async with self.counted:
            self.counted.notify_all()

    async def noted(self, phase: str, version: int) -> None:
        """Count a record written, and wake whoever waits for one of its version."""
        self.record_versions[phase][version] += 1
        async with self.counted:
            self.counted.notify_all()

    async def written(self, version: int) -> None:
        """Wait until a record of `version` is written (in this phase)."""
        async with self.counted:
            await self.counted.wait_for(lambda: self.record_versions[self.phase][version] > 0)

    async def progressed(self, calls: int) -> None:
        """Wait until `calls` more calls have ended (the fleet is under load)."""
        target = sum(self.outcomes.values()) + calls
        async with self.counted:
            await self.counted.wait_for(lambda: sum(self.outcomes.values()) >= target)

    def failures(self) -> dict[str, list[str]]:
        return {
            "no dirty failure": self.dirty,
            "no parked call lost": self.lost,
            "no legacy session lost": self.sessions_lost,
            "no tool body ran twice": self.ran_twice,
            "no completion whose body never ran": self.never_ran,
            "no unhandled error in a replica's log": self.crashes,
        }

    def lines(self) -> list[str]:
        out = ["steps:", *(f"  {s}" for s in self.steps)]
        out.append(f"outcomes ({sum(self.outcomes.values())}):")
        out += [f"  {n:6d}  {k}" for k, n in sorted(self.outcomes.items(), key=lambda kv: -kv[1])]
        for phase, versions in self.record_versions.items():
            out.append(f"records written {phase}, by version: {dict(sorted(versions.items()))}")
        out.append(f"heartbeat levels after the rollout: {self.beat_levels}")
        out.append(f"retries forwarded by each new replica in its step: {self.forwards}")
        out.append("checks:")
        for name, problems in self.failures().items():
            out.append(f"  {'ok  ' if not problems else 'FAIL'}  {name}{problems[:5] or ''}")
        return out


class Fleet:
    """The processes of a rollout: Redis, the legacy server, the replicas, the balancer."""

    def __init__(self, folder: Path, size: int) -> None:
        self.folder, self.size = folder, size
        self.redis = RedisServer()
        self.legacy: LegacyServer | None = None
        self.replicas: list[GatewayProcess] = []  # serving now, slot by slot
        self.started: list[GatewayProcess] = []  # every replica ever started: stopped at the end
        self.prefix = f"r{uuid.uuid4().hex[:8]}:"
        self.env = {"MRTR_GATEWAY_SEALING_KEYS": generate_key()}
        self.balancer: RoundRobin | None = None
        self.lb: TestServer | None = None
        self._names = iter(range(1000))
        self._configs = iter(range(1000))

    def release(self, version: str, python: str, **fleet: float) -> Release:
        """A release's configuration: the same for both but for `fleet` settings this
        release has and the previous one would refuse (`format_settle_s`)."""
        config: dict[str, Any] = {
            "store": {"url": self.redis.url, "key_prefix": self.prefix},
            "fleet": {"heartbeat_s": 0.5, "drain_timeout_s": 30, **fleet},
            "sealing": {"audience": "rollout"},
            "limits": {"max_parked_per_principal": 1000, "suspension_ttl_s": SUSPENSION_TTL_S},
            "upstreams": [{"name": "plain", "url": self.legacy_url(), "path": "/mcp"}],
        }
        path = self.folder / f"gateway-{next(self._configs)}-{version}.yaml"
        path.write_text(yaml.safe_dump(config))
        return Release(version, python, path)

    def legacy_url(self) -> str:
        if self.legacy is None:
            self.legacy = LegacyServer()
        return self.legacy.url

    def start(self, release: Release) -> GatewayProcess:
        """A replica of `release`, serving (one that fails to start has stopped itself)."""
        name = f"{release.version}-{next(self._names)}"
        replica = GatewayProcess(release.config, self.env, name, python=release.python)
        self.started.append(replica)
        return replica

    async def open(self, release: Release) -> str:
        started = await asyncio.gather(
            *(asyncio.to_thread(self.start, release) for _ in range(self.size))
        )
        self.replicas = list(started)
        self.balancer = RoundRobin([r.base for r in self.replicas], skip_refused=True)
        self.lb = TestServer(self.balancer.app(), host="127.0.0.1")
        await self.lb.start_server()
        return str(self.lb.make_url("/mcp"))

    async def replace(self, slot: int, release: Release, held: list[Held]) -> str:
        """One step of a rollout: the new replica serves, then the old one drains; the
        `held` calls are retried through the new one once the old one drains."""
        old = self.replicas[slot]
        new = await asyncio.to_thread(self.start, release)
        self.replicas[slot] = new
        assert self.balancer is not None
        self.balancer.backends[slot] = new.base  # its endpoint ready; the old one's gone
        old.send_signal(signal.SIGTERM)
        for call in held:
            call.retry_url = new.url()
            call.draining.set()
        began = time.monotonic()
        code = await asyncio.to_thread(old.wait, 60)
        drained = time.monotonic() - began
        return f"{old.replica_id} -> {new.replica_id} (drained in {drained:.1f} s, exit {code})"

    async def close(self) -> None:
        if self.lb is not None:
            await self.lb.close()
        await asyncio.to_thread(self._stop)

    def _stop(self) -> None:
        for replica in self.started:
            replica.stop()
        for process in (self.legacy, self.redis):
            if process is not None:
                process.stop()


# -- the load ------------------------------------------------------------------------------


async def post(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[int, Any]:
    async with http.post(url, json=body, headers=default_headers(body)) as resp:
        raw = await resp.read()
        if resp.headers.get("Content-Type", "").startswith("text/event-stream"):
            messages = parse_sse_messages(raw)
            return resp.status, messages[-1] if messages else None
        try:
            return resp.status, json.loads(raw)
        except ValueError:
            return resp.status, raw[:200].decode(errors="replace")


@dataclass(slots=True)
class Held:
    """A call parked on a replica about to be replaced, whose retry waits for its drain."""

    first_url: str  # where its first request goes: the replica about to be replaced
    parked: asyncio.Event  # set once its first request is answered (parked, or not)
    draining: asyncio.Event  # set once that replica was told to stop: retry then
    retry_url: str = ""  # where its retries go: its replacement (of the other release)


async def one_call(
    http: aiohttp.ClientSession, url: str, tool: str, report: Report, held: Held | None = None
) -> None:
    """One logical call to its end, every round; its outcome counted."""
    run_id = uuid.uuid4().hex
    arguments = {"text": run_id} if tool == "echo" else {"run_id": run_id}
    params: dict[str, Any] = {"name": tool, "arguments": arguments}
    if tool != "echo":
        report.runs.append((tool, run_id))
    label = tool if held is None else f"{tool} parked on a replica then replaced"
    try:
        await _rounds(http, url, tool, report, run_id, params, label, held)
    finally:
        if held is not None:  # its first request answered, whatever it was
            held.parked.set()


async def _rounds(
    http: aiohttp.ClientSession,
    url: str,
    tool: str,
    report: Report,
    run_id: str,
    params: dict[str, Any],
    label: str,
    held: Held | None,
) -> None:
    rid = 0
    while True:
        rid += 1
        if held is not None and rid == 2:  # parked on the replica: retried once it drains
            held.parked.set()
            await held.draining.wait()
        target = url
        if held is not None:
            target = held.first_url if rid == 1 else held.retry_url or url
        for send in range(1, SENDS + 1):
            try:
                status, reply = await post(http, target, rpc("tools/call", params, rid=rid))
            except (TimeoutError, aiohttp.ClientError) as exc:
                status, reply = 0, f"connection: {type(exc).__name__}"
            told_again = status == 503 and isinstance(reply, dict) and "error" in reply
            if (status == 0 or told_again) and send < SENDS:
                await asyncio.sleep(0.1 * send)  # backing off, as a client should
                continue
            break
        where = "retry" if "requestState" in params else "first request"
        if not isinstance(reply, dict):
            await report.tally(f"{label}: dirty ({where})")
            report.dirty.append(f"{tool} {where}: HTTP {status} {reply!r}")
            if where == "retry":
                report.lost.append(f"{tool} {run_id}: HTTP {status}")
            return
        if "error" in reply:
            error = reply["error"]
            said = str(error.get("message", ""))[:60]
            kind = f"{label}: error {error.get('code')} ({status}) on a {where}: {said}"
            await report.tally(kind)
            if where == "retry":  # it had parked: a call the rollout lost
                report.lost.append(f"{tool} {run_id}: {kind}")
            return
        result = reply["result"]
        if result.get("resultType") == "input_required":
            answers = {key: ANSWERS[key] for key in result["inputRequests"]}
            params = {**params, "requestState": result["requestState"], "inputResponses": answers}
            continue
        text = (result.get("content") or [{}])[0].get("text")
        if text != EXPECTED.get(tool, run_id):
            await report.tally(f"{label}: wrong answer")
            report.dirty.append(f"{tool}: wrong answer {text!r}")
            return
        if tool != "echo":
            report.completed.add((tool, run_id))
        await report.tally(f"{label}: complete")
        return


async def modern_client(url: str, stop: asyncio.Event, report: Report, seed: int) -> None:
    rng = random.Random(seed)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=90)) as http:
        while not stop.is_set():
            await one_call(http, url, rng.choice(TOOLS), report)


async def legacy_session(url: str, stop: asyncio.Event, report: Report, n: int) -> None:
    """One 2025 session from start to end: every call on it must be served."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=90)) as http:
        client = LegacyClient(http, url)
        await client.open()
        calls = 0
        while not stop.is_set():
            calls += 1
            text = f"session {n} call {calls}"
            for send in range(1, SENDS + 1):
                try:
                    result = await client.call_tool("echo", {"text": text})
                    ok = result["content"][0]["text"] == text
                    await report.tally(f"legacy session call: {'complete' if ok else 'dirty'}")
                    if not ok:
                        report.dirty.append(f"legacy session {n}: {result!r}")
                    break
                except (RuntimeError, TimeoutError, aiohttp.ClientError) as exc:
                    told_again = "HTTP 503" in str(exc) or isinstance(exc, aiohttp.ClientError)
                    if told_again and send < SENDS:
                        await asyncio.sleep(0.1 * send)
                        continue
                    await report.tally("legacy session call: failed")
                    report.sessions_lost.append(f"session {n} call {calls}: {exc}"[:300])
                    return
        await client.close()


# -- what the fleet writes -----------------------------------------------------------------


async def watch_records(redis_url: str, prefix: str, report: Report, ready: asyncio.Event) -> None:
    """Note the version of every record the fleet writes, as Redis tells of each write."""
    client = aioredis.from_url(redis_url)
    try:
        await client.config_set("notify-keyspace-events", "Kh")
        async with client.pubsub() as pubsub:
            await pubsub.psubscribe(f"__keyspace@0__:{prefix}{{*}}:rec")
            async for message in pubsub.listen():
                if message["type"] == "psubscribe":
                    ready.set()
                    continue
                if message["type"] != "pmessage" or message["data"] != b"hset":
                    continue
                key = message["channel"].decode().split(":", 1)[1]
                raw = await client.hget(key, "json")
                if raw is not None:  # gone already (the call ended): its version unseen
                    await report.noted(report.phase, json.loads(raw)["version"])
    finally:
        await client.aclose()


async def beat_levels(redis_url: str, prefix: str) -> dict[str, int]:
    client = aioredis.from_url(redis_url)
    try:
        levels = {}
        async for key in client.scan_iter(match=f"{prefix}{{replica:*}}:beat"):
            value = await client.get(key)
            if value is not None:
                levels[key.decode()[len(prefix) :]] = formats.read_beat(value.decode()).level
        return levels
    finally:
        await client.aclose()


# -- the run -------------------------------------------------------------------------------


async def run(
    *,
    replicas: int = 3,
    clients: int = 6,
    sessions: int = 2,
    calls_per_step: int = 10,
    held: int = 3,
    settle_s: float | None = None,
    moved_on: bool = False,
) -> Report:
    """Roll a fleet of the previous release to this one and back, under load; at each step
    `held` calls parked on the replica replaced are retried while it drains. `settle_s`:
    this release's `fleet.format_settle_s` (its default when None). `moved_on`: the fleet
    moves on to this release's formats after the rollout (a settle of a second), and the
    rollback follows docs/operations.md: first the fleet is pinned to the previous
    formats (rolled again, `fleet.format_level: 1`), then `limits.suspension_ttl_s`
    passes, then the rollback."""
    if moved_on:
        settle_s = 1.0
    report = Report()
    older = previous()
    old_python = str(await asyncio.to_thread(older.python))
    with tempfile.TemporaryDirectory(prefix="mrtr-rollout-") as tmp:
        fleet = Fleet(Path(tmp), replicas)
        tasks: list[asyncio.Task[None]] = []
        try:
            old = fleet.release(older.version, old_python)
            settle = {} if settle_s is None else {"format_settle_s": settle_s}
            new = fleet.release(__version__, sys.executable, **settle)
            pinned = fleet.release(__version__, sys.executable, **settle, format_level=1)
            watching = asyncio.Event()
            tasks.append(
                spawn(
                    watch_records(fleet.redis.url, fleet.prefix, report, watching), name="records"
                )
            )
            await watching.wait()
            url = await fleet.open(old)
            report.steps.append(f"{replicas} replicas of {old.version} serve")
            stop = asyncio.Event()
            tasks += [
                spawn(modern_client(url, stop, report, seed), name=f"client-{seed}")
                for seed in range(clients)
            ]
            tasks += [
                spawn(legacy_session(url, stop, report, n), name=f"session-{n}")
                for n in range(sessions)
            ]
            for slot in range(replicas):
                await report.progressed(calls_per_step)
                report.steps.append(await step(fleet, slot, new, url, report, held))
            report.beat_levels = await beat_levels(fleet.redis.url, fleet.prefix)
            report.phase = "after the rollout"
            report.steps.append(f"rolled out to {new.version}")
            if moved_on:
                async with asyncio.timeout(60):  # a second's settle, and a beat or two
                    await report.written(2)
                report.steps.append("the fleet moved on: a record of version 2 written")
                for slot in range(replicas):
                    await report.progressed(calls_per_step)
                    report.steps.append(await step(fleet, slot, pinned, url, report, held))
                # The operator's wait (docs/operations.md): a time, not an event. Every
                # call parked in this release's formats has ended by then.
                await asyncio.sleep(SUSPENSION_TTL_S)
                report.steps.append(f"pinned to format level 1; {SUSPENSION_TTL_S:g} s passed")
            report.phase = "in the rollback"
            report.steps.append(f"rolling back to {old.version}")
            for slot in range(replicas):
                await report.progressed(calls_per_step)
                report.steps.append(await step(fleet, slot, old, url, report, held))
            await report.progressed(calls_per_step)
            stop.set()
            await asyncio.gather(*tasks[1:])
            await judge(fleet, report)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await fleet.close()
    return report


async def step(
    fleet: Fleet, slot: int, release: Release, url: str, report: Report, held: int
) -> str:
    """Replace the replica in `slot`, with `held` calls parked on it (their first request
    sent to it) retried through its replacement once it drains: each retry is forwarded
    by a replica of one release to the owner of the other."""
    draining = asyncio.Event()
    first_url = fleet.replicas[slot].url()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=90)) as http:
        calls = [Held(first_url, asyncio.Event(), draining) for _ in range(held)]
        tasks = [
            spawn(one_call(http, url, TOOLS[n % 2], report, h), name=f"held-{n}")
            for n, h in enumerate(calls)
        ]
        try:
            await asyncio.gather(*(h.parked.wait() for h in calls))
            done = await fleet.replace(slot, release, calls)
            await asyncio.gather(*tasks)
            replacement = fleet.replicas[slot]
            report.forwards[replacement.replica_id] = await forwards(http, replacement)
        finally:
            draining.set()  # a replace that failed: the calls end either way
            await asyncio.gather(*tasks, return_exceptions=True)
    return done


async def forwards(http: aiohttp.ClientSession, replica: GatewayProcess) -> int:
    """How many retries `replica` has forwarded to their calls' owners (its metrics)."""
    async with http.get(replica.url("/metrics")) as resp:
        text = await resp.text()
    return sum(
        int(float(line.split()[-1]))
        for line in text.splitlines()
        if line.startswith("mrtr_forward_duration_seconds_count")
    )


async def judge(fleet: Fleet, report: Report) -> None:
    """What the legacy server ran (asked of it directly), and what the replicas logged."""
    assert fleet.legacy is not None
    async with aiohttp.ClientSession() as http:
        server = LegacyClient(http, fleet.legacy.url)
        await server.open()
        for tool, run_id in report.runs:
            result = await server.call_tool("runs", {"tool": tool, "run_id": run_id})
            runs = int(result["content"][0]["text"])
            if runs > 1:
                report.ran_twice.append(f"{tool} {run_id} ran {runs} times")
            if runs == 0 and (tool, run_id) in report.completed:
                report.never_ran.append(f"{tool} {run_id}")
        await server.close()
    for replica in fleet.started:
        for line in replica.logs().splitlines():
            if "unhandled_error" in line or "background_task_failed" in line:
                report.crashes.append(f"{replica.replica_id}: {line[:400]}")
