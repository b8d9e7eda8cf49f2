"""The conformance suite's "everything" server, written as a legacy mcp 1.x server.

Every tool, prompt and resource the 2026-07-28 server scenarios call, with the
behaviour each expects, built the way deployed legacy servers are built: inline
awaits of `ctx.elicit`, `ctx.session.create_message`, `ctx.session.list_roots`.
Nothing here knows about 2026-07-28: the gateway in front of it does the rest.

    python fixture_server.py --port N
"""

from __future__ import annotations

import argparse
import asyncio
import base64
from typing import Annotated, Any

import uvicorn
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.prompts.base import Message, Prompt, UserMessage
from mcp.shared.exceptions import McpError
from mcp.types import (
    AudioContent,
    CallToolRequest,
    Completion,
    EmbeddedResource,
    ErrorData,
    ImageContent,
    PromptReference,
    ResourceTemplateReference,
    SamplingMessage,
    TextContent,
    TextResourceContents,
)
from pydantic import BaseModel, Field

IMAGE = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
AUDIO = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="

JSON_SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


class Name(BaseModel):
    name: str = Field(description="Your name")


class Confirm(BaseModel):
    ok: bool = Field(description="Confirm")


class Color(BaseModel):
    color: str = Field(description="Your favorite color")


class PromptContext(BaseModel):
    context: str = Field(description="Context for the prompt")


class Value(BaseModel):
    value: str = Field(description="A value")


class ConfirmDelete(BaseModel):
    confirm: bool = Field(description="Delete the file?")


class NameOrConfirm(BaseModel):
    name: str = Field(default="", description="A name")
    confirm: bool = Field(default=False, description="Confirm")


def text(value: str) -> TextContent:
    return TextContent(type="text", text=value)


async def sample(ctx: Context, prompt: str, max_tokens: int) -> str:
    result = await ctx.session.create_message(
        messages=[SamplingMessage(role="user", content=text(prompt))],
        max_tokens=max_tokens,
        related_request_id=ctx.request_id,
    )
    return result.content.text if isinstance(result.content, TextContent) else str(result.content)


class FixtureServer(FastMCP):
    async def read_resource(self, uri: Any) -> Any:
        """Unknown URIs answer -32602 with the URI, as 2026-07-28 asks (mcp 1.x would say code 0)."""
        try:
            return await super().read_resource(uri)
        except ValueError as exc:
            if "Unknown resource" not in str(exc):
                raise
            raise McpError(
                ErrorData(code=-32602, message="Resource not found", data={"uri": str(uri)})
            ) from exc


