"""The README's quick start and worked example, run as written against the demo.

The blocks marked `<!-- run: NAME -->` in README.md are taken from the file as they
are and run: `./scripts/demo` (a real mcp 1.x example server and the real gateway),
then the curl blocks in one shell (the question, the retry with the captured
`requestState`, the same retry again), then the Python client with the mcp 2.x SDK,
its user typing "high". One change only: the demo runs on free ports
(`MRTR_DEMO_PORT`, `MRTR_DEMO_LEGACY_PORT`), so `127.0.0.1:8080` in a block is read as
that port; the suite may run beside another demo. `./scripts/test` is not run: it is
this suite.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.peers.tooling import LoggedProcess, ensure_venv, quiet_port

pytestmark = pytest.mark.peers

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
WRITTEN_PORT = "127.0.0.1:8080"


def blocks() -> dict[str, str]:
    """Each marked block's code, by its name."""
    found = re.findall(
        r"<!-- run: ([\w-]+) -->\n```\w+\n(.*?)\n```", README.read_text(), flags=re.S
    )
    return {name: code + "\n" for name, code in found}


def on_port(code: str, port: int) -> str:
    assert WRITTEN_PORT in code
    return code.replace(WRITTEN_PORT, f"127.0.0.1:{port}")


def commands(code: str) -> list[str]:
    """The commands of a shell block, without their comments."""
    return [line.split("#")[0].strip() for line in code.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def demo() -> Iterator[int]:
    """`./scripts/demo` as the quick start writes it, on free ports: the gateway's port."""
    quick_start = commands(blocks()["quick-start"])
    assert quick_start == ["./scripts/demo", "./scripts/test"]
    assert os.access(ROOT / "scripts" / "test", os.X_OK)
    port, legacy_port = quiet_port(), quiet_port()
    process = LoggedProcess(
        ["bash", "-c", f"cd {ROOT} && {quick_start[0]}"],
        name="demo",
        env={"MRTR_DEMO_PORT": str(port), "MRTR_DEMO_LEGACY_PORT": str(legacy_port)},
        stdout_too=True,
    )
    try:
        process.start_ready("gateway_listening", timeout=110)
        yield port
    finally:
        process.stop()  # SIGTERM: the demo ends the two servers it started, by PID


def test_every_block_the_readme_marks_is_run_here() -> None:
    assert list(blocks()) == ["quick-start", "ask", "retry", "python-client"]


def test_the_worked_example_runs_as_pasted(demo: int) -> None:
    code = blocks()
    script = (
        on_port(code["ask"], demo)
        + "echo '--- retry'\n"
        + on_port(code["retry"], demo)
        + "\necho '--- again'\n"
        + on_port(code["retry"], demo)
    )
    out = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    asked, answered, again = (
        out.split("--- retry\n")[0],
        *out.split("--- retry\n")[1].split("--- again\n"),
    )
    question = json.loads(asked)["result"]
    assert question["resultType"] == "input_required"
    elicitation = question["inputRequests"]["priority"]
    assert elicitation["method"] == "elicitation/create"
    # What the README shows of the answer is what the demo says.
    shown = re.search(r'"message":"([^"]+)"', README.read_text())
    assert shown is not None and elicitation["params"]["message"] == shown.group(1)
    assert question["requestState"].startswith("gw1.")
    result = json.loads(answered)["result"]
    assert result["resultType"] == "complete" and result["isError"] is False
    assert re.fullmatch(
        r"Created ticket #\d+ 'Printer on fire' with priority high", result["content"][0]["text"]
    )
    assert json.loads(again)["error"] == {
        "code": -32602,
        "message": "Invalid or expired requestState",
    }


def test_the_python_client_runs_as_pasted(demo: int, tmp_path: Path) -> None:
    program = tmp_path / "client.py"
    program.write_text(on_port(blocks()["python-client"], demo))
    done = subprocess.run(
        [str(ensure_venv("modern")), str(program)],
        input="high\n",  # the user, asked "Which priority should 'Printer on fire' get?"
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.startswith("Which priority should 'Printer on fire' get? [low/normal/high] ")
    assert re.search(r"Created ticket #\d+ 'Printer on fire' with priority high\n$", done.stdout)
