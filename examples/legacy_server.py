"""An example legacy MCP server (official `mcp` 1.x SDK, protocol 2025-11-25).

Its tools block on inline awaits, as most deployed servers do. A 2026-07-28
client cannot call them directly (it gets HTTP 400 "Missing session ID");
through mrtr-gateway every question becomes an `input_required` round.

    python examples/legacy_server.py [--port 9000]
"""

from __future__ import annotations

import argparse
import itertools

import uvicorn
from mcp.server.fastmcp import Context, FastMCP
from mcp.types import SamplingMessage, TextContent
from pydantic import BaseModel, Field

mcp = FastMCP("example-legacy-server")
tickets = itertools.count(4711)


class Priority(BaseModel):
    priority: str = Field(
        description="low, normal or high", json_schema_extra={"enum": ["low", "normal", "high"]}
    )


class Confirm(BaseModel):
    confirm: bool = Field(description="Delete it?")


@mcp.tool(description="Create a ticket; asks for its priority.")
async def create_ticket(title: str, ctx: Context) -> str:
    answer = await ctx.elicit(f"Which priority should '{title}' get?", Priority)
    if answer.action != "accept":
        return f"No ticket created ({answer.action})"
    return f"Created ticket #{next(tickets)} '{title}' with priority {answer.data.priority}"


@mcp.tool(description="Delete a ticket after confirmation.")
async def delete_ticket(number: int, ctx: Context) -> str:
    answer = await ctx.elicit(f"Really delete ticket #{number}?", Confirm)
    confirmed = answer.action == "accept" and answer.data.confirm
    return f"Ticket #{number} {'deleted' if confirmed else 'kept'}"


@mcp.tool(description="Summarise text with the client's model (sampling).")
async def summarize(text: str, ctx: Context) -> str:
    result = await ctx.session.create_message(
        messages=[
            SamplingMessage(
                role="user", content=TextContent(type="text", text=f"Summarise: {text}")
            )
        ],
        max_tokens=100,
    )
    return result.content.text if isinstance(result.content, TextContent) else str(result.content)


@mcp.tool(description="List the client's workspace roots.")
async def workspace(ctx: Context) -> str:
    roots = await ctx.session.list_roots()
    return "\n".join(f"{root.name or '-'}: {root.uri}" for root in roots.roots) or "no roots"


@mcp.tool(description="Echo (no interaction).")
def echo(text: str) -> str:
    return text


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=9000)
    args = parser.parse_args()
    uvicorn.run(mcp.streamable_http_app(), host="127.0.0.1", port=args.port, log_level="warning")