def build() -> FastMCP:
    mcp = FixtureServer("conformance-fixture-legacy")

    # -- plain tools (test_simple_text first: some scenarios call tools[0]) -------------

    @mcp.tool(description="Returns a simple text response.", structured_output=False)
    async def test_simple_text() -> list[Any]:
        return [text("This is a simple text response for testing.")]

    @mcp.tool(description="Returns an image.", structured_output=False)
    async def test_image_content() -> list[Any]:
        return [ImageContent(type="image", data=IMAGE, mimeType="image/png")]

    @mcp.tool(description="Returns audio.", structured_output=False)
    async def test_audio_content() -> list[Any]:
        return [AudioContent(type="audio", data=AUDIO, mimeType="audio/wav")]

    @mcp.tool(description="Returns an embedded resource.", structured_output=False)
    async def test_embedded_resource() -> list[Any]:
        resource = TextResourceContents(
            uri="test://embedded-resource",
            mimeType="text/plain",
            text="This is an embedded resource content.",
        )
        return [EmbeddedResource(type="resource", resource=resource)]

    @mcp.tool(description="Returns text, an image and a resource.", structured_output=False)
    async def test_multiple_content_types() -> list[Any]:
        resource = TextResourceContents(
            uri="test://mixed-content-resource",
            mimeType="application/json",
            text='{"test":"data","value":123}',
        )
        return [
            text("Multiple content types test:"),
            ImageContent(type="image", data=IMAGE, mimeType="image/png"),
            EmbeddedResource(type="resource", resource=resource),
        ]

    @mcp.tool(description="Always fails (an isError result).", structured_output=False)
    async def test_error_handling() -> list[Any]:
        raise RuntimeError("This tool intentionally returns an error for testing")

    @mcp.tool(description="Reports progress three times.", structured_output=False)
    async def test_tool_with_progress(ctx: Context) -> list[Any]:
        for step in (0, 50, 100):
            await ctx.report_progress(step, 100, f"Completed step {step} of 100")
            if step < 100:
                await asyncio.sleep(0.05)
        return [
            text(
                f"progress done ({ctx.request_context.meta.progressToken if ctx.request_context.meta else None})"
            )
        ]

    # -- multi round-trip tools (inline awaits) ----------------------------------------

    @mcp.tool(description="Asks the user's name, then greets.", structured_output=False)
    async def test_input_required_result_elicitation(ctx: Context) -> list[Any]:
        answer = await ctx.elicit("What is your name?", Name)
        return [
            text(
                f"Hello, {answer.data.name}!"
                if answer.action == "accept"
                else f"No name ({answer.action})"
            )
        ]

    @mcp.tool(description="Samples the client's model.", structured_output=False)
    async def test_input_required_result_sampling(ctx: Context) -> list[Any]:
        return [
            text(f"Sampling result: {await sample(ctx, 'What is the capital of France?', 100)}")
        ]

    @mcp.tool(description="Lists the client's roots.", structured_output=False)
    async def test_input_required_result_list_roots(ctx: Context) -> list[Any]:
        roots = await ctx.session.list_roots()
        return [text(f"Found {len(roots.roots)} root(s)")]

    @mcp.tool(description="Asks for a confirmation.", structured_output=False)
    async def test_input_required_result_request_state(ctx: Context) -> list[Any]:
        answer = await ctx.elicit("Please confirm", Confirm)
        return [text(f"state-ok: confirmed={answer.action == 'accept' and answer.data.ok}")]

    @mcp.tool(description="Asks three things at once.", structured_output=False)
    async def test_input_required_result_multiple_inputs(ctx: Context) -> list[Any]:
        name, greeting, roots = await asyncio.gather(
            ctx.elicit("What is your name?", Name),
            sample(ctx, "Generate a greeting", 50),
            ctx.session.list_roots(),
        )
        return [text(f"Name: {name.data.name}; Greeting: {greeting}; Roots: {len(roots.roots)}")]

    @mcp.tool(description="Asks twice, in two rounds.", structured_output=False)
    async def test_input_required_result_multi_round(ctx: Context) -> list[Any]:
        name = await ctx.elicit("Step 1: What is your name?", Name)
        color = await ctx.elicit("Step 2: What is your favorite color?", Color)
        return [text(f"Multi-round complete for {name.data.name} who likes {color.data.color}")]

    @mcp.tool(
        description="Asks for a confirmation (its state must not be tampered with).",
        structured_output=False,
    )
    async def test_input_required_result_tampered_state(ctx: Context) -> list[Any]:
        answer = await ctx.elicit("Please confirm", Confirm)
        return [text(f"integrity-ok: state verified ({answer.action})")]

    @mcp.tool(
        description="Asks only what the client declared it can answer.", structured_output=False
    )
    async def test_input_required_result_capabilities(ctx: Context) -> list[Any]:
        caps = ctx.session.client_params.capabilities if ctx.session.client_params else None
        asks: dict[str, Any] = {}
        if caps is not None and caps.elicitation is not None:
            asks["elicitation"] = ctx.elicit("Elicitation input", Value)
        if caps is not None and caps.sampling is not None:
            asks["sampling"] = sample(ctx, "Sample request", 50)
        results = await asyncio.gather(*asks.values())
        return [text(f"received: {', '.join(asks) or 'nothing asked'} ({len(results)})")]

    # -- diagnostics of the stateless scenario -----------------------------------------

    @mcp.tool(description="Needs the sampling capability.", structured_output=False)
    async def test_missing_capability(ctx: Context) -> list[Any]:
        await sample(ctx, "Needs sampling", 10)
        return [text("Success")]

    @mcp.tool(
        description="Elicits at once (its answer arrives as input_required).",
        structured_output=False,
    )
    async def test_streaming_elicitation(ctx: Context) -> list[Any]:
        answer = await ctx.elicit("Streaming elicitation", Value)
        return [text(f"streamed: {answer.action}")]

    @mcp.tool(description="Logs a message, then returns.", structured_output=False)
    async def test_logging_tool(ctx: Context) -> list[Any]:
        await ctx.log("info", "This log must not reach a client that did not ask for logs")
        return [text("Logging evaluated")]

    # -- schema-carrying tools (pending scenarios); never tools[0] -----------------------

    @mcp.tool(description="Tool with JSON Schema 2020-12 features", structured_output=False)
    async def json_schema_2020_12_tool(
        name: str | None = None,
        address: dict[str, Any] | None = None,
        contactMethod: str | None = None,  # noqa: N803 - the schema's own property name
        phone: str | None = None,
        email: str | None = None,
    ) -> list[Any]:
        return [text(f"json schema tool: {name}")]

    @mcp.tool(
        description="Takes a region that clients mirror into the Mcp-Param-Region header.",
        structured_output=False,
    )
    async def test_custom_header(
        region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})],
    ) -> list[Any]:
        return [text(f"region: {region}")]

    # -- list changes (the suite's hooks for subscriptions/listen) ---------------------------
    # Declared as a legacy server that tells of changes declares them; each hook changes its
    # list and tells the calling session, as mcp 1.x servers do.

    @mcp.tool(description="Adds or removes a tool, then says the tool list changed.")
    async def test_trigger_tool_change(ctx: Context) -> str:
        if mcp._tool_manager.get_tool("test_dynamic_tool") is None:
            mcp.add_tool(lambda: "dynamic", name="test_dynamic_tool", description="Comes and goes.")
        else:
            mcp.remove_tool("test_dynamic_tool")
        await ctx.session.send_tool_list_changed()
        return "tool list changed"

    @mcp.tool(description="Adds a prompt, then says the prompt list changed.")
    async def test_trigger_prompt_change(ctx: Context) -> str:
        dynamic = Prompt.from_function(
            lambda: "dynamic", name="test_dynamic_prompt", description="Added at run time."
        )
        mcp.add_prompt(dynamic)
        await ctx.session.send_prompt_list_changed()
        return "prompt list changed"

    # -- long jobs (the tasks extension's scenarios; the gateway makes them tasks) -------

    @mcp.tool(description="Greets at once.", structured_output=False)
    async def greet(name: str) -> list[Any]:
        return [text(f"Hello, {name}!")]

    @mcp.tool(description="Computes for a while, reporting progress.", structured_output=False)
    async def slow_compute(ctx: Context, seconds: float = 1.0, label: str = "") -> list[Any]:
        await ctx.report_progress(0, seconds, f"computing {label}".strip())
        await asyncio.sleep(seconds)
        return [text(f"computed {label} in {seconds:g} s".replace("  ", " "))]

    @mcp.tool(description="Fails after a moment (an isError result).", structured_output=False)
    async def failing_job() -> list[Any]:
        await asyncio.sleep(0.5)
        raise RuntimeError("the job failed")

    @mcp.tool(description="Fails after a moment with a JSON-RPC error.", structured_output=False)
    async def protocol_error_job() -> list[Any]:
        raise AssertionError("answered by the request handler below")

    @mcp.tool(description="Asks before deleting a file.", structured_output=False)
    async def confirm_delete(ctx: Context, filename: str) -> list[Any]:
        answer = await ctx.elicit(f"Delete {filename}?", ConfirmDelete)
        deleted = answer.action == "accept" and answer.data.confirm
        return [text(f"{filename}: {'deleted' if deleted else 'kept'}")]

    @mcp.tool(description="Asks two things at once.", structured_output=False)
    async def multi_input(ctx: Context) -> list[Any]:
        first, second = await asyncio.gather(
            ctx.elicit("First input", NameOrConfirm), ctx.elicit("Second input", NameOrConfirm)
        )
        return [text(f"inputs: {first.action}, {second.action}")]

    @mcp.tool(description="Asks a name, then works a moment.", structured_output=False)
    async def test_tool_with_task(ctx: Context) -> list[Any]:
        answer = await ctx.elicit("What is your name?", Name)
        await asyncio.sleep(0.2)
        return [text(f"Hello {answer.data.name}" if answer.action == "accept" else "No name")]

    # An mcp 1.x tool cannot answer a JSON-RPC error (its exceptions become isError
    # results): the request handler answers for this one.
    handlers = mcp._mcp_server.request_handlers
    call_tool = handlers[CallToolRequest]

    async def call_tool_or_fail(request: CallToolRequest) -> Any:
        if request.params.name == "protocol_error_job":
            await asyncio.sleep(0.5)
            raise McpError(ErrorData(code=-32603, message="protocol_error_job failed"))
        return await call_tool(request)

    handlers[CallToolRequest] = call_tool_or_fail  # type: ignore[assignment]

    declared = mcp._mcp_server.get_capabilities

    def get_capabilities(*args: Any, **kwargs: Any) -> Any:
        capabilities = declared(*args, **kwargs)
        capabilities.tools.listChanged = True
        capabilities.prompts.listChanged = True
        return capabilities

    mcp._mcp_server.get_capabilities = get_capabilities  # type: ignore[method-assign]

    tool = mcp._tool_manager.get_tool("json_schema_2020_12_tool")
    assert tool is not None
    tool.parameters = JSON_SCHEMA_2020_12

    # -- resources (test://static-text first: `caching` reads resources[0]) -------------

    @mcp.resource(
        "test://static-text", name="static-text", description="Static text.", mime_type="text/plain"
    )
    def static_text() -> str:
        return "This is the content of the static text resource."

    @mcp.resource(
        "test://static-binary", name="static-binary", description="A PNG.", mime_type="image/png"
    )
    def static_binary() -> bytes:
        return base64.b64decode(IMAGE)

    @mcp.resource(
        "test://template/{id}/data",
        name="template-data",
        description="Templated data.",
        mime_type="application/json",
    )
    def template_data(id: str) -> str:  # noqa: A002 - the template's own parameter name
        return f'{{"id":"{id}","templateTest":true,"data":"Data for ID: {id}"}}'

    # -- prompts ---------------------------------------------------------------------------

    @mcp.prompt(description="A simple prompt.")
    def test_simple_prompt() -> list[Message]:
        return [UserMessage("This is a simple prompt for testing.")]

    @mcp.prompt(description="A prompt with two arguments.")
    def test_prompt_with_arguments(arg1: str, arg2: str) -> list[Message]:
        return [UserMessage(f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'")]

    @mcp.prompt(description="A prompt with an embedded resource.")
    def test_prompt_with_embedded_resource(resourceUri: str) -> list[Message]:  # noqa: N803
        resource = TextResourceContents(
            uri=resourceUri, mimeType="text/plain", text="Embedded resource content for testing."
        )
        return [
            UserMessage(EmbeddedResource(type="resource", resource=resource)),
            UserMessage("Please process the embedded resource above."),
        ]

    @mcp.prompt(description="A prompt with an image.")
    def test_prompt_with_image() -> list[Message]:
        return [
            UserMessage(ImageContent(type="image", data=IMAGE, mimeType="image/png")),
            UserMessage("Please analyze the image above."),
        ]

    @mcp.prompt(description="A prompt that asks for its context first.")
    async def test_input_required_result_prompt(ctx: Context) -> list[Message]:
        answer = await ctx.elicit("What context should the prompt use?", PromptContext)
        context = answer.data.context if answer.action == "accept" else "none"
        return [UserMessage(f"Prompt with context: {context}")]

    @mcp.completion()
    async def complete(
        ref: PromptReference | ResourceTemplateReference, argument: Any, context: Any
    ) -> Completion:
        if isinstance(ref, PromptReference) and ref.name == "test_prompt_with_arguments":
            values = [
                v
                for v in ("paris", "park", "party", "test", "testing")
                if v.startswith(argument.value)
            ]
            return Completion(values=values, total=len(values), hasMore=False)
        return Completion(values=[])

    return mcp


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(
        build().streamable_http_app(), host="127.0.0.1", port=args.port, log_level="warning"
    )


if __name__ == "__main__":
    main()
