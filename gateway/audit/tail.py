"""`mrtr-gateway audit tail`: the fleet's audit stream (`gateway.audit.stream`), read.

    mrtr-gateway audit tail [--config FILE] [--follow] [--since WHEN] [-n N]
                            [--principal WHO] [--tool NAME] [--kind KIND] [--call ID]

It reads the gateway's own file for where the stream is (`audit.stream`), prints each
event as its JSON line, oldest first, and with `--follow` waits for more, riding out a
Redis that restarts. Without `--since` it starts with the last `-n` events. An event
seen twice (a consumer's duty: see `gateway.protocol.audit`) is printed once; an entry
that is no event of a schema this release reads is skipped, said on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import re
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.clock import Backoff
from gateway.config import load_config
from gateway.errors import ConfigError
from gateway.protocol import audit_record
from gateway.store.redis_client import (
    RedisClient,
    close_client,
    connect,
    from_redis,
    stop_if_cancelled,
    text,
)

#: How long one read of a followed stream waits for news (below the client's socket
#: timeout, 2 s).
BLOCK_MS = 1000
#: Entries read at once.
PAGE = 1000
#: Event ids remembered to print each once.
REMEMBERED = 100_000
_FOLLOW_RETRY = Backoff(0.2, 5.0)
_AGO = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNITS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_STREAM_ID = re.compile(r"^\d+(-\d+)?$")


def since_id(when: str, now_ms: int) -> str:
    """`--since` as the first stream id to read: `90s`, `10m`, `2h`, `1d` ago; an ISO 8601
    time (UTC when it names no zone); or a stream id or milliseconds since the epoch.

    Raises:
        ValueError: none of those.
    """
    ago = _AGO.fullmatch(when)
    if ago:
        return f"{max(now_ms - int(float(ago.group(1)) * _UNITS[ago.group(2)]), 0)}-0"
    if _STREAM_ID.fullmatch(when):
        return when if "-" in when else f"{when}-0"
    try:
        moment = datetime.datetime.fromisoformat(when.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"--since {when!r}: a duration ago (90s, 10m, 2h, 1d), an ISO 8601 time "
            "(2026-10-01T12:00:00Z) or a stream id"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return f"{int(moment.timestamp() * 1000)}-0"


def principal_names(principal: Any) -> frozenset[str]:
    """Every name an event's principal (its JSON) may be looked up by."""
    if not isinstance(principal, Mapping):
        return frozenset()
    found = {
        str(principal[k])
        for k in ("issuer", "subject", "client_id", "key_id", "log_id")
        if principal.get(k)
    }
    if principal.get("kind") == "jwt":
        found.add(f"{principal.get('issuer')}|{principal.get('subject')}")
    return frozenset(found)


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditFilter:
    """Which events to print: all that match every criterion given."""

    principal: str | None = None  # a subject, client id, API key id, issuer|subject, log id
    tool: str | None = None  # a tool's name
    kind: str | None = None  # an event kind (`call.ended`) or its family (`call`, `task`)
    call_id: str | None = None

    def matches(self, event: Mapping[str, Any]) -> bool:
        if self.principal is not None:
            if self.principal not in principal_names(event.get("principal")):
                return False
        if self.tool is not None and event.get("tool") != self.tool:
            return False
        if self.kind is not None:
            kind = str(event.get("kind", ""))
            if kind != self.kind and not kind.startswith(self.kind + "."):
                return False
        return self.call_id is None or event.get("call_id") == self.call_id


