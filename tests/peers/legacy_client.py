"""A legacy (2025) client built with the official `mcp` 1.x SDK (run in the legacy venv).

Long-lived: reads one JSON command per line on stdin, answers one JSON line on stdout.
Sessions outlive commands: `open` starts a `ClientSession` over `streamable_http_client`
(initialize, notifications/initialized, the standalone GET stream) and keeps it under a
name, later commands use it, `close` ends it (DELETE). The server's requests are answered
by the SDK's callbacks, as a 2025 host answers them:

- elicitation: `answers[message]` if the session was opened with one for that message,
  else accept with content synthesised from the requested schema (strings "alice",
  integers 30, booleans true, ...); URL mode: accept;
- sampling: an assistant message "SAMPLED[<prompt text>]" from "fake-model";
- roots: two file:// roots.

Each answer says what the callbacks saw since the command began (`seen`), and a GET
stream's answers are counted as they come (httpx's response hook), so a test can wait
until the session's stream is held (`get_streams`) before asking for what a server sends
on it (mcp 1.x sends `sampling/createMessage` and `roots/list` there).

Commands ({"op": ...}):
  open      {"session", "url", "token"?, "caps"?: ["elicitation","sampling","roots"], "answers"?}
            -> {"initialize": InitializeResult, "session_id", "get_stream": bool}
  call      {"session", "name", "arguments"?, "progress"?: bool}
            -> {"result", "seen", "progress", "logs"}
  request   {"session", "method": list_tools | list_prompts | list_resources |
             list_resource_templates | get_prompt | read_resource | complete | ping |
             set_logging_level | subscribe | unsubscribe, "args"?} -> {"result"}
  token     {"session", "token"}: the Authorization sent from now on (a refreshed token)
  get_streams {"session", "count", "timeout"?} -> {"statuses": [GET answer statuses]}
  close     {"session"} -> {"closed": true}
  script    {"url", "token"?, "steps": [call or request commands without "session"]}
            -> {"initialize", "steps": [answers]}: a session of its own, opened and closed
An MCP error is answered {"error": {code, message, data}}; a failure {"crash", "trace"}.
"""

from __future__ import annotations

import asyncio
import json
import sys
import traceback
from typing import Any

import httpx
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError
from pydantic import AnyUrl

ROOTS = [
    types.Root(uri=AnyUrl("file:///srv/peers-root-a"), name="root-a"),
    types.Root(uri=AnyUrl("file:///srv/peers-root-b"), name="root-b"),
]
GET_STREAM_WAIT_S = 10.0


def synthesise(schema: dict[str, Any]) -> dict[str, Any]:
    content: dict[str, Any] = {}
    for name, prop in (schema.get("properties") or {}).items():
        kind = prop.get("type")
        if kind in ("integer", "number"):
            content[name] = 30
        elif kind == "boolean":
            content[name] = True
        elif name == "color":
            content[name] = "green"
        elif name == "city":
            content[name] = "Paris"
        elif name == "topic":
            content[name] = "autumn"
        else:
            content[name] = "alice"
    return content


def dump(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


class Session:
    """One client session held open across commands."""

    def __init__(self, url: str, token: str | None, caps: set[str], answers: dict[str, Any]):
        self.url = url
        self.caps = caps
        self.answers = answers
        self.seen: dict[str, Any] = {}
        self.logs: list[dict[str, Any]] = []
        self.gets: list[int] = []
        self.gets_changed = asyncio.Event()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(30, read=300),
            event_hooks={"response": [self._on_response]},
        )
        self.session: ClientSession | None = None
        self.opened: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.closing = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._hold())
        self.reset()

    def reset(self) -> None:
        self.seen = {"elicitations": [], "samplings": [], "roots": 0}
        self.logs = []

    async def _on_response(self, response: httpx.Response) -> None:
        if response.request.method == "GET":
            self.gets.append(response.status_code)
            self.gets_changed.set()

    async def _hold(self) -> None:
        try:
            async with (
                self.http,
                streamable_http_client(self.url, http_client=self.http) as (
                    read,
                    write,
                    session_id,
                ),
            ):
                async with ClientSession(
                    read,
                    write,
                    elicitation_callback=self._elicit if "elicitation" in self.caps else None,
                    sampling_callback=self._sample if "sampling" in self.caps else None,
                    list_roots_callback=self._roots if "roots" in self.caps else None,
                    logging_callback=self._log,
                ) as session:
                    self.session = session
                    initialized = await session.initialize()
                    held = await self.wait_gets(1, GET_STREAM_WAIT_S)
                    self.opened.set_result(
                        {
                            "initialize": dump(initialized),
                            "session_id": session_id(),
                            "get_stream": bool(held) and held[0] == 200,
                        }
                    )
                    await self.closing.wait()
        except BaseException as exc:  # noqa: BLE001 - reported to whoever waits
            if not self.opened.done():
                self.opened.set_exception(exc)
            raise

    async def wait_gets(self, count: int, timeout: float) -> list[int]:
        try:
            async with asyncio.timeout(timeout):
                while len(self.gets) < count:
                    self.gets_changed.clear()
                    await self.gets_changed.wait()
        except TimeoutError:
            pass
        return list(self.gets)

    async def _elicit(self, context: Any, params: Any) -> Any:
        data = dump(params)
        self.seen["elicitations"].append(data)
        answer = self.answers.get(data.get("message", ""))
        if answer is not None:
            return types.ElicitResult.model_validate(answer)
        if data.get("mode") == "url":
            return types.ElicitResult(action="accept")
        return types.ElicitResult(
            action="accept", content=synthesise(data.get("requestedSchema") or {})
        )

    async def _sample(self, context: Any, params: Any) -> Any:
        text = " ".join(
            m.content.text for m in params.messages if isinstance(m.content, types.TextContent)
        )
        self.seen["samplings"].append(text)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=f"SAMPLED[{text}]"),
            model="fake-model",
            stopReason="endTurn",
        )

    async def _roots(self, context: Any) -> Any:
        self.seen["roots"] += 1
        return types.ListRootsResult(roots=ROOTS)

    async def _log(self, params: Any) -> None:
        self.logs.append(dump(params))

    async def close(self) -> None:
        self.closing.set()
        await self.task


