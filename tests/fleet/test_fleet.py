"""Many replicas on Redis, as separate processes behind a round-robin balancer.

A real `redis-server`, three `mrtr-gateway serve` processes sharing it and one sealing
key, mcp 1.x legacy servers (one without SSE event ids, one with an event store), and
the mcp 2.x client pinned to 2026-07-28 going through the balancer.
"""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis

from gateway.store.base import SuspendedCall
from tests.peers.tooling import (
    GatewayProcess,
    LegacyServer,
    RedisServer,
)
from tests.support.cases import CASE_IDS, CASES, asked, drive, text_of
from tests.support.fleet import Fleet, until_dead
from tests.support.legacy import ALICE, await_journal
from tests.support.outcome import LOG_TAIL
from tests.support.wire import default_headers, parse_sse_messages, rpc

pytestmark = pytest.mark.peers


async def body_runs(
    fleet: Fleet, tool: str, run_id: str, path: str = "/mcp", via: GatewayProcess | None = None
) -> int:
    url = via.base + path if via is not None else fleet.url(path)
    status, reply = await fleet.post(
        url, rpc("tools/call", {"name": "runs", "arguments": {"tool": tool, "run_id": run_id}})
    )
    return int(reply["result"]["content"][0]["text"])


@pytest.mark.parametrize(("tool", "arguments", "questions", "text"), CASES, ids=CASE_IDS)
async def test_every_interactive_tool_completes_with_rounds_on_different_replicas(
    fleet: Fleet,
    modern,
    tool: str,
    arguments: dict[str, Any],
    questions: list[list[str]],
    text: str,
) -> None:
    run_id = uuid.uuid4().hex
    before = len(fleet.balancer.served)
    reply = await drive(
        modern,
        {
            "op": "call_tool",
            "url": fleet.url(),
            "name": tool,
            "arguments": {**arguments, "run_id": run_id},
        },
    )
    rounds = reply["rounds"]
    assert asked(rounds, questions), rounds
    assert text_of(reply) == text
    served = [s for s in fleet.balancer.served[before:] if s.method == "tools/call"]
    assert len(served) == len(rounds) + 1
    assert all(a.backend != b.backend for a, b in zip(served, served[1:], strict=False))
    assert sum(1 for s in served if s.resumed) == len(rounds)
    assert await body_runs(fleet, tool, run_id) == 1


async def test_a_cross_replica_retry_is_served_by_the_owner_and_relays_notifications(
    fleet: Fleet,
) -> None:
    run_id = uuid.uuid4().hex
    owner, other = fleet.replicas[0], fleet.replicas[1]
    call = {"name": "chatty_progress", "arguments": {"steps": 2, "run_id": run_id}}
    status, first = await fleet.post(
        owner.base + "/mcp", rpc("tools/call", call, progressToken="a")
    )
    state = first["result"]["requestState"]
    retry = rpc(
        "tools/call",
        {
            **call,
            "requestState": state,
            "inputResponses": {
                "elicit.confirm": {"action": "accept", "content": {"confirm": True}}
            },
        },
        rid=2,
        progressToken="b",
    )
    body = json.dumps(retry)
    async with fleet.http.post(
        other.base + "/mcp", data=body, headers=default_headers(retry)
    ) as resp:
        messages = parse_sse_messages(await resp.read())
    *notes, final = messages
    assert [(n["params"]["progressToken"], n["params"]["message"]) for n in notes] == [
        ("b", "after 1"),
        ("b", "after 2"),
    ]
    assert final["result"]["content"][0]["text"] == "done (accept)"
    await other.await_line('"event":"retry_forwarded"', timeout=30)  # the log reader may lag
    assert await body_runs(fleet, "chatty_progress", run_id) == 1


async def test_an_owner_restarted_under_its_name_is_a_new_owner_and_takes_its_calls_over(
    fleet: Fleet, redis_server: RedisServer
) -> None:
    run_id = uuid.uuid4().hex
    owner = fleet.replicas[0]
    greet = {"name": "greet", "arguments": {"run_id": run_id}}
    status, first = await fleet.post(owner.base + "/resumable", rpc("tools/call", greet))
    state = first["result"]["requestState"]
    owner.kill9()
    await until_dead(fleet, redis_server.url, owner)
    await asyncio.to_thread(owner.start)  # the same replica id, as a pod keeps its name
    await asyncio.to_thread(owner.wait_for_line, GatewayProcess.READY, 30)
    retry = rpc("tools/call", {**greet, "requestState": state, "inputResponses": ALICE}, rid=2)
    status, reply = await fleet.post(owner.base + "/resumable", retry)
    assert status == 200, reply
    assert reply["result"]["content"][0]["text"] == "Hello, alice!", reply
    await owner.await_line('"event":"call_taken_over"', timeout=30)
    assert await body_runs(fleet, "greet", run_id, "/resumable", via=owner) == 1