class Reader:
    """Entries of the stream turned into the lines to print (see the module docstring)."""

    def __init__(
        self, match: AuditFilter, out: Callable[[bytes], None], skipped: Callable[[str], None]
    ) -> None:
        self.match = match
        self.out = out
        self.skipped = skipped
        self.printed = 0
        self._seen: set[str] = set()
        self._order: deque[str] = deque()

    def take(self, entries: list[tuple[Any, Mapping[Any, Any]]]) -> str | None:
        """Print what `entries` hold; the last entry's stream id (None: there was none)."""
        last = None
        for entry_id, fields in entries:
            last = text(entry_id)
            raw = fields.get(b"event", fields.get("event"))
            try:
                event = audit_record.read(orjson.loads(raw or b""))
            except ValueError as exc:
                self.skipped(f"entry {last}: {exc}")
                continue
            event_id = str(event.get("id"))
            if event_id in self._seen:
                continue
            self._remember(event_id)
            if self.match.matches(event):
                self.out(raw if isinstance(raw, bytes) else str(raw).encode())
                self.printed += 1
        return last

    def _remember(self, event_id: str) -> None:
        self._seen.add(event_id)
        self._order.append(event_id)
        if len(self._order) > REMEMBERED:
            self._seen.discard(self._order.popleft())


async def tail(
    client: RedisClient,
    key: str,
    reader: Reader,
    *,
    since: str | None = None,
    last: int = 20,
    follow: bool = False,
    note: Callable[[str], None] = lambda _: None,
    following: Callable[[], None] = lambda: None,
) -> None:
    """Print the stream at `key` through `reader`: from stream id `since`, or its `last`
    events; with `follow`, then what comes, until cancelled (`following` is told once the
    past is printed: what is added from then on is printed too).

    Raises:
        RedisError, OSError: Redis could not be read (without `follow`; with it, each
        failure is said through `note` and the read tried again).
    """
    if since is None:
        newest: Any = await client.xrevrange(key, "+", "-", count=last) if last > 0 else []
        position = reader.take(list(reversed(newest or []))) or await _top(client, key)
    else:
        position = since
        while True:
            page: Any = await client.xrange(key, position, "+", count=PAGE)
            got = reader.take(page or [])
            if got is None:
                break
            position = f"({got}"  # after it (Redis 6.2)
        position = position.lstrip("(")
    failures = 0
    if follow:
        following()
    while follow:
        try:
            read: Any = await client.xread({key: position}, count=PAGE, block=BLOCK_MS)
        except Exception as exc:
            stop_if_cancelled(exc)  # the client may have turned a cancel into this
            if not from_redis(exc):
                raise
            failures += 1
            if failures == 1:
                note(f"the stream cannot be read now ({exc}); trying again")
            await asyncio.sleep(_FOLLOW_RETRY.delay(failures))
            continue
        stop_if_cancelled()
        if failures:
            note("reading the stream again")
            failures = 0
        for _, entries in read or []:
            position = reader.take(entries) or position


async def _top(client: RedisClient, key: str) -> str:
    """The newest entry's id, or `0-0` for an empty stream: a follow from there reads
    only what comes."""
    newest: Any = await client.xrevrange(key, "+", "-", count=1)
    return text(newest[0][0]) if newest else "0-0"


def tail_command(args: argparse.Namespace) -> int:
    """Raises: ConfigError (the file, or one that writes no stream)."""
    config = load_config(args.config)
    stream = None if config.audit is None else config.audit.stream
    if stream is None:
        raise ConfigError(
            f"{args.config}: writes no audit stream (audit.stream); the events are where its "
            "other sinks put them (audit.file, or the log stream)"
        )
    since = None
    if args.since is not None:
        try:
            since = since_id(args.since, int(time.time() * 1000))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    match = AuditFilter(principal=args.principal, tool=args.tool, kind=args.kind, call_id=args.call)

    def out(line: bytes) -> None:
        sys.stdout.buffer.write(line + b"\n")
        sys.stdout.buffer.flush()

    def said(message: str) -> None:
        print(f"mrtr-gateway: {message}", file=sys.stderr)

    reader = Reader(match, out, lambda why: said(f"skipped {why}"))

    async def run() -> None:
        client = connect(stream.url)
        try:
            await tail(
                client,
                stream.key,
                reader,
                since=since,
                last=args.lines,
                follow=args.follow,
                note=said,
            )
        finally:
            await close_client(client)

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        return 0
    except Exception as exc:
        if not from_redis(exc):
            raise
        said(f"the stream {stream.key} could not be read: {exc}")
        return 1
    return 0
