"""Node.js legacy MCP servers as test peers: our own TypeScript-SDK server, and a real
third-party one from the npm registry.

`ensure_node_modules` installs the pinned packages of `tests/peers/node/package.json`
(lock file committed) into `.peers/node` with `npm ci`, once while the lock is unchanged:
- `@modelcontextprotocol/sdk` 1.32.2 runs `ts_server.mjs` (stdio; inline elicitation,
  sampling, roots, progress, a large message, a prompt and a resource);
- `@modelcontextprotocol/server-everything` 2026.8.31, the reference server, speaks stdio,
  HTTP+SSE and Streamable HTTP (`EverythingServer`).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.peers.tooling import PEERS_DIR, LoggedProcess, free_port

SOURCE = Path(__file__).resolve().parent / "node"
HOME = PEERS_DIR / "node"


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
        # ESM resolves packages beside the script, so our server runs from a copy there.
        shutil.copy(SOURCE / "ts_server.mjs", HOME / "ts_server.mjs")
        return HOME
    HOME.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json", "ts_server.mjs"):
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


def ts_server_command() -> list[str]:
    """The stdio command line of our TypeScript-SDK server."""
    return [node(), str(ensure_node_modules() / "ts_server.mjs")]


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
