"""One request pipeline for both eras (`gateway.web.pipeline`), in process: in front of a
Streamable HTTP server the test plays, a 2026 client and a 2025 client of the same route.

- Every 2026 method has its server in the dispatch table.
- The seams (`gateway.seams`) are plugged once and used by both eras: a list on its way
  out (JSON and streamed), a call on its way in (refused, or sent upstream under the
  name the upstream knows), every request at its end, as its `request_served` line says.
- One function writes each request line (`request_served`, `request_failed`,
  `request_rejected`, `request_refused`), and no client answer is rendered outside
  `gateway.protocol.rendering`.
"""

from __future__ import annotations

import ast
import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog

from gateway import logging as log_context
from gateway.aio import spawn
from gateway.app import build_app
from gateway.errors import CapacityExceeded, MethodNotFound
from gateway.protocol import methods
from gateway.seams import RequestServed, Seams
from gateway.web.pipeline import Pipeline
from gateway.web.serving import serve
from tests.support.inprocess import Gateway, gateway_config
from tests.support.legacy_wire import call, open_session, request, send
from tests.support.streamable import StreamableServer
from tests.support.wire import rpc

GATEWAY = Path(__file__).resolve().parents[2] / "gateway"

TOOLS = [{"name": name, "inputSchema": {"type": "object"}} for name in ("own", "hidden", "plain")]
ECHOED = {"content": [{"type": "text", "text": "done"}]}


def shown_as(served: RequestServed, method: str, result: dict[str, Any]) -> dict[str, Any]:
    """A catalog's list seam: `hidden` left out, `own` shown as `shown`; no `secret` prompt."""
    if method == "prompts/list":
        return {**result, "prompts": [p for p in result["prompts"] if p["name"] != "secret"]}
    if method != "tools/list":
        return result
    tools = [
        {**tool, "name": "shown"} if tool["name"] == "own" else tool
        for tool in result["tools"]
        if tool["name"] != "hidden"
    ]
    return {**result, "tools": tools}


async def called_as(served: RequestServed, params: dict[str, Any]) -> dict[str, Any]:
    """A catalog's call seam: `hidden` is unknown, `shown` goes upstream as `own`; an
    approval's: `busy` cannot be asked about now."""
    if params.get("name") == "hidden":
        raise MethodNotFound("Unknown tool: hidden")
    if params.get("name") == "busy":
        raise CapacityExceeded("No one can approve it now")
    if params.get("name") == "shown":
        return {**params, "name": "own"}
    return params