async def test_owner_killed_takeover_continues_the_call_where_the_upstream_allows(
    fleet: Fleet, redis_server: RedisServer
) -> None:
    run_id = uuid.uuid4().hex
    owner, survivor = fleet.replicas[0], fleet.replicas[1]
    greet = {"name": "greet", "arguments": {"run_id": run_id}}
    status, first = await fleet.post(owner.base + "/resumable", rpc("tools/call", greet))
    state = first["result"]["requestState"]
    owner.kill9()
    await until_dead(fleet, redis_server.url, owner)
    retry = rpc("tools/call", {**greet, "requestState": state, "inputResponses": ALICE}, rid=2)
    status, reply = await fleet.post(survivor.base + "/resumable", retry)
    assert status == 200, reply
    assert reply["result"].get("content", [{}])[0].get("text") == "Hello, alice!", reply
    await survivor.await_line('"event":"call_taken_over"', timeout=30)  # the log reader may lag
    assert await body_runs(fleet, "greet", run_id, "/resumable", via=survivor) == 1


async def test_owner_killed_the_calls_sharing_its_session_are_each_taken_over(
    fleet: Fleet, redis_server: RedisServer
) -> None:
    owner, survivor = fleet.replicas[0], fleet.replicas[1]
    runs = [uuid.uuid4().hex for _ in range(3)]
    states = []
    for run_id in runs:  # one after the other: they pack onto one upstream session
        call = rpc("tools/call", {"name": "greet", "arguments": {"run_id": run_id}})
        status, first = await fleet.post(owner.base + "/shared", call)
        assert first["result"]["resultType"] == "input_required", first
        states.append(first["result"]["requestState"])
    client = aioredis.from_url(redis_server.url)
    try:
        records = [k async for k in client.scan_iter(f"{fleet.prefix}*:rec")]
        jsons = [json.loads(await client.hget(k, "json")) for k in records]
    finally:
        await client.aclose()
    assert len({j["session_id"] for j in jsons}) == 1  # the three share one session
    owner.kill9()
    await until_dead(fleet, redis_server.url, owner)
    retries = [
        rpc(
            "tools/call",
            {
                "name": "greet",
                "arguments": {"run_id": run_id},
                "requestState": state,
                "inputResponses": {
                    "elicit.username": {"action": "accept", "content": {"username": f"u{i}"}}
                },
            },
            rid=2,
        )
        for i, (run_id, state) in enumerate(zip(runs, states, strict=True))
    ]
    # Two together (one session taken over for both), then the last: the session must not
    # have been ended upstream when the first two were done.
    replies = await asyncio.gather(
        *(fleet.post(survivor.base + "/shared", retry) for retry in retries[:2])
    )
    replies.append(await fleet.post(survivor.base + "/shared", retries[2]))
    texts = [reply["result"]["content"][0]["text"] for _, reply in replies]
    assert texts == ["Hello, u0!", "Hello, u1!", "Hello, u2!"], replies
    # Not asserted here: that the first two joined one adoption (one GET stream, no 409
    # asked again). Sent together, they may still reach the survivor one after the other
    # on a loaded machine; takeovers that do meet join one (tests/upstream/test_pool.py).
    for run_id in runs:
        assert await body_runs(fleet, "greet", run_id, "/shared", via=survivor) == 1


async def until(condition: Callable[[], Awaitable[bool]], timeout: float = 60.0) -> None:
    """Until `condition` holds (checked every 50 ms), bounded: for what only Redis or a
    replica's endpoint can tell (no event to wait on)."""
    async with asyncio.timeout(timeout):
        while not await condition():
            await asyncio.sleep(0.05)


async def all_ready(fleet: Fleet) -> bool:
    for replica in fleet.replicas:
        async with fleet.http.get(replica.base + "/readyz") as resp:
            if resp.status != 200:
                return False
            assert (await resp.json())["fleet"] == "ok"
    return True


