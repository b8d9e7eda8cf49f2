"""Server-Sent Events framing, sans-IO: feed bytes, take events; encode events.

Follows the WHATWG event-stream parsing rules the MCP transports rely on:
CRLF, LF or CR line ends; `data` lines joined by LF; comment lines ignored;
an `id` field persists as the last event id; `retry` is an integer of ASCII digits.

Everything a server sends is untrusted, and one event may be tens of megabytes (a
tool's whole result). So the work is linear in the bytes fed: each byte is looked at
once when its chunk arrives, a line cut between chunks waits as a list of pieces
joined once at its end, and no buffer is sliced again as it grows. An event past
`max_event_bytes` (its lines so far, comments and line ends included) raises
`EventTooLarge`; the parser is then spent, as is the stream it read.

A parser given `raw_over` holds an event whose data is larger than that, undecoded
(`held`, a `LargeEvent`: a large result is read from its bytes in steps, by
`gateway.protocol.large`), and goes no further until `release()`: what is fed meanwhile
is kept, and read by the next `feed()` after it, in order.
"""

from __future__ import annotations

from gateway.immutable import immutable

#: The default bound on one event; the gateway passes its configured one.
MAX_EVENT_BYTES = 64 * 1024 * 1024
#: A `retry` longer than this is ignored (nobody waits 115 days between reconnections).
_MAX_RETRY_DIGITS = 10


class EventTooLarge(ValueError):
    """An event grew past the parser's bound."""


@immutable
class SseEvent:
    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


@immutable
class LargeEvent(SseEvent):
    """An event whose data is over the parser's `raw_over`: `raw` is its data undecoded
    (UTF-8, its lines joined by LF) and `data` is empty."""

    raw: bytes = b""


