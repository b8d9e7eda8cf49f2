"""The suite's own bound (pytest-timeout, `[tool.pytest.ini_options]` in pyproject.toml): a
test that hangs fails, and what it started still ends: the processes of its fixtures and
those its own `finally` ends, async or not. Shown on a pytest run of its own whose tests
hang beside a real redis-server each, with the suite's timeout method."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

HANGING = """
import asyncio
import os
import threading
from pathlib import Path

import pytest

from tests.peers.tooling import RedisServer


def started(server: RedisServer, name: str) -> None:
    assert server.proc is not None
    (Path(os.environ["PIDS"]) / name).write_text(str(server.proc.pid))


@pytest.fixture
def server():
    server = RedisServer()
    yield server
    server.stop()


async def test_async_with_a_process_in_a_fixture(server):
    started(server, "async-fixture")
    await asyncio.Event().wait()


async def test_async_with_a_process_of_its_own():
    server = RedisServer()
    try:
        started(server, "async-own")
        await asyncio.Event().wait()
    finally:
        server.stop()


def test_sync_with_a_process_in_a_fixture(server):
    started(server, "sync-fixture")
    threading.Event().wait()
"""


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_test_that_hangs_fails_and_what_it_started_ends(tmp_path: Path) -> None:
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    method = settings["ini_options"]["timeout_method"]
    (tmp_path / "test_hanging.py").write_text(HANGING)
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
        f"timeout = 3\ntimeout_method = {method}\n"
    )
    pids = tmp_path / "pids"
    pids.mkdir()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env={**os.environ, "PIDS": str(pids), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,  # a bound on this test's own wait, far past the three hangs
    )
    report = run.stdout + run.stderr
    assert "3 failed" in report and report.count("Timeout") >= 3, report
    started = {path.name: int(path.read_text()) for path in pids.iterdir()}
    assert set(started) == {"async-fixture", "async-own", "sync-fixture"}, report
    assert [name for name, pid in started.items() if running(pid)] == [], report


@pytest.mark.parametrize("setting", ["timeout", "timeout_method"])
def test_the_suite_sets_its_bound(setting: str) -> None:
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    assert setting in settings["ini_options"]