class Ended:
    """An audit trail's end seam: what it was told of each request."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str, int, str]] = []

    def __call__(self, served: RequestServed) -> None:
        entry = (served.lane.value, served.method, served.caller.log_id, served.status)
        self.seen.append((*entry, served.outcome))


@pytest.fixture
async def upstream() -> AsyncIterator[StreamableServer]:
    played = await StreamableServer(
        {"tools/list": {"tools": TOOLS}, "tools/call": ECHOED}, streamed={"prompts/list"}
    ).start()
    yield played
    await played.stop()


@pytest.fixture
def ended() -> Ended:
    return Ended()


@pytest.fixture
async def gateway(upstream: StreamableServer, ended: Ended) -> AsyncIterator[Gateway]:
    seams = Seams(listing=(shown_as,), calling=(called_as,), ended=(ended,))
    app = build_app(gateway_config(upstream.url), seams=seams)
    served = await serve(app, "127.0.0.1", 0, idle_timeout_s=75)
    http = aiohttp.ClientSession()
    try:
        yield Gateway(served, http, upstream.url)
    finally:
        await http.close()
        await served.close()


def pipeline_of(gateway: Gateway) -> Pipeline:
    for resource in gateway.app.router.resources():
        for route in resource:
            handler = getattr(route.handler, "__self__", None)
            if isinstance(handler, Pipeline):
                return handler
    raise AssertionError("no pipeline")


async def test_every_method_a_2026_client_may_send_has_its_server(gateway: Gateway) -> None:
    assert pipeline_of(gateway).served_by.keys() == methods.FRONT


async def test_a_list_leaves_through_the_listing_seam_in_both_eras(
    gateway: Gateway, upstream: StreamableServer
) -> None:
    status, reply, _ = await gateway.post(rpc("tools/list"))
    assert status == 200
    assert [tool["name"] for tool in reply["result"]["tools"]] == ["shown", "plain"]
    session = await open_session(gateway.http, gateway.url)
    whole = await send(gateway.http, gateway.url, request("tools/list"), session=session)
    assert [tool["name"] for tool in whole.last["result"]["tools"]] == ["shown", "plain"]
    # A list answered as a stream passes the seam event by event.
    listing = send(gateway.http, gateway.url, request("prompts/list", rid=5), session=session)
    posting = spawn(listing, name="post")
    stream = await upstream.next_stream("prompts/list")
    await stream.respond({"prompts": [{"name": "p"}, {"name": "secret"}]})
    streamed = await asyncio.wait_for(posting, 5)
    assert streamed.last == {"jsonrpc": "2.0", "id": 5, "result": {"prompts": [{"name": "p"}]}}


async def test_a_call_enters_through_the_calling_seam_in_both_eras(
    gateway: Gateway, upstream: StreamableServer
) -> None:
    session = await open_session(gateway.http, gateway.url)
    with structlog.testing.capture_logs(processors=[log_context.merge_bound]) as logs:
        status, reply, _ = await gateway.post(rpc("tools/call", {"name": "shown"}, rid=3))
        assert status == 200 and reply["result"]["content"] == ECHOED["content"]
        legacy = await send(gateway.http, gateway.url, call("shown", rid=4), session=session)
        assert legacy.status == 200 and legacy.last["result"] == ECHOED
        status, refused, _ = await gateway.post(rpc("tools/call", {"name": "hidden"}, rid=6))
        assert (status, refused["id"], refused["error"]["code"]) == (404, 6, -32601)
        gone = await send(gateway.http, gateway.url, call("hidden", rid=7), session=session)
        assert gone.status == 404
        assert (gone.last["id"], gone.last["error"]["code"]) == (7, -32601)
    called = [m["params"]["name"] for m in upstream.received if m.get("method") == "tools/call"]
    assert called == ["own", "own"]  # the upstream's name; the hidden tool never went up
    failed = [line for line in logs if line["event"] == "request_failed"]
    assert [(line["code"], line["kind"]) for line in failed] == [(-32601, "MethodNotFound")] * 2
    served = [line for line in logs if line["event"] == "request_served"]
    assert [(line.get("era"), line["outcome"], line["tool"]) for line in served] == [
        (None, "complete", "shown"),
        ("legacy", "complete", "shown"),
        (None, "error", "hidden"),
        ("legacy", "error", "hidden"),
    ]


async def test_every_request_served_line_reaches_the_ended_seam_as_it_says_it(
    gateway: Gateway, ended: Ended
) -> None:
    with structlog.testing.capture_logs(processors=[log_context.merge_bound]) as logs:
        await gateway.post(rpc("tools/list"))
        await gateway.post(rpc("tools/call", {"name": "hidden"}))
        session = await open_session(gateway.http, gateway.url)  # initialize, initialized
        await send(gateway.http, gateway.url, call("plain"), session=session)
        await send(gateway.http, gateway.url, request("tools/list"), session="not-a-session")
    lines = [line for line in logs if line["event"] == "request_served"]
    said = [
        (
            line.get("era", "2026"),
            line["rpc_method"],
            line["principal"],
            line["status"],
            line["outcome"],
        )
        for line in lines
    ]
    assert said == ended.seen
    assert [entry[3:] for entry in said] == [
        (200, "complete"),
        (404, "error"),
        (200, "complete"),  # initialize
        (202, "accepted"),
        (200, "complete"),
        (404, "refused"),
    ]


def calls_named(tree: ast.AST, first: str) -> list[ast.Call]:
    """The calls in `tree` whose first argument is the string `first` (a log event)."""
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == first
    ]


def test_one_function_writes_each_request_line_and_one_renders_every_error() -> None:
    found: dict[str, list[str]] = {}
    renders: list[str] = []
    for path in sorted(GATEWAY.rglob("*.py")):
        module = str(path.relative_to(GATEWAY.parent))
        tree = ast.parse(path.read_text())
        for event in ("request_served", "request_failed", "request_rejected", "request_refused"):
            found.setdefault(event, []).extend(module for _ in calls_named(tree, event))
        renders.extend(
            module
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "error"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "jsonrpc"
        )
    assert found == {
        "request_served": ["gateway/web/pipeline.py"],
        "request_failed": ["gateway/seams.py"],  # `RequestServed.failed`
        "request_rejected": ["gateway/web/front.py"],
        "request_refused": ["gateway/web/front.py"],
    }
    # A JSON-RPC error made anywhere else than the renderer answers a server's request
    # (upstream), never a client's.
    assert sorted(set(renders)) == ["gateway/protocol/outside.py", "gateway/protocol/rendering.py"]


@pytest.mark.parametrize(
    ("tool", "status", "retry_after"), [("hidden", 404, None), ("busy", 503, "1")]
)
async def test_an_error_is_the_same_answer_to_either_era_but_for_its_id(
    gateway: Gateway, tool: str, status: int, retry_after: str | None
) -> None:
    """One renderer: the same error, either era, is the same status, headers and body
    (`Retry-After` on an error of a moment), with the request's id."""
    got, modern, response = await gateway.post(rpc("tools/call", {"name": tool}, rid=9))
    session = await open_session(gateway.http, gateway.url)
    legacy = await send(gateway.http, gateway.url, call(tool, rid=9), session=session)
    assert legacy.status == got == status
    assert json.loads(legacy.raw) == modern and modern["id"] == 9
    assert legacy.headers["Content-Type"].startswith("application/json")
    assert legacy.headers.get("Retry-After") == response.headers.get("Retry-After") == retry_after
