"""Where events go: what a sink is, the log stream, and a file.

A sink's `write` takes an event (its object and its JSON line) and returns at once, on
the event loop, whatever the sink's state: it never awaits and never raises to its
caller (`gateway.audit.trail.Audit` keeps it so).

- `LogSink`: each event is an `audit` line of the log stream (its object under `audit`),
  written whatever `logging.level` says: request logs are filtered by level, an audit
  trail is not.
- `FileSink`: each event is a line of JSON appended to a file. Lines are written as the
  event loop's current step ends, all those of the step in one `write`, to a descriptor
  opened with `O_APPEND` (so a file shared by several replicas of one host gets whole
  batches, never interleaved bytes). What a `kill -9` can lose is the step it interrupts,
  no more. A write that fails (a disk full, the folder gone) keeps the lines in the
  backlog and is tried again after 0.1 s, then longer, up to 5 s. `reopen` (on `SIGHUP`,
  after logrotate moved the file) writes what is held to the file it has open, closes it
  and opens the path again.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from typing import Any, Protocol

import structlog

from gateway.audit.backlog import Backlog
from gateway.audit.metrics import AuditMetrics
from gateway.clock import Backoff, Clock, Timer

log = structlog.get_logger("gateway.audit")

#: The most events written in one `write` (or one Redis command).
BATCH = 512
#: Between tries of a sink that cannot write.
RETRY = Backoff(0.1, 5.0)


class Sink(Protocol):
    name: str

    def write(self, event: Mapping[str, Any], line: bytes) -> None:
        """Take one event: `event` as an object, `line` its JSON (no newline)."""
        ...

    def start(self) -> None:
        """Begin (on the running loop): open what it writes to, start its writer."""
        ...

    def reopen(self) -> None:
        """Open anew what the sink writes to (a file moved by logrotate)."""
        ...

    async def close(self) -> None:
        """Write what is held, within a bound; what cannot be is counted as dropped."""
        ...


class LogSink:
    """`audit` lines of the log stream, in its format, at every level."""

    name = "log"

    def __init__(self, metrics: AuditMetrics) -> None:
        self._written = metrics.written.labels(self.name)
        self._logger: Any = None

    def _made(self) -> Any:
        # The configured chain and output (`gateway.logging.configure`), without its level.
        config = structlog.get_config()
        self._logger = structlog.wrap_logger(
            config["logger_factory"](),
            processors=config["processors"],
            wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        )
        return self._logger

    def write(self, event: Mapping[str, Any], line: bytes) -> None:
        (self._logger or self._made()).info("audit", audit=event)
        self._written.inc()

    def start(self) -> None:
        self._made()  # the logging configured by now, whatever was before

    def reopen(self) -> None:
        pass

    async def close(self) -> None:
        pass


_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)


class FileSink:
    """JSON lines appended to `path` (see the module docstring)."""

    name = "file"

    def __init__(self, path: str, *, bound: int, metrics: AuditMetrics, clock: Clock) -> None:
        self.path = path
        self.clock = clock
        self.backlog: Backlog[bytes] = Backlog(self.name, bound, metrics)
        self._fd: int | None = None
        # A batch being written: its bytes not written yet, and how many events it holds.
        self._pending = memoryview(b"")
        self._pending_events = 0
        self._flush_soon = False
        self._retry: Timer | None = None
        self._failures = 0

    def write(self, event: Mapping[str, Any], line: bytes) -> None:
        self.backlog.add(line + b"\n")
        if not self._flush_soon and self._retry is None:
            self._flush_soon = True
            asyncio.get_running_loop().call_soon(self._flush)

    def start(self) -> None:
        self._open()

    def _open(self) -> bool:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, _FLAGS, 0o640)
            except OSError as exc:
                self._failed(exc)
                return False
        return True

    def _flush(self) -> None:
        """Write everything held, in batches; on failure, try again later."""
        self._flush_soon = False
        self._retry = None
        if not self._open():
            return
        assert self._fd is not None
        try:
            while self._pending or self.backlog:
                if not self._pending:
                    lines = self.backlog.take(BATCH)
                    self._pending, self._pending_events = memoryview(b"".join(lines)), len(lines)
                written = os.write(self._fd, self._pending)
                self._pending = self._pending[written:]
                if not self._pending:
                    self.backlog.wrote(self._pending_events)
                    self._pending_events = 0
        except OSError as exc:
            self._close_fd()  # opened again at the next try: the path may be back
            self._failed(exc)
            return
        self._failures = 0

    def _failed(self, exc: OSError) -> None:
        self.backlog.failed(f"{self.path}: {exc.strerror or exc}")
        self._failures += 1
        if self._retry is None:
            when = self.clock.monotonic() + RETRY.delay(self._failures)
            self._retry = self.clock.call_at(when, self._flush)

    def _close_fd(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.close(fd)
            except OSError:
                pass  # closed all the same

    def reopen(self) -> None:
        """Write what is held to the file open now, then open the path again (logrotate
        moved the file away and sent SIGHUP)."""
        if self._fd is not None and self._retry is None:
            self._flush()
        self._close_fd()
        if self._retry is None:
            self._open()
        log.info("audit_file_reopened", path=self.path)

    async def close(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        self._flush()
        if self._retry is not None:  # it failed: what is held is lost with the process
            self._retry.cancel()
            self._retry = None
        left = len(self.backlog) + self._pending_events
        self.backlog.take(len(self.backlog))
        self._pending, self._pending_events = memoryview(b""), 0
        self.backlog.drop(left, why="stopped before it could be written")
        self._close_fd()
