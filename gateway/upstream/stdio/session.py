"""A legacy server as a child process: one process is one session (`UpstreamSession`).

A stdio server has exactly one client, so the gateway starts a process per
session, initialises it once and lends it to one call at a time, as it lends an
HTTP session. The process runs under `keeper.py` in a process group of its own,
so closing the session, stopping the gateway or killing it with `kill -9` ends
the server and everything it started. Messages are newline-delimited JSON with
no 64 KiB line limit (the cap is `max_message_bytes`); stderr goes to the log a
line at a time, tagged with the upstream's name. A process that exits fails the
call it was serving with a clear error; the pool starts another.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from gateway.aio import cancel_and_wait, spawn
from gateway.clock import Clock
from gateway.errors import UpstreamError, UpstreamExited
from gateway.protocol.capabilities import ClientCaps
from gateway.protocol.lines import LineReader, MessageTooLarge, decode_line, encode_line
from gateway.upstream.duplex import DuplexSession

log = structlog.get_logger("gateway.upstream")

KEEPER = Path(__file__).with_name("keeper.py")
#: What a child gets of the gateway's own environment; everything else it is given explicitly.
BASE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "USER", "LOGNAME")
_READ_CHUNK = 256 * 1024
_STOP_GRACE_S = 2.0
_STDERR_LINES_PER_S = 50


@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    """How to start one stdio server."""

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    timeout_s: float = 30.0
    max_message_bytes: int = 16 * 1024 * 1024
    client_version: str = "0.1.0"

    def child_env(self, gateway_env: Mapping[str, str]) -> dict[str, str]:
        """The child's environment: a minimal base from the gateway's, plus `env`.

        Never the gateway's whole environment: it holds sealing keys and store passwords.
        """
        env = {k: gateway_env[k] for k in BASE_ENV if k in gateway_env}
        env.update(self.env)
        return env


class StdioSession(DuplexSession):
    def __init__(self, command: Command, caps: ClientCaps, *, clock: Clock) -> None:
        super().__init__(
            command.name, caps, timeout_s=command.timeout_s, client_version=command.client_version
        )
        self.command = command
        self.clock = clock  # the window its stderr lines are counted in
        self.proc: asyncio.subprocess.Process | None = None
        self._readers: list[asyncio.Task[None]] = []
        self._write_lock = asyncio.Lock()
        self._last_stderr = ""
        self._stopping = False  # the gateway is ending the process: its exit is expected

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    async def _connect(self) -> None:
        env = self.command.child_env(os.environ)
        env["MRTR_KEEPER_PARENT"] = str(os.getpid())
        env["MRTR_KEEPER_GRACE_S"] = str(_STOP_GRACE_S)
        try:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-S",
                str(KEEPER),
                *self.command.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                cwd=self.command.cwd,
                start_new_session=True,
            )
        except OSError as exc:
            raise UpstreamError(f"cannot start the stdio server: {exc}") from exc
        log.info("upstream_process_started", upstream=self.name, pid=self.proc.pid)
        self._readers = [
            spawn(self._read_stdout(), name=f"stdio-out-{self.name}", detached=True),
            spawn(self._read_stderr(), name=f"stdio-err-{self.name}", detached=True),
        ]

    async def _write(self, message: dict[str, Any]) -> None:
        proc = self.proc
        if proc is None or proc.stdin is None:
            raise UpstreamError("the stdio server is not running")
        data = encode_line(message)
        if len(data) > self.command.max_message_bytes:
            raise UpstreamError(f"a message of {len(data)} bytes is over the stdio cap")
        async with self._write_lock:
            try:
                proc.stdin.write(data)
                await proc.stdin.drain()
            except (ConnectionError, RuntimeError) as exc:
                raise self._ended or UpstreamError("the stdio server stopped reading") from exc

    async def _disconnect(self) -> None:
        """Close stdin, then end the process group (the keeper does: TERM, then KILL)."""
        proc = self.proc
        if proc is None:
            return
        self._stopping = True
        if proc.returncode is None:
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                proc.send_signal(signal.SIGTERM)
                async with asyncio.timeout(_STOP_GRACE_S + 2):
                    await proc.wait()
            except ProcessLookupError:
                pass
            except TimeoutError:
                os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
        self._lost(UpstreamError("the stdio session was closed"))
        for reader in self._readers:
            await cancel_and_wait(reader)
        # The pipes close with the process transport; asyncio's Process has no public close.
        transport = getattr(proc, "_transport", None)
        if transport is not None:
            transport.close()
        log.info("upstream_process_ended", upstream=self.name, pid=proc.pid, status=proc.returncode)

    async def _read_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        lines = LineReader(self.command.max_message_bytes)
        try:
            while chunk := await self.proc.stdout.read(_READ_CHUNK):
                for line in lines.feed(chunk):
                    message = decode_line(line)
                    if message is None:
                        log.warning("upstream_sent_bad_json", upstream=self.name)
                    else:
                        self._deliver(message)
        except MessageTooLarge as exc:
            log.warning("upstream_message_too_large", upstream=self.name, error=str(exc))
            self._retire(UpstreamError(f"the stdio server sent {exc}"))
            return
        except Exception as exc:  # noqa: BLE001 - whatever broke the reader, the session is dead
            log.exception("upstream_reader_failed", upstream=self.name)
            self._retire(UpstreamError(f"reading the stdio server failed: {type(exc).__name__}"))
            return
        status = await self.proc.wait()
        if self._stopping:
            return  # closed on purpose; `_disconnect` logs the ending
        detail = f": {self._last_stderr}" if self._last_stderr else ""
        log.warning(
            "upstream_process_exited",
            upstream=self.name,
            status=status,
            last_stderr=self._last_stderr or None,
        )
        self._lost(UpstreamExited(f"the stdio server exited with status {status}{detail}"))

    async def _read_stderr(self) -> None:
        """Each line to the log at info (stderr is not only errors), rate-limited."""
        assert self.proc is not None and self.proc.stderr is not None
        lines = LineReader(64 * 1024)
        clock = self.clock
        window, count, dropped = clock.monotonic(), 0, 0
        while chunk := await self.proc.stderr.read(_READ_CHUNK):
            try:
                batch = lines.feed(chunk)
            except MessageTooLarge:
                lines = LineReader(64 * 1024)
                batch = [b"(a line over 64 KiB was dropped)"]
            for raw in batch:
                text = raw.decode("utf-8", "replace")
                self._last_stderr = text[-300:]
                if clock.monotonic() - window >= 1.0:
                    if dropped:
                        log.info("upstream_stderr_dropped", upstream=self.name, lines=dropped)
                    window, count, dropped = clock.monotonic(), 0, 0
                count += 1
                if count > _STDERR_LINES_PER_S:
                    dropped += 1
                    continue
                log.info("upstream_stderr", upstream=self.name, pid=self.proc.pid, line=text)
