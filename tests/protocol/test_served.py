"""The reply lists a replica has served: remembered while a reply list lives, then let go."""

from __future__ import annotations

from gateway.protocol.served import ServedReplies


def test_a_reply_served_is_known_while_its_list_lives_and_forgotten_after() -> None:
    served = ServedReplies(ttl_s=60.0)
    served.add("r1", 0.0)
    served.add("r2", 30.0)
    assert "r1" in served and "r2" in served and "r3" not in served
    served.add("r3", 60.0)  # r1 is exactly a list's life old: still kept
    assert "r1" in served
    served.add("r4", 75.0)  # past it: r1 goes, r2 stays
    assert "r1" not in served
    assert "r2" in served and "r3" in served and "r4" in served
