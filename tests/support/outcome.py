"""Whether a test failed, for the teardown of a fixture that owns processes (the hook
in tests/conftest.py keeps each phase's report on the test)."""

from __future__ import annotations

import pytest

#: How much of a process's log a failure's report shows (its end).
LOG_TAIL = 20_000


def failed(request: pytest.FixtureRequest) -> bool:
    """Whether the test that requested the fixture failed in its setup or its body."""
    return any(
        getattr(getattr(request.node, f"report_{when}", None), "failed", False)
        for when in ("setup", "call")
    )
