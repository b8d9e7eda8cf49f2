"""The official filesystem server (`@modelcontextprotocol/server-filesystem`) over stdio,
through the gateway, with the official mcp 2.x client.

It asks the client for `roots/list` once, right after `initialized`, and confines itself
to the directories it gets. Each 2026 client (its own bearer credential, its own
principal) declaring roots is asked that start-of-session question in the first round
of its first call, before the call reaches the server, and its session works in its own
roots from then on; another client, with other roots, in its own. Every question the server asks
gets exactly one answer: each process the gateway started says what became of its
roots (applied, or refused for a session no caller took in time), none times out.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from tests.peers.npm import filesystem_command
from tests.support.cases import drive, text_of

pytestmark = pytest.mark.peers

RUNS = 4  # new callers each run: a session (a process) of their own each
APPLIED = "Updated allowed directories from MCP roots"
REFUSED = "Failed to request initial roots from client"
NOT_ASKED = "Client does not support MCP Roots"  # the gateway's own session declares none


def stderr_lines(logs: list[dict[str, Any]]) -> list[str]:
    return [str(e.get("line", "")) for e in logs if e.get("event") == "upstream_stderr"]


def pending(logs: list[dict[str, Any]]) -> set[int]:
    """The processes started that neither said what became of their roots nor ended."""
    started = {e["pid"] for e in logs if e.get("event") == "upstream_process_started"}
    ended = {e["pid"] for e in logs if e.get("event") == "upstream_process_ended"}
    settled = {
        e["pid"]
        for e in logs
        if e.get("event") == "upstream_stderr"
        and any(outcome in str(e.get("line")) for outcome in (APPLIED, REFUSED, NOT_ASKED))
    }
    return started - ended - settled


async def list_allowed(modern: Any, url: str, who: str, root: Path) -> dict[str, Any]:
    return await drive(
        modern,
        {
            "op": "call_tool",
            "url": url,
            "name": "list_allowed_directories",
            "arguments": {},
            "caps": ["roots"],
            "roots": [{"uri": root.as_uri(), "name": root.name}],
            "token": who,
        },
    )


async def test_each_client_works_in_its_own_roots_and_every_question_is_answered(
    make_gateway: Any, modern: Any, tmp_path: Path
) -> None:
    dirs = {name: tmp_path / name for name in ("cli", "a", "b")}
    for folder in dirs.values():
        folder.mkdir()
    with capture_logs() as logs:
        gateway = await make_gateway(
            upstream={
                "command": filesystem_command(dirs["cli"]),
                # Sessions opened ahead ask too; none is taken in this test's time, so
                # their questions lapse (answered) within it.
                "pool": {"outside_question_s": 2.0},
            }
        )
        for run in range(RUNS):
            for who in ("a", "b"):
                caller = f"{who}-{run}"
                first = await list_allowed(modern, gateway.url, caller, dirs[who])
                # The server's start-of-session question, asked of this caller first (the
                # server applies the answer in the background: its first call may be
                # served before it is done, as it may be for a direct client).
                assert len(first["rounds"]) == 1 and first["seen"]["roots"] == 1, first
                for _ in range(2):
                    again = await list_allowed(modern, gateway.url, caller, dirs[who])
                    assert again["rounds"] == []  # its session knows its roots already
                    assert text_of(again).splitlines()[1:] == [str(dirs[who])], text_of(again)
        # Every process the gateway started says what became of its question (asked and
        # applied; answered once no caller came for it; none asked, for the gateway's own
        # session), or was ended (a session retired once its question was answered).
        async with asyncio.timeout(30):
            while unsettled := pending(logs):
                await asyncio.sleep(0.1)
    lines = stderr_lines(logs)
    assert sum(APPLIED in line for line in lines) == 2 * RUNS, lines
    assert not unsettled and not any("timed out" in line for line in lines), lines
