"""The test tooling's own promises about the peers it runs."""

from __future__ import annotations

import asyncio
import socket

import pytest

from tests.conftest import Gateway
from tests.peers.tooling import ModernClient

pytestmark = pytest.mark.peers


async def test_a_modern_client_killed_for_not_answering_is_started_again(gateway: Gateway) -> None:
    """One command that hangs fails its own test, not every test after it."""
    silent = socket.socket()  # accepts (the backlog does), never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    client = ModernClient()
    try:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/mcp"
        hang = {"op": "list_tools", "url": url}
        with pytest.raises(RuntimeError, match="no answer to list_tools within 2"):
            await asyncio.to_thread(client.run, hang, 2.0)
        killed = client.proc
        reply = await asyncio.to_thread(client.run, {"op": "list_tools", "url": gateway.url})
        assert client.proc is not killed and killed.returncode is not None
        assert "greet" in {tool["name"] for tool in reply["result"]["tools"]}
    finally:
        client.stop()
        silent.close()