async def call(session: Session, step: dict[str, Any]) -> dict[str, Any]:
    assert session.session is not None
    session.reset()
    progress: list[dict[str, Any]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append({"progress": value, "total": total, "message": message})

    result = await session.session.call_tool(
        step["name"],
        step.get("arguments") or {},
        progress_callback=on_progress if step.get("progress") else None,
    )
    return {
        "result": dump(result),
        "seen": session.seen,
        "progress": progress,
        "logs": session.logs,
    }


async def request(session: Session, step: dict[str, Any]) -> dict[str, Any]:
    client = session.session
    assert client is not None
    session.reset()
    method, args = step["method"], step.get("args") or {}
    if method == "list_tools":
        result: Any = await client.list_tools()
    elif method == "list_prompts":
        result = await client.list_prompts()
    elif method == "list_resources":
        result = await client.list_resources()
    elif method == "list_resource_templates":
        result = await client.list_resource_templates()
    elif method == "get_prompt":
        result = await client.get_prompt(args["name"], args.get("arguments"))
    elif method == "read_resource":
        result = await client.read_resource(AnyUrl(args["uri"]))
    elif method == "complete":
        ref = types.PromptReference(type="ref/prompt", name=args["prompt"])
        result = await client.complete(ref, args["argument"])
    elif method == "ping":
        result = await client.send_ping()
    elif method == "set_logging_level":
        result = await client.set_logging_level(args["level"])
    elif method == "subscribe":
        result = await client.subscribe_resource(AnyUrl(args["uri"]))
    elif method == "unsubscribe":
        result = await client.unsubscribe_resource(AnyUrl(args["uri"]))
    else:
        raise ValueError(f"unknown method {method}")
    return {"result": dump(result), "seen": session.seen, "logs": session.logs}


SESSIONS: dict[str, Session] = {}


async def step_on(session: Session, step: dict[str, Any]) -> dict[str, Any]:
    try:
        if step["op"] == "call":
            return await call(session, step)
        return await request(session, step)
    except McpError as exc:
        error = exc.error
        return {"error": {"code": error.code, "message": error.message, "data": error.data}}


async def open_session(command: dict[str, Any]) -> Session:
    caps = set(command.get("caps", ["elicitation", "sampling", "roots"]))
    return Session(command["url"], command.get("token"), caps, command.get("answers") or {})


async def run(command: dict[str, Any]) -> dict[str, Any]:
    op = command["op"]
    if op == "open":
        session = await open_session(command)
        opened = await session.opened
        SESSIONS[command["session"]] = session
        return opened
    if op == "script":
        session = await open_session(command)
        opened = await session.opened
        try:
            steps = [await step_on(session, step) for step in command["steps"]]
        finally:
            await session.close()
        return {**opened, "steps": steps}
    session = SESSIONS[command["session"]]
    if op in ("call", "request"):
        return await step_on(session, command)
    if op == "token":
        session.http.headers["Authorization"] = f"Bearer {command['token']}"
        return {"ok": True}
    if op == "get_streams":
        statuses = await session.wait_gets(command["count"], command.get("timeout", 30.0))
        return {"statuses": statuses}
    if op == "close":
        del SESSIONS[command["session"]]
        await session.close()
        return {"closed": True}
    raise ValueError(f"unknown op {op}")


async def serve() -> None:
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            for session in list(SESSIONS.values()):
                await session.close()
            return
        command = json.loads(line)
        try:
            reply = await run(command)
        except McpError as exc:
            error = exc.error
            reply = {"error": {"code": error.code, "message": error.message, "data": error.data}}
        except Exception as exc:  # report, keep serving
            reply = {"crash": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(serve())
