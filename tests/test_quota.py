"""A quota counts what a replica holds in all and per principal: past the total its
`full` error, past a principal's share its `busy` error (another principal is still
served), and each place comes back when its holder lets go."""

from __future__ import annotations

import pytest

from gateway.quota import Quota


class Full(Exception):
    pass


class Busy(Exception):
    pass


def test_a_principal_past_its_share_is_busy_while_another_is_served() -> None:
    quota = Quota(3, 2, full=Full, busy=Busy)
    quota.take("alice")
    quota.take("alice")
    with pytest.raises(Busy):
        quota.take("alice")
    quota.take("bob")
    assert (len(quota), quota.of("alice"), quota.of("bob")) == (3, 2, 1)


def test_the_total_is_checked_before_the_share() -> None:
    quota = Quota(2, 1, full=Full, busy=Busy)
    quota.take("alice")
    quota.take("bob")
    with pytest.raises(Full):
        quota.take("alice")  # over both: the replica's refusal (another replica may serve)
    with pytest.raises(Full):
        quota.take("carol")


def test_a_refusal_counts_nothing_and_a_release_gives_the_place_back() -> None:
    quota = Quota(1, 1, full=Full, busy=Busy)
    with quota.held("alice"):
        with pytest.raises(Full):
            with quota.held("bob"):
                pass
        assert (len(quota), quota.of("bob")) == (1, 0)
    assert (len(quota), quota.of("alice")) == (0, 0)
    with pytest.raises(RuntimeError), quota.held("bob"):
        raise RuntimeError("the holder failed")
    assert len(quota) == 0  # given back however the block ended
    quota.take("bob")


def test_what_cannot_be_refused_is_counted_over_the_caps() -> None:
    quota = Quota(1, 1, full=Full, busy=Busy)
    quota.take("alice")
    quota.add("alice")  # a task carried on from a replica that died
    assert (len(quota), quota.of("alice")) == (2, 2)
    quota.release("alice")
    with pytest.raises(Full):
        quota.take("bob")
    quota.release("alice")
    quota.take("bob")
