"""A scripted legacy server behind the upstream port (`gateway.upstream.port`).

The test plays the server: it waits for the gateway's call requests
(`next_call`), says things on the call's stream (`ask`, `notify`, `respond`,
`break_stream`), and reads what the gateway sent back (`next_sent`). Everything
is an awaited event; nothing sleeps.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.aio import spawn
from gateway.errors import UpstreamError
from gateway.protocol.capabilities import ClientCaps
from gateway.protocol.translate import UpstreamInfo
from gateway.protocol.versions import UPSTREAM_VERSIONS, Version
from gateway.upstream.held import HeldQuestions
from gateway.upstream.port import Inbox, SessionExpired, StreamCursor, StreamEnd, TaskPump

INFO = UpstreamInfo(
    protocol_version=UPSTREAM_VERSIONS[0].value,
    capabilities={"tools": {}},
    server_info={"name": "scripted", "version": "1"},
    instructions=None,
)


@dataclass
class Sent:
    session: ScriptedSession
    message: dict[str, Any]


class ScriptedServer:
    """The server side of every session of one upstream."""

    def __init__(self) -> None:
        self.sessions: list[ScriptedSession] = []
        self.calls: asyncio.Queue[ScriptedSession] = asyncio.Queue()
        self.sent: asyncio.Queue[Sent] = asyncio.Queue()
        self.forgotten: set[str] = set()  # session ids adopt() no longer finds
        self.unreachable = False
        self.resumable = True  # gives SSE event ids, so another replica can take over
        self.adoptable = True  # False: a session is a process or a connection (stdio, SSE)
        self.adopt_gate: asyncio.Event | None = None  # set: adopt() waits for it
        self.adopt_waiting = asyncio.Event()  # an adopt() is waiting at the gate
        self._ids = itertools.count(1)

    def new_session(self, caps: ClientCaps, session_id: str | None = None) -> ScriptedSession:
        session = ScriptedSession(self, caps, session_id or f"s{next(self._ids)}")
        if not self.adoptable:
            session.id = None
        self.sessions.append(session)
        return session

    async def next_call(self, timeout_s: float = 5.0) -> ScriptedSession:
        """The session on which the gateway sent (or resumed) its next call."""
        async with asyncio.timeout(timeout_s):
            return await self.calls.get()

    async def next_sent(self, timeout_s: float = 5.0) -> dict[str, Any]:
        """The next message the gateway sent on any session (answers, cancellations)."""
        async with asyncio.timeout(timeout_s):
            return (await self.sent.get()).message

    def nothing_sent(self) -> bool:
        return self.sent.empty()


class ScriptedSession:
    def __init__(self, server: ScriptedServer, caps: ClientCaps, session_id: str) -> None:
        self.server = server
        self.caps = caps
        self.version: Version = UPSTREAM_VERSIONS[0]
        self.info: UpstreamInfo | None = INFO
        self.id: str | None = session_id
        self.principal: str | None = None  # whose, once acquired or adopted
        self.held = HeldQuestions()
        self.request: dict[str, Any] | None = None
        self.resumed_after: str | None = None  # Last-Event-ID of a takeover
        self.headers: Mapping[str, str] | None = None
        self._owner: Inbox | None = None
        self._stream: Inbox | None = None
        self._cursor: StreamCursor | None = None
        self._done = asyncio.Event()
        self._ids = itertools.count(100)
        self._events = itertools.count(1)

    # -- the port ------------------------------------------------------------------------

    def next_id(self) -> str:
        return f"{self.id or 'p'}-{next(self._ids)}"

    def attach(self, inbox: Inbox) -> None:
        self._owner = inbox

    def detach(self, inbox: Inbox) -> None:
        if self._owner is inbox:
            self._owner = None

    async def start(
        self,
        message: dict[str, Any],
        inbox: Inbox,
        cursor: StreamCursor,
        headers: Mapping[str, str] | None = None,
    ) -> TaskPump:
        self.request, self.headers = message, headers
        return TaskPump(spawn(self._serve(inbox, cursor), name="scripted-call"))

    async def pump_resumed(self, rid: Any, inbox: Inbox, cursor: StreamCursor) -> None:
        self.request = {"jsonrpc": "2.0", "id": rid, "method": "(resumed)"}
        self.resumed_after = cursor.last_id
        if cursor.live is not None:
            cursor.live.set()  # the scripted stream is live at once
        await self._serve(inbox, cursor)

    async def _serve(self, inbox: Inbox, cursor: StreamCursor) -> None:
        self._stream, self._cursor = inbox, cursor
        cursor.accepted = True
        self.server.calls.put_nowait(self)
        await self._done.wait()

    async def send(self, message: dict[str, Any]) -> None:
        if self.server.unreachable:
            raise UpstreamError("scripted upstream unreachable")
        self.server.sent.put_nowait(Sent(self, message))

    # -- the server speaking ---------------------------------------------------------------

    @property
    def call_id(self) -> Any:
        assert self.request is not None, "no call on this session"
        return self.request["id"]

    def _say(self, message: dict[str, Any]) -> None:
        assert self._stream is not None and self._cursor is not None
        if self.server.resumable:
            self._cursor.last_id = f"{self.id}-event-{next(self._events)}"
        self._stream.put_nowait(message)

    def ask(self, rid: Any, method: str, params: dict[str, Any]) -> None:
        self._say({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})

    def elicit(self, rid: Any, field: str = "username", message: str = "Name?") -> None:
        self.ask(
            rid,
            "elicitation/create",
            {
                "message": message,
                "requestedSchema": {
                    "type": "object",
                    "properties": {field: {"type": "string"}},
                    "required": [field],
                },
            },
        )

    def on_standalone(self, message: dict[str, Any]) -> None:
        """A message on the session's other stream (mcp 1.x sends sampling and roots there)."""
        assert self._owner is not None
        self._owner.put_nowait(message)

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self._say({"jsonrpc": "2.0", "method": method, "params": params})

    def respond(self, result: dict[str, Any] | None = None, error: dict[str, Any] | None = None):
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": self.call_id}
        if error is not None:
            reply["error"] = error
        else:
            reply["result"] = result if result is not None else {"content": []}
        self._say(reply)
        self._done.set()

    def break_stream(self, reason: str = "connection reset") -> None:
        assert self._stream is not None
        self._stream.put_nowait(StreamEnd(UpstreamError(reason)))
        self._done.set()


