"""What the previous release writes, this one reads; and what this one writes while a
replica of the previous release lives, that one reads. Transcripts, each against the real
previous release (built from tests/rollout/PREVIOUS_RELEASE into a venv of its own and
driven through `old_side.py`) and, for records, a real Redis both releases' stores share.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.clock import SystemClock
from gateway.fleet import messages
from gateway.fleet.ledger import roll_call_key
from gateway.fleet.redis_bus import RedisBus
from gateway.protocol import formats, legacy_session, state
from gateway.protocol.formats import FleetLevel, Kind
from gateway.store.base import PARKED, SuspendedCall
from gateway.store.redis import RedisStore
from gateway.store.redis_client import RedisClient, close_client, connect
from tests.peers.tooling import CommandPeer, RedisServer
from tests.rollout.previous import previous

pytestmark = pytest.mark.peers

KEY = state.generate_key()
NOW = 1_800_000_000_000


class PreviousRelease(CommandPeer):
    """The previous release's codecs and store, one command per line (`old_side.py`)."""

    name = "previous release"

    def __init__(self) -> None:
        self.python = previous().python()
        self.proc = self._start()
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen[str]:
        script = Path(__file__).resolve().parent / "old_side.py"
        return subprocess.Popen(
            [str(self.python), "-P", str(script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )


@pytest.fixture(scope="module")
def old() -> Iterator[PreviousRelease]:
    peer = PreviousRelease()
    yield peer
    peer.stop()


@pytest.fixture
async def client(redis_server: RedisServer) -> Any:
    redis = connect(redis_server.url)
    yield redis
    await close_client(redis)


def level(at: int) -> FleetLevel:
    """A fleet's level as a replica of this release learnt it: `at` the oldest live."""
    learnt = FleetLevel(settle_s=0.0)
    learnt.observe([at, formats.LEVEL], 0.0)
    return learnt


MIXED, MOVED_ON = level(formats.PREVIOUS), level(formats.LEVEL)


def record(call_id: str) -> SuspendedCall:
    return SuspendedCall(
        call_id=call_id,
        round=1,
        status=PARKED,
        owner="old~1",
        upstream="legacy",
        method="tools/call",
        target="greet",
        principal="anonymous",
        digest="d" * 32,
        upstream_request_id=7,
        session_id="s-1",
        protocol_version="2025-11-25",
        caps="e",
        last_event_id=None,
        pending=[{"key": "name", "id": 0, "method": "elicitation/create", "params": {}}],
        deadline_ms=SystemClock().wall_ms() + 60_000,
        created_ms=SystemClock().wall_ms(),
    )


def fields_of(stored: SuspendedCall) -> dict[str, Any]:
    data = dataclasses.asdict(stored)
    for name in ("version", "attempt", "claimer", "status"):
        data.pop(name)
    return data


# -- records ---------------------------------------------------------------------------


async def test_a_record_parked_by_the_previous_release_is_resumed_by_this_one_and_back(
    old: PreviousRelease, client: RedisClient, redis_server: RedisServer
) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    parked = record("call-old")
    written = old.run({"op": "record", "fields": _old_fields(parked)})["json"]
    assert json.loads(written)["version"] == 1
    old.run({"op": "park", "url": redis_server.url, "prefix": prefix, "json": written})

    # This release, in a fleet that still has a replica of the previous one, claims the
    # round the old replica parked, and gives it back: written as the old one reads it.
    store = RedisStore(client, prefix=prefix, level=MIXED)
    claimed = await store.claim("call-old", 1, "new~1")
    assert claimed is not None and claimed.version == 1
    assert fields_of(claimed) == fields_of(parked)
    assert await store.give_back(claimed)
    assert json.loads(await client.hget(store.key("call-old"), "json"))["version"] == 1

    # The old replica resumes the round given back.
    again = old.run(
        {"op": "claim", "url": redis_server.url, "prefix": prefix, "call": "call-old"}
        | {"round": 1, "claimer": "old~2"}
    )
    assert "error" not in again
    assert fields_of(SuspendedCall.from_json(again["json"])) == fields_of(parked)


async def test_a_record_parked_by_this_release_is_resumed_by_the_previous_one_while_it_lives(
    old: PreviousRelease, client: RedisClient, redis_server: RedisServer
) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    store = RedisStore(client, prefix=prefix, level=MIXED)
    made = record("call-new")
    await store.park(made)
    claim = {"op": "claim", "url": redis_server.url, "prefix": prefix, "round": 1}
    resumed = old.run(claim | {"call": "call-new", "claimer": "old~1"})
    assert "error" not in resumed
    assert fields_of(SuspendedCall.from_json(resumed["json"])) == fields_of(made)

    # Once the fleet has moved on, the previous release can no longer read a record: the
    # reason this release writes what every live replica reads.
    moved_on = RedisStore(client, prefix=prefix, level=MOVED_ON)
    await moved_on.park(record("call-v2"))
    refused = old.run(claim | {"call": "call-v2", "claimer": "old~1"})
    assert refused["error"] == "StoreError"


async def test_the_store_writes_each_record_in_the_version_the_fleet_reads_as_it_changes(
    client: RedisClient,
) -> None:
    """A finished rollout moves on, a rollback brings the previous version back at once."""
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    fleet = FleetLevel(settle_s=5.0)
    store = RedisStore(client, prefix=prefix, level=fleet)

    async def parked_version(at_s: float, *levels: int) -> int:
        fleet.observe(levels, at_s)
        await store.park(record("c"))
        return int(json.loads(await client.hget(store.key("c"), "json"))["version"])

    assert await parked_version(0.0, formats.PREVIOUS, formats.LEVEL) == 1  # mixed
    assert await parked_version(1.0, formats.LEVEL) == 1  # the last old one left: settling
    assert await parked_version(6.0, formats.LEVEL) == 2  # settled: moved on
    assert await parked_version(7.0, formats.LEVEL, formats.PREVIOUS) == 1  # a rollback
    claimed = await store.claim("c", 1, "new~1")
    assert claimed is not None and claimed.version == 1


# -- messages between replicas ---------------------------------------------------------

MESSAGES: list[messages.Message] = [
    messages.Resume(
        call="c1",
        round=2,
        request_id=5,
        method="tools/call",
        params={"name": "greet", "arguments": {}},
        reply="mrtr:reply:r1",
        trace={"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"},
    ),
    messages.Cancel(call="c1", reply="mrtr:reply:r1"),
    messages.Notify(notification={"method": "notifications/progress", "params": {}}),
    messages.Outcome(result={"content": [], "resultType": "complete"}),
    messages.Failure(error={"code": -32603, "message": "x"}, status=502),
]


def _as_dict(message: messages.Message) -> dict[str, Any]:
    return {"op": type(message).__name__.lower(), **dataclasses.asdict(message)}


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_goes_both_ways_between_the_releases(
    old: PreviousRelease, message: messages.Message
) -> None:
    from_old = old.run({"op": "encode", "message": _as_dict(message)})["text"]
    assert messages.decode(from_old) == message

    to_old = messages.encode(message, MIXED.version(Kind.MESSAGE))
    assert old.run({"op": "decode", "text": to_old})["message"] == _as_dict(message)

    # What a fleet that moved on writes, the previous release refuses whole.
    moved_on = messages.encode(message, MOVED_ON.version(Kind.MESSAGE))
    assert messages.decode(moved_on) == message
    assert old.run({"op": "decode", "text": moved_on})["error"] == "ValueError"


#: This release's messages the previous release never knew, one of each: a task's
#: (tasks are held back while a replica of it beats) and the legacy lane's (sent only to
#: a replica-bound session's owner, and it held none).
UNKNOWN_TO_PREVIOUS: list[messages.Message] = [
    messages.ForTask(task="t1", principal="alice", answers={"name": {}}, cancel=False),
    messages.Exchange(
        verb="POST",
        route="local",
        session="h1",
        body='{"jsonrpc":"2.0","id":1,"method":"ping"}',
        headers={"MCP-Protocol-Version": "2025-11-25"},
        reply="mrtr:reply:r2",
        reader="new~2",
    ),
    messages.Stop(reply="mrtr:reply:r2"),
    messages.ExchangeHead(status=200, headers={"Content-Type": "text/event-stream"}, stream=True),
    messages.StreamEvent(data='{"jsonrpc":"2.0"}', id="e1"),
    messages.ExchangeEnd(error=None),
    messages.ExchangeFailed(error={"code": -32600, "message": "x"}, status=400),
    messages.ClientAnswer(
        question="mrtr-ask/n1/new~2", session="s_1", answer={"jsonrpc": "2.0", "id": "x"}
    ),
]


def _op(message: messages.Message) -> str:
    return str(json.loads(messages.encode(message))["op"])


def test_every_message_the_previous_release_knew_goes_both_ways_and_no_other_is_misread(
    old: PreviousRelease,
) -> None:
    """The catalogue, checked against the previous release's own decoder: each message it
    knew has its transcript both ways (above), and each it did not know, in every version
    this release writes, it refuses whole (a replica of it never half-reads one)."""
    known = set(old.run({"op": "message_ops"})["ops"])
    assert known == {_op(m) for m in MESSAGES}
    assert set(messages.CATALOGUE) == known | {_op(m) for m in UNKNOWN_TO_PREVIOUS}
    for message in UNKNOWN_TO_PREVIOUS:
        kind = messages.kind_of(message)
        for level in (MIXED, MOVED_ON):
            if not level.known(kind):
                continue  # never written while a replica of the previous release lives
            text = messages.encode(message, level.version(kind))
            assert messages.decode(text) == message
            assert old.run({"op": "decode", "text": text})["error"] == "ValueError", text


# -- sealed requestState and legacy session ids ----------------------------------------

CLAIMS = state.Claims(
    call="c1",
    round=1,
    principal="anonymous",
    digest="d" * 32,
    audience="mrtr-gateway",
    issued_ms=NOW,
    expires_ms=NOW + 60_000,
    owner="old~1",
)
OPEN = {"now_ms": NOW + 1, "principal": "anonymous", "digest": "d" * 32, "audience": "mrtr-gateway"}


def test_a_request_state_sealed_by_either_release_opens_in_the_other(
    old: PreviousRelease,
) -> None:
    codec = state.AesGcmKeyRing([state.parse_key(KEY, "key")])
    from_old = old.run({"op": "seal", "key": KEY, "claims": dataclasses.asdict(CLAIMS)})["token"]
    assert state.open_claims(codec, from_old, **OPEN) == CLAIMS

    to_old = state.seal_claims(codec, CLAIMS, MIXED.version(Kind.REQUEST_STATE))
    opened = old.run({"op": "open", "key": KEY, "token": to_old, **OPEN})
    assert opened["claims"] == dataclasses.asdict(CLAIMS)

    moved_on = state.seal_claims(codec, CLAIMS, MOVED_ON.version(Kind.REQUEST_STATE))
    assert state.open_claims(codec, moved_on, **OPEN) == CLAIMS
    refused = old.run({"op": "open", "key": KEY, "token": moved_on, **OPEN})
    assert (refused["error"], refused["detail"]) == ("InvalidRequestState", "payload shape")


def test_a_legacy_session_id_minted_by_either_release_is_served_by_the_other(
    old: PreviousRelease,
) -> None:
    claims = legacy_session.SessionClaims(
        upstream="legacy",
        session="up-1",
        principal=legacy_session.principal_tag("anonymous"),
        owner="",
        audience="mrtr-gateway",
        created_ms=NOW,
        expires_ms=NOW + 60_000,
    )
    keys = [state.parse_key(KEY, "key")]
    codec = state.AesGcmKeyRing(keys, prefix=legacy_session.SESSION_PREFIX)
    check = {"now_ms": NOW + 1, "principal": claims.principal, "upstream": "legacy"}
    check["audience"] = "mrtr-gateway"
    old_claims = {k: v for k, v in dataclasses.asdict(claims).items() if k != "declared"}
    sealed = {"op": "seal_session", "key": KEY, "claims": old_claims}
    from_old = old.run(sealed)["token"]
    assert legacy_session.open_session(codec, from_old, **check) == claims

    # While a replica of it lives, this one writes version 1: what it declared left out.
    declaring = dataclasses.replace(claims, declared=("elicitation",))
    mixed = MIXED.version(Kind.LEGACY_SESSION)
    mine = legacy_session.seal_session(codec, declaring, mixed)
    opened = old.run({"op": "open_session", "key": KEY, "token": mine, **check})
    assert opened["claims"] == old_claims

    moved_on = legacy_session.seal_session(codec, declaring, MOVED_ON.version(Kind.LEGACY_SESSION))
    assert legacy_session.open_session(codec, moved_on, **check) == declaring
    refused = old.run({"op": "open_session", "key": KEY, "token": moved_on, **check})
    assert refused == {"refused": "payload shape"}  # 0.1.0 reads no "k": 404 there


# -- heartbeats --------------------------------------------------------------------------


async def test_the_previous_release_reads_this_ones_heartbeat_and_this_one_its(
    old: PreviousRelease, client: RedisClient, redis_server: RedisServer
) -> None:
    """The previous release reads only the epoch after the beat's first space; this one
    also reads the level before it, and a beat without one is the previous release's."""
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    bus = RedisBus(client, prefix=prefix, replica_id="new~1", heartbeat_s=1.0, clock=SystemClock())
    await client.set(bus.epoch_key(), "e1")
    await client.set(bus.replica_key("new~1"), formats.beat_value(NOW, "e1"), px=60_000)
    asked = {"op": "written_back", "url": redis_server.url, "prefix": prefix}
    assert old.run(asked | {"replica": "new~1"})["written"] is True

    await client.set(bus.replica_key("old~1"), f"{NOW} e1", px=60_000)  # as 0.1.0 beats
    assert await bus.written_back("old~1") is True
    # The first look scans every heartbeat key: a replica of 0.1.0 lives.
    assert await bus.look_at_fleet() == formats.PREVIOUS
    await client.delete(bus.replica_key("old~1"))
    assert await bus.look_at_fleet() == formats.LEVEL  # gone: the fleet moves on (settle 0)
    # The next looks read the roll call, where 0.1.0's ledger names its replica.
    await client.set(bus.replica_key("old~2"), f"{NOW} e1", px=60_000)
    await client.sadd(roll_call_key(prefix), "old~2", "gone~1")  # one without a heartbeat
    assert await bus.look_at_fleet() == formats.PREVIOUS


def _old_fields(stored: SuspendedCall) -> dict[str, Any]:
    """A record's fields as the previous release's constructor takes them."""
    data = dataclasses.asdict(stored)
    del data["attempt"]
    data["version"] = 1
    return data


def test_the_release_under_test_is_the_previous_one(old: PreviousRelease) -> None:
    """The venv holds what PREVIOUS_RELEASE names, not this checkout (found by mistake on
    the path): it writes records of version 1 and knows no formats module."""
    probe = subprocess.run(
        [str(old.python), "-P", "-c", "import gateway.protocol.formats"],
        capture_output=True,
        text=True,
    )
    assert probe.returncode != 0 and "No module named 'gateway.protocol.formats'" in probe.stderr
