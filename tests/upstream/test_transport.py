"""`mapped_errors`: the one place foreign failures toward a legacy server become UpstreamError."""

from __future__ import annotations

import pytest

from gateway.errors import UpstreamError
from gateway.upstream.transport import mapped_errors


@pytest.mark.parametrize(
    ("raised", "message"),
    [
        (TimeoutError(), "upstream timed out while posting a request"),
        (
            ConnectionResetError("reset by peer"),
            "upstream unreachable while posting a request: reset by peer",
        ),
        (ValueError("not JSON"), "upstream's answer failed while posting a request: not JSON"),
    ],
)
def test_a_foreign_failure_becomes_an_upstream_error_naming_what_was_done(
    raised: BaseException, message: str
) -> None:
    with pytest.raises(UpstreamError) as caught, mapped_errors("posting a request"):
        raise raised
    assert str(caught.value) == message
    assert caught.value.__cause__ is raised


def test_its_own_errors_and_everything_else_pass_unchanged() -> None:
    own = UpstreamError("the server said no")
    with pytest.raises(UpstreamError) as caught, mapped_errors("posting a request"):
        raise own
    assert caught.value is own
    with pytest.raises(KeyError), mapped_errors("posting a request"):
        raise KeyError("a bug stays a bug")
    with mapped_errors("posting a request"):
        pass  # nothing raised, nothing made
