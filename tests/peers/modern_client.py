"""A 2026-07-28 client built with the official `mcp` 2.x SDK (run in the modern venv).

Long-lived: reads one JSON command per line on stdin, answers one JSON line on
stdout. Each command opens a `Client(url, mode="2026-07-28")` and drives one
request through the SDK's own multi-round-trip path, round by round, so the
test sees how many rounds there were and which keys each asked. Input requests
are answered by the SDK's callback table (`dispatch_input_request`):

- elicitation: `answers[key]` if the command gives one, else accept with content
  synthesised from the requested schema (strings "alice", integers 30, ...);
- sampling: an assistant message "SAMPLED[<prompt text>]" from "fake-model";
- roots: two file:// roots, or the command's `roots` ([{"uri", "name"}]).

Command: {"op": "call_tool"|"get_prompt"|"read_resource"|"list_tools"|"discover",
          "url", "name"|"uri", "arguments", "answers", "caps": ["elicitation","sampling","roots"],
          "progress": bool, "log_level": str|null, "max_rounds": int, "token": str|null,
          "roots": [{"uri", "name"}]}

or {"op": "listen", "url", "filter": {Client.listen's keywords}, "then": [{"name",
"arguments"}, ...], "events": n}: opens `Client.listen(...)`, calls each tool of `then` on
the same client once the listen is acknowledged, and reads `n` change events; it answers
what was honoured, the events ("tools", "prompts", "resources", "updated:<uri>"), the
tools listed after them, and how the stream ended ("read", "graceful" or "lost").
"""

from __future__ import annotations

import asyncio
import json
import sys
import traceback
from typing import Any

import mcp_types as types
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ResourceUpdated, SubscriptionLost
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

ROOTS = [
    types.Root(uri="file:///srv/peers-root-a", name="root-a"),
    types.Root(uri="file:///srv/peers-root-b", name="root-b"),
]


def synthesise(schema: dict[str, Any]) -> dict[str, Any]:
    content: dict[str, Any] = {}
    for name, prop in (schema.get("properties") or {}).items():
        kind = prop.get("type")
        if kind == "integer" or kind == "number":
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


async def run(command: dict[str, Any]) -> dict[str, Any]:
    answers: dict[str, Any] = command.get("answers") or {}
    caps = set(command.get("caps", ["elicitation", "sampling", "roots"]))
    seen: dict[str, Any] = {"elicitations": [], "samplings": [], "roots": 0}

    async def on_elicit(ctx: ClientRequestContext, params: Any) -> Any:
        data = dump(params)
        seen["elicitations"].append({"key": ctx.request_id, "params": data})
        if ctx.request_id in answers:
            return types.ElicitResult.model_validate(answers[ctx.request_id])
        if data.get("mode") == "url":
            return types.ElicitResult(action="accept")
        return types.ElicitResult(
            action="accept", content=synthesise(data.get("requestedSchema") or {})
        )

    async def on_sample(ctx: ClientRequestContext, params: Any) -> Any:
        text = " ".join(
            m.content.text for m in params.messages if isinstance(m.content, types.TextContent)
        )
        seen["samplings"].append({"key": ctx.request_id, "text": text})
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=f"SAMPLED[{text}]"),
            model="fake-model",
            stop_reason="endTurn",
        )

    roots = [types.Root(**root) for root in command["roots"]] if "roots" in command else ROOTS

    async def on_roots(ctx: ClientRequestContext) -> Any:
        seen["roots"] += 1
        return types.ListRootsResult(roots=roots)

    progress: list[dict[str, Any]] = []
    logs: list[dict[str, Any]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append({"progress": value, "total": total, "message": message})

    async def on_log(params: Any) -> None:
        logs.append(dump(params))

    server: Any = command["url"]
    if command.get("token"):  # a bearer token on every request, as an authorized client sends
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {command['token']}"})
        server = streamable_http_client(command["url"], http_client=http)
    client = Client(
        server,
        mode="2026-07-28",
        elicitation_callback=on_elicit if "elicitation" in caps else None,
        sampling_callback=on_sample if "sampling" in caps else None,
        list_roots_callback=on_roots if "roots" in caps else None,
        logging_callback=on_log,
        log_level=command.get("log_level"),
        cache=None,
    )
    rounds: list[list[str]] = []
    op = command["op"]
    async with client:
        session = client.session
        if op == "discover":
            return {"result": await session.send_discover("2026-07-28")}
        if op == "list_tools":
            return {"result": dump(await session.list_tools())}
        if op == "listen":
            return await listen(client, command)

        async def send(responses: Any, state: str | None) -> Any:
            common = {
                "input_responses": responses,
                "request_state": state,
                "allow_input_required": True,
            }
            if op == "call_tool":
                return await session.call_tool(
                    command["name"],
                    command.get("arguments") or {},
                    progress_callback=on_progress if command.get("progress") else None,
                    **common,
                )
            if op == "get_prompt":
                return await session.get_prompt(
                    command["name"], command.get("arguments") or {}, **common
                )
            if op == "read_resource":
                return await session.read_resource(command["uri"], **common)
            raise ValueError(f"unknown op {op}")

        result = await send(command.get("presupply"), None)
        while isinstance(result, types.InputRequiredResult):
            if len(rounds) >= command.get("max_rounds", 10):
                return {"rounds": rounds, "stuck": dump(result)}
            requests = result.input_requests or {}
            rounds.append(sorted(requests))
            responses: dict[str, Any] = {}
            for key, request in requests.items():
                reply = await session.dispatch_input_request(
                    ClientRequestContext(session=session, request_id=key), request
                )
                if isinstance(reply, types.ErrorData):
                    return {"rounds": rounds, "refused": dump(reply)}
                responses[key] = reply
            result = await send(responses, result.request_state)
        return {
            "rounds": rounds,
            "result": dump(result),
            "progress": progress,
            "logs": logs,
            "seen": seen,
        }


EVENT_NAMES = {
    "ToolsListChanged": "tools",
    "PromptsListChanged": "prompts",
    "ResourcesListChanged": "resources",
}


async def listen(client: Client, command: dict[str, Any]) -> dict[str, Any]:
    events: list[str] = []
    ended = "read"
    async with client.listen(**command.get("filter", {})) as subscription:
        honored = dump(subscription.honored)
        for step in command.get("then", []):
            await client.session.call_tool(step["name"], step.get("arguments") or {})
        try:
            async for event in subscription:
                if isinstance(event, ResourceUpdated):
                    events.append(f"updated:{event.uri}")
                else:
                    events.append(EVENT_NAMES[type(event).__name__])
                if len(events) >= command.get("events", 0) > 0:
                    break
            else:
                ended = "graceful"
        except SubscriptionLost:
            ended = "lost"
    tools = sorted(tool.name for tool in (await client.session.list_tools()).tools)
    return {"honored": honored, "events": events, "ended": ended, "tools": tools}


async def serve() -> None:
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        command = json.loads(line)
        try:
            reply = await run(command)
        except MCPError as exc:
            reply = {"error": {"code": exc.code, "message": exc.message, "data": exc.data}}
        except BaseExceptionGroup as group:
            found = group.subgroup(lambda e: isinstance(e, MCPError))
            if found is None:
                reply = {
                    "crash": f"{type(group).__name__}: {group}",
                    "trace": traceback.format_exc(),
                }
            else:
                exc = found.exceptions[0]
                while isinstance(exc, BaseExceptionGroup):
                    exc = exc.exceptions[0]
                reply = {"error": {"code": exc.code, "message": exc.message, "data": exc.data}}
        except Exception as exc:  # report, keep serving
            reply = {"crash": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(serve())
