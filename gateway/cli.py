"""Command line: `serve`, `check-config`, `keygen`.

mrtr-gateway serve --config FILE
mrtr-gateway serve --upstream URL [--host H] [--port N] [--path /mcp]
mrtr-gateway check-config FILE
mrtr-gateway keygen
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence

from gateway import __version__
from gateway.aio import spawn
from gateway.config import GatewayConfig, load_config, parse_config
from gateway.errors import ConfigError
from gateway.protocol.state import generate_key


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mrtr-gateway",
        description="Serve legacy MCP servers to MCP 2026-07-28 clients "
        "(Multi Round-Trip Requests).",
    )
    parser.add_argument("--version", action="version", version=f"mrtr-gateway {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the gateway")
    serve.add_argument("--config", help="YAML configuration file")
    serve.add_argument(
        "--upstream", help="quick start: URL of one legacy MCP endpoint (no config file)"
    )
    serve.add_argument("--host", help="listen address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="listen port (default 8080)")
    serve.add_argument(
        "--path", default="/mcp", help="quick start: the gateway's MCP path (default /mcp)"
    )
    serve.add_argument("--store", help="suspended-call store URL (default memory://)")
    serve.add_argument("--keys-file", help="file of sealing keys, one per line (first seals)")
    check = commands.add_parser("check-config", help="validate a YAML configuration file")
    check.add_argument("file")
    commands.add_parser("keygen", help="print a fresh requestState sealing key")
    return parser


def _serve_config(args: argparse.Namespace) -> GatewayConfig:
    if bool(args.config) == bool(args.upstream):
        raise ConfigError("serve needs exactly one of --config FILE or --upstream URL")
    if args.config:
        config = load_config(args.config)
        overrides: dict[str, object] = {}
        listen = {
            "host": args.host or config.listen.host,
            "port": args.port if args.port is not None else config.listen.port,
        }
        overrides["listen"] = type(config.listen)(**listen)  # type: ignore[arg-type]
        from dataclasses import replace

        return replace(config, **overrides)  # type: ignore[arg-type]
    data: dict[str, object] = {
        "listen": {
            "host": args.host or "127.0.0.1",
            "port": args.port if args.port is not None else 8080,
        },
        "upstreams": [{"name": "default", "url": args.upstream, "path": args.path}],
    }
    if args.store:
        data["store"] = {"url": args.store}
    if args.keys_file:
        data["sealing"] = {"keys_file": args.keys_file}
    return parse_config(data)


async def _run(config: GatewayConfig) -> None:
    # Imported here so that check-config and keygen never load aiohttp, redis or the app.
    from aiohttp import web

    from gateway.app import BRIDGE, build_app

    app = build_app(config)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, config.listen.host, config.listen.port)
    await site.start()
    for upstream in config.upstreams:
        print(
            f"mrtr-gateway: http://{config.listen.host}:{config.listen.port}{upstream.path}"
            f" -> {upstream.url}",
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
        await runner.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "keygen":
            print(generate_key())
            return 0
        if args.command == "check-config":
            config = load_config(args.file)
            names = ", ".join(f"{u.name} ({u.path} -> {u.url})" for u in config.upstreams)
            print(f"{args.file}: OK; upstreams: {names}")
            if config.sealing.ephemeral:
                print(
                    "warning: no sealing key configured; "
                    "an ephemeral key will be used (one replica only)"
                )
            return 0
        config = _serve_config(args)
    except ConfigError as exc:
        print(f"mrtr-gateway: configuration error: {exc}", file=sys.stderr)
        return 2
    from gateway.logging import configure

    configure(config.logging.level, config.logging.format)
    asyncio.run(_run(config))
    return 0
