"""The real thing, short form: a fleet of the previous release (tests/rollout/PREVIOUS_RELEASE,
in its own venv) rolled to this release replica by replica under load, and rolled back,
as a Deployment does (tests/rollout/scenario.py; the long form is
`scripts/chaos.py --scenario rollout`)."""

from __future__ import annotations

import pytest

from gateway.protocol import formats
from tests.rollout.scenario import run

pytestmark = pytest.mark.peers


@pytest.mark.timeout(420)
async def test_a_rollout_and_a_rollback_under_load_lose_nothing() -> None:
    report = await run(replicas=3, clients=6, sessions=2, calls_per_step=12, held=3)
    print("\n".join(report.lines()))  # the counts per outcome, in the test's output
    assert report.failures() == {name: [] for name in report.failures()}
    outcomes = report.outcomes
    # Every kind of call went through, parked ones across the replicas of both releases.
    for kind in ("greet", "register", "echo", "legacy session call"):
        assert outcomes[f"{kind}: complete"] > 0, kind
    # At each of the six steps, three calls parked on the replica replaced were retried
    # while it drained, through its replacement of the other release (which forwarded
    # them to it), and completed.
    held = sum(n for kind, n in outcomes.items() if "then replaced: complete" in kind)
    assert held == 6 * 3
    assert len(report.forwards) == 6 and min(report.forwards.values()) >= 3, report.forwards
    # Whatever failed, failed with a JSON-RPC error on a first request (the call had
    # not started: nothing parked), never on a retry (counted as lost above).
    assert all(": complete" in kind or "on a first request" in kind for kind in outcomes)
    # The fleet never moved on (no replica ran fleet.format_settle_s, 900 s, in a fleet of
    # this release only): every record was written as the previous release reads it,
    # while this release's replicas beat their own level.
    written = {version for versions in report.record_versions.values() for version in versions}
    assert written == {1}, report.record_versions
    assert set(report.beat_levels.values()) == {formats.LEVEL}, report.beat_levels


@pytest.mark.timeout(420)
async def test_a_rollback_after_the_fleet_moved_on_loses_nothing_when_pinned_first() -> None:
    """docs/operations.md's rollback once the fleet writes this release's formats: pin the
    fleet to the previous formats (a rollout of its own), wait a suspension's lifetime,
    then roll back."""
    report = await run(replicas=3, clients=6, sessions=2, calls_per_step=12, moved_on=True)
    print("\n".join(report.lines()))
    assert report.failures() == {name: [] for name in report.failures()}
    assert report.record_versions["after the rollout"][2] > 0  # it had moved on
    assert set(report.record_versions["in the rollback"]) == {1}, report.record_versions
    held = sum(n for kind, n in report.outcomes.items() if "then replaced: complete" in kind)
    assert held == 9 * 3  # rollout, pin and rollback: three steps each