async def session_known(http: aiohttp.ClientSession, url: str, sid: str, version: str) -> bool:
    """Whether the legacy server still knows a session: a ping on it (404 once it ended)."""
    headers = {
        "Accept": "application/json, text/event-stream",
        "Mcp-Session-Id": sid,
        "MCP-Protocol-Version": version,
    }
    ping = {"jsonrpc": "2.0", "id": "probe", "method": "ping"}
    async with http.post(url, json=ping, headers=headers) as resp:
        await resp.read()
        assert resp.status in (200, 404), resp.status
        return resp.status == 200


async def test_owner_killed_its_idle_sessions_are_ended_upstream_but_not_a_parked_calls(
    fleet: Fleet, redis_server: RedisServer, legacy: LegacyServer, resumable: LegacyServer
) -> None:
    owner, survivors = fleet.replicas[0], fleet.replicas[1:]
    url_of = {"plain": legacy.url, "resumable": resumable.url, "shared": resumable.url}
    greet = {"name": "greet", "arguments": {"run_id": uuid.uuid4().hex}}
    status, first = await fleet.post(owner.base + "/resumable", rpc("tools/call", greet))
    state = first["result"]["requestState"]
    client = aioredis.from_url(redis_server.url)
    try:
        (key,) = [k async for k in client.scan_iter(f"{fleet.prefix}{{*}}:rec")]
        record = SuspendedCall.from_json(await client.hget(key, "json"))
        assert record.owner.startswith(f"{owner.replica_id}~") and record.session_id
        ledger = f"{fleet.prefix}{{replica:{record.owner}}}:sessions"
        listed: dict[str, tuple[str, str]] = {}

        async def lists_both() -> bool:  # the idle sessions of both servers, once written
            raw = await client.hgetall(ledger)
            listed.clear()
            for field, version in raw.items():
                upstream, sid = json.loads(field)
                listed[sid] = (upstream, version.decode())
            return {"plain", "resumable"} <= {u for u, _ in listed.values()}

        await until(lists_both)
        assert record.session_id not in listed  # a parked call's session is never listed
        assert "local" not in {u for u, _ in listed.values()}  # stdio: nobody else can end it
        for sid, (upstream, version) in listed.items():
            assert await session_known(fleet.http, url_of[upstream], sid, version)

        owner.kill9()  # no shutdown: its sessions stay open on the servers
        await until_dead(fleet, redis_server.url, owner)
        await until(lambda: _gone(client, ledger))  # every entry claimed by a sweeper ...
        ended = '"event":"orphaned_sessions_ended"'

        async def logged() -> bool:  # ... which logs its pass once its DELETEs are done
            return any(ended in s.logs() for s in survivors)

        await until(logged)
        sweeper = [s for s in survivors if ended in s.logs()]
        assert len(sweeper) == 1, [s.logs()[-LOG_TAIL:] for s in survivors]
        for sid, (upstream, version) in listed.items():
            assert not await session_known(fleet.http, url_of[upstream], sid, version), upstream
        assert await session_known(
            fleet.http, resumable.url, record.session_id, record.protocol_version
        )
    finally:
        await client.aclose()
    # The parked call's session lived on: the call is taken over and completes.
    retry = rpc("tools/call", {**greet, "requestState": state, "inputResponses": ALICE}, rid=2)
    status, reply = await fleet.post(survivors[0].base + "/resumable", retry)
    assert status == 200, reply
    assert reply["result"]["content"][0]["text"] == "Hello, alice!", reply


async def _gone(client: aioredis.Redis, key: str) -> bool:
    return not await client.exists(key)


