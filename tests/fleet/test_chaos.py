"""The chaos suite's short form: the fleet under load through a replica `kill -9` and
restart under the same name, and a store fault: a Redis restart that loses every key,
a Sentinel failover (the primary killed), a Cluster primary killed. The script checks
every guarantee and exits 1 if one fails (its report is printed on failure)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.peers

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("store", ["standalone", "sentinel", "cluster"])
def test_the_fleet_keeps_every_guarantee_under_fire(store: str) -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "chaos.py"), "--short", "--store", store],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stdout + run.stderr[-4000:]
    assert "complete" in run.stdout and "FAIL" not in run.stdout
