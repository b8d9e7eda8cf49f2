"""A question's id tagged with its call, and given back to its server as it was."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.protocol import legacy_questions as questions


@pytest.mark.parametrize("own", [7, 0, "q-1", "with/slashes and spaces", "", 2**40])
@pytest.mark.parametrize("method", ["tools/call", "prompts/get", "resources/read"])
def test_a_tagged_id_gives_back_the_call_its_number_its_method_and_the_servers_own_id(
    own: Any, method: str
) -> None:
    tag = questions.tagged("hQ3abc-_d", 12, method, own)
    assert isinstance(tag, str) and tag.startswith(questions.PREFIX)
    assert questions.untagged(tag) == ("hQ3abc-_d", 12, method, own)


@pytest.mark.parametrize(
    "rid",
    [
        7,
        None,
        "plain",
        "mrtr-q/",
        "mrtr-q/c/x/t/7",  # no number
        "mrtr-q/c/1/z/7",  # no method
        "mrtr-q/c/1/t/not json",
        "mrtr-q/c/1/t/[1]",  # an id is a string or a number
        "mrtr-q/c/1/t/true",
        "mrtr-q//1/t/7",
    ],
)
def test_an_id_that_is_no_tag_is_left_alone(rid: Any) -> None:
    assert questions.untagged(rid) is None
