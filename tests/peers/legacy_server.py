"""A legacy MCP server built with the official `mcp` 1.x SDK (run in the legacy venv).

Every interactive tool blocks on an inline await, the way thousands of deployed
servers do: `ctx.elicit(...)`, `ctx.session.create_message(...)` (sent on the
standalone GET stream by mcp 1.x, no related request id) and
`ctx.session.list_roots()` (likewise). Each tool body records that it ran under
its `run_id`, so tests can prove a body ran exactly once; `journal` tells what
happened to a run (answers seen, cancellation), and `await_journal` waits, bounded, for
an entry to appear (so a test can await what the server did instead of polling; a test
can add entries of its own with `write_journal`). `remember` and `recall` keep a value per
session, as servers keep a login or a scratchpad.

    python legacy_server.py [--port N] [--event-store] [--notifying] [--json-response]

`--json-response` answers every POST with JSON rather than a stream (mcp 1.x then drops
what a tool asks the client on the way: only plain tools work).

`--notifying` makes it a server that tells of changes, as mcp 1.x lets one be built by hand:
it declares `tools.listChanged`, `resources.listChanged` and `resources.subscribe`, keeps
the sessions that subscribed to each resource, and has `add_tool` (adds a tool, then tells
the calling session its tool list changed, as `ctx.session.send_tool_list_changed()`
does) and `touch` (tells every session subscribed to a URI that it was updated); a
subscription to `crash://soon` makes the process exit a moment after it is answered.

It prints `peer listening on HOST:PORT` on stderr once it accepts connections (port 0,
the default, picks a free port).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import weakref
from collections import defaultdict
from pathlib import Path
from typing import Annotated, Any

import anyio
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.streamable_http import EventStore
from mcp.shared.exceptions import UrlElicitationRequiredError
from mcp.types import (
    CallToolResult,
    ElicitRequestURLParams,
    SamplingMessage,
    TextContent,
    ToolAnnotations,
)
from pydantic import BaseModel, Field
from serving import serve

RUNS: dict[str, int] = defaultdict(int)
JOURNAL: dict[str, list[str]] = defaultdict(list)
BACKGROUND: set[asyncio.Task[None]] = set()
CONNECTED: set[str] = set()
# Set (and replaced by a fresh one) whenever the journal changes: what `await_journal` waits on.
JOURNAL_CHANGED = asyncio.Event()


STATE_DIR: Path | None = None  # --state-dir: counts shared by every process (stdio)


def ran(tool: str, run_id: str) -> None:
    count(f"{tool}:{run_id}")


def count(key: str) -> int:
    """Add one to `key`'s count and return it: in this process, or in --state-dir."""
    if STATE_DIR is None:
        RUNS[key] += 1
        return RUNS[key]
    path = STATE_DIR / key.replace("/", "_")
    with path.open("a") as tally:
        tally.write("x")
    return counted(key)


def counted(key: str) -> int:
    if STATE_DIR is None:
        return RUNS.get(key, 0)
    path = STATE_DIR / key.replace("/", "_")
    return len(path.read_text()) if path.exists() else 0


def note(run_id: str, entry: str) -> None:
    """Journal `entry` for `run_id` and wake every `await_journal` (synchronous: callable
    from a cancelled scope, where nothing may be awaited)."""
    global JOURNAL_CHANGED
    JOURNAL[run_id].append(entry)
    changed, JOURNAL_CHANGED = JOURNAL_CHANGED, asyncio.Event()
    changed.set()


class Username(BaseModel):
    username: str = Field(description="Your user name")


class Profile(BaseModel):
    color: str = Field(description="Favourite color")
    age: int = Field(description="Age in years")


class Confirm(BaseModel):
    confirm: bool = Field(description="Go ahead?")


class Topic(BaseModel):
    topic: str = Field(description="A topic")


class City(BaseModel):
    city: str = Field(description="A city")


