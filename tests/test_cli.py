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

from gateway import cli
from gateway.cli import main
from gateway.config import GatewayConfig
from gateway.errors import ConfigError
from gateway.protocol.state import generate_key, parse_key
from tests.peers.tooling import GatewayProcess
from tests.support.cases import drive

ROOT = Path(__file__).resolve().parents[1]


def test_keygen_prints_a_usable_key(capsys) -> None:
    assert main(["keygen"]) == 0
    assert len(parse_key(capsys.readouterr().out.strip(), "printed key")) == 32


def test_check_config_accepts_the_example_and_names_errors(tmp_path: Path, capsys) -> None:
    assert main(["check-config", str(ROOT / "config" / "example.yaml")]) == 0
    out = capsys.readouterr().out
    assert "OK; upstreams: example (/mcp -> streamable-http http://127.0.0.1:9000/mcp)" in out
    assert "legacy lane: on; 2025 clients served on: example\n" in out
    assert "tasks: no tool has a task policy\n" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text("upstreams: [{name: x, url: 'ftp://nope'}]\n")
    assert main(["check-config", str(bad)]) == 2
    assert "upstreams[0].url" in capsys.readouterr().err


def test_check_config_says_whether_the_legacy_lane_is_on_and_for_which_upstreams(
    tmp_path: Path, capsys
) -> None:
    config = tmp_path / "two.yaml"
    upstreams = (
        "upstreams:\n"
        "  - {name: web, url: 'http://127.0.0.1:9000/mcp'}\n"
        "  - {name: local, command: [node, server.js], path: /local}\n"
    )
    config.write_text(upstreams)
    assert main(["check-config", str(config)]) == 0
    out = capsys.readouterr().out
    assert (
        "legacy lane: on; 2025 clients served on: web, local; sessions held by the replica "
        "that opens them: local (at most 64 per replica and upstream, ended after 600 s "
        "without a request)"
    ) in out
    config.write_text(upstreams + "legacy: {max_bound_sessions: 8, bound_session_idle_s: 30}\n")
    assert main(["check-config", str(config)]) == 0
    assert "(at most 8 per replica and upstream, ended after 30 s" in capsys.readouterr().out
    config.write_text(upstreams + "legacy: {max_bound_sessions: 0}\n")
    assert main(["check-config", str(config)]) == 2
    assert "legacy.max_bound_sessions: must be greater than 0" in capsys.readouterr().err
    config.write_text(upstreams + "legacy: {enabled: false}\n")
    assert main(["check-config", str(config)]) == 0
    assert "legacy lane: off" in capsys.readouterr().out


