"""Test tooling for real MCP SDK peers: their virtual environments and processes.

The two SDK majors share the distribution name `mcp`, so each lives in its own
venv under `.peers/` (created on first use, reused while the pins are
unchanged) and runs as a subprocess:

- legacy: `mcp==1.30.0` runs `legacy_server.py` (inline-await tools) and
  `legacy_client.py` (a 2025-11-25 client);
- modern: `mcp==2.3.0` runs `modern_client.py` (a 2026-07-28 client).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import venv
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

ROOT = Path(__file__).resolve().parents[2]
PEERS_DIR = Path(os.environ.get("MRTR_PEERS_DIR", ROOT / ".peers"))
HERE = Path(__file__).resolve().parent
PEER_READY = "peer listening on"  # serving.READY, printed by the peer scripts

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


def ensure_release(version: str, commit: str) -> Path:
    """The python of a venv holding the gateway as released at `commit` (`version`), built
    from the repository's own history (`git archive`) under the peers directory, reused
    while the commit is the same: a rolling upgrade's previous release, beside this one.
    """
    home = PEERS_DIR / f"release-{version}"
    python = home / "bin" / "python"
    stamp = home / ".commit"
    if python.exists() and stamp.exists() and stamp.read_text() == commit:
        return python
    venv.EnvBuilder(with_pip=True, clear=True).create(home)
    source = home / "src"
    source.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], capture_output=True)
    if archive.returncode != 0:  # a shallow clone lacks it: fetch the history
        raise RuntimeError(f"git archive {commit} failed: {archive.stderr.decode()[:500]}")
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True)
    done = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            str(source),
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"installing release {version} failed:\n{done.stdout}\n{done.stderr}")
    stamp.write_text(commit)
    return python


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


BUS_OFFSET = 10000  # a Redis Cluster node's bus listens this much above its port
_QUIET: set[int] = set()  # the quiet ports this process handed out


def ephemeral_start() -> int:
    """The first port the kernel hands out to outgoing connections (Linux's default if unknown)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def quiet_port() -> int:
    """A free port, and the port `BUS_OFFSET` above it, both below the ephemeral range: for
    a process that binds it later, or again after a restart.

    A port from `free_port()` goes back to the ephemeral pool when its probe socket closes,
    so any outgoing connection made before the process binds it (or while it is down for
    a restart) may take it, and a chaos run makes many; below the range, nothing but
    another listener can. Neither port is one this process handed out before.
    """
    high = ephemeral_start() - BUS_OFFSET - 1
    while True:  # with no room below the range, `free_port()` and the old risk
        port = random.randint(1024, high) if high >= 2048 else free_port()
        pair = {port, port + BUS_OFFSET}
        if port + BUS_OFFSET > 65535 or pair & _QUIET:
            continue
        if _bindable(port) and _bindable(port + BUS_OFFSET):
            _QUIET.update(pair)
            return port


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_for_port(port: int, proc: subprocess.Popen[Any], timeout: float = 30.0) -> None:
    """Poll until something listens on `port`.

    Only for processes that do not say when they are ready; every process started here
    does (see `LoggedProcess.wait_for_line`). Kept for tests/test_cli.py until it uses
    `GatewayProcess`.
    """
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


class LoggedProcess:
    """A subprocess whose stderr is read line by line by a thread of its own.

    Each line goes to a log file (`log_path`, for a human tailing a stuck test) and to
    memory (`logs()`), and wakes whoever waits for a line (`wait_for_line`, bounded, no
    polling). The pipe is always drained, so a chatty process never blocks on it.
    `start()` may be called again after the process ended (a restart): the log goes on,
    and waits look at the new process's lines only.
    """

    def __init__(
        self,
        args: Sequence[str],
        *,
        name: str,
        env: Mapping[str, str] | None = None,
        stdout_too: bool = False,
    ) -> None:
        self.args = list(args)
        self.name = name
        self.env = {**os.environ, **(env or {})}
        self.stdout_too = stdout_too
        fd, path = tempfile.mkstemp(prefix=f"{name}-", suffix=".log")
        os.close(fd)
        self.log_path = Path(path)
        self._lines: list[str] = []
        self._changed = threading.Condition()
        self._eof = True
        self._started_at = 0
        self._reader: threading.Thread | None = None
        self.proc: subprocess.Popen[str] | None = None
        self.paused = False

    def start(self) -> None:
        if self._reader is not None:
            self._reader.join(10)
        with self._changed:
            self._eof = False
            self._started_at = len(self._lines)
        self.paused = False
        self.proc = subprocess.Popen(
            self.args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if self.stdout_too else subprocess.DEVNULL,
            stderr=subprocess.STDOUT if self.stdout_too else subprocess.PIPE,
            env=self.env,
            text=True,
            encoding="utf-8",
            errors="replace",
        )
        pipe = self.proc.stdout if self.stdout_too else self.proc.stderr
        assert pipe is not None
        self._reader = threading.Thread(
            target=self._read, args=(pipe,), name=f"{self.name}-log", daemon=True
        )
        self._reader.start()

    def _read(self, pipe: IO[str]) -> None:
        with pipe, self.log_path.open("a", encoding="utf-8") as log:
            for line in pipe:
                log.write(line)
                log.flush()
                with self._changed:
                    self._lines.append(line)
                    self._changed.notify_all()
        with self._changed:
            self._eof = True
            self._changed.notify_all()

    # -- reading the log --------------------------------------------------------------

    def logs(self) -> str:
        """Everything the process (and earlier runs of it) wrote so far."""
        with self._changed:
            return "".join(self._lines)

    def mark(self) -> int:
        """A position in the log: pass it as `since` to wait only for lines written after."""
        with self._changed:
            return len(self._lines)

    def wait_for_line(
        self, needle: str | Callable[[str], bool], timeout: float = 30.0, since: int | None = None
    ) -> str:
        """The first line from `since` (default: since this process started) that contains
        `needle` (or satisfies it), waiting for it up to `timeout` seconds.

        Raises:
            RuntimeError: the process ended, or the time is up, without such a line.
        """
        matches = needle if callable(needle) else (lambda line: needle in line)
        checked = self._started_at if since is None else since
        found: str | None = None

        def done() -> bool:
            nonlocal checked, found
            for line in self._lines[checked:]:
                checked += 1
                if matches(line):
                    found = line
                    return True
            return self._eof

        with self._changed:
            self._changed.wait_for(done, timeout)
        if found is not None:
            return found
        why = "ended" if self._eof else f"is still running after {timeout:g} s"
        raise RuntimeError(
            f"{self.name} {why} without writing a line with {needle!r}; its log:\n{self.logs()}"
        )

    async def await_line(
        self, needle: str | Callable[[str], bool], timeout: float = 30.0, since: int | None = None
    ) -> str:
        """`wait_for_line` for async tests (in a worker thread: the event loop keeps running)."""
        return await asyncio.to_thread(self.wait_for_line, needle, timeout, since)

    def start_ready(self, needle: str, timeout: float = 30.0) -> str:
        """`start()`, then the line saying it is ready (`wait_for_line`). A process that
        does not say so in time is ended, not left running behind the failure.

        Raises:
            RuntimeError: it ended, or was still not ready after `timeout` seconds.
        """
        LoggedProcess.start(self)  # the process alone, whatever a subclass's start adds
        try:
            return self.wait_for_line(needle, timeout)
        except BaseException:
            self.stop()
            raise

    # -- controlling the process ------------------------------------------------------

    def _process(self) -> subprocess.Popen[str]:
        assert self.proc is not None, "not started"
        return self.proc

    @property
    def returncode(self) -> int | None:
        return self._process().poll()

    def send_signal(self, sig: int) -> None:
        self._process().send_signal(sig)

    def wait(self, timeout: float = 15.0) -> int:
        """The exit status, once the process ended and its last line is read.

        Raises:
            subprocess.TimeoutExpired
        """
        code = self._process().wait(timeout)
        if self._reader is not None:
            self._reader.join(timeout)
        return code

    def kill9(self) -> None:
        """SIGKILL: no shutdown code runs."""
        self._process().kill()
        self.wait(10)

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets open and answers nothing (a hung host);
        the kernel still accepts connections for it. `resume()` lets it go on."""
        self._process().send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT: a paused process goes on where it stopped."""
        self._process().send_signal(signal.SIGCONT)
        self.paused = False

    def terminate(self, timeout: float = 15.0) -> None:
        """SIGTERM, and SIGKILL if it is still running after `timeout` seconds."""
        if self.paused and self._process().poll() is None:
            self.resume()  # a stopped process acts on SIGTERM only once it goes on
        if self._process().poll() is None:
            self._process().terminate()
            try:
                self.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill9()
        self.wait(10)

    def stop(self) -> None:
        """End the process (if it still runs) and remove the log file; `logs()` still works."""
        if self.proc is not None:
            self.terminate()
        self.log_path.unlink(missing_ok=True)


P = TypeVar("P", bound=LoggedProcess)


async def started_together(*makers: Callable[[], P]) -> list[P]:
    """Processes started at once (each made in a thread: it waits for its ready line).
    If one fails to start, those that did are ended before the failure is raised.

    Raises:
        RuntimeError: a process did not say it was ready.
    """
    made = await asyncio.gather(
        *(asyncio.to_thread(make) for make in makers), return_exceptions=True
    )
    failed = [each for each in made if isinstance(each, BaseException)]
    if failed:
        for each in made:
            if isinstance(each, LoggedProcess):
                each.stop()
        raise failed[0]
    return [each for each in made if not isinstance(each, BaseException)]


class LegacyServer(LoggedProcess):
    """An `mcp` 1.x server process on a free loopback port (it picks one and says which)."""

    def __init__(
        self,
        *,
        event_store: bool = False,
        transport: str = "streamable-http",
        slow_get_ms: int = 0,
        notifying: bool = False,
        json_response: bool = False,
    ) -> None:
        """`slow_get_ms`: each GET stream is held that long before the server serves it;
        `notifying`: the server declares and sends change notifications; `json_response`:
        it answers POSTs with JSON, never a stream."""
        python = ensure_venv("legacy")
        args = [str(python), str(HERE / "legacy_server.py"), "--port", "0"]
        args += ["--transport", transport]
        if event_store:
            args.append("--event-store")
        if notifying:
            args.append("--notifying")
        if json_response:
            args.append("--json-response")
        if slow_get_ms:
            args += ["--slow-get-ms", str(slow_get_ms)]
        super().__init__(args, name="legacy-server")
        self.port = int(self.start_ready(PEER_READY).rsplit(":", 1)[1])
        self.args[self.args.index("--port") + 1] = str(self.port)  # a restart keeps it
        path = "/sse" if transport == "sse" else "/mcp"
        self.url = f"http://127.0.0.1:{self.port}{path}"

    def restart(self, *, kill: bool = False) -> None:
        """A new server process on the same port: every session it knew is gone. `kill`:
        the old one is ended with SIGKILL, its tools cut off mid work (SIGTERM lets them
        finish first: uvicorn waits for the requests in flight)."""
        if kill:
            self.kill9()
        else:
            self.terminate()
        self.start_ready(PEER_READY)


def legacy_stdio_command(state_dir: Path, *, notifying: bool = False) -> list[str]:
    """The legacy test server as a stdio program (the gateway starts it); run counts are
    kept in `state_dir`, since each session is a process of its own. `notifying`: it
    declares and sends change notifications."""
    python = ensure_venv("legacy")
    script = str(HERE / "legacy_server.py")
    command = [str(python), script, "--transport", "stdio", "--state-dir", str(state_dir)]
    return [*command, "--notifying"] if notifying else command


class NativeServer(LoggedProcess):
    """An `mcp` 2.x server serving 2026-07-28 natively (the benchmark's baseline)."""

    def __init__(self) -> None:
        python = ensure_venv("modern")
        super().__init__([str(python), str(HERE / "native_server.py")], name="native-server")
        self.port = int(self.start_ready(PEER_READY).rsplit(":", 1)[1])
        self.url = f"http://127.0.0.1:{self.port}/mcp"


class CommandPeer:
    """A client peer process taking one JSON command per line, answering one JSON line. A
    process killed for not answering in time is started again for the next command: one
    test fails, not every test after it (what it held, such as open sessions, is lost)."""

    kind = ""  # which peer venv (PINS)
    script = ""  # the peer script in tests/peers/
    name = "peer"

    def __init__(self) -> None:
        self.python = ensure_venv(self.kind)
        self.proc = self._start()
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(self.python), str(HERE / self.script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def run(self, command: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        with self._lock:
            if self.proc.poll() is not None:  # killed by an earlier command's timeout
                self._close_pipes()
                self.proc = self._start()
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
                self.proc.wait(10)
                raise RuntimeError(
                    f"{self.name} gave no answer to {command.get('op')} within {timeout} s"
                )
            reply: dict[str, Any] = json.loads(box[0])
            if "crash" in reply:
                raise RuntimeError(
                    f"{self.name} crashed: {reply['crash']}\n{reply.get('trace', '')}"
                )
            return reply

    def _close_pipes(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()

    def stop(self) -> None:
        if self.proc.stdin:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc.stdout:
            self.proc.stdout.close()


class ModernClient(CommandPeer):
    """An `mcp` 2.x client (2026-07-28), one request per command (`modern_client.py`)."""

    kind, script, name = "modern", "modern_client.py", "modern client"


class LegacyClient(CommandPeer):
    """An `mcp` 1.x client (2025-11-25) whose sessions outlive commands (`legacy_client.py`)."""

    kind, script, name = "legacy", "legacy_client.py", "legacy client"


class RedisServer(LoggedProcess):
    """A real `redis-server` on a free loopback port, persisting nothing; killable, restartable."""

    READY = "Ready to accept connections"

    def __init__(self) -> None:
        self.port = quiet_port()  # restarted on it
        self.url = f"redis://127.0.0.1:{self.port}/0"
        super().__init__(
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
            name="redis",
            stdout_too=True,  # redis-server logs to stdout
        )
        self.start()

    def start(self) -> None:
        self.start_ready(self.READY)

    def kill(self) -> None:
        self.kill9()


class GatewayProcess(LoggedProcess):
    """`mrtr-gateway serve` as a separate process on a free loopback port.

    Configured by a file (`GatewayProcess(path, env, name)`, as fleet replicas are) or
    by command-line options (`GatewayProcess(argv=["--upstream", url], name=...)`);
    `--port` is added here. `env` is added to this process's environment, with JSON logs
    and `MRTR_GATEWAY_REPLICA_ID=name` unless `env` says otherwise. Ready once it logs
    where it serves (`gateway_listening`); its stderr is in `logs()`, and
    `await_line('"event":"..."')` waits for a log event.
    """

    READY = '"event":"gateway_listening"'

    def __init__(
        self,
        config_file: Path | None = None,
        env: Mapping[str, str] | None = None,
        name: str = "gateway",
        *,
        argv: Sequence[str] = (),
        ready_timeout: float = 30.0,
        python: Path | str = sys.executable,
    ) -> None:
        """`python`: whose gateway runs (another release's venv, `ensure_release`)."""
        self.port = quiet_port()  # restarted on it
        # Another release's python must not find this checkout's `gateway` in the working
        # directory (`-P`: nothing is put before its own site-packages).
        safe = [] if str(python) == sys.executable else ["-P"]
        args = [str(python), *safe, "-m", "gateway", "serve"]
        if config_file is not None:
            args += ["--config", str(config_file)]
        args += [*argv, "--port", str(self.port)]
        defaults = {"MRTR_GATEWAY_REPLICA_ID": name, "MRTR_GATEWAY_LOG_FORMAT": "json"}
        super().__init__(args, name=name, env={**defaults, **(env or {})})
        self.replica_id = self.env["MRTR_GATEWAY_REPLICA_ID"]
        self.base = f"http://127.0.0.1:{self.port}"
        self.start_ready(self.READY, ready_timeout)

    def url(self, path: str = "/mcp") -> str:
        return self.base + path


if __name__ == "__main__":
    for name in PINS:
        print(name, ensure_venv(name), file=sys.stderr)
