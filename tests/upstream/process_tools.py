"""Watching processes from tests: who a process's children are, and waiting for one to end
(pidfd: an event, not a poll)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path


def children_of(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(p) for p in (task / "children").read_text().split()]
    return found


async def exited(pid: int, timeout_s: float = 10.0) -> None:
    """Until process `pid` has ended."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    woken = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_reader(fd, woken.set)
    try:
        async with asyncio.timeout(timeout_s):
            await woken.wait()
    finally:
        loop.remove_reader(fd)
        os.close(fd)