class ScriptedPool:
    """Implements `gateway.upstream.port.UpstreamPool` over a `ScriptedServer`."""

    def __init__(self, server: ScriptedServer) -> None:
        self.server = server
        self.info: UpstreamInfo | None = INFO
        self.released: list[tuple[ScriptedSession, bool]] = []
        self.adopted: list[str] = []
        self.discarded: list[ScriptedSession] = []

    @property
    def size(self) -> int:
        return len(self.server.sessions) - len(self.released)

    def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def check(self) -> bool:
        return not self.server.unreachable

    async def acquire(self, caps: ClientCaps, principal: str) -> ScriptedSession:
        if self.server.unreachable:
            raise UpstreamError("scripted upstream unreachable")
        session = self.server.new_session(caps)
        session.principal = principal
        return session

    async def adopt(
        self, caps: ClientCaps, principal: str, session_id: str, version: Version
    ) -> ScriptedSession:
        if session_id in self.server.forgotten:
            raise SessionExpired()
        if self.server.unreachable:
            raise UpstreamError("scripted upstream unreachable")
        if self.server.adopt_gate is not None:
            self.server.adopt_waiting.set()
            await self.server.adopt_gate.wait()
        self.adopted.append(session_id)
        session = self.server.new_session(caps, session_id)
        session.principal = principal
        return session

    def release(self, session: Any, *, reuse: bool) -> None:
        self.released.append((session, reuse))

    def discard(self, session: Any) -> None:
        self.discarded.append(session)

    def released_reuse(self, session: ScriptedSession) -> bool | None:
        for each, reuse in self.released:
            if each is session:
                return reuse
        return None

    async def request(
        self,
        caps: ClientCaps,
        principal: str | None,
        method: str,
        params: dict[str, Any] | None,
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        raise AssertionError(f"a plain request ({method}) reached the call core's upstream")

    async def upstream_info(self) -> UpstreamInfo:
        return INFO