def test_check_config_names_each_endpoints_upstreams_as_clients_see_them(
    tmp_path: Path, capsys
) -> None:
    config = tmp_path / "joined.yaml"
    config.write_text(
        "upstreams:\n"
        "  - {name: notes, url: 'http://127.0.0.1:9000/mcp'}\n"
        "  - {name: tickets, url: 'http://127.0.0.1:9001/mcp'}\n"
        "endpoints:\n"
        "  - {path: /mcp, upstreams: [notes, tickets]}\n"
    )
    assert main(["check-config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "upstreams: notes (/mcp -> streamable-http" in out
    assert (
        "endpoint /mcp: notes as notes_<name>, tickets as tickets_<name>; a list without an "
        "upstream that cannot be reached: omit; 2025 clients: a session of each of 2 servers "
        "per client session"
    ) in out
    assert "2025 clients served on: notes, tickets" in out


def test_check_config_names_the_tools_that_run_as_tasks(tmp_path: Path, capsys) -> None:
    config = tmp_path / "tasks.yaml"
    config.write_text(
        "upstreams:\n"
        "  - name: web\n"
        "    url: 'http://127.0.0.1:9000/mcp'\n"
        "    tools: {build: {task: optional}, report: {task: {support: required, after_s: 2}}}\n"
    )
    assert main(["check-config", str(config)]) == 0
    assert (
        "tasks: web/build (optional, after 0 s, ttl 3600 s), "
        "web/report (required, after 2 s, ttl 3600 s)\n"
    ) in capsys.readouterr().out
    config.write_text(config.read_text().replace("optional", "sometimes"))
    assert main(["check-config", str(config)]) == 2
    assert "upstreams[0].tools.build.task: must be one of none, optional, required" in (
        capsys.readouterr().err
    )


def test_check_config_names_the_audit_sinks_and_the_content_kept_without_a_password(
    tmp_path: Path, capsys
) -> None:
    config = tmp_path / "audit.yaml"
    upstreams = "upstreams: [{name: web, url: 'http://127.0.0.1:9000/mcp'}]\n"
    config.write_text(upstreams)
    assert main(["check-config", str(config)]) == 0
    assert "audit trail: off (no audit section)\n" in capsys.readouterr().out
    config.write_text(
        upstreams + f"audit:\n  log: true\n  file: {{path: {tmp_path}/audit.jsonl}}\n"
        "  stream: {url: 'redis://:hunter2@audit:6379/0'}\n"
        "  include_answers: true\n  redact: ['(?i)pin']\n"
    )
    assert main(["check-config", str(config)]) == 0
    out = capsys.readouterr().out
    assert (
        f"audit trail: the log stream (audit lines); file {tmp_path}/audit.jsonl; "
        "Redis stream mrtr:{audit}:events at redis://audit:6379/0; content recorded: "
        "answers (through 1 redact patterns, at most 1024 bytes each)\n"
    ) in out
    assert "hunter2" not in out
    config.write_text(upstreams + "audit: {}\n")
    assert main(["check-config", str(config)]) == 2
    assert "audit: name at least one sink" in capsys.readouterr().err


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
    err = capsys.readouterr().err
    assert "exactly one of --config FILE, --upstream URL or --upstream-command" in err


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[GatewayConfig]:
    """`serve` records the configuration it would run with; no MRTR_GATEWAY_* variable is set."""
    for name in list(os.environ):
        if name.startswith("MRTR_GATEWAY_"):
            monkeypatch.delenv(name)
    configs: list[GatewayConfig] = []

    def record(config: GatewayConfig, _loop: object) -> int:
        configs.append(config)
        return 0

    monkeypatch.setattr(cli, "serve", record)
    return configs


def config_file(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "conf" / "gateway.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text("upstreams: [{name: u, url: 'http://127.0.0.1:1/mcp', path: /u}]\n" + extra)
    return path


def test_serve_help_states_the_precedence(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "flag > environment variable > file > default" in text
    assert "--path PATH quick start only" in text
    assert "overrides store.url and MRTR_GATEWAY_STORE_URL (default memory://)" in text


def test_listen_flags_override_the_file(tmp_path: Path, served) -> None:
    path = config_file(tmp_path, "listen: {host: 127.0.0.2, port: 7000}\n")
    assert main(["serve", "--config", str(path)]) == 0
    assert main(["serve", "--config", str(path), "--host", "0.0.0.0", "--port", "9999"]) == 0
    assert main(["serve", "--config", str(path), "--port", "9998"]) == 0
    listens = [(c.listen.host, c.listen.port) for c in served]
    assert listens == [("127.0.0.2", 7000), ("0.0.0.0", 9999), ("127.0.0.2", 9998)]


def test_a_store_flag_with_a_config_file_still_needs_a_shared_key(
    tmp_path: Path, served, capsys
) -> None:
    path = config_file(tmp_path)
    assert main(["serve", "--config", str(path), "--store", "redis://127.0.0.1:1/0"]) == 2
    assert "every replica shares" in capsys.readouterr().err
    assert served == []


def test_the_keys_file_flag_is_used_with_a_config_file(
    tmp_path: Path, served, monkeypatch: pytest.MonkeyPatch
) -> None:
    file_key, flag_key = generate_key(), generate_key()
    path = config_file(tmp_path, "sealing: {keys_file: file-keys}\n")
    (path.parent / "file-keys").write_text(file_key + "\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "keys").write_text(flag_key + "\n")
    monkeypatch.chdir(tmp_path / "run")  # the flag's path is relative to here, not to conf/
    store = ["--store", "redis://127.0.0.1:1/0"]
    assert main(["serve", "--config", str(path), *store]) == 0
    assert main(["serve", "--config", str(path), *store, "--keys-file", "keys"]) == 0
    assert [c.sealing.keys for c in served] == [
        (parse_key(file_key, "file key"),),
        (parse_key(flag_key, "flag key"),),
    ]
    assert {c.store.url for c in served} == {"redis://127.0.0.1:1/0"}


def test_the_keys_file_flag_wins_over_the_key_variables(
    tmp_path: Path, served, monkeypatch: pytest.MonkeyPatch
) -> None:
    flag_key = generate_key()
    (tmp_path / "keys").write_text(flag_key + "\n")
    monkeypatch.setenv("MRTR_GATEWAY_SEALING_KEYS", generate_key())
    monkeypatch.setenv("MRTR_GATEWAY_SEALING_KEYS_FILE", str(tmp_path / "missing"))
    argv = ["serve", "--config", str(config_file(tmp_path))]
    assert main([*argv, "--keys-file", str(tmp_path / "keys")]) == 0
    assert served[0].sealing.keys == (parse_key(flag_key, "flag key"),)


@pytest.mark.parametrize(
    ("in_file", "in_env", "flag", "expected"),
    [
        (None, None, None, "memory://"),
        ("redis://file:6379/0", None, None, "redis://file:6379/0"),
        ("redis://file:6379/0", "redis://env:6379/0", None, "redis://env:6379/0"),
        (None, "redis://env:6379/0", None, "redis://env:6379/0"),
        ("redis://file:6379/0", "redis://env:6379/0", "redis://flag:6379/0", "redis://flag:6379/0"),
        ("redis://file:6379/0", "redis://env:6379/0", "memory://", "memory://"),
    ],
)
def test_store_url_precedence_is_flag_then_environment_then_file_then_default(
    tmp_path: Path, served, monkeypatch: pytest.MonkeyPatch, in_file, in_env, flag, expected
) -> None:
    monkeypatch.setenv("MRTR_GATEWAY_SEALING_KEYS", generate_key())
    if in_env:
        monkeypatch.setenv("MRTR_GATEWAY_STORE_URL", in_env)
    path = config_file(tmp_path, f"store: {{url: '{in_file}'}}\n" if in_file else "")
    argv = ["serve", "--config", str(path), *(["--store", flag] if flag else [])]
    assert main(argv) == 0
    assert served[0].store.url == expected


def test_path_is_refused_with_a_config_file(tmp_path: Path, served, capsys) -> None:
    assert main(["serve", "--config", str(config_file(tmp_path)), "--path", "/other"]) == 2
    err = capsys.readouterr().err
    assert "--path is a quick-start flag" in err and "upstreams[].path" in err
    assert served == []


def test_quick_start_takes_every_flag(tmp_path: Path, served) -> None:
    key = generate_key()
    (tmp_path / "keys").write_text(key + "\n")
    up = ["serve", "--upstream", "http://127.0.0.1:1/mcp"]
    assert main(up) == 0
    flags = ["--path", "/legacy", "--host", "127.0.0.3", "--port", "0"]
    flags += ["--store", "redis://r:6379/0", "--keys-file", str(tmp_path / "keys")]
    assert main([*up, *flags]) == 0
    default, flagged = served
    assert (default.upstreams[0].path, default.listen.port, default.store.url) == (
        "/mcp",
        8080,
        "memory://",
    )
    assert flagged.upstreams[0].path == "/legacy"
    assert (flagged.listen.host, flagged.listen.port) == ("127.0.0.3", 0)
    assert flagged.store.url == "redis://r:6379/0"
    assert flagged.sealing.keys == (parse_key(key, "key"),)


@pytest.mark.peers
async def test_quick_start_serve_bridges_a_legacy_server_and_stops_on_sigterm(
    legacy, modern
) -> None:
    gateway = await asyncio.to_thread(GatewayProcess, argv=["--upstream", legacy.url])
    try:
        reply = await drive(
            modern, {"op": "call_tool", "url": gateway.url(), "name": "greet", "arguments": {}}
        )
        assert reply["rounds"] == [["elicit.username"]]
        assert reply["result"]["content"][0]["text"] == "Hello, alice!"
    finally:
        gateway.send_signal(signal.SIGTERM)
        status = await asyncio.to_thread(gateway.wait, 60)
        err = gateway.logs()
        gateway.stop()
    assert status == 0
    assert '"event":"sealing_key_ephemeral"' in err
    assert '"event":"request_served"' in err and '"outcome":"complete"' in err
    assert 'requestState":' not in err and "gw1." not in err  # never logged


def test_a_redis_store_without_a_shared_key_refuses_to_start(capsys) -> None:
    assert (
        main(["serve", "--upstream", "http://127.0.0.1:1/mcp", "--store", "redis://127.0.0.1:1/0"])
        == 2
    )
    assert "every replica shares" in capsys.readouterr().err


async def park_greet(gateway: GatewayProcess, run_id: str) -> None:
    """One `greet` through the gateway, parked on its question (`input_required`)."""
    import aiohttp

    from tests.support.legacy import greet
    from tests.support.wire import default_headers

    body = greet(run_id)
    async with aiohttp.ClientSession() as http:
        async with http.post(gateway.url(), json=body, headers=default_headers(body)) as resp:
            assert (await resp.json())["result"]["resultType"] == "input_required"


@pytest.mark.peers
async def test_a_second_signal_ends_a_drain_at_once(legacy) -> None:
    gateway = await asyncio.to_thread(GatewayProcess, argv=["--upstream", legacy.url])
    try:
        await park_greet(gateway, "drain-twice")
        gateway.send_signal(signal.SIGTERM)  # drains: the parked call could be resumed for 30 s
        await asyncio.to_thread(gateway.wait_for_line, '"event":"gateway_stopping"', 30)
        gateway.send_signal(signal.SIGTERM)
        status = await asyncio.to_thread(gateway.wait, 60)  # a bound, not how fast
        err = gateway.logs()
    finally:
        gateway.stop()
    assert status == 0
    # Cut short: the drain neither finished (the call is still parked) nor ran out its 30 s.
    assert '"event":"drain_finished"' not in err and '"event":"drain_timeout"' not in err
    assert '"event":"call_cancelled"' in err and "gateway shutting down" in err
    (listening,) = [line for line in err.splitlines() if '"event":"gateway_listening"' in line]
    assert json.loads(listening)["port"] == gateway.port
    assert json.loads(listening)["event_loop"] == "uvloop"


@pytest.mark.peers
async def test_a_drain_does_not_wait_for_a_parked_call_whose_server_died() -> None:
    """The legacy server is killed while a call is parked: the call can never complete,
    so SIGTERM's drain ends at once instead of holding the gateway for 30 s."""
    import aiohttp

    from tests.peers.tooling import LegacyServer

    legacy = await asyncio.to_thread(LegacyServer)  # its own: this test kills it
    gateway = await asyncio.to_thread(GatewayProcess, argv=["--upstream", legacy.url])
    try:
        await park_greet(gateway, "server-dies")
        legacy.kill9()
        await asyncio.to_thread(gateway.wait_for_line, '"event":"parked_call_lost"', 30)
        async with aiohttp.ClientSession() as http:
            async with http.get(gateway.url("/metrics")) as resp:
                scraped = await resp.text()
        assert "\nmrtr_parked_calls_lost 1.0\n" in scraped
        gateway.send_signal(signal.SIGTERM)
        # A bound, not how fast: a drain that waited for the call would say drain_timeout.
        status = await asyncio.to_thread(gateway.wait, 60)
        err = gateway.logs()
    finally:
        gateway.stop()
        legacy.stop()
    assert status == 0
    assert '"event":"drain_finished"' in err and '"lost":1' in err
    assert '"event":"drain_timeout"' not in err


def test_apikey_prints_the_key_first_then_the_entry_holding_only_its_hash(capsys) -> None:
    import yaml

    from gateway.auth import ApiKeyStore, parse_api_keys

    assert main(["apikey", "--id", "ci-bot", "--scopes", "mcp:tools", "admin"]) == 0
    out = capsys.readouterr().out
    key, entry = out.split("\n", 1)
    assert key.startswith("mrtr_") and key not in entry
    (loaded,) = parse_api_keys(yaml.safe_load(entry))
    assert loaded.id == "ci-bot" and set(loaded.scopes) == {"mcp:tools", "admin"}
    assert ApiKeyStore([loaded]).check(key) is not None
    assert main(["apikey", "--id", "bad id", "--scopes", "x"]) == 2


def test_the_event_loop_is_uvloop_where_installed_and_asyncio_on_request() -> None:
    factory, name = cli.event_loop("auto")
    assert name == "uvloop" and factory is not None  # installed with the gateway here
    assert cli.event_loop("asyncio") == (None, "asyncio")
    with pytest.raises(ConfigError, match="must be auto, uvloop or asyncio"):
        cli.event_loop("trio")


def test_an_unknown_event_loop_is_a_configuration_error(monkeypatch, capsys) -> None:
    monkeypatch.setenv(cli.ENV_EVENT_LOOP, "fastest")
    assert main(["serve", "--upstream", "http://127.0.0.1:1/mcp"]) == 2
    assert "MRTR_GATEWAY_EVENT_LOOP: must be auto, uvloop or asyncio" in capsys.readouterr().err


def _serve_refused(argv: list[str], log_format: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MRTR_GATEWAY_")}
    env["MRTR_GATEWAY_LOG_FORMAT"] = log_format
    return subprocess.run(
        [sys.executable, "-m", "gateway", "serve", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=ROOT,
    )


@pytest.mark.parametrize("log_format", ["json", "console"])
def test_a_port_in_use_is_one_line_and_exit_2_before_anything_starts(log_format: str) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["--upstream", "http://127.0.0.1:1/mcp", "--port", str(port)]
        proc = _serve_refused(argv, log_format)
    assert proc.returncode == 2
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()  # one line: no traceback, no banner
    assert "gateway_refused" in line and "gateway_started" not in proc.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in line
    assert "Traceback" not in proc.stderr
    if log_format == "json":
        event = json.loads(line)
        assert (event["event"], event["level"]) == ("gateway_refused", "error")
        assert "in use" in event["reason"]


def test_an_address_not_on_this_machine_is_refused_in_one_line() -> None:
    argv = ["--upstream", "http://127.0.0.1:1/mcp", "--host", "192.0.2.1", "--port", "0"]
    proc = _serve_refused(argv, "json")
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert json.loads(line)["event"] == "gateway_refused"
    assert "cannot listen on 192.0.2.1:0" in line


def test_serve_help_lists_every_quick_start_flag(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    for flag in (
        "--config",
        "--upstream",
        "--upstream-command",
        "--transport",
        "--path",
        "--host",
        "--port",
        "--store",
        "--keys-file",
    ):
        assert flag in out


def test_check_config_lists_every_mistake_on_a_line_of_its_own(tmp_path: Path, capsys) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "listen: {port: 80800}\n"
        "upstream:\n  - {name: demo, url: 'http://127.0.0.1:9000/mcp'}\n"
        "limits: {max_body_byte: 1000}\n"
    )
    assert main(["check-config", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f"mrtr-gateway: {path}: 4 mistakes",
        "  limits.max_body_byte: unknown key; did you mean max_body_bytes?",
        "  listen.port: must be 0..65535, got 80800",
        "  upstream: unknown key; did you mean upstreams?",
        "  upstreams: at least one legacy server is required (name, url, path)",
    ]


def test_check_config_names_a_yaml_error_by_file_line_and_column(tmp_path: Path, capsys) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("listen:\n  port: 8080\n   host: x\n")
    assert main(["check-config", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"mrtr-gateway: {path}:3:8: not valid YAML: mapping values are not allowed here; "
        "check the indentation of line 3\n"
    )


@pytest.mark.parametrize("log_format", ["json", "console"])
def test_a_refused_configuration_is_one_log_line_and_exit_2(
    tmp_path: Path, log_format: str
) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("listen: {port: 80800}\nupstreams: [{name: u, url: 'ftp://x'}]\n")
    proc = _serve_refused(["--config", str(path)], log_format)
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert "gateway_refused" in line and "Traceback" not in line
    if log_format == "json":
        reason = json.loads(line)["reason"]
        assert reason.startswith("configuration: 2 mistakes: listen.port: must be 0..65535")
        assert "upstreams[0].url" in reason
        assert reason.endswith(f"(each on a line of its own: mrtr-gateway check-config {path})")


@pytest.mark.peers
def test_where_it_serves_is_logged_at_every_level(legacy) -> None:
    gateway = GatewayProcess(
        argv=["--upstream", legacy.url], env={"MRTR_GATEWAY_LOG_LEVEL": "error"}
    )  # ready once it logs gateway_listening
    try:
        (line,) = [x for x in gateway.logs().splitlines() if "gateway_listening" in x]
    finally:
        gateway.stop()
    assert json.loads(line)["urls"] == {
        f"http://127.0.0.1:{gateway.port}/mcp": (f"streamable-http:{legacy.url}")
    }
    assert "gateway_started" not in gateway.logs()  # info: below the level asked for
