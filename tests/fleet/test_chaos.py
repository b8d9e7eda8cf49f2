"""The chaos suite's short form: the fleet under load through a replica `kill -9` and
restart under the same name, and a store fault: a Redis restart that loses every key,
a Sentinel failover (the primary killed), a Cluster primary killed. The script checks
every guarantee, the audit trail's among them (every sink's events joined: a call started
and ended once, each round asked once and answered at most once, every completed call
there under one call id), and exits 1 if one fails (its report is printed on failure)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.peers

ROOT = Path(__file__).resolve().parents[2]
#: The script's own bound: a run takes 20 to 90 s, the most on a loaded 2-core machine.
RUN_S = 240


# The script's bound and the time it takes to end what it started, past the suite's.
@pytest.mark.timeout(RUN_S + 60)
@pytest.mark.parametrize("store", ["standalone", "sentinel", "cluster"])
def test_the_fleet_keeps_every_guarantee_under_fire(store: str) -> None:
    # A session of its own: however this test ends (the script's bound, the suite's, an
    # interrupt), the script and every process it started (replicas, Redis, legacy
    # servers) are ended with it by their process group, none left running.
    run = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "chaos.py"), "--short", "--store", store],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = run.communicate(timeout=RUN_S)
    finally:
        try:  # the script, if still running, and whatever of its group outlived it
            os.killpg(run.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # all ended: the usual case
        run.wait()
    assert run.returncode == 0, stdout + stderr[-4000:]
    assert "complete" in stdout and "FAIL" not in stdout
