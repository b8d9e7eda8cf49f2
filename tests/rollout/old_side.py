"""The previous release's codecs and store, driven from a test (run in that release's venv).

Reads one JSON command per line on stdin, answers one JSON line on stdout, as the peer
scripts do. It imports the `gateway` installed in its own venv (the previous release),
never this checkout's: run it with `python -P`. Each command is what a replica of that
release does with a datum it shares with the fleet:

  {"op": "record", "fields": {...}}            -> {"json": SuspendedCall(**fields).to_json()}
  {"op": "park", "url", "prefix", "json"}      -> {} (its RedisStore parks the record)
  {"op": "claim", "url", "prefix", "call", "round", "claimer"}
                                                -> {"json": the claimed record, or null}
  {"op": "encode", "message": {"op", ...}}     -> {"text": messages.encode(...)}
  {"op": "decode", "text"}                     -> {"message": {"op", ...}}
  {"op": "message_ops"}                        -> {"ops": every op its decode knows}
  {"op": "seal", "key", "claims"}              -> {"token": a requestState}
  {"op": "open", "key", "token", "now_ms", "principal", "digest", "audience"}
                                                -> {"claims": {...}}
  {"op": "seal_session", "key", "claims"}      -> {"token": a legacy session id}
  {"op": "open_session", "key", "token", "now_ms", "principal", "upstream", "audience"}
                                                -> {"claims": {...}} or {"refused": reason}
  {"op": "written_back", "url", "prefix", "replica"} -> {"written": bool or null}

Anything raised answers {"error": "<exception class>", "detail", "trace"}.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import sys
import traceback
from typing import Any

from gateway.calls import messages
from gateway.clock import SystemClock
from gateway.fleet.redis_bus import RedisBus
from gateway.protocol import legacy_session, state
from gateway.store.base import SuspendedCall
from gateway.store.redis import RedisStore
from gateway.store.redis_client import close_client, connect


def ring(key: str, prefix: str = state.PREFIX) -> state.AesGcmKeyRing:
    raw = base64.urlsafe_b64decode(key + "=" * (-len(key) % 4))
    return state.AesGcmKeyRing([raw], prefix=prefix)


async def with_store(command: dict[str, Any]) -> dict[str, Any]:
    client = connect(command["url"])
    store = RedisStore(client, prefix=command["prefix"])
    try:
        if command["op"] == "park":
            await store.park(SuspendedCall.from_json(command["json"]))
            return {}
        claimed = await store.claim(command["call"], command["round"], command["claimer"])
        return {"json": None if claimed is None else claimed.to_json()}
    finally:
        await close_client(client)


async def written_back(command: dict[str, Any]) -> dict[str, Any]:
    client = connect(command["url"])
    bus = RedisBus(
        client,
        prefix=command["prefix"],
        replica_id="old-reader",
        heartbeat_s=1.0,
        clock=SystemClock(),
    )
    try:
        return {"written": await bus.written_back(command["replica"])}
    finally:
        await close_client(client)


def handle(command: dict[str, Any]) -> dict[str, Any]:
    op = command["op"]
    if op == "record":
        return {"json": SuspendedCall(**command["fields"]).to_json()}
    if op in ("park", "claim"):
        return asyncio.run(with_store(command))
    if op == "written_back":
        return asyncio.run(written_back(command))
    if op == "encode":
        data = dict(command["message"])
        kind = getattr(messages, data.pop("op").capitalize())  # "resume": Resume, ...
        return {"text": messages.encode(kind(**data))}
    if op == "message_ops":
        return {"ops": sorted(messages._OPS)}
    if op == "decode":
        message = messages.decode(command["text"])
        op = type(message).__name__.lower()
        return {"message": {"op": op, **dataclasses.asdict(message)}}
    if op == "seal":
        return {"token": state.seal_claims(ring(command["key"]), state.Claims(**command["claims"]))}
    if op == "open":
        claims = state.open_claims(
            ring(command["key"]),
            command["token"],
            now_ms=command["now_ms"],
            principal=command["principal"],
            digest=command["digest"],
            audience=command["audience"],
        )
        return {"claims": dataclasses.asdict(claims)}
    if op == "seal_session":
        codec = ring(command["key"], legacy_session.SESSION_PREFIX)
        claims = legacy_session.SessionClaims(**command["claims"])
        return {"token": legacy_session.seal_session(codec, claims)}
    if op == "open_session":
        opened = legacy_session.open_session(
            ring(command["key"], legacy_session.SESSION_PREFIX),
            command["token"],
            now_ms=command["now_ms"],
            principal=command["principal"],
            upstream=command["upstream"],
            audience=command["audience"],
        )
        if isinstance(opened, legacy_session.Refusal):
            return {"refused": opened.reason}
        return {"claims": dataclasses.asdict(opened)}
    raise ValueError(f"unknown op {op!r}")


def main() -> None:
    for line in sys.stdin:
        command = json.loads(line)
        try:
            reply = handle(command)
        except Exception as exc:  # the release refusing what it was given: the test judges
            reply = {"error": type(exc).__name__, "detail": getattr(exc, "reason", str(exc))}
            reply["trace"] = traceback.format_exc()
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
