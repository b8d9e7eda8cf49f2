"""Newline-delimited JSON-RPC framing (the stdio transport), sans-IO.

Feed bytes as they come, take complete messages. There is no line limit but the
one given: a message that outgrows it is an error, because a stream cut mid-line
cannot be read any further.
"""

from __future__ import annotations

from typing import Any

from gateway.protocol import jsonrpc


class MessageTooLarge(ValueError):
    """A message outgrew the cap before its end of line."""


class LineReader:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        """The complete lines in `chunk` and what came before it (without line ends).

        Raises:
            MessageTooLarge
        """
        self._buffer += chunk
        lines = []
        start = 0
        while (end := self._buffer.find(b"\n", start)) != -1:
            line = bytes(self._buffer[start:end]).rstrip(b"\r")
            if len(line) > self.max_bytes:
                raise MessageTooLarge(f"a message of {len(line)} bytes is over {self.max_bytes}")
            if line.strip():
                lines.append(line)
            start = end + 1
        del self._buffer[:start]
        if len(self._buffer) > self.max_bytes:
            raise MessageTooLarge(f"a message grew past {self.max_bytes} bytes without ending")
        return lines


def decode_line(line: bytes) -> dict[str, Any] | None:
    """The JSON-RPC message on one line, or None when it is not one (servers print junk)."""
    try:
        item = jsonrpc.loads(line)
    except (ValueError, RecursionError):
        return None
    return item if isinstance(item, dict) else None


def encode_line(message: dict[str, Any]) -> bytes:
    return jsonrpc.dumps(message) + b"\n"