class Parser:
    """Incremental event-stream parser. `feed()` returns the events completed so far."""

    __slots__ = (
        "max_event_bytes",
        "raw_over",
        "last_event_id",
        "held",
        "_after",
        "_pieces",
        "_size",
        "_skip_lf",
        "_data",
        "_event",
        "_id",
        "_retry",
        "_has_fields",
    )

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES, raw_over: int | None = None) -> None:
        self.max_event_bytes = max_event_bytes
        self.raw_over = raw_over
        self.last_event_id: str | None = None
        self.held: LargeEvent | None = None  # a large event, until `release()`
        self._after: list[bytes] | None = None  # what came after it, not yet read
        self._pieces: list[bytes] = []  # a line not yet ended, as it arrived
        self._size = 0  # the bytes of the event under way, pieces included
        self._skip_lf = False  # the last chunk ended with CR: a first LF is its pair
        self._data: list[bytes] = []
        self._event = b""
        self._id: str | None = None
        self._retry: int | None = None
        self._has_fields = False

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """The events `chunk` completes.

        Raises:
            EventTooLarge: the event under way passed `max_event_bytes`.
        """
        if self._after is not None:
            if self.held is not None:
                self._after.append(chunk)  # read once the large event is released
                return []
            self._after.append(chunk)
            chunk, self._after = b"".join(self._after), None
        events: list[SseEvent] = []
        end = len(chunk)
        pos = 0
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                pos = 1
        # The next LF and CR are each found once and kept until a line passes them:
        # looking for "the nearer of the two" afresh at each line would scan the rest
        # of the chunk once per line.
        lf = chunk.find(b"\n", pos)
        cr = chunk.find(b"\r", pos)
        while lf >= 0 or cr >= 0:
            if cr < 0 or 0 <= lf < cr:
                stop, after = lf, lf + 1
                lf = chunk.find(b"\n", after)
            else:
                stop, after = cr, cr + 1
                if after == end:
                    self._skip_lf = True  # its LF, if any, starts the next chunk
                elif chunk[after] == 0x0A:
                    after += 1
                    lf = chunk.find(b"\n", after)
                cr = chunk.find(b"\r", after)
            # `_grow`, written out: it runs for every line of every event.
            self._size += after - pos
            if self._size > self.max_event_bytes:
                raise EventTooLarge(f"an event is over {self.max_event_bytes} bytes")
            line = chunk[pos:stop]
            pos = after
            if self._pieces:
                self._pieces.append(line)
                pieces, self._pieces = self._pieces, []
                first = pieces[0]
                if first[:5] == b"data:" and len(first) > 5:
                    # A data line that came in pieces (a large event's): its value joined
                    # once, not joined with its field name and then sliced from it.
                    pieces[0] = first[6:] if first[5] == 0x20 else first[5:]
                    self._has_fields = True
                    self._data.append(b"".join(pieces))
                    continue
                line = b"".join(pieces)
            event = self._line(line)
            if event is not None:
                if type(event) is LargeEvent:
                    self.held, self._after = event, [chunk[pos:]]
                    return events
                events.append(event)
        if pos < end:
            rest = chunk[pos:] if pos else chunk
            self._pieces.append(rest)
            self._grow(len(rest))
        return events

    def release(self) -> None:
        """The held event has been read: the next `feed()` goes on after it."""
        self.held = None

    def _grow(self, size: int) -> None:
        self._size += size
        if self._size > self.max_event_bytes:
            raise EventTooLarge(f"an event is over {self.max_event_bytes} bytes")

    def _line(self, line: bytes) -> SseEvent | None:
        if not line:
            return self._dispatch()
        if line[0] == 0x3A:  # ":" a comment
            return None
        colon = line.find(b":")
        if colon < 0:
            field, value = line, b""
        else:
            field = line[:colon]
            start = colon + 2 if line[colon + 1 : colon + 2] == b" " else colon + 1
            value = line[start:]
        self._has_fields = True
        if field == b"data":
            self._data.append(value)
        elif field == b"event":
            self._event = value
        elif field == b"id":
            if b"\0" not in value:
                self._id = self.last_event_id = value.decode("utf-8", "replace")
        elif field == b"retry" and value.isdigit() and len(value) <= _MAX_RETRY_DIGITS:
            self._retry = int(value)  # bytes.isdigit() is ASCII digits only
        return None

    def _dispatch(self) -> SseEvent | None:
        self._size = 0
        if not self._has_fields:
            return None
        data = b"\n".join(self._data)
        kind = self._event.decode("utf-8", "replace") or "message"
        if self.raw_over is not None and len(data) > self.raw_over:
            event: SseEvent = LargeEvent("", kind, self._id, self._retry, data)
        else:
            event = SseEvent(
                data=data.decode("utf-8", "replace"), event=kind, id=self._id, retry=self._retry
            )
        self._data, self._event, self._id, self._retry = [], b"", None, None
        self._has_fields = False
        return event


def encode(data: str, *, event: str = "message") -> bytes:
    """One SSE frame carrying `data` (which must not contain newlines: compact JSON)."""
    return f"event: {event}\ndata: {data}\n\n".encode()


def frame(data: bytes) -> bytes:
    """One `message` frame carrying `data`, which holds no CR or LF (compact JSON, as
    `jsonrpc.dumps` writes it): `encode` without decoding and encoding the data again."""
    return b"event: message\ndata: " + data + b"\n\n"


def encode_event(event: SseEvent) -> bytes:
    """An event as read (`Parser`) framed again, every field kept: its id, its retry, its
    type, its data over as many `data` lines as it has lines. What `Parser` yields holds
    no CR or LF but in `data`, so each field stays one line."""
    lines = [] if event.id is None else [f"id: {event.id}"]
    if event.retry is not None:
        lines.append(f"retry: {event.retry}")
    lines.append(f"event: {event.event}")
    lines.extend(f"data: {line}" for line in event.data.split("\n"))
    lines.append("\n")
    return "\n".join(lines).encode()


KEEPALIVE = b": keepalive\n\n"
