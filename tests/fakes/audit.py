"""An audit sink that keeps what it is given, for tests to read (implements
`gateway.audit.sinks.Sink`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.audit.trail import Audit
from gateway.clock import Clock
from gateway.protocol.audit import NO_CONTENT, ContentPolicy


class KeptSink:
    name = "kept"

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.lines: list[bytes] = []

    def write(self, event: Mapping[str, Any], line: bytes) -> None:
        self.events.append(dict(event))
        self.lines.append(line)

    def start(self) -> None:
        pass

    def reopen(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def kinds(self) -> list[str]:
        return [e["kind"] for e in self.events]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["kind"] == kind]


def kept_trail(
    replica: str, clock: Clock, policy: ContentPolicy = NO_CONTENT
) -> tuple[Audit, KeptSink]:
    """A trail of `replica` writing to a sink the test reads."""
    sink = KeptSink()
    return Audit(replica=replica, sinks=[sink], policy=policy, clock=clock), sink
