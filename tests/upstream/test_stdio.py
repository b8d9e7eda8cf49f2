"""stdio upstreams with real processes (a tiny SDK-free server): framing, environment,
crashes, and process hygiene down to `kill -9` of the gateway. Waits are on process
exit (pidfd) and on messages, never on time."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from structlog.testing import capture_logs

from gateway.aio import spawn
from gateway.clock import SystemClock
from gateway.config import PoolLimits
from gateway.errors import UpstreamError, UpstreamExited
from gateway.protocol.capabilities import ClientCaps
from gateway.upstream.pool import SessionPool
from gateway.upstream.port import Inbox, StreamCursor, StreamEnd
from gateway.upstream.stdio.session import Command, StdioSession
from tests.peers.tooling import GatewayProcess
from tests.upstream.process_tools import children_of, exited

TINY = Path(__file__).resolve().parents[1] / "peers" / "tiny_stdio.py"
ASKING = ClientCaps(elicitation_form=True)


def command(**overrides: Any) -> Command:
    settings: dict[str, Any] = {"timeout_s": 10, **overrides}
    return Command(name="tiny", argv=(sys.executable, str(TINY)), **settings)


def text_of(reply: dict[str, Any]) -> str:
    return str(reply["result"]["content"][0]["text"])


async def call_tool(session: StdioSession, name: str, **arguments: Any) -> str:
    reply = await session.request("tools/call", {"name": name, "arguments": arguments})
    return text_of(reply)


async def test_a_session_is_a_process_that_relays_a_question_and_a_1_mib_message() -> None:
    session = StdioSession(command(), ASKING, clock=SystemClock())
    info = await session.open()
    try:
        assert info.server_info == {"name": "tiny", "version": "1"} and session.id is None
        assert len(await call_tool(session, "big", size=1 << 20)) == 1 << 20
        inbox = Inbox()
        session.attach(inbox)
        rid = session.next_id()
        message = {"jsonrpc": "2.0", "id": rid, "method": "tools/call"}
        message["params"] = {"name": "ask", "arguments": {}}
        pump = spawn(session.pump(message, inbox, StreamCursor()), name="pump")
        question = await inbox.get()
        assert question["method"] == "elicitation/create"
        await session.send(
            {
                "jsonrpc": "2.0",
                "id": "q1",
                "result": {"action": "accept", "content": {"name": "Ada"}},
            }
        )
        assert text_of(await inbox.get()) == "Hello, Ada!"
        await pump
    finally:
        await session.close()


async def test_a_message_over_the_cap_ends_the_session_with_a_clear_error() -> None:
    session = StdioSession(command(max_message_bytes=4096), ClientCaps(), clock=SystemClock())
    await session.open()
    try:
        with pytest.raises(UpstreamError, match="over 4096"):
            await call_tool(session, "big", size=10_000)
        assert not session.alive
    finally:
        await session.close()


async def test_the_child_gets_its_env_and_a_minimal_base_never_the_gateways_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MRTR_GATEWAY_SEALING_KEYS", "a-secret-sealing-key")
    monkeypatch.setenv("REDIS_PASSWORD", "hunter2")
    session = StdioSession(command(env={"API_TOKEN": "given"}), ClientCaps(), clock=SystemClock())
    await session.open()
    try:
        environ = json.loads(await call_tool(session, "environ"))
    finally:
        await session.close()
    assert environ["API_TOKEN"] == "given" and "PATH" in environ
    assert "MRTR_GATEWAY_SEALING_KEYS" not in environ and "REDIS_PASSWORD" not in environ
    assert not [k for k in environ if k.startswith("MRTR_KEEPER")]


async def test_closing_a_session_ends_its_whole_process_group() -> None:
    lingering = Command(name="tiny", argv=(sys.executable, str(TINY), "--linger"))
    session = StdioSession(lingering, ClientCaps(), clock=SystemClock())
    await session.open()
    server = int(await call_tool(session, "pid"))
    grandchild = int(await call_tool(session, "spawn"))
    assert session.pid is not None
    keeper = session.pid
    await session.close()
    for pid in (keeper, server, grandchild):
        await exited(pid)


async def test_a_crash_mid_call_fails_that_call_clearly_and_the_next_call_works() -> None:
    pool = SessionPool(
        "tiny",
        lambda caps: StdioSession(command(), caps, clock=SystemClock()),
        PoolLimits(min_idle=0),
    )
    try:
        session = await pool.acquire(ClientCaps(), "alice")
        inbox = Inbox()
        session.attach(inbox)
        message = {"jsonrpc": "2.0", "id": session.next_id(), "method": "tools/call"}
        message["params"] = {"name": "crash", "arguments": {}}
        with capture_logs() as logs:
            await session.pump(message, inbox, StreamCursor())
            end = await inbox.get()
        assert isinstance(end, StreamEnd) and isinstance(end.error, UpstreamExited)
        assert "exited with status 3" in end.error.message
        assert "tiny stdio server starting" in end.error.message  # its last stderr line
        [exit_line] = [e for e in logs if e["event"] == "upstream_process_exited"]
        assert exit_line["status"] == 3 and "tiny stdio server starting" in exit_line["last_stderr"]
        pool.release(session, reuse=True)  # dead: closed, not kept
        again = await pool.acquire(ClientCaps(), "alice")
        assert again is not session
        reply = await again.request("tools/call", {"name": "echo", "arguments": {"text": "ok"}})
        assert text_of(reply) == "ok"
        pool.release(again, reuse=True)
    finally:
        await pool.close()


async def test_a_server_that_cannot_start_is_a_clear_error_and_is_not_restarted_in_a_loop() -> None:
    broken = Command(name="broken", argv=(sys.executable, "-c", "import sys; sys.exit(5)"))
    pool = SessionPool(
        "broken",
        lambda caps: StdioSession(broken, caps, clock=SystemClock()),
        PoolLimits(min_idle=0),
        restart_backoff_s=60,
    )
    try:
        with pytest.raises(UpstreamError, match="exited with status 5"):
            await pool.acquire(ClientCaps(), "alice")
        with pytest.raises(UpstreamError, match="failed to start 1 time"):
            await pool.acquire(ClientCaps(), "alice")  # within the backoff: no new process
        assert not await pool.check()
    finally:
        await pool.close()


async def test_a_gateway_killed_with_sigkill_leaves_no_process_behind() -> None:
    command = f"{sys.executable} {TINY} --linger"  # a server that outlives its stdin
    gateway = await asyncio.to_thread(GatewayProcess, argv=["--upstream-command", command])
    try:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "spawn",
                "arguments": {},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        }
        headers = {
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "tools/call",
            "Mcp-Name": "spawn",
        }
        async with aiohttp.ClientSession() as http:
            async with http.post(gateway.url(), json=body, headers=headers) as r:
                grandchild = int((await r.json())["result"]["content"][0]["text"])
        keepers = children_of(gateway._process().pid)
        everyone = keepers + [p for k in keepers for p in children_of(k)] + [grandchild]
        assert len(keepers) >= 2  # the shared session's process and the call's
    finally:
        gateway.kill9()
        gateway.stop()
    for pid in everyone:
        await exited(pid)


async def test_a_response_with_an_odd_id_is_ignored_and_the_session_goes_on() -> None:
    session = StdioSession(command(), ClientCaps(), clock=SystemClock())
    await session.open()
    try:
        assert await call_tool(session, "odd_id") == "still here"
        assert await call_tool(session, "echo", text="ok") == "ok" and session.alive
    finally:
        await session.close()


async def test_a_server_that_stops_reading_is_retired_after_the_timeout_not_waited_on() -> None:
    session = StdioSession(command(timeout_s=1), ClientCaps(), clock=SystemClock())
    await session.open()
    try:
        assert await call_tool(session, "deaf") == "not listening"
        with pytest.raises(UpstreamError):  # a 1 MiB request fills the pipe nobody reads
            await asyncio.wait_for(call_tool(session, "echo", text="x" * (1 << 20)), 10)
        assert not session.alive
    finally:
        await session.close()
