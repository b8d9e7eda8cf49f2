"""Command line: `serve`, `check-config`, `keygen`.

mrtr-gateway serve --config FILE [--host H] [--port N] [--store URL] [--keys-file F]
mrtr-gateway serve --upstream URL [--transport sse] [--path /mcp] [--host H] [--port N] ...
mrtr-gateway serve --upstream-command 'node server.js stdio' [--path /mcp] [--host H] ...
mrtr-gateway check-config FILE
mrtr-gateway keygen
mrtr-gateway apikey --id ID --scopes S [S ...]
mrtr-gateway audit tail [--config FILE] [--follow] [--since WHEN] [--principal P] [--tool T]

A flag overrides the same setting from the environment and from the file:
flag > environment variable > file > default. The flags are written into the YAML
data before validation, so every rule (a Redis store needs a shared sealing key,
...) applies to the combined result. Quick-start flags (--path, --transport) describe
the one upstream of --upstream or --upstream-command and are refused with --config.

Only `serve` imports aiohttp and the app: check-config and keygen stay light (`audit
tail` imports the Redis client).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import shlex
import signal
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import structlog

from gateway import __version__
from gateway.aio import spawn
from gateway.audit.command import add_parser as add_audit
from gateway.config import (
    BOUND_TRANSPORTS,
    ENV_KEYS,
    ENV_KEYS_FILE,
    ENV_LOG_FORMAT,
    ENV_STORE_URL,
    LEGACY_TRANSPORTS,
    GatewayConfig,
    ListenConfig,
    StoreConfig,
    UpstreamConfig,
    load_config,
    parse_config,
)
from gateway.config.audit import audit_line
from gateway.errors import ConfigError
from gateway.protocol.state import generate_key

PRECEDENCE = "flag > environment variable > file > default"


def _default(cls: type[Any], name: str) -> object:
    """A dataclass field's default, for the help texts (defaults are written only there)."""
    return next(f.default for f in dataclasses.fields(cls) if f.name == name)


_SERVE_EXAMPLES = """examples:
  mrtr-gateway serve --upstream http://127.0.0.1:9000/mcp
  mrtr-gateway serve --upstream http://127.0.0.1:9000/sse --transport sse --port 8081
  mrtr-gateway serve --upstream-command 'node server.js stdio' --path /tools
  mrtr-gateway serve --config gateway.yaml --store redis://redis:6379/0 --keys-file keys

A start refused (a port in use, a configuration mistake) is one gateway_refused log line
and exit status 2; `mrtr-gateway check-config FILE` lists every mistake of a file."""


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
        description=textwrap.fill(
            "Run the gateway from a config file (--config) or, without one, in front of one "
            "legacy server (--upstream URL, or --upstream-command for a stdio one). A flag "
            f"overrides the same setting from the environment and from the file: {PRECEDENCE}.",
            79,
        ),
        epilog=_SERVE_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    pins = commands.add_parser(
        "pins",
        help="the tools' pins, in the fleet's Redis: list them (drift shown), or approve "
        "what a tool became",
    )
    actions = pins.add_subparsers(dest="action", required=True)
    listed = actions.add_parser("list", help="every pin, and what drifted from it")
    listed.add_argument("--config", metavar="FILE", required=True, help="the gateway's file")
    listed.add_argument("--upstream", help="only this upstream's pins")
    approve = actions.add_parser(
        "approve", help="trust what a drifted tool became (every replica, within a heartbeat)"
    )
    approve.add_argument("--config", metavar="FILE", required=True, help="the gateway's file")
    approve.add_argument("--upstream", required=True, help="the upstream's name")
    which = approve.add_mutually_exclusive_group(required=True)
    which.add_argument("--tool", action="append", help="a tool, by the server's own name")
    which.add_argument("--all", action="store_true", help="every drifted tool of the upstream")
    add_audit(commands)
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


def serve(config: GatewayConfig, loop: LoopChoice = (None, "asyncio")) -> int:
    """Run the gateway until SIGTERM or SIGINT (a second one ends a drain at once).

    Returns the exit status: 0 after a stop, 2 when the start is refused (the port is
    in use, the store or an upstream is unusable): one `gateway_refused` log line, and
    no `gateway_started` before it when the port cannot be bound.
    """
    from gateway.logging import configure

    configure(config.logging.level, config.logging.format)
    factory, name = loop
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(_run(config, name))
    except StartRefused as exc:
        structlog.get_logger("gateway").error("gateway_refused", reason=str(exc))
        return 2
    return 0


