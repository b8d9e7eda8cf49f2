"""Command line: `serve`, `check-config`, `keygen`.

mrtr-gateway serve --config FILE [--host H] [--port N] [--store URL] [--keys-file F]
mrtr-gateway serve --upstream URL [--transport sse] [--path /mcp] [--host H] [--port N] ...
mrtr-gateway serve --upstream-command 'node server.js stdio' [--path /mcp] [--host H] ...
mrtr-gateway check-config FILE
mrtr-gateway keygen
mrtr-gateway apikey --id ID --scopes S [S ...]

A flag overrides the same setting from the environment and from the file:
flag > environment variable > file > default. The flags are written into the YAML
data before validation, so every rule (a Redis store needs a shared sealing key,
...) applies to the combined result. Quick-start flags (--path, --transport) describe
the one upstream of --upstream or --upstream-command and are refused with --config.

Only `serve` imports aiohttp and the app: check-config and keygen stay light.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import structlog

from gateway import __version__
from gateway.aio import spawn
from gateway.config import (
    ENV_KEYS,
    ENV_KEYS_FILE,
    ENV_STORE_URL,
    LEGACY_TRANSPORTS,
    GatewayConfig,
    ListenConfig,
    StoreConfig,
    UpstreamConfig,
    load_config,
    parse_config,
)
from gateway.errors import ConfigError
from gateway.protocol.state import generate_key

PRECEDENCE = "flag > environment variable > file > default"


def _default(cls: type[Any], name: str) -> object:
    """A dataclass field's default, for the help texts (defaults are written only there)."""
    return next(f.default for f in dataclasses.fields(cls) if f.name == name)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mrtr-gateway",
        description="Serve legacy MCP servers to MCP 2026-07-28 clients "
        "(Multi Round-Trip Requests).",
    )
    parser.add_argument("--version", action="version", version=f"mrtr-gateway {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "serve",
        help="run the gateway",
        description="Run the gateway from a config file (--config) or, without one, in front "
        "of one legacy server (--upstream). A flag overrides the same setting from the "
        f"environment and from the file: {PRECEDENCE}.",
    )
    run.add_argument("--config", metavar="FILE", help="YAML configuration file")
    run.add_argument(
        "--upstream",
        metavar="URL",
        help="quick start: URL of one legacy MCP endpoint (no config file)",
    )
    run.add_argument(
        "--upstream-command",
        metavar="COMMAND",
        help="quick start: the command line of one legacy stdio server, e.g. "
        "'node server.js stdio' (split like a shell does; no shell runs it)",
    )
    run.add_argument(
        "--transport",
        choices=("streamable-http", "sse"),
        help="quick start only: how --upstream URL speaks (default streamable-http; "
        "sse for a 2024-11-05 HTTP+SSE endpoint such as http://host:port/sse)",
    )
    run.add_argument(
        "--path",
        help="quick start only: the gateway's MCP path "
        f"(default {_default(UpstreamConfig, 'path')}); "
        "with --config, set upstreams[].path in the file",
    )
    run.add_argument(
        "--host",
        help=f"listen address; overrides listen.host (default {_default(ListenConfig, 'host')})",
    )
    run.add_argument(
        "--port",
        type=int,
        help=f"listen port; overrides listen.port (default {_default(ListenConfig, 'port')})",
    )
    run.add_argument(
        "--store",
        metavar="URL",
        help=f"suspended-call store URL; overrides store.url and {ENV_STORE_URL} "
        f"(default {_default(StoreConfig, 'url')})",
    )
    run.add_argument(
        "--keys-file",
        metavar="FILE",
        help="file of sealing keys, one per line, first seals (relative to the working "
        f"directory); overrides sealing.keys_file, {ENV_KEYS} and {ENV_KEYS_FILE}",
    )
    check = commands.add_parser("check-config", help="validate a YAML configuration file")
    check.add_argument("file")
    commands.add_parser("keygen", help="print a fresh requestState sealing key")
    apikey = commands.add_parser(
        "apikey",
        help="make an API key: the key on the first line of stdout, then the YAML entry "
        "to append to auth.api_keys_file (which holds only its hash)",
    )
    apikey.add_argument(
        "--id", required=True, help="the key's id: its principal in logs and limits"
    )
    apikey.add_argument(
        "--scopes", nargs="+", default=[], metavar="SCOPE", help="the scopes the key grants"
    )
    return parser


def _serve_config(args: argparse.Namespace) -> GatewayConfig:
    """The configuration of `serve`: the file or the quick start, with the flags written in.

    Raises:
        ConfigError
    """
    sources = [bool(args.config), bool(args.upstream), bool(args.upstream_command)]
    if sum(sources) != 1:
        raise ConfigError(
            "serve needs exactly one of --config FILE, --upstream URL or --upstream-command COMMAND"
        )
    overrides: dict[str, object] = {}
    if args.host is not None:
        overrides["listen.host"] = args.host
    if args.port is not None:
        overrides["listen.port"] = args.port
    if args.store is not None:
        overrides["store.url"] = args.store
    if args.keys_file is not None:
        # Relative to where the command runs, not to the config file's folder.
        overrides["sealing.keys_file"] = str(Path(args.keys_file).absolute())
    if args.config:
        for flag, value, key in (
            ("--path", args.path, "path"),
            ("--transport", args.transport, "transport"),
        ):
            if value is not None:
                raise ConfigError(
                    f"{flag} is a quick-start flag (with --upstream or --upstream-command): "
                    f"with --config it could mean any upstream; set upstreams[].{key} in the "
                    "file instead"
                )
        return load_config(args.config, overrides=overrides)
    upstream: dict[str, object] = {"name": "default"}
    if args.upstream_command:
        if args.transport is not None:
            raise ConfigError("--transport is for --upstream URL; a command speaks stdio")
        try:
            upstream["command"] = shlex.split(args.upstream_command)
        except ValueError as exc:
            raise ConfigError(f"--upstream-command: cannot split it: {exc}") from exc
    else:
        upstream["url"] = args.upstream
        if args.transport is not None:
            upstream["transport"] = args.transport
    if args.path is not None:
        upstream["path"] = args.path
    return parse_config({"upstreams": [upstream]}, overrides=overrides)


