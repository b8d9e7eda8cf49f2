"""Fixtures of the front's tests."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from gateway.logging import MalformedRequests


@pytest.fixture
def server_log() -> Iterator[logging.Logger]:
    """aiohttp's server log with the filter `gateway.logging.configure` puts on it."""
    logger = logging.getLogger("aiohttp.server")
    malformed = MalformedRequests()
    logger.addFilter(malformed)
    yield logger
    logger.removeFilter(malformed)
