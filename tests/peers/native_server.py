"""The same tools served natively at 2026-07-28 by the official `mcp` 2.x SDK (modern venv).

The benchmark's baseline: `greet` asks its question MRTR-style (a resolver), so a
2026 client reaches it in two plain requests with no gateway in between.

    python native_server.py [--port N]

It prints `peer listening on HOST:PORT` on stderr once it accepts connections (port 0,
the default, picks a free port).
"""

from __future__ import annotations

import argparse
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve
from pydantic import BaseModel, Field
from serving import serve


class Username(BaseModel):
    username: str = Field(description="Your user name")


def ask_username() -> Elicit[Username]:
    return Elicit("What is your username?", Username)


def build() -> MCPServer:
    mcp = MCPServer("peers-native-py")

    @mcp.tool(description="Echo the text back (no interaction).")
    async def echo(text: str) -> str:
        return text

    @mcp.tool(description="Ask the user's name, then greet (MRTR resolver).")
    async def greet(user: Annotated[Username, Resolve(ask_username)], run_id: str = "") -> str:
        return f"Hello, {user.username}!"

    return mcp


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    serve(build().streamable_http_app(), "127.0.0.1", args.port)
