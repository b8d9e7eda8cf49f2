"""`mrtr-gateway pins`: the tools' pins in the fleet's Redis, listed, and drift approved.

It reads the gateway's own file for where the store is, and works on the same pins the
replicas keep (`gateway.store.pins`). An approval also counts a tool-list change for the
upstream in the fleet's change counts (`gateway.fleet.changes`), so that every replica
fetches the list again within a heartbeat and stops refusing the tool.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

from gateway.clock import SystemClock
from gateway.config import ENV_KEYS, ENV_KEYS_FILE, load_config
from gateway.errors import ConfigError, StoreError
from gateway.protocol.state import generate_key
from gateway.store.pins import RedisPins
from gateway.store.redis_client import connect, ride_out


def pins_command(args: argparse.Namespace) -> int:
    """Raises: ConfigError (the file, or a store that is not Redis)."""
    # It seals nothing: where the file names no key, a throwaway one stands in for the
    # check that a fleet's replicas share one.
    env = dict(os.environ)
    if not env.get(ENV_KEYS) and not env.get(ENV_KEYS_FILE):
        env[ENV_KEYS] = generate_key()
    config = load_config(args.config, env=env)
    if not config.store.url.startswith(("redis", "unix")):
        raise ConfigError(
            f"{args.config}: store.url is {config.store.url}: pins are kept in each gateway's "
            "memory, lost when it stops, and no command reaches them; set store.url to a "
            "Redis to keep and approve them"
        )
    names = {u.name for u in config.upstreams}
    if args.upstream is not None and args.upstream not in names:
        raise ConfigError(f"--upstream {args.upstream}: no such upstream (have: {sorted(names)})")
    try:
        return asyncio.run(_run(args, config.store.url, config.store.key_prefix, names))
    except StoreError as exc:
        print(f"the store could not be read: {exc}", file=sys.stderr)
        return 1


async def _run(args: argparse.Namespace, url: str, prefix: str, names: set[str]) -> int:
    client = connect(url)
    try:
        pins = RedisPins(client, prefix=prefix, ride_out_s=0.0)
        if args.action == "list":
            for upstream in sorted(names) if args.upstream is None else [args.upstream]:
                for tool, pin in sorted((await pins.all(upstream)).items()):
                    drift = pin.drift(tool)
                    line = {"upstream": upstream, "tool": tool, "pinned": pin.fingerprint}
                    if drift is not None:
                        line.update(
                            drifted=True,
                            severity=drift.severity,
                            changed=list(drift.changed),
                            weakened=list(drift.weakened),
                            seen=drift.seen,
                        )
                    print(json.dumps(line))
            return 0
        approved = await pins.approve(args.upstream, None if args.all else args.tool)
        if approved:
            field = f"{args.upstream}|notifications/tools/list_changed"
            count = lambda: client.hincrby(f"{prefix}fleet:changes", field, 1)  # noqa: E731
            await ride_out(SystemClock(), count, 0.0)
        for tool in approved:
            print(json.dumps({"upstream": args.upstream, "tool": tool, "approved": True}))
        if not approved:
            print("nothing to approve: no such tool drifted", file=sys.stderr)
            return 1
        return 0
    finally:
        await client.aclose()
