"""Loopback servers for the client's tests: each request read, then answered by a script
that writes whatever bytes it likes (a real answer, or a hostile one)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable


class Server:
    """A loopback server that runs `answer(reader, writer, request_number)` per request."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests: list[bytes] = []
        self.url = ""
        self._server: asyncio.AbstractServer | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self, answer: Callable[..., object]) -> Server:
        async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            self._writers.append(writer)
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    length = 0
                    for line in head.split(b"\r\n"):
                        if line.lower().startswith(b"content-length:"):
                            length = int(line.split(b":")[1])
                    self.requests.append(head + await reader.readexactly(length))
                    if await answer(reader, writer, len(self.requests)) is False:  # type: ignore[misc]
                        writer.close()
                        return
            except (asyncio.IncompleteReadError, ConnectionError):
                writer.close()

        self._server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/mcp"
        return self

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        await self._server.wait_closed()


async def turns_until(condition: Callable[[], bool], turns: int = 100_000) -> None:
    """Run the loop until `condition` holds (a socket event this process has yet to read)."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")