class StartRefused(Exception):
    """The gateway could not start (its port, its store, an upstream's settings): said in
    one log line, never a traceback. A failure once it serves is not one of these."""


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
    from gateway.app import BRIDGE, build_app, where
    from gateway.errors import GatewayError
    from gateway.logging import announce
    from gateway.web.serving import bind, serve

    try:
        # Bound first: a port in use refuses the start before anything is built or logged.
        sockets = bind(config.listen.host, config.listen.port)
        try:
            app = build_app(config)
        except BaseException:
            for sock in sockets:
                sock.close()
            raise
        served = await serve(
            app,
            config.listen.host,
            config.listen.port,
            idle_timeout_s=config.limits.idle_timeout_s,
            sockets=sockets,
        )
    except (GatewayError, OSError) as exc:
        raise StartRefused(str(exc) or repr(exc)) from exc
    announce(
        "gateway_listening",
        host=config.listen.host,
        port=served.port,
        event_loop=loop_name,
        # Where clients go, and what each serves (no credentials, a command's program only).
        urls={str(served.make_url(u.path)): where(u) for u in config.upstreams},
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
            structlog.get_logger("gateway").info(
                "gateway_stopping",
                calls=len(bridge.calls),
                detail="the calls held here may still be resumed until they end or "
                f"fleet.drain_timeout_s ({config.fleet.drain_timeout_s:g} s) passes; "
                "signal again to stop now",
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
    """What `check-config` says of the legacy lane: on or off, for which upstreams, and
    which of them hold their sessions in one replica (stdio, HTTP+SSE), with the bounds."""
    legacy = config.legacy
    if not legacy.enabled:
        return "legacy lane: off (legacy.enabled: false): 2025 clients get 404 for initialize"
    served = [u.name for u in config.upstreams if u.transport in LEGACY_TRANSPORTS]
    bound = [u.name for u in config.upstreams if u.transport in BOUND_TRANSPORTS]
    line = f"legacy lane: on; 2025 clients served on: {', '.join(served) or 'none'}"
    if bound:
        line += (
            f"; sessions held by the replica that opens them: {', '.join(bound)} "
            f"(at most {legacy.max_bound_sessions} per replica and upstream, "
            f"ended after {legacy.bound_session_idle_s:g} s without a request)"
        )
    return line


def _endpoint_lines(config: GatewayConfig) -> list[str]:
    """What `check-config` says of each endpoint: its path, its upstreams as clients see
    their names, what a list does without one, and how 2025 clients are served there
    (a session of each server's behind theirs, opened at `initialize`)."""
    lines = []
    by_name = {u.name: u for u in config.upstreams}
    for endpoint in config.endpoints:
        shown = ", ".join(
            f"{name} as {by_name[name].prefix}<name>" if by_name[name].prefix else name
            for name in endpoint.upstreams
        )
        line = f"endpoint {endpoint.path}: {shown}"
        if endpoint.several:
            line += (
                f"; a list without an upstream that cannot be reached: "
                f"{endpoint.on_upstream_down}; 2025 clients: "
                + (
                    f"a session of each of {len(endpoint.upstreams)} servers per client session"
                    if config.legacy.enabled
                    else "off (legacy.enabled)"
                )
            )
        lines.append(line)
    return lines


def _print_mistakes(file: str, exc: ConfigError) -> None:
    """`check-config`'s refusal: every mistake on a line of its own, by key path."""
    if len(exc.problems) == 1:
        (problem,) = exc.problems
        where = "" if problem.startswith((file, "cannot read")) else f"{file}: "
        print(f"mrtr-gateway: {where}{problem}", file=sys.stderr)
        return
    print(f"mrtr-gateway: {file}: {len(exc.problems)} mistakes", file=sys.stderr)
    for problem in exc.problems:
        print(f"  {problem}", file=sys.stderr)


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
        if args.command == "pins":
            from gateway.pins_cli import pins_command

            try:
                return pins_command(args)
            except ConfigError as exc:
                _print_mistakes(args.config, exc)
                return 2
        if args.command == "audit":
            from gateway.audit.tail import tail_command

            try:
                return tail_command(args)
            except ConfigError as exc:
                _print_mistakes(args.config, exc)
                return 2
        if args.command == "check-config":
            try:
                config = load_config(args.file)
            except ConfigError as exc:
                _print_mistakes(args.file, exc)
                return 2
            names = ", ".join(
                f"{u.name} ({u.path} -> {u.transport} {u.location})" for u in config.upstreams
            )
            print(f"{args.file}: OK; upstreams: {names}")
            for line in _endpoint_lines(config):
                print(line)
            print(_legacy_line(config))
            print(_tasks_line(config))
            print(audit_line(config.audit))
            if config.sealing.ephemeral:
                print(
                    "warning: no sealing key configured; "
                    "an ephemeral key will be used (one replica only)"
                )
            return 0
        config = _serve_config(args)
        loop = event_loop(os.environ.get(ENV_EVENT_LOOP, "auto"))
    except ConfigError as exc:
        # A refused start is a log line like any other (the file may not say how to log:
        # the environment's format, or auto); `check-config` lists each mistake on a line.
        from gateway.logging import refused

        reason = f"configuration: {exc}"
        if len(exc.problems) > 1:
            reason += f" (each on a line of its own: mrtr-gateway check-config {args.config})"
        refused(reason, os.environ.get(ENV_LOG_FORMAT) or "auto")
        return 2
    return serve(config, loop)
