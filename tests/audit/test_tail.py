"""`mrtr-gateway audit tail`, against a real redis-server: the last events or those since a
time, filtered, each once, oldest first; followed as they come; a file without a stream
refused by its key."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.aio import cancel_and_wait, spawn
from gateway.audit.tail import AuditFilter, Reader, since_id, tail
from gateway.cli import main
from gateway.config.audit import stream_key
from gateway.protocol import audit, audit_record
from gateway.protocol.audit import (
    AuditOutcome,
    CallEnded,
    CallStarted,
    Era,
    Refusal,
    RequestRefused,
    Who,
)
from gateway.store.redis_client import RedisClient, connect
from tests.peers.tooling import RedisServer

ALICE = Who(kind="jwt", log_id="p_a", issuer="https://id.example", subject="alice", client="app")
BOT = Who(kind="key", log_id="p_b", subject="ci-bot")
NOW_MS = 1_800_000_000_000
EVERY = AuditFilter()


def event(n: int, who: Who = ALICE, tool: str = "book", **more: Any) -> dict[str, Any]:
    made = CallStarted(principal=who, call_id=f"c-{n}", era=Era.MODERN, upstream="u", target=tool)
    return audit_record.record(made, event_id=f"e-{n}", wall_ms=NOW_MS + n, replica="r") | more


async def add(client: RedisClient, at: str, *events: dict[str, Any]) -> None:
    for data in events:
        await client.xadd(at, {"id": data["id"], "event": orjson.dumps(data)})


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[RedisClient]:
    made = connect(redis_server.url)
    yield made
    await made.aclose()


@pytest.fixture
def at() -> str:
    return stream_key(f"t{uuid.uuid4().hex[:6]}:", "audit")


class Printed:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.skipped: list[str] = []
        self._more = asyncio.Event()

    def out(self, line: bytes) -> None:
        self.lines.append(orjson.loads(line))
        self._more.set()

    def reader(self, match: AuditFilter = EVERY) -> Reader:
        return Reader(match, self.out, self.skipped.append)

    async def until(self, count: int) -> None:
        async with asyncio.timeout(10):
            while len(self.lines) < count:
                self._more.clear()
                await self._more.wait()

    def ids(self) -> list[str]:
        return [line["id"] for line in self.lines]


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        ("90s", f"{NOW_MS - 90_000}-0"),
        ("10m", f"{NOW_MS - 600_000}-0"),
        ("2h", f"{NOW_MS - 7_200_000}-0"),
        ("1d", f"{NOW_MS - 86_400_000}-0"),
        ("2027-01-15T08:00:00Z", f"{NOW_MS}-0"),
        ("2027-01-15T08:00:00", f"{NOW_MS}-0"),  # no zone: UTC
        ("2027-01-15T10:00:00+02:00", f"{NOW_MS}-0"),
        ("1800000000000-3", "1800000000000-3"),
        ("1800000000000", "1800000000000-0"),
    ],
)
def test_since_is_read_as_a_duration_a_time_or_a_stream_id(when: str, expected: str) -> None:
    assert since_id(when, NOW_MS) == expected


def test_since_refuses_anything_else() -> None:
    with pytest.raises(ValueError, match="a duration ago"):
        since_id("yesterday", NOW_MS)


@pytest.mark.parametrize(
    ("match", "printed"),
    [
        (AuditFilter(principal="alice"), {"e-1", "e-3"}),
        (AuditFilter(principal="https://id.example|alice"), {"e-1", "e-3"}),
        (AuditFilter(principal="ci-bot"), {"e-2"}),
        (AuditFilter(principal="p_b"), {"e-2"}),
        (AuditFilter(tool="search"), {"e-3"}),
        (AuditFilter(kind="call"), {"e-1", "e-2", "e-3", "e-4"}),
        (AuditFilter(kind="call.ended"), {"e-4"}),
        (AuditFilter(kind="call.end"), set()),  # a family is a whole name
        (AuditFilter(kind="request"), {"e-5"}),
        (AuditFilter(call_id="c-1"), {"e-1", "e-4"}),
        (AuditFilter(principal="alice", tool="book"), {"e-1"}),
    ],
)
def test_a_filter_keeps_the_events_that_match_every_criterion(
    match: AuditFilter, printed: set[str]
) -> None:
    events = [
        event(1),
        event(2, BOT),
        event(3, tool="search"),
        audit_record.record(
            CallEnded(
                call_id="c-1",
                era=Era.MODERN,
                upstream="u",
                outcome=AuditOutcome.COMPLETE,
                duration_ms=1,
                rounds=0,
            ),
            event_id="e-4",
            wall_ms=NOW_MS,
            replica="r",
        ),
        audit_record.record(
            RequestRefused(refusal=Refusal.AUTHENTICATION, reason="no token"),
            event_id="e-5",
            wall_ms=NOW_MS,
            replica="r",
        ),
    ]
    assert {e["id"] for e in events if match.matches(audit_record.read(e))} == printed


async def test_the_last_events_are_printed_oldest_first_each_once(
    client: RedisClient, at: str
) -> None:
    await add(client, at, *(event(n) for n in range(1, 6)), event(3))  # e-3 written twice
    printed = Printed()
    await tail(client, at, printed.reader(), last=3)
    assert printed.ids() == ["e-4", "e-5", "e-3"]  # the last three entries
    printed = Printed()
    await tail(client, at, printed.reader(), last=20)
    assert printed.ids() == ["e-1", "e-2", "e-3", "e-4", "e-5"]


async def test_since_prints_everything_from_then_over_many_pages(
    client: RedisClient, at: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.audit import tail as tail_module

    monkeypatch.setattr(tail_module, "PAGE", 2)
    await add(client, at, *(event(n) for n in range(1, 8)))
    third = (await client.xrange(at, "-", "+"))[2][0].decode()
    printed = Printed()
    await tail(client, at, printed.reader(), since=third)
    assert printed.ids() == ["e-3", "e-4", "e-5", "e-6", "e-7"]


async def test_an_entry_that_is_no_event_read_here_is_skipped_and_said(
    client: RedisClient, at: str
) -> None:
    await client.xadd(at, {"id": "x", "event": b"not json"})
    await add(client, at, event(1), {**event(2), "v": audit.SCHEMA + 1})
    printed = Printed()
    await tail(client, at, printed.reader())
    assert printed.ids() == ["e-1"]
    assert len(printed.skipped) == 2


async def test_follow_prints_events_as_they_come(client: RedisClient, at: str) -> None:
    await add(client, at, event(1))
    printed = Printed()
    following = spawn(
        tail(client, at, printed.reader(AuditFilter(principal="alice")), last=5, follow=True),
        name="tail",
    )
    try:
        await printed.until(1)
        await add(client, at, event(2, BOT), event(3))
        await printed.until(2)
        assert printed.ids() == ["e-1", "e-3"]
    finally:
        await cancel_and_wait(following)


async def test_follow_with_nothing_before_prints_only_what_comes(
    client: RedisClient, at: str
) -> None:
    await add(client, at, event(1))
    printed = Printed()
    ready = asyncio.Event()
    following = spawn(
        tail(client, at, printed.reader(), last=0, follow=True, following=ready.set),
        name="tail",
    )
    try:
        async with asyncio.timeout(10):
            await ready.wait()
        await add(client, at, event(2))
        await printed.until(1)
        assert printed.ids() == ["e-2"]
    finally:
        await cancel_and_wait(following)


def config_file(tmp_path: Path, audit_section: str) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "upstreams: [{name: u, url: 'http://127.0.0.1:9/mcp'}]\n"
        "store: {key_prefix: 'tailtest:'}\n" + audit_section
    )
    return path


async def test_the_command_prints_the_configured_streams_events(
    tmp_path: Path,
    redis_server: RedisServer,
    client: RedisClient,
    capsys: pytest.CaptureFixture[str],
) -> None:
    at = stream_key("tailtest:", "cli")
    await client.delete(at)
    await add(client, at, event(1), event(2, tool="search"))
    path = config_file(tmp_path, f"audit: {{stream: {{url: '{redis_server.url}', name: cli}}}}\n")
    status = await asyncio.to_thread(
        main, ["audit", "tail", "--config", str(path), "--tool", "search"]
    )
    assert status == 0
    lines = capsys.readouterr().out.splitlines()
    assert [orjson.loads(line)["id"] for line in lines] == ["e-2"]


def test_the_command_refuses_a_file_that_writes_no_stream(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path, "audit: {log: true}\n")
    assert main(["audit", "tail", "--config", str(path)]) == 2
    assert "writes no audit stream (audit.stream)" in capsys.readouterr().err
    assert main(["audit", "tail", "--config", str(path), "--since", "soon"]) == 2
