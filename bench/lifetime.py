"""How a bench script runs: SIGTERM and SIGINT cancel it, so that its `finally` blocks end,
by PID, the gateways and servers it started (`Gateway.stop`, `LegacyServer.stop`) rather
than leaving them running after it."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T], *, fast: bool = False) -> T:
    """Run `main` (on uvloop when `fast`) to its end; a SIGTERM or SIGINT cancels it and
    exits with 143 or 130 once its `finally` blocks have run."""
    stopped: list[int] = []

    async def guarded() -> T:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda sig=sig: (stopped.append(sig), task.cancel()))
        return await main

    with asyncio.Runner(loop_factory=uvloop.new_event_loop if fast else None) as runner:
        try:
            return runner.run(guarded())
        except asyncio.CancelledError:
            if not stopped:
                raise
            raise SystemExit(128 + stopped[0]) from None
