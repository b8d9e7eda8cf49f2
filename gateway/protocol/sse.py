"""Server-Sent Events framing, sans-IO: feed bytes, take events; encode events.

Follows the WHATWG event-stream parsing rules the MCP transports rely on:
CRLF, LF or CR line ends; `data` lines joined by LF; comment lines ignored;
an `id` field persists as the last event id; `retry` is an integer.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Event:
    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


class Parser:
    """Incremental event-stream parser. `feed()` returns the events completed so far."""

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._retry: int | None = None
        self._has_fields = False
        self.last_event_id: str | None = None

    def feed(self, chunk: bytes) -> list[Event]:
        self._buffer += chunk
        events: list[Event] = []
        while True:
            line, sep_found = self._next_line()
            if not sep_found:
                return events
            event = self._process_line(line)
            if event is not None:
                events.append(event)

    def _next_line(self) -> tuple[str, bool]:
        buf = self._buffer
        lf, cr = buf.find(b"\n"), buf.find(b"\r")
        if cr == -1 or (lf != -1 and lf < cr):
            if lf == -1:
                return "", False
            end, skip = lf, 1
        else:
            if cr + 1 == len(buf):
                return "", False  # wait: the LF of a CRLF may be in the next chunk
            end, skip = cr, 2 if buf[cr + 1] == 0x0A else 1
        self._buffer = buf[end + skip :]
        return buf[:end].decode("utf-8", "replace"), True

    def _process_line(self, line: str) -> Event | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        self._has_fields = True
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id":
            if "\0" not in value:
                self._id = value
                self.last_event_id = value
        elif field == "retry" and value.isdigit():
            self._retry = int(value)
        return None

    def _dispatch(self) -> Event | None:
        if not self._has_fields:
            return None
        event = Event(
            data="\n".join(self._data),
            event=self._event or "message",
            id=self._id,
            retry=self._retry,
        )
        self._data, self._event, self._id, self._retry = [], "", None, None
        self._has_fields = False
        return event


def encode(data: str, *, event: str = "message") -> bytes:
    """One SSE frame carrying `data` (which must not contain newlines: compact JSON)."""
    return f"event: {event}\ndata: {data}\n\n".encode()


KEEPALIVE = b": keepalive\n\n"
