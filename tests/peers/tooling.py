"""Test tooling for real MCP SDK peers: their virtual environments and processes.

The two SDK majors share the distribution name `mcp`, so each lives in its own
venv under `.peers/` (created on first use, reused while the pins are
unchanged) and runs as a subprocess:

- legacy: `mcp==1.30.0` runs `legacy_server.py` (inline-await tools);
- modern: `mcp==2.3.0` runs `modern_client.py` (a 2026-07-28 client).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import venv
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PEERS_DIR = Path(os.environ.get("MRTR_PEERS_DIR", ROOT / ".peers"))
HERE = Path(__file__).resolve().parent

PINS = {
    "legacy": ["mcp==1.30.0", "uvicorn"],
    "modern": ["mcp==2.3.0"],
}


def ensure_venv(kind: str) -> Path:
    """The python of the `kind` venv, creating or refreshing it when its pins changed."""
    home = PEERS_DIR / kind
    python = home / "bin" / "python"
    stamp = home / ".pins"
    wanted = json.dumps(PINS[kind])
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    venv.EnvBuilder(with_pip=True, clear=True).create(home)
    done = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            *PINS[kind],
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"installing the {kind} peer venv failed:\n{done.stdout}\n{done.stderr}")
    stamp.write_text(wanted)
    return python


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[Any], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"peer exited early with status {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"peer did not listen on port {port} within {timeout} s")


class LegacyServer:
    """An `mcp` 1.x server process on a free loopback port."""

    def __init__(self, *, event_store: bool = False) -> None:
        python = ensure_venv("legacy")
        self.port = free_port()
        self.args = [str(python), str(HERE / "legacy_server.py"), "--port", str(self.port)]
        if event_store:
            self.args.append("--event-store")
        # A file, not a pipe: nobody reads a pipe, and a full one would block the server.
        self.log = tempfile.NamedTemporaryFile(prefix="legacy-server-", suffix=".log", delete=False)
        self._start()
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def _start(self) -> None:
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=self.log)
        wait_for_port(self.port, self.proc)

    def _terminate(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self) -> None:
        """A new server process on the same port: every session it knew is gone."""
        self._terminate()
        self._start()

    def stop(self) -> None:
        self._terminate()
        self.log.close()
        os.unlink(self.log.name)


class ModernClient:
    """An `mcp` 2.x client process taking one JSON command per line."""

    def __init__(self) -> None:
        python = ensure_venv("modern")
        self.proc = subprocess.Popen(
            [str(python), str(HERE / "modern_client.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self._lock = threading.Lock()

    def run(self, command: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        with self._lock:
            assert self.proc.stdin and self.proc.stdout
            self.proc.stdin.write(json.dumps(command) + "\n")
            self.proc.stdin.flush()
            box: list[str] = []
            reader = threading.Thread(
                target=lambda: box.append(self.proc.stdout.readline()), daemon=True
            )
            reader.start()
            reader.join(timeout)
            if not box or not box[0]:
                self.proc.kill()
                raise RuntimeError(
                    f"modern client gave no answer to {command.get('op')} within {timeout} s"
                )
            reply: dict[str, Any] = json.loads(box[0])
            if "crash" in reply:
                raise RuntimeError(
                    f"modern client crashed: {reply['crash']}\n{reply.get('trace', '')}"
                )
            return reply

    def stop(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        if self.proc.stdout:
            self.proc.stdout.close()


if __name__ == "__main__":
    for name in PINS:
        print(name, ensure_venv(name), file=sys.stderr)


class RedisServer:
    """A real `redis-server` on a free loopback port, persisting nothing; killable, restartable."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.log = tempfile.NamedTemporaryFile(prefix="redis-", suffix=".log", delete=False)
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_for_port(self.port, self.proc)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        self.log.close()
        os.unlink(self.log.name)


class GatewayProcess:
    """`mrtr-gateway serve --config FILE` as a separate process."""

    def __init__(self, config_file: Path, env: dict[str, str], name: str) -> None:
        self.port = free_port()
        self.name = name
        self.log = tempfile.NamedTemporaryFile(
            prefix=f"gateway-{name}-", suffix=".log", delete=False
        )
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gateway",
                "serve",
                "--config",
                str(config_file),
                "--port",
                str(self.port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=self.log,
            env={
                **os.environ,
                **env,
                "MRTR_GATEWAY_REPLICA_ID": name,
                "MRTR_GATEWAY_LOG_FORMAT": "json",
            },
        )
        wait_for_port(self.port, self.proc)
        self.base = f"http://127.0.0.1:{self.port}"

    def logs(self) -> str:
        return Path(self.log.name).read_text()

    def kill9(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
        os.unlink(self.log.name)
