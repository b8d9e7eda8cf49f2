"""The command line as a user runs it: keygen, check-config, and the quick-start serve."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.protocol.state import parse_key
from tests.conftest import drive
from tests.peers.tooling import free_port, wait_for_port

ROOT = Path(__file__).resolve().parents[1]


def test_keygen_prints_a_usable_key(capsys) -> None:
    assert main(["keygen"]) == 0
    assert len(parse_key(capsys.readouterr().out.strip(), "printed key")) == 32


def test_check_config_accepts_the_example_and_names_errors(tmp_path: Path, capsys) -> None:
    assert main(["check-config", str(ROOT / "config" / "example.yaml")]) == 0
    assert "OK; upstreams: example (/mcp -> http://127.0.0.1:9000/mcp)" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("upstreams: [{name: x, url: 'ftp://nope'}]\n")
    assert main(["check-config", str(bad)]) == 2
    assert "upstreams[0].url" in capsys.readouterr().err


_IO_MODULES_AFTER = """
import json, sys
from gateway.cli import main
status = main(sys.argv[1:])
def io_modules():
    return sorted(
        name for name in sys.modules
        if name.split(".")[0] in ("aiohttp", "redis") or name.startswith("gateway.upstream")
    )
loaded = io_modules()
import gateway.app  # the control: the same probe sees them once the app is imported
print(json.dumps({"status": status, "loaded": loaded, "control": io_modules()}))
"""


@pytest.mark.parametrize(
    "argv", [["check-config", str(ROOT / "config" / "example.yaml")], ["keygen"]]
)
def test_check_config_and_keygen_load_no_io_modules(argv: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _IO_MODULES_AFTER, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    report = json.loads(proc.stdout.splitlines()[-1])
    assert report["status"] == 0
    assert report["loaded"] == []
    assert {"aiohttp", "redis", "gateway.upstream"} <= set(report["control"])


def test_serve_needs_exactly_one_source(capsys) -> None:
    assert main(["serve"]) == 2
    assert "exactly one of --config FILE or --upstream URL" in capsys.readouterr().err


@pytest.mark.peers
async def test_quick_start_serve_bridges_a_legacy_server_and_stops_on_sigterm(
    legacy, modern
) -> None:
    port = free_port()
    env = {**os.environ, "MRTR_GATEWAY_LOG_FORMAT": "json"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--upstream", legacy.url, "--port", str(port)],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        await asyncio.to_thread(wait_for_port, port, proc)
        reply = await drive(
            modern,
            {
                "op": "call_tool",
                "url": f"http://127.0.0.1:{port}/mcp",
                "name": "greet",
                "arguments": {},
            },
        )
        assert reply["rounds"] == [["elicit.username"]]
        assert reply["result"]["content"][0]["text"] == "Hello, alice!"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.to_thread(proc.communicate, timeout=15)
    assert proc.returncode == 0
    assert '"event": "sealing_key_ephemeral"' in err
    assert '"event": "call_completed"' in err
    assert 'requestState":' not in err and "gw1." not in err  # never logged


def test_a_redis_store_without_a_shared_key_refuses_to_start(capsys) -> None:
    assert (
        main(["serve", "--upstream", "http://127.0.0.1:1/mcp", "--store", "redis://127.0.0.1:1/0"])
        == 2
    )
    assert "every replica shares" in capsys.readouterr().err


@pytest.mark.peers
async def test_a_second_signal_ends_a_drain_at_once(legacy) -> None:
    import aiohttp

    from tests.conftest import default_headers
    from tests.integration.test_mrtr_wire import greet

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--upstream", legacy.url, "--port", str(port)],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "MRTR_GATEWAY_LOG_FORMAT": "json"},
    )
    await asyncio.to_thread(wait_for_port, port, proc)
    body = greet("drain-twice")
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"http://127.0.0.1:{port}/mcp", json=body, headers=default_headers(body)
        ) as resp:
            assert (await resp.json())["result"]["resultType"] == "input_required"
    proc.send_signal(signal.SIGTERM)  # drains: the parked call could still be resumed for 30 s
    line = await asyncio.to_thread(proc.stderr.readline)
    while "draining 1 call(s)" not in line:
        line = await asyncio.to_thread(proc.stderr.readline)
    proc.send_signal(signal.SIGTERM)
    _, err = await asyncio.to_thread(proc.communicate, timeout=10)
    assert proc.returncode == 0
    assert '"event": "call_cancelled"' in err and "gateway shutting down" in err
