"""Node.js legacy MCP servers as test peers: our own TypeScript-SDK server, and a real
third-party one from the npm registry.

`ensure_node_modules` installs the pinned packages of `tests/peers/node/package.json`
(lock file committed) into `.peers/node` with `npm ci`, once while the lock is unchanged:
- `@modelcontextprotocol/sdk` 1.32.2 runs `ts_server.mjs` (stdio; inline elicitation,
  sampling, roots, progress, a large message, a prompt and a resource) and
  `ts_client.mjs` (a 2025 client over Streamable HTTP answering elicitation, sampling
  and roots: `run_ts_client`);
- `@modelcontextprotocol/server-everything` 2026.8.31, the reference server, speaks stdio,
  HTTP+SSE and Streamable HTTP (`EverythingServer`);
- `@modelcontextprotocol/server-filesystem` 2026.8.31, the most used MCP server: it asks
  the client for its roots right after `initialized` and works in them
  (`filesystem_command`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tests.peers.tooling import PEERS_DIR, LoggedProcess, free_port

SOURCE = Path(__file__).resolve().parent / "node"
HOME = PEERS_DIR / "node"
SCRIPTS = ("ts_server.mjs", "ts_client.mjs")


def node() -> str:
    found = shutil.which("node")
    if found is None:
        raise RuntimeError("node (>= 20) is needed for the Node.js peers")
    return found


def ensure_node_modules() -> Path:
    """The folder holding `node_modules` for the pinned Node peers (installed on first use)."""
    lock = (SOURCE / "package-lock.json").read_text()
    stamp = HOME / ".lock"
    if stamp.exists() and stamp.read_text() == lock and (HOME / "node_modules").is_dir():
        # ESM resolves packages beside the script, so our peers run from a copy there.
        for name in SCRIPTS:
            shutil.copy(SOURCE / name, HOME / name)
        return HOME
    HOME.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json", *SCRIPTS):
        shutil.copy(SOURCE / name, HOME / name)
    done = subprocess.run(
        ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=HOME,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"npm ci for the Node peers failed:\n{done.stdout}\n{done.stderr}")
    stamp.write_text(lock)
    return HOME


def filesystem_command(*directories: Path) -> list[str]:
    """The stdio command line of the official filesystem server, allowed `directories`
    until a client's roots say otherwise."""
    entry = ensure_node_modules() / "node_modules/@modelcontextprotocol/server-filesystem"
    return [node(), str(entry / "dist/index.js"), *map(str, directories)]


def ts_server_command() -> list[str]:
    """The stdio command line of our TypeScript-SDK server."""
    return [node(), str(ensure_node_modules() / "ts_server.mjs")]


def run_ts_client(url: str, steps: list[dict[str, Any]], timeout: float = 100.0) -> Any:
    """One session of the TypeScript SDK 1.x client (`ts_client.mjs`) at `url` running
    `steps`, opened and closed (DELETE): its answer (see the script)."""
    done = subprocess.run(
        [node(), str(ensure_node_modules() / "ts_client.mjs")],
        input=json.dumps({"url": url, "steps": steps}),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"ts_client.mjs failed ({done.returncode}):\n{done.stderr}")
    return json.loads(done.stdout)


def everything_entry() -> str:
    home = ensure_node_modules()
    return str(home / "node_modules/@modelcontextprotocol/server-everything/dist/index.js")


def everything_stdio_command() -> list[str]:
    return [node(), everything_entry(), "stdio"]


class EverythingServer(LoggedProcess):
    """server-everything over HTTP+SSE (`sse`) or Streamable HTTP (`streamableHttp`).

    It takes its port from PORT only and says on stderr when it listens.
    """

    def __init__(self, mode: str) -> None:
        self.port = free_port()
        args = [node(), everything_entry(), mode]
        super().__init__(args, name=f"everything-{mode}", env={"PORT": str(self.port)})
        self.start()
        self.wait_for_line(f"port {self.port}")
        path = "/sse" if mode == "sse" else "/mcp"
        self.url = f"http://127.0.0.1:{self.port}{path}"
