"""A large upstream response read in steps, its bulk kept as the bytes it came in.

A result of tens of megabytes (a file, an image, a table) parsed whole holds the event
loop for as long as the parse takes, and written back out holds it as long again: every
other client of the gateway waits. A response of `LARGE_BYTES` or more is read here
instead, by the generator `reading`, which stops after about every `STEP_BYTES` of work
(its caller lets the loop run between two steps):

- What the gateway looks into is read to Python values: the envelope, `result` (or
  `error`), the members of `result`, the entries of those that are arrays and the
  members of those entries (a `resources/read` result's `contents[*].uri`): objects down
  to `_KEPT_OBJECTS` containers deep, arrays down to `_KEPT_ARRAYS`.
- Below that, a value larger than the largest probe window (`_PROBE_SHIFTS`), and a
  string that large anywhere, is validated a step at a time by orjson and kept as the
  bytes it came in, an `orjson.Fragment` that `orjson.dumps` writes out verbatim (its CR
  and LF, which valid JSON holds there only as whitespace, made spaces: the message
  stays one SSE line).
- A large array or object is validated many entries at a time: cut at the last
  separator in a step's window (`,` with what the entry after it opens with, as seen
  between two entries of it), the entries before the cut are parsed as one, `[` and `]`
  (or `{` and `}`) around them. A cut inside a string or a nested value fails that parse
  (a string left open, a bracket left unclosed) and an earlier one is tried; an entry
  the window cannot take is read alone.

It reads what `jsonrpc.loads` reads, to the same value, and refuses what it refuses
(nesting past `jsonrpc.MAX_DEPTH`). What it does not read plainly raises `Unstepped`, and
the caller reads the message whole, as before: not an object, a request or a
notification (only responses are read here), `NaN`, an integer past 64 bits where a
value is kept, a lone surrogate escape, bytes that are not UTF-8, a string too dense with
escapes to cut, entries it cannot cut, or more work than `_WORK_PER_BYTE` times the
message. Sans-IO: bytes in, a value out, no awaiting.
"""

from __future__ import annotations

import copyreg
import json
import re
from collections.abc import Generator
from typing import Any

import orjson

from gateway.protocol import jsonrpc

#: A response this large (or larger) is read in steps.
LARGE_BYTES = 1 << 20
#: The work between two steps: bytes parsed, copied or searched.
STEP_BYTES = 1 << 20
#: The windows a value is first tried in, as fractions of a step (each sixteen times the
#: one before: 4 KiB, 64 KiB, 1 MiB): a value that fits none is large.
_PROBE_SHIFTS = (8, 4, 0)
#: How deep (containers around it) an object, and an array, is still read to a value.
_KEPT_OBJECTS = 3
_KEPT_ARRAYS = 2
#: At most this many entries read one at a time (not cut in batches) per message.
_MAX_ALONE = 10_000
#: At most this much work per byte of the message (cuts tried and failed, probes).
_WORK_PER_BYTE = 8

Step = Generator[None, None, tuple[Any, int]]

_WS = re.compile(rb"[ \t\n\r]*")
# Where a long string may be cut without splitting an escape (or a surrogate pair of
# them): before a backslash that follows another byte (in a valid string it starts an
# escape) unless it starts the low half of a pair; or after 9 bytes without a backslash
# (an escape is at most 6 bytes long, and moving the cut back to the start of its UTF-8
# character takes at most 3: no backslash is part of a multi-byte character).
_STRING_CUT = re.compile(rb"(?<=[^\\])(?P<escape>\\)(?!u[dD][c-fC-F])|[^\\]{9}")
# What an object entry of an array opens with, its first key included: the separator
# between two such entries is sought with it (a key recurs in every entry of a table).
_FIRST_KEY = re.compile(rb'\{[ \t\n\r]*"[^"\\]{0,64}"')
_SPACES = bytes.maketrans(b"\r\n", b"  ")
_CLOSING = {0x5B: b"]", 0x7B: b"}"}
_NUMBER_GOES_ON = frozenset(b"0123456789.eE+-")


def _reduced(fragment: orjson.Fragment) -> tuple[type[orjson.Fragment], tuple[bytes]]:
    return orjson.Fragment, (orjson.dumps(fragment),)


# A result holding its bulk as fragments is copied whole where a dataclass holding it is
# (`dataclasses.asdict` deep-copies: a fleet message carrying the result), and pickled so.
copyreg.pickle(orjson.Fragment, _reduced)


class Unstepped(Exception):
    """The message is not one `reading` reads in steps: read it whole."""


