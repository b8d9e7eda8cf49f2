"""Where the tools' pins are kept: in this process (one replica) or in Redis, shared by
the fleet and read by `mrtr-gateway pins`.

Per upstream and tool (the server's own name), a pin holds the definition trusted (first
seen, or last approved) and, once it drifted, the definition seen since. Pinning a tool
seen for the first time is atomic: two replicas seeing it at once keep one pin. An
approval makes what was seen the pin. Each pin is a JSON object versioned as the formats
registry says (`Kind.PIN`), so a rolling upgrade covers it.

A pin is read when a replica refreshes its catalog (at most every `catalog.ttl_s`), never
on a client's request.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from gateway.protocol import formats, pins
from gateway.protocol.formats import Kind
from gateway.store.redis_client import RedisClient, text
from gateway.store.versioned import VersionedOnRedis


@dataclass(frozen=True, slots=True)
class Pin:
    """A tool's pin: the definition trusted, and the one seen since if it differs."""

    definition: dict[str, Any]
    pinned_ms: int
    seen: dict[str, Any] | None = None
    seen_ms: int | None = None

    @property
    def fingerprint(self) -> str:
        return pins.fingerprint(self.definition)

    def drift(self, tool: str) -> pins.Drift | None:
        """How the definition seen since differs from the pin; None when it does not."""
        return None if self.seen is None else pins.drift(tool, self.definition, self.seen)

    def encode(self, version: int) -> str:
        data: dict[str, Any] = {"def": self.definition, "at": self.pinned_ms}
        if self.seen is not None:
            data.update(seen=self.seen, seen_at=self.seen_ms)
        return json.dumps(formats.stamped(Kind.PIN, data, version), separators=(",", ":"))

    @classmethod
    def decode(cls, raw: str | bytes) -> Pin:
        """Raises: ValueError for anything but a pin of a version this release reads."""
        loaded = json.loads(raw)
        if not isinstance(loaded, dict):
            raise ValueError("a pin is a JSON object")
        _, data = formats.unstamped(Kind.PIN, loaded)
        definition, at = data.get("def"), data.get("at")
        if not isinstance(definition, dict) or not isinstance(at, int):
            raise ValueError("a pin without its definition")
        seen, seen_at = data.get("seen"), data.get("seen_at")
        if seen is not None and (not isinstance(seen, dict) or not isinstance(seen_at, int)):
            raise ValueError("a pin with a malformed seen definition")
        return cls(definition, at, seen, seen_at)


class PinStore(Protocol):
    async def pin(
        self, upstream: str, tools: dict[str, dict[str, Any]], now_ms: int
    ) -> dict[str, Pin]:
        """Pin the tools (by own name, their `pins.definition`) that have no pin yet, each
        atomically, and record as seen the definition of each that differs from its pin:
        the pins of those tools as they stand after. Raises: StoreError."""
        ...

    async def all(self, upstream: str) -> dict[str, Pin]:
        """Every pin of an upstream (removed tools keep theirs). Raises: StoreError."""
        ...

    async def approve(self, upstream: str, tools: Iterable[str] | None) -> list[str]:
        """Trust what was seen of `tools` (None: of every drifted tool): the names approved.
        Raises: StoreError."""
        ...


def _merged(pin: Pin | None, definition: dict[str, Any], now_ms: int) -> Pin | None:
    """The pin after `definition` was seen; None when it does not change."""
    if pin is None:
        return Pin(definition, now_ms)
    if pins.fingerprint(definition) == pin.fingerprint:
        return None if pin.seen is None else Pin(pin.definition, pin.pinned_ms)
    if pin.seen is not None and pins.fingerprint(pin.seen) == pins.fingerprint(definition):
        return None
    return Pin(pin.definition, pin.pinned_ms, definition, now_ms)


class MemoryPins:
    """Pins in this process: one replica's, lost when it stops (a restarted gateway pins
    on first sight again)."""

    def __init__(self) -> None:
        self._pins: dict[str, dict[str, Pin]] = {}

    async def pin(
        self, upstream: str, tools: dict[str, dict[str, Any]], now_ms: int
    ) -> dict[str, Pin]:
        kept = self._pins.setdefault(upstream, {})
        for name, definition in tools.items():
            changed = _merged(kept.get(name), definition, now_ms)
            if changed is not None:
                kept[name] = changed
        return {name: kept[name] for name in tools}

    async def all(self, upstream: str) -> dict[str, Pin]:
        return dict(self._pins.get(upstream, {}))

    async def approve(self, upstream: str, tools: Iterable[str] | None) -> list[str]:
        kept = self._pins.get(upstream, {})
        return [name for name in _drifted(kept, tools) if _approve_in(kept, name)]


def _drifted(kept: dict[str, Pin], tools: Iterable[str] | None) -> list[str]:
    names = kept if tools is None else [t for t in tools if t in kept]
    return [name for name in names if kept[name].seen is not None]


def _approve_in(kept: dict[str, Pin], name: str) -> bool:
    pin = kept[name]
    assert pin.seen is not None and pin.seen_ms is not None
    kept[name] = Pin(pin.seen, pin.seen_ms)
    return True


#: Set a pin if none is (HSETNX), else record what was seen: KEYS[1] the upstream's hash;
#: ARGV[1] the tool, ARGV[2] the pin to set when none is. The pin as it stands after.
PIN_IF_NONE = """
redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
return redis.call('HGET', KEYS[1], ARGV[1])
"""

#: Replace a pin only if it is still what was read (ARGV[2]): ARGV[3] the new one.
REPLACE = """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
"""


class RedisPins(VersionedOnRedis):
    """One hash per upstream (`<prefix>pins:{<upstream>}`), a field per tool; never
    expiring (a removed tool keeps its pin)."""

    kind = Kind.PIN

    def __init__(self, client: RedisClient, **given: Any) -> None:
        super().__init__(client, **given)
        self._pin_if_none = client.register_script(PIN_IF_NONE)
        self._replace = client.register_script(REPLACE)

    def key(self, upstream: str) -> str:
        return f"{self.prefix}pins:{{{upstream}}}"

    async def pin(
        self, upstream: str, tools: dict[str, dict[str, Any]], now_ms: int
    ) -> dict[str, Pin]:
        key, after = self.key(upstream), {}
        for name, definition in tools.items():
            fresh = Pin(definition, now_ms).encode(self.version())
            raw = await self._run(partial(self._pin_if_none, keys=[key], args=[name, fresh]))
            pin = Pin.decode(text(raw))
            changed = _merged(pin, definition, now_ms)
            if changed is not None:  # drifted: what was seen is kept beside the pin
                written = changed.encode(self.version())
                args = [name, text(raw), written]
                if await self._run(partial(self._replace, keys=[key], args=args)):
                    pin = changed
            after[name] = pin
        return after

    async def all(self, upstream: str) -> dict[str, Pin]:
        raw = await self._run(lambda: self.client.hgetall(self.key(upstream)))
        return {text(name): Pin.decode(text(value)) for name, value in raw.items()}

    async def approve(self, upstream: str, tools: Iterable[str] | None) -> list[str]:
        key, approved = self.key(upstream), []
        for name in _drifted(await self.all(upstream), tools):
            raw = await self._run(partial(self.client.hget, key, name))
            if raw is None:
                continue
            pin = Pin.decode(text(raw))
            if pin.seen is None or pin.seen_ms is None:
                continue
            args = [name, text(raw), Pin(pin.seen, pin.seen_ms).encode(self.version())]
            if await self._run(partial(self._replace, keys=[key], args=args)):
                approved.append(name)
        return approved