async def test_owner_killed_a_replay_safe_tool_completes_by_replay(
    fleet: Fleet, redis_server: RedisServer
) -> None:
    run_id = uuid.uuid4().hex
    owner, survivor = fleet.replicas[0], fleet.replicas[2]
    register = {"name": "register", "arguments": {"run_id": run_id}}
    status, first = await fleet.post(owner.base + "/mcp", rpc("tools/call", register))
    status, second = await fleet.post(
        owner.base + "/mcp",
        rpc(
            "tools/call",
            {**register, "requestState": first["result"]["requestState"], "inputResponses": ALICE},
            rid=2,
        ),
    )
    assert list(second["result"]["inputRequests"]) == ["elicit.age+color"]
    owner.kill9()
    await until_dead(fleet, redis_server.url, owner)
    profile = {"elicit.age+color": {"action": "accept", "content": {"age": 41, "color": "teal"}}}
    retry = rpc(
        "tools/call",
        {**register, "requestState": second["result"]["requestState"], "inputResponses": profile},
        rid=3,
    )
    status, reply = await fleet.post(survivor.base + "/mcp", retry)
    assert status == 200, reply
    # The first answer came from the journal: the client was not asked again.
    assert (
        reply["result"]["content"][0]["text"]
        == "Registered alice (age 41) with favourite color teal"
    )
    await survivor.await_line('"event":"call_replayed"', timeout=30)  # the log reader may lag
    assert await body_runs(fleet, "register", run_id, via=survivor) == 2  # replay-safe: ran again


async def test_owner_killed_any_other_tool_gets_a_clear_error_and_never_runs_twice(
    fleet: Fleet, redis_server: RedisServer
) -> None:
    run_id = uuid.uuid4().hex
    owner, survivor = fleet.replicas[1], fleet.replicas[2]
    greet = {"name": "greet", "arguments": {"run_id": run_id}}
    status, first = await fleet.post(owner.base + "/mcp", rpc("tools/call", greet))
    owner.kill9()
    await until_dead(fleet, redis_server.url, owner)
    retry = rpc(
        "tools/call",
        {**greet, "requestState": first["result"]["requestState"], "inputResponses": ALICE},
        rid=2,
    )
    status, reply = await fleet.post(survivor.base + "/mcp", retry)
    assert status == 502
    assert reply["error"]["code"] == -32603
    assert "start the request again" in reply["error"]["message"]
    status, again = await fleet.post(survivor.base + "/mcp", retry)
    assert again["error"]["message"] == "Invalid or expired requestState"  # the record is gone
    assert await body_runs(fleet, "greet", run_id, via=survivor) == 1


async def test_a_stdio_call_dies_with_its_replica_lost_or_replayed_and_leaves_no_process(
    fleet: Fleet, redis_server: RedisServer
) -> None:
    from tests.upstream.process_tools import children_of, exited

    run_id = uuid.uuid4().hex
    owner, survivor = fleet.replicas[0], fleet.replicas[1]
    greet = {"name": "greet", "arguments": {"run_id": run_id}}
    register = {"name": "register", "arguments": {"run_id": run_id}}
    status, first = await fleet.post(owner.base + "/local", rpc("tools/call", greet))
    status, second = await fleet.post(owner.base + "/local", rpc("tools/call", register, rid=2))
    assert "requestState" in first["result"] and "requestState" in second["result"]
    keepers = children_of(owner._process().pid)
    processes = keepers + [p for k in keepers for p in children_of(k)]
    assert len(keepers) >= 2  # the two parked calls' processes, and the shared one
    owner.kill9()
    for pid in processes:
        await exited(pid)  # the processes went with their replica
    await until_dead(fleet, redis_server.url, owner)
    lost = rpc(
        "tools/call",
        {**greet, "requestState": first["result"]["requestState"], "inputResponses": ALICE},
        rid=3,
    )
    status, reply = await fleet.post(survivor.base + "/local", lost)
    assert status == 502 and "start the request again" in reply["error"]["message"]
    replayed = rpc(
        "tools/call",
        {**register, "requestState": second["result"]["requestState"], "inputResponses": ALICE},
        rid=4,
    )
    status, reply = await fleet.post(survivor.base + "/local", replayed)
    assert status == 200 and list(reply["result"]["inputRequests"]) == ["elicit.age+color"]
    profile = {"elicit.age+color": {"action": "accept", "content": {"age": 30, "color": "red"}}}
    params = {**register, "requestState": reply["result"]["requestState"]}
    done = rpc("tools/call", {**params, "inputResponses": profile}, rid=5)
    status, reply = await fleet.post(survivor.base + "/local", done)  # nothing left parked
    assert (
        reply["result"]["content"][0]["text"]
        == "Registered alice (age 30) with favourite color red"
    )
    assert await body_runs(fleet, "greet", run_id, "/local", via=survivor) == 1
    assert await body_runs(fleet, "register", run_id, "/local", via=survivor) == 2