def build(event_store: EventStore | None = None, *, json_response: bool = False) -> FastMCP:
    mcp = FastMCP(
        "peers-legacy-py",
        event_store=event_store,
        retry_interval=50 if event_store else None,
        json_response=json_response,
    )

    @mcp.tool(description="Echo the text back (no interaction).")
    async def echo(text: str) -> str:
        return text

    # What a session did, kept the usual way: keyed by the session (a login, a scratchpad).
    remembered: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()

    @mcp.tool(description="Remembers a value for this session.")
    async def remember(value: str, ctx: Context) -> str:
        remembered[ctx.session] = value
        return "remembered"

    @mcp.tool(description="What this session remembered (empty when nothing).")
    async def recall(ctx: Context) -> str:
        return remembered.get(ctx.session, "")

    @mcp.tool(description="How many times a tool body ran for a run id.")
    async def runs(tool: str, run_id: str) -> str:
        return str(counted(f"{tool}:{run_id}"))

    @mcp.tool(description="What happened to a run: the answers its body saw, its cancellation.")
    async def journal(run_id: str) -> str:
        return ",".join(JOURNAL.get(run_id, []))

    @mcp.tool(
        description="The journal of a run once it holds `entry`, or as it is after `timeout_s`."
    )
    async def await_journal(run_id: str, entry: str, timeout_s: float = 10.0) -> str:
        with anyio.move_on_after(timeout_s):
            while entry not in JOURNAL.get(run_id, []):
                await JOURNAL_CHANGED.wait()
        return ",".join(JOURNAL.get(run_id, []))

    @mcp.tool(description="Adds an entry to a run's journal (what a test says happened).")
    async def write_journal(run_id: str, entry: str) -> str:
        note(run_id, entry)
        return "ok"

    @mcp.tool(description="Ask the user's name (form elicitation), then greet.")
    async def greet(ctx: Context, run_id: str = "") -> str:
        ran("greet", run_id)
        try:
            answer = await ctx.elicit("What is your username?", Username)
        except anyio.get_cancelled_exc_class():
            note(run_id, "cancelled")
            raise
        note(run_id, answer.action)
        if answer.action != "accept":
            return f"No greeting ({answer.action})"
        return f"Hello, {answer.data.username}!"

    @mcp.tool(description="Two elicitations in sequence (two rounds).")
    async def register(ctx: Context, run_id: str = "") -> str:
        ran("register", run_id)
        first = await ctx.elicit("Choose a username", Username)
        if first.action != "accept":
            return f"Registration stopped ({first.action})"
        second = await ctx.elicit(f"Tell us about {first.data.username}", Profile)
        if second.action != "accept":
            return f"Registration stopped ({second.action})"
        return (
            f"Registered {first.data.username} (age {second.data.age}) "
            f"with favourite color {second.data.color}"
        )

    @mcp.tool(description="Elicit a confirmation; reports accept / decline / cancel.")
    async def confirm_action(action: str, ctx: Context, run_id: str = "") -> str:
        ran("confirm_action", run_id)
        answer = await ctx.elicit(f"Really {action}?", Confirm)
        if answer.action == "accept":
            return f"{action}: {'confirmed' if answer.data.confirm else 'not confirmed'}"
        return f"{action}: {answer.action}"

    @mcp.tool(description="Side effect runs once, after the answer is in.")
    async def increment_counter(ctx: Context, run_id: str = "") -> str:
        ran("increment_counter", run_id)
        answer = await ctx.elicit("Increment the counter?", Confirm)
        if answer.action == "accept" and answer.data.confirm:
            count(f"counter:{run_id}")
        return f"counter={counted(f'counter:{run_id}')}"

    @mcp.tool(description="Sampling (request sent on the standalone GET stream by mcp 1.x).")
    async def summarize(text: str, ctx: Context, run_id: str = "") -> str:
        ran("summarize", run_id)
        result = await ctx.session.create_message(
            messages=[
                SamplingMessage(
                    role="user", content=TextContent(type="text", text=f"Summarize: {text}")
                )
            ],
            max_tokens=50,
        )
        content = result.content
        return f"Summary: {content.text if isinstance(content, TextContent) else content}"

    @mcp.tool(description="Roots (request sent on the standalone GET stream by mcp 1.x).")
    async def list_roots(ctx: Context, run_id: str = "") -> str:
        ran("list_roots", run_id)
        result = await ctx.session.list_roots()
        return "Roots: " + ", ".join(f"{r.name}={r.uri}" for r in result.roots)

    @mcp.tool(description="Elicit a topic, then sample a haiku about it (two rounds).")
    async def elicit_then_sample(ctx: Context, run_id: str = "") -> str:
        ran("elicit_then_sample", run_id)
        topic = await ctx.elicit("Pick a topic", Topic)
        if topic.action != "accept":
            return f"No haiku ({topic.action})"
        result = await ctx.session.create_message(
            messages=[
                SamplingMessage(
                    role="user",
                    content=TextContent(type="text", text=f"Haiku about {topic.data.topic}"),
                )
            ],
            max_tokens=60,
        )
        content = result.content
        return f"Haiku: {content.text if isinstance(content, TextContent) else content}"

    @mcp.tool(description="Three questions at once (elicitation, sampling, roots): one round.")
    async def concurrent(ctx: Context, run_id: str = "") -> str:
        ran("concurrent", run_id)
        answers: dict[str, str] = {}

        async def ask_city() -> None:
            answer = await ctx.elicit("Which city?", City)
            answers["city"] = answer.data.city if answer.action == "accept" else answer.action

        async def ask_model() -> None:
            result = await ctx.session.create_message(
                messages=[
                    SamplingMessage(role="user", content=TextContent(type="text", text="Say hi"))
                ],
                max_tokens=10,
            )
            answers["model"] = (
                result.content.text if isinstance(result.content, TextContent) else "?"
            )

        async def ask_roots() -> None:
            result = await ctx.session.list_roots()
            answers["roots"] = str(len(result.roots))

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask_city)
            tg.start_soon(ask_model)
            tg.start_soon(ask_roots)
        return f"city={answers['city']} model={answers['model']} roots={answers['roots']}"

    @mcp.tool(description="Two form elicitations at once: one round, two keys.")
    async def two_at_once(ctx: Context, run_id: str = "") -> str:
        ran("two_at_once", run_id)
        results: dict[str, str] = {}

        async def ask(name: str, schema: type[BaseModel]) -> None:
            answer = await ctx.elicit(f"Question {name}", schema)
            results[name] = str(
                answer.data.model_dump() if answer.action == "accept" else answer.action
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, "a", Username)
            tg.start_soon(ask, "b", City)
        return f"a={results['a']} b={results['b']}"

    async def progress_around_a_question(ctx: Context, steps: int) -> str:
        for i in range(steps):
            await ctx.report_progress(i + 1, steps * 2, f"before {i + 1}")
        answer = await ctx.elicit("Continue?", Confirm)
        for i in range(steps):
            await ctx.report_progress(steps + i + 1, steps * 2, f"after {i + 1}")
        return f"done ({answer.action})"

    @mcp.tool(description="Progress notifications, then an elicitation, then more progress.")
    async def progress_then_ask(ctx: Context, steps: int = 2, run_id: str = "") -> str:
        ran("progress_then_ask", run_id)
        return await progress_around_a_question(ctx, steps)

    @mcp.tool(description="The same as progress_then_ask, under another name.")
    async def chatty_progress(ctx: Context, steps: int = 2, run_id: str = "") -> str:
        ran("chatty_progress", run_id)
        return await progress_around_a_question(ctx, steps)

    @mcp.tool(description="Sends `steps` progress notifications (no interaction).")
    async def slow_progress(ctx: Context, steps: int = 3) -> str:
        for i in range(steps):
            await ctx.report_progress(i + 1, steps, f"step {i + 1}/{steps}")
            await asyncio.sleep(0.01)
        return f"done after {steps} steps"

    @mcp.tool(description="Logs at several levels, then elicits.")
    async def chatty(ctx: Context, run_id: str = "") -> str:
        ran("chatty", run_id)
        await ctx.debug("debug line")
        await ctx.warning("warning line")
        answer = await ctx.elicit("Ok?", Confirm)
        return f"chatty {answer.action}"

    @mcp.tool(description="URL-mode elicitation (2025-11-25).")
    async def connect_account(ctx: Context, run_id: str = "") -> str:
        ran("connect_account", run_id)
        answer = await ctx.elicit_url(
            "Connect your account", "https://example.com/connect?x=1", f"elic-{run_id}"
        )
        return f"connect: {answer.action}"

    @mcp.tool(
        description="Holds until cancelled; records the cancellation (for abandonment tests)."
    )
    async def hold(ctx: Context, run_id: str = "") -> str:
        ran("hold", run_id)
        try:
            answer = await ctx.elicit("Hold on?", Confirm)
            note(run_id, f"answer:{answer.action}")
            await anyio.sleep(3600)
        except anyio.get_cancelled_exc_class():
            note(run_id, "cancelled")
            raise
        return "held"

    @mcp.tool(
        description="Progress, then the server closes the POST stream, then asks (--event-store)."
    )
    async def poll_then_ask(ctx: Context, run_id: str = "") -> str:
        ran("poll_then_ask", run_id)
        await ctx.report_progress(1, 2, "before the break")
        await ctx.close_sse_stream()
        answer = await ctx.elicit("Still there?", Confirm)
        await ctx.report_progress(2, 2, "after the break")
        return f"resumed: {answer.action}"

    @mcp.tool(
        description="Closes its stream at once (after the priming event), then works a while."
    )
    async def close_then_work(ctx: Context, seconds: float = 1.0, run_id: str = "") -> str:
        ran("close_then_work", run_id)
        note(run_id, "started")
        await ctx.close_sse_stream()
        await anyio.sleep(seconds)
        return "worked"

    @mcp.tool(description="Refuses with -32042 (visit a URL first) until `connect` was called.")
    async def needs_connection(run_id: str = "") -> str:
        ran("needs_connection", run_id)
        if run_id not in CONNECTED:
            raise UrlElicitationRequiredError(
                [
                    ElicitRequestURLParams(
                        mode="url",
                        message="Connect your account first",
                        url=f"https://example.com/connect/{run_id}",
                        elicitationId=f"conn-{run_id}",
                    )
                ]
            )
        return f"connected {run_id}"

    @mcp.tool(description="Completes the out-of-band URL flow of needs_connection.")
    async def connect(run_id: str) -> str:
        CONNECTED.add(run_id)
        return "ok"

    @mcp.tool(description="Returns at once; a moment later asks for roots outside any request.")
    async def late_roots(ctx: Context, run_id: str = "") -> str:
        session = ctx.session

        async def ask_later() -> None:
            await anyio.sleep(0.2)
            try:
                note(run_id, "roots:asking")
                result = await session.list_roots()
                note(run_id, f"roots:{[root.name for root in result.roots]}")
            except Exception as exc:  # the gateway refuses: no client request is in flight
                note(run_id, f"roots:error {getattr(getattr(exc, 'error', None), 'code', '?')}")

        BACKGROUND.add(asyncio.get_running_loop().create_task(ask_later()))
        return "asked later"

    @mcp.tool(description="Works silently for a while (no notifications), then returns.")
    async def sleepy(seconds: float, run_id: str = "") -> str:
        ran("sleepy", run_id)
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            note(run_id, "cancelled")
            raise
        return f"slept {seconds}"

    @mcp.tool(description="Takes a region that 2026 clients mirror into Mcp-Param-Region.")
    async def regional(
        region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})], count: int = 1
    ) -> str:
        return f"{region} x{count}"

    @mcp.tool(description="Reports the trace context it received in _meta and in HTTP headers.")
    async def traced(ctx: Context) -> str:
        meta = ctx.request_context.meta
        in_meta = (meta.model_extra or {}).get("traceparent") if meta is not None else None
        request = ctx.request_context.request
        in_header = request.headers.get("traceparent") if request is not None else None
        return f"meta={in_meta} header={in_header}"

    @mcp.tool(description="Reports the Authorization header its HTTP request carried, if any.")
    async def authorization_seen(ctx: Context) -> str:
        request = ctx.request_context.request
        return str(request.headers.get("authorization") if request is not None else None)

    @mcp.tool(
        description="A result of about `size` bytes: `text` (one text block), `prose` (text "
        "whose JSON has escapes), `records` (structuredContent: many small objects).",
        structured_output=False,
    )
    async def big(size: int, shape: str = "text") -> CallToolResult:
        if shape == "records":
            count = size // 64
            row = {"ok": True}
            items = [{"id": i, "name": f"item-{i}", **row, "score": i / 2} for i in range(count)]
            return CallToolResult(
                content=[TextContent(type="text", text=f"{count} records")],
                structuredContent={"items": items},
            )
        unit = 'lorem "ipsum"\tdolor\n' if shape == "prose" else "x"
        text = (unit * (size // len(unit) + 1))[:size]
        return CallToolResult(content=[TextContent(type="text", text=text)])

    @mcp.tool(description="Pings the client (the gateway answers), then returns.")
    async def pinger(ctx: Context) -> str:
        await ctx.session.send_ping()
        return "pong received"

    @mcp.resource("profile://{user}", description="A profile whose reading asks for a field.")
    async def profile(user: str, ctx: Context) -> str:
        ran("profile", user)
        answer = await ctx.elicit(f"Favourite colour of {user}?", Profile)
        if answer.action != "accept":
            return f"{user}: unknown"
        return f"{user}: {answer.data.color}, {answer.data.age}"

    @mcp.resource("static://hello", description="Plain text.")
    def hello() -> str:
        return "hello resource"

    @mcp.prompt(description="An interview prompt that asks for a topic first.")
    async def interview(ctx: Context, guest: str = "someone") -> str:
        ran("interview", guest)
        topic = await ctx.elicit(f"Topic for {guest}?", Topic)
        chosen = topic.data.topic if topic.action == "accept" else "anything"
        return f"Interview {guest} about {chosen}."

    @mcp.prompt(description="A plain prompt.")
    def plain(word: str = "x") -> str:
        return f"Say {word}."

    # `tools/list` counted, so a test can tell how often the server was asked for it.
    listed = mcp.list_tools

    async def counted_list_tools() -> Any:
        count("tools/list:served")
        return await listed()

    mcp._mcp_server.list_tools()(counted_list_tools)

    @mcp.tool(description="How many times tools/list was asked of this server.")
    async def lists_served() -> str:
        return str(counted("tools/list:served"))

    @mcp.tool(
        description="Deletes a note (a destructive tool: counts its runs).",
        annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True),
    )
    async def delete_note(note_id: str, run_id: str = "") -> str:
        ran("delete_note", run_id)
        return f"deleted {note_id}"

    @mcp.tool(
        description="Reads a note (read-only: counts its runs).",
        annotations=ToolAnnotations(readOnlyHint=True),
    )
    async def read_note(note_id: str, run_id: str = "") -> str:
        ran("read_note", run_id)
        return f"note {note_id}"

    return mcp


class MemoryEventStore(EventStore):
    """Event ids on every SSE event, so a broken stream can be resumed (GET + Last-Event-ID)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, object]] = []

    async def store_event(self, stream_id, message):  # type: ignore[no-untyped-def]
        event_id = f"{stream_id}:{len(self.events)}"
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id, send_callback):  # type: ignore[no-untyped-def]
        index = next((i for i, e in enumerate(self.events) if e[0] == last_event_id), None)
        if index is None:
            return None
        stream_id = self.events[index][1]
        for event_id, sid, message in self.events[index + 1 :]:
            if sid == stream_id and message is not None:
                from mcp.server.streamable_http import EventMessage

                await send_callback(EventMessage(message, event_id))
        return stream_id


def add_change_notifications(mcp: FastMCP) -> None:
    """Turn `mcp` into a server that declares and sends change notifications."""
    lowlevel = mcp._mcp_server
    declared = lowlevel.get_capabilities
    subscribers: dict[str, list[Any]] = defaultdict(list)

    def get_capabilities(*args: Any, **kwargs: Any) -> Any:
        capabilities = declared(*args, **kwargs)
        capabilities.tools.listChanged = True
        capabilities.resources.listChanged = True
        capabilities.resources.subscribe = True  # mcp 1.x says False, handler or not
        return capabilities

    lowlevel.get_capabilities = get_capabilities  # type: ignore[method-assign]

    @lowlevel.subscribe_resource()
    async def subscribe(uri: Any) -> None:
        if str(uri).startswith("forbidden://"):
            raise ValueError("no subscriptions to that")
        if str(uri) == "crash://soon":  # the process dies a moment after it answers
            asyncio.get_running_loop().call_later(0.2, os._exit, 3)
        subscribers[str(uri)].append(lowlevel.request_context.session)

    @lowlevel.unsubscribe_resource()
    async def unsubscribe(uri: Any) -> None:
        session = lowlevel.request_context.session
        if session in subscribers[str(uri)]:
            subscribers[str(uri)].remove(session)

    @mcp.tool(description="Adds a tool named `name`, then says the tool list changed.")
    async def add_tool(name: str, ctx: Context) -> str:
        async def added() -> str:
            return f"{name} ran"

        mcp.add_tool(added, name=name, description="Added at run time.")
        await ctx.session.send_tool_list_changed()
        return f"added {name}"

    @mcp.tool(
        description="Gives tool `name` a new description (and readOnlyHint), then says the "
        "tool list changed."
    )
    async def redescribe(name: str, description: str, read_only: bool, ctx: Context) -> str:
        tool = mcp._tool_manager._tools[name]
        tool.description = description
        tool.annotations = ToolAnnotations(readOnlyHint=read_only)
        await ctx.session.send_tool_list_changed()
        return f"redescribed {name}"

    @mcp.tool(description="Tells every session subscribed to `uri` that it was updated.")
    async def touch(uri: str) -> str:
        told = 0
        for session in list(subscribers[uri]):
            try:
                await session.send_resource_updated(uri)
                told += 1
            except Exception:  # a session that ended since: it hears nothing more
                subscribers[uri].remove(session)
        return f"told {told}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--event-store", action="store_true")
    parser.add_argument("--notifying", action="store_true", help="declare and send changes")
    parser.add_argument(
        "--transport", choices=("streamable-http", "sse", "stdio"), default="streamable-http"
    )
    parser.add_argument("--state-dir", help="keep run counts in files here (several processes)")
    parser.add_argument(
        "--slow-get-ms", type=int, default=0, help="hold each GET this long before serving it"
    )
    parser.add_argument(
        "--json-response", action="store_true", help="answer POSTs with JSON, never a stream"
    )
    args = parser.parse_args()
    global STATE_DIR
    STATE_DIR = Path(args.state_dir) if args.state_dir else None
    mcp = build(MemoryEventStore() if args.event_store else None, json_response=args.json_response)
    if args.notifying:
        add_change_notifications(mcp)
    if args.transport == "stdio":
        mcp.run("stdio")
    elif args.transport == "sse":
        serve(mcp.sse_app(), args.host, args.port)
    elif args.slow_get_ms:
        serve(slow_gets(mcp.streamable_http_app(), args.slow_get_ms / 1000), args.host, args.port)
    else:
        serve(mcp.streamable_http_app(), args.host, args.port)


def slow_gets(app: Any, delay_s: float) -> Any:
    """`app`, but each GET (a session's standalone stream) waits `delay_s` before the app
    sees it: a loaded server that registers the stream late, while its POSTs go on."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            await anyio.sleep(delay_s)
        await app(scope, receive, send)

    return wrapped


if __name__ == "__main__":
    main()
