"""The check of what a client was asked (`asked`): questions asked together may be split
over consecutive rounds, never mixed with another step's, never asked twice or left out."""

from __future__ import annotations

import pytest

from tests.support.cases import asked

TOGETHER = [["elicit.city", "elicit.username"]]
ONE_THEN_ANOTHER = [["elicit.username"], ["elicit.age+color"]]


@pytest.mark.parametrize(
    ("rounds", "questions"),
    [
        ([["elicit.city", "elicit.username"]], TOGETHER),
        ([["elicit.username"], ["elicit.city"]], TOGETHER),  # a late sibling: the next round
        ([["elicit.city"], ["elicit.username"]], TOGETHER),
        ([["elicit.username"], ["elicit.age+color"]], ONE_THEN_ANOTHER),
        ([], []),
    ],
)
def test_what_was_asked_as_the_tool_asks_it(
    rounds: list[list[str]], questions: list[list[str]]
) -> None:
    assert asked(rounds, questions)


@pytest.mark.parametrize(
    ("rounds", "questions"),
    [
        ([["elicit.username"]], TOGETHER),  # one left out
        ([["elicit.username"], ["elicit.username"], ["elicit.city"]], TOGETHER),  # twice
        ([["elicit.city", "elicit.username"], ["elicit.city"]], TOGETHER),
        ([["elicit.age+color"], ["elicit.username"]], ONE_THEN_ANOTHER),  # out of order
        ([["elicit.username", "elicit.age+color"]], ONE_THEN_ANOTHER),  # two steps in one
        ([["elicit.username"], [], ["elicit.age+color"]], ONE_THEN_ANOTHER),  # an empty round
        ([["elicit.username"], ["elicit.age+color"], ["roots"]], ONE_THEN_ANOTHER),  # more
    ],
)
def test_what_was_not(rounds: list[list[str]], questions: list[list[str]]) -> None:
    assert not asked(rounds, questions)