async def test_replay_mode_needs_no_store_and_survives_any_replica(
    fleet: Fleet, modern, redis_server: RedisServer
) -> None:
    run_id = uuid.uuid4().hex
    reply = await drive(
        modern,
        {
            "op": "call_tool",
            "url": fleet.url(),
            "name": "progress_then_ask",
            "arguments": {"steps": 1, "run_id": run_id},
            "progress": True,
        },
    )
    assert reply["rounds"] == [["elicit.confirm"]]
    assert text_of(reply) == "done (accept)"
    # the second run answered the question from the journal sealed in requestState
    assert [p["message"] for p in reply["progress"]] == ["before 1", "before 1", "after 1"]
    assert await body_runs(fleet, "progress_then_ask", run_id) == 2  # one run per round, by design
    client = aioredis.from_url(redis_server.url)
    try:
        assert await client.keys(f"{fleet.prefix}{{*}}:rec") == []
    finally:
        await client.aclose()


async def test_redis_down_plain_requests_work_suspensions_fail_clearly_and_recover(
    fleet: Fleet, redis_server: RedisServer, legacy: LegacyServer
) -> None:
    redis_server.kill()
    try:
        status, listed = await fleet.post(fleet.url(), rpc("tools/list"))
        assert status == 200 and listed["result"]["tools"]
        status, echoed = await fleet.post(
            fleet.url(), rpc("tools/call", {"name": "echo", "arguments": {"text": "up"}})
        )
        assert echoed["result"]["content"][0]["text"] == "up"
        run_id = uuid.uuid4().hex
        status, reply = await fleet.post(
            fleet.url(), rpc("tools/call", {"name": "greet", "arguments": {"run_id": run_id}})
        )
        assert status == 503 and reply["error"]["code"] == -32603
        assert "127.0.0.1" not in reply["error"]["message"]  # no internals on the wire
        async with fleet.http.get(fleet.replicas[0].base + "/readyz") as resp:
            probe = await resp.json()
            assert resp.status == 503 and probe["store"] == "unreachable", probe
            assert probe["fleet"] == "lapsed", probe  # it resumes nothing until it beats
    finally:
        await asyncio.to_thread(redis_server.start)
    # Back when every replica is ready again: the store answers and each has renewed its
    # lease (a call parked on one before that would be refused on its retry, with 503).
    await until(lambda: all_ready(fleet))
    # its upstream call was released: the tool saw its question cancelled
    assert await await_journal(legacy.url, run_id, "cancel") == ["cancel"]
    status, first = await fleet.post(
        fleet.url(), rpc("tools/call", {"name": "greet", "arguments": {"run_id": "after"}})
    )
    assert first["result"]["resultType"] == "input_required"
    retry = rpc(
        "tools/call",
        {
            "name": "greet",
            "arguments": {"run_id": "after"},
            "requestState": first["result"]["requestState"],
            "inputResponses": ALICE,
        },
        rid=2,
    )
    status, reply = await fleet.post(fleet.url(), retry)
    assert reply.get("result", {}).get("content", [{}])[0].get("text") == "Hello, alice!", reply


async def test_sigterm_drains_parked_calls_whose_retries_still_complete(fleet: Fleet) -> None:
    draining, other = fleet.replicas[0], fleet.replicas[1]
    firsts = []
    for i in range(2):
        greet = {"name": "greet", "arguments": {"run_id": f"drain-{i}"}}
        status, first = await fleet.post(draining.base + "/mcp", rpc("tools/call", greet))
        firsts.append((greet, first["result"]["requestState"]))
    draining.send_signal(signal.SIGTERM)
    await draining.await_line('"event":"drain_started"', timeout=30)
    async with fleet.http.get(draining.base + "/readyz") as resp:
        assert resp.status == 503 and (await resp.json())["draining"]
    status, refused = await fleet.post(
        draining.base + "/mcp", rpc("tools/call", {"name": "greet", "arguments": {}})
    )
    assert status == 503 and refused["error"]["data"] == {"reason": "draining"}
    for index, (greet, state) in enumerate(firsts):
        target = (
            draining if index == 0 else other
        )  # directly, and forwarded through another replica
        retry = rpc("tools/call", {**greet, "requestState": state, "inputResponses": ALICE}, rid=9)
        status, reply = await fleet.post(target.base + "/mcp", retry)
        assert reply["result"]["content"][0]["text"] == "Hello, alice!"
    code = await asyncio.to_thread(draining.wait, 60)
    assert code == 0
    assert '"event":"drain_finished"' in draining.logs()