def reading(body: bytes, *, step_bytes: int = STEP_BYTES) -> Generator[None, None, dict[str, Any]]:
    """Read the JSON-RPC response `body` in steps: `next()` does one (about `step_bytes`
    of work); the response, with its bulk kept as `orjson.Fragment`s, is the value of
    the `StopIteration` that ends it.

    Raises:
        Unstepped: not a response this reads in steps (see the module's docstring).
    """
    reader = _Reader(body, step_bytes)
    start = reader.ws(0)
    if body[start : start + 1] != b"{":
        raise Unstepped("not an object")
    message, end = yield from reader.container(start, 0)
    if reader.ws(end) != len(body):
        raise Unstepped("not one value")
    if "method" in message:
        raise Unstepped("a request or a notification")
    result: dict[str, Any] = message
    return result


class _Reader:
    __slots__ = ("body", "size", "step", "probes", "lookback", "_budget", "_spent", "_alone")

    def __init__(self, body: bytes, step: int) -> None:
        self.body = body
        self.size = len(body)
        self.step = step
        self.probes = tuple(max(step >> shift, 64) for shift in _PROBE_SHIFTS)
        self.lookback = min(step // 4, 4096)  # before a window's end, where to cut a string
        self._budget = _WORK_PER_BYTE * len(body) + step
        self._spent = 0  # work since the last step
        self._alone = 0  # entries read one at a time

    # -- the parts of a message ----------------------------------------------------------

    def value(self, p: int, depth: int, keep: bool) -> Step:
        """The value at `p` (no whitespace before it) with `depth` containers around it,
        and where it ends; `keep`: read to a value (else a large one is kept as bytes)."""
        small = self.small(p, depth, keep)
        if small is not None:
            return small
        first = self.body[p : p + 1]
        if first == b'"':
            return (yield from self.string(p))
        if first in (b"[", b"{"):
            return (yield from self.container(p, depth))
        raise Unstepped("a large value that is no string, array or object")

    def small(self, p: int, depth: int, keep: bool) -> tuple[Any, int] | None:
        """The value at `p` if it fits one of the probe windows, and where it ends."""
        body = self.body
        for size in self.probes:
            end = self.fit(min(p + size, self.size), p)
            window = body[p:end]
            self.work(len(window))
            try:
                value = orjson.loads(window)
            except orjson.JSONDecodeError as exc:
                ends = _offset(window, exc)
                if ends >= len(window):
                    continue  # the value goes on past the window
                raw = window[:ends]  # the value, if what stopped the parse followed it
                try:
                    value = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue  # not a value cut short by what follows it: a wider look
                return self.check(raw, value, depth, keep), p + ends
            if end < self.size and body[end] in _NUMBER_GOES_ON:
                continue  # a number the window cut
            return self.check(window, value, depth, keep), end
        return None

    def string(self, p: int) -> Step:
        """A string too large to probe: validated a window at a time, kept as bytes.

        Each window is parsed as a string left open (`"` and the window): orjson reads
        to the window's end (the string goes on: the next window starts at a cut near
        that end, where no escape is split) or stops after the string's closing quote."""
        body = self.body
        start = p + 1
        while True:
            if self.due():
                yield
            end = self.fit(min(start + self.step, self.size), start)
            doc = b'"' + body[start:end]
            self.work(len(doc))
            try:
                orjson.loads(doc)
            except orjson.JSONDecodeError as exc:
                ends = _offset(doc, exc)
                if ends < len(doc):  # stopped after the closing quote, or at a fault
                    if not _is_json(doc[:ends]):
                        raise Unstepped("not a JSON string") from None
                    self.work(ends)
                    return self.fragment(p, start + ends - 1), start + ends - 1
            else:
                return self.fragment(p, end), end  # closed, and only whitespace after it
            if end >= self.size:
                raise Unstepped("a string that does not end")
            found = _STRING_CUT.search(body, max(start + 1, end - self.lookback), end)
            if found is None:
                raise Unstepped("a string with nowhere to cut it")
            start = found.start() if found.group("escape") else self.fit(found.end(), start)

    def container(self, p: int, depth: int) -> Step:
        """The array or object at `p`: read to a list or dict down to `_KEPT_OBJECTS`
        and `_KEPT_ARRAYS` (large entries below are bytes), else validated and kept as
        bytes; entries cut in batches where a separator is known."""
        body = self.body
        is_object = body[p] == 0x7B
        opening, closing = body[p : p + 1], _CLOSING[body[p]]
        keep = depth <= (_KEPT_OBJECTS if is_object else _KEPT_ARRAYS)
        kept: Any = {} if is_object else []
        at = self.ws(p + 1)
        if body[at : at + 1] == closing:
            return ({} if is_object else []), at + 1
        separator: bytes | None = None
        alone = 0  # entries still to read one at a time before the next batch is cut
        failures = 0
        while True:
            if self.due():
                yield
            if depth == 0 and "method" in kept:
                raise Unstepped("a request or a notification")
            if separator is not None and alone == 0:
                batch = self.batch(opening, closing, at, separator, depth, keep)
                if batch is not None:
                    entries, at = batch
                    if keep and is_object:
                        kept.update(entries)
                    elif keep:
                        kept.extend(entries)
                    failures = 0
                    continue
                failures += 1
                alone = min(1 << failures, 64)
            alone = max(alone - 1, 0)
            self._alone += 1
            if self._alone > _MAX_ALONE:
                raise Unstepped("too many entries read one at a time")
            key = None
            if is_object:
                found = self.small(at, depth + 1, True) if body[at] == 0x22 else None
                if found is None or not isinstance(found[0], str):
                    raise Unstepped("an object key that is no short string")
                key, at = found
                at = self.ws(at)
                if body[at : at + 1] != b":":
                    raise Unstepped("no colon after a key")
                at = self.ws(at + 1)
            value, at = yield from self.value(at, depth + 1, keep)
            if keep:
                if is_object:
                    kept[key] = value
                else:
                    kept.append(value)
            at = self.ws(at)
            follows = body[at : at + 1]
            if follows == closing:
                end = at + 1
                return (kept if keep else self.fragment(p, end)), end
            if follows != b",":
                raise Unstepped("no comma between entries")
            after = self.ws(at + 1)
            separator = body[at:after] + self.opening_of(after, is_object)
            at = after

    def batch(
        self, opening: bytes, closing: bytes, at: int, separator: bytes, depth: int, keep: bool
    ) -> tuple[Any, int] | None:
        """The entries from `at` up to the last `separator` in a step's window that
        parse as one (three cuts tried), and where the entry after them starts; None when
        none does."""
        body = self.body
        cut = body.rfind(separator, at, min(at + self.step, self.size))
        for _ in range(3):
            if cut <= at:
                return None
            raw = opening + body[at:cut] + closing
            self.work(len(raw))
            try:
                entries = orjson.loads(raw)
            except orjson.JSONDecodeError:
                cut = body.rfind(separator, at, cut)
                continue
            return self.check(raw, entries, depth, keep), self.ws(cut + 1)
        return None

    def opening_of(self, at: int, is_object: bool) -> bytes:
        """What the entry at `at` opens with, as far as the next entries share it."""
        body = self.body
        first = body[at : at + 1]
        if is_object or first in (b'"', b"["):
            return first
        if first == b"{":
            key = _FIRST_KEY.match(body, at)
            return first if key is None else key.group()
        return b""  # a number or a literal: any comma of the array is a separator

    # -- bounds and bookkeeping ----------------------------------------------------------

    def check(self, raw: bytes, value: Any, depth: int, keep: bool) -> Any:
        """`value` (read from `raw`, with `depth` containers around it) as `jsonrpc.loads`
        reads it: an integer past 64 bits, which orjson reads as a float, read exactly
        where the value is kept (none may be written out by orjson: `Unstepped`); and
        refused when it nests past `jsonrpc.MAX_DEPTH`."""
        deep = raw.count(b"[") + raw.count(b"{") + depth > jsonrpc.MAX_DEPTH
        if keep and jsonrpc.has_long_number(raw):  # or a float with 20 digits or more
            try:
                value = json.loads(raw)
            except ValueError:
                raise Unstepped("not JSON") from None
            deep = True  # `orjson.dumps` says whether it holds such an integer
        if not deep:
            return value
        nested = value
        for _ in range(depth):
            nested = [nested]
        self.work(len(raw))
        try:
            orjson.dumps(nested)  # refuses past MAX_DEPTH levels, as `jsonrpc.loads` does
        except orjson.JSONEncodeError:
            raise Unstepped("nested too deep, or an integer past 64 bits") from None
        return value

    def fragment(self, start: int, end: int) -> orjson.Fragment:
        raw = self.body[start:end]
        self.work(len(raw))
        if b"\n" in raw or b"\r" in raw:
            raw = raw.translate(_SPACES)
        return orjson.Fragment(raw)

    def ws(self, at: int) -> int:
        found = _WS.match(self.body, at)
        assert found is not None  # it matches the empty string
        return found.end()

    def fit(self, end: int, start: int) -> int:
        """`end`, moved back to the start of the UTF-8 character it is in."""
        body = self.body
        while start < end < self.size and 0x80 <= body[end] < 0xC0:
            end -= 1
        return end

    def work(self, size: int) -> None:
        self._spent += size
        self._budget -= size
        if self._budget < 0:
            raise Unstepped("more work than the message is worth")

    def due(self) -> bool:
        """Whether a step's work has been done since the last step."""
        if self._spent < self.step:
            return False
        self._spent = 0
        return True


def _offset(doc: bytes, exc: orjson.JSONDecodeError) -> int:
    """Where in `doc` orjson stopped, in bytes (it counts characters)."""
    if doc.isascii():
        return int(exc.pos)
    text = exc.doc
    if not isinstance(text, str):
        raise Unstepped("no document in orjson's error")
    return len(text[: exc.pos].encode())


def _is_json(raw: bytes) -> bool:
    try:
        orjson.loads(raw)
    except orjson.JSONDecodeError:
        return False
    return True
