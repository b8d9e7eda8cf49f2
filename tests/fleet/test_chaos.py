"""The chaos suite's short form: the fleet under load through a replica `kill -9` and
restart under the same name and a Redis restart that loses every key; the script
checks every guarantee and exits 1 if one fails (its report is printed on failure)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.peers

ROOT = Path(__file__).resolve().parents[2]


def test_the_fleet_keeps_every_guarantee_under_fire() -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "chaos.py"), "--short"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stdout + run.stderr[-4000:]
    assert "complete" in run.stdout and "FAIL" not in run.stdout