LoopChoice = tuple[Callable[[], asyncio.AbstractEventLoop] | None, str]


def serve(config: GatewayConfig, loop: LoopChoice = (None, "asyncio")) -> None:
    """Run the gateway until SIGTERM or SIGINT (a second one ends a drain at once)."""
    from gateway.logging import configure

    configure(config.logging.level, config.logging.format)
    factory, name = loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(_run(config, name))


ENV_EVENT_LOOP = "MRTR_GATEWAY_EVENT_LOOP"


def event_loop(choice: str) -> LoopChoice:
    """The event loop to run on: uvloop where it is installed (`auto`), or asyncio's own.

    Raises:
        ConfigError: `uvloop` was asked for and is not installed, or an unknown choice.
    """
    if choice not in ("auto", "uvloop", "asyncio"):
        raise ConfigError(f"{ENV_EVENT_LOOP}: must be auto, uvloop or asyncio")
    if choice == "asyncio":
        return None, "asyncio"
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise ConfigError(f"{ENV_EVENT_LOOP}=uvloop: uvloop is not installed") from None
        return None, "asyncio"
    return uvloop.new_event_loop, "uvloop"


async def _run(config: GatewayConfig, loop_name: str = "asyncio") -> None:
    # Imported here so that check-config and keygen never load aiohttp, redis or the app.
    from gateway.app import BRIDGE, build_app
    from gateway.web.serving import serve

    app = build_app(config)
    served = await serve(
        app,
        config.listen.host,
        config.listen.port,
        idle_timeout_s=config.limits.idle_timeout_s,
    )
    structlog.get_logger("gateway").info(
        "gateway_listening",
        host=config.listen.host,
        port=config.listen.port,
        event_loop=loop_name,
    )
    for upstream in config.upstreams:
        print(
            f"mrtr-gateway: http://{config.listen.host}:{config.listen.port}{upstream.path}"
            f" -> {upstream.location}",
            file=sys.stderr,
            flush=True,
        )
    signals = asyncio.Queue[int]()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, signals.put_nowait, sig)
    try:
        await signals.get()
        # Not ready any more, no new calls; retries of the calls held here still complete.
        # A second signal (Ctrl-C again) stops at once, cancelling what is left upstream.
        bridge = app[BRIDGE]
        if bridge.calls:
            print(
                f"mrtr-gateway: draining {len(bridge.calls)} call(s) for up to "
                f"{config.fleet.drain_timeout_s:g} s; signal again to stop now",
                file=sys.stderr,
                flush=True,
            )
        drain = spawn(bridge.drain(config.fleet.drain_timeout_s), name="drain")
        again = spawn(signals.get(), name="second-signal")
        await asyncio.wait({drain, again}, return_when=asyncio.FIRST_COMPLETED)
        again.cancel()
        if not drain.done():
            drain.cancel()
            await bridge.close()
    finally:
        await served.close()


def _legacy_line(config: GatewayConfig) -> str:
    """What `check-config` says of the legacy lane: on or off, and for which upstreams."""
    if not config.legacy.enabled:
        return "legacy lane: off (legacy.enabled: false): 2025 clients get 404 for initialize"
    served = [u.name for u in config.upstreams if u.transport in LEGACY_TRANSPORTS]
    others = [u.name for u in config.upstreams if u.transport not in LEGACY_TRANSPORTS]
    line = f"legacy lane: on; 2025 clients served on: {', '.join(served) or 'none'}"
    if others:
        line += f"; not yet on: {', '.join(others)} (stdio and HTTP+SSE upstreams)"
    return line


def _tasks_line(config: GatewayConfig) -> str:
    """What `check-config` says of tasks: the tools whose calls may run as tasks."""
    tools = [
        f"{u.name}/{name} ({t.task.support}, after {t.task.after_s:g} s, ttl {t.task.ttl_s:g} s)"
        for u in config.upstreams
        for name, t in u.tools.items()
        if t.task.enabled
    ]
    return "tasks: " + (", ".join(tools) if tools else "no tool has a task policy")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "keygen":
            print(generate_key())
            return 0
        if args.command == "apikey":
            from gateway.auth import new_api_key

            key, entry = new_api_key(args.id, args.scopes)
            print(key)
            sys.stdout.write(entry)
            print(
                "mrtr-gateway: the key is shown once; the file needs only the entry (its hash)",
                file=sys.stderr,
            )
            return 0
        if args.command == "check-config":
            config = load_config(args.file)
            names = ", ".join(
                f"{u.name} ({u.path} -> {u.transport} {u.location})" for u in config.upstreams
            )
            print(f"{args.file}: OK; upstreams: {names}")
            print(_legacy_line(config))
            print(_tasks_line(config))
            if config.sealing.ephemeral:
                print(
                    "warning: no sealing key configured; "
                    "an ephemeral key will be used (one replica only)"
                )
            return 0
        config = _serve_config(args)
        loop = event_loop(os.environ.get(ENV_EVENT_LOOP, "auto"))
    except ConfigError as exc:
        print(f"mrtr-gateway: configuration error: {exc}", file=sys.stderr)
        return 2
    serve(config, loop)
    return 0
