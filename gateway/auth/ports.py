"""The seams of the identity core: the wall clock it reads and the HTTP it fetches with.

Everything in `gateway.auth` that needs the time calls a `WallClock` (seconds since
the Unix epoch, as JWT claims count them): the gateway's one clock's `wall_s`
(`gateway.clock.Clock`), narrowed to the one reading identity needs. Everything that
talks to an authorization server goes through an `HttpFetcher`. Production passes
`Clock.wall_s` and `AiohttpFetcher`; tests pass a hand-moved clock and an in-memory
fetcher, so expiry and refresh intervals are tested without sleeping.

This module holds no I/O and no policy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

#: Seconds since the Unix epoch, like `time.time`: `Clock.wall_s`. Tests pass a manual clock.
WallClock = Callable[[], float]


class FetchError(Exception):
    """The document could not be fetched: connection, timeout, size or not JSON.

    The message names the URL and the failure, never a credential.
    """


@dataclass(frozen=True, slots=True)
class HttpReply:
    """An answer whose body was parsed as JSON.

    `body` is None when the body was empty, or was not JSON on a non-2xx answer.
    """

    status: int
    body: Any
    headers: Mapping[str, str] = field(default_factory=dict)


class HttpFetcher(Protocol):
    """How the identity core reaches an authorization server.

    Implementations never follow redirects (a redirect is an answer with a 3xx
    status), bound every call with a timeout and cap the body size.
    """

    async def get_json(self, url: str) -> HttpReply:
        """GET `url` asking for JSON.

        Raises:
            FetchError: no answer, or a 2xx answer whose body is not JSON.
        """
        ...

    async def post_form(
        self,
        url: str,
        form: Mapping[str, str],
        *,
        basic_auth: tuple[str, str] | None = None,
    ) -> HttpReply:
        """POST `form` as application/x-www-form-urlencoded, optionally with HTTP Basic.

        Raises:
            FetchError: no answer, or a 2xx answer whose body is not JSON.
        """
        ...
