"""Build a `Bridge` on the fakes, and the client requests a transcript sends it."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.aio import spawn
from gateway.audit.trail import OFF, Audit
from gateway.calls.bridge import Bridge
from gateway.calls.replicas import Alone, Fleet, Replicas
from gateway.calls.suspension import Withdraw, park_only, withdrawing
from gateway.config import GatewayConfig, parse_config
from gateway.fleet.port import Bus
from gateway.fleet.single import SingleReplica
from gateway.protocol.inbound import FrontRequest, read_envelope
from gateway.protocol.state import AesGcmKeyRing, generate_key, parse_key
from gateway.protocol.versions import Version
from gateway.store.base import SuspendedCallStore
from gateway.store.memory import MemoryStore
from tests.fakes.clock import ManualClock
from tests.fakes.fleet import Network
from tests.fakes.upstream import ScriptedPool, ScriptedServer, ScriptedSession

KEY = generate_key()
EVERYTHING = {"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}}
ALICE = {"elicit.username": {"action": "accept", "content": {"username": "alice"}}}


def config(replica_id: str = "r1", *, tools: dict[str, Any] | None = None, **limits: Any):
    data: dict[str, Any] = {
        "replica_id": replica_id,
        "sealing": {"audience": "transcripts"},
        "limits": {"coalesce_ms": 10, **limits},
        "upstreams": [{"name": "up", "url": "http://upstream.invalid/mcp", "tools": tools or {}}],
    }
    return parse_config(data, env={"MRTR_GATEWAY_SEALING_KEYS": KEY})


class Replica:
    """One gateway replica's call core, on fakes."""

    def __init__(
        self,
        clock: ManualClock,
        server: ScriptedServer,
        *,
        store: SuspendedCallStore | None = None,
        bus: Bus | None = None,
        settings: GatewayConfig | None = None,
        withdraw: Withdraw | None = None,
        audit: Audit = OFF,
    ) -> None:
        self.config = settings or config()
        self.pool = ScriptedPool(server)
        self.store = store if store is not None else MemoryStore(clock)
        # Alone without a bus (the fleet of one), as the gateway composes it.
        among: Replicas = (
            Alone(SingleReplica(self.config.replica_id))
            if bus is None
            else Fleet(bus, beat_s=self.config.fleet.heartbeat_s)
        )
        self.bus = among.bus
        self.bridge = Bridge(
            self.config,
            store=self.store,
            codec=AesGcmKeyRing([parse_key(KEY, "test key")]),
            pools={"up": self.pool},
            replicas=among,
            clock=clock,
            park=park_only if withdraw is None else withdrawing(withdraw),
            audit=audit,
        )
        self.upstream = self.config.upstreams[0]
        self.notified: list[dict[str, Any]] = []

    async def notify(self, notification: dict[str, Any]) -> None:
        self.notified.append(notification)

    async def call(self, request: FrontRequest, principal: str = "alice") -> dict[str, Any]:
        return await self.bridge.handle(self.upstream, request, principal, self.notify)


def call_tool(
    name: str = "greet",
    arguments: dict[str, Any] | None = None,
    *,
    rid: int = 1,
    state: str | None = None,
    answers: dict[str, Any] | None = None,
    caps: dict[str, Any] | None = None,
    progress: str | None = None,
    log_level: str | None = None,
) -> FrontRequest:
    """A tools/call as a 2026-07-28 client sends it, past the front door's checks."""
    meta: dict[str, Any] = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": EVERYTHING if caps is None else caps,
    }
    if progress is not None:
        meta["progressToken"] = progress
    if log_level is not None:
        meta["io.modelcontextprotocol/logLevel"] = log_level
    params: dict[str, Any] = {"name": name, "arguments": arguments or {}, "_meta": meta}
    if state is not None:
        params["requestState"] = state
    if answers is not None:
        params["inputResponses"] = answers
    version = Version.parse("2026-07-28")
    assert version is not None
    return FrontRequest(
        id=rid, method="tools/call", params=params, envelope=read_envelope(version, meta)
    )


WINDOW = 0.010  # limits.coalesce_ms of `config`


async def ask_username(
    replica: Replica, server: ScriptedServer, clock: ManualClock, principal: str = "alice"
) -> tuple[dict[str, Any], ScriptedSession]:
    """Start `greet`, let the server ask one question, close the window: round 1."""
    pending = spawn(replica.call(call_tool(), principal), name="first")
    session = await server.next_call()
    session.elicit(7)
    await clock.armed(clock.now + WINDOW)
    clock.advance(WINDOW)
    return await pending, session


async def letting_go(call_id: str) -> None:
    """Until the session of a parked call whose stream was lost has been given back (the
    task the loss started, `Suspender._let_go_lost`)."""
    (task,) = [t for t in asyncio.all_tasks() if t.get_name() == f"call-lost-{call_id}"]
    await task


def two_replicas(
    clock: ManualClock,
    server: ScriptedServer,
    network: Network,
    tools: dict | None = None,
    store: SuspendedCallStore | None = None,
    **limits: Any,
) -> tuple[Replica, Replica]:
    """Replicas `a` and `b` sharing one store (a `MemoryStore` unless given) and one bus,
    both alive; `limits` as `config` takes them."""
    a, b = replicas(clock, server, network, ("a", "b"), tools, store, **limits)
    return a, b


def replicas(
    clock: ManualClock,
    server: ScriptedServer,
    network: Network,
    names: tuple[str, ...],
    tools: dict | None = None,
    store: SuspendedCallStore | None = None,
    audits: dict[str, Audit] | None = None,
    **limits: Any,
) -> tuple[Replica, ...]:
    """A fleet of replicas named `names`, as `two_replicas` makes two (each with its
    audit trail in `audits`, by name, if it has one)."""
    store = store if store is not None else MemoryStore(clock)
    fleet = tuple(
        Replica(
            clock,
            server,
            store=store,
            bus=network.bus(n),
            settings=config(n, tools=tools, **limits),
            audit=(audits or {}).get(n, OFF),
        )
        for n in names
    )
    for name, replica in zip(names, fleet, strict=True):
        network.join(name, replica.bridge.serve_forwarded)
    return fleet
