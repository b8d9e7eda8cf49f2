"""`HttpFetcher` on aiohttp: bounded, redirect-free JSON fetches toward authorization servers.

Every call has a total timeout and a body cap, and redirects are never followed
(a `jwks_uri` that redirects elsewhere is an SSRF vector, so a 3xx comes back as
an answer the caller refuses). Failures become `FetchError` naming the URL; no
header or form value is ever put in a message.

It must not decide anything: which URLs are allowed and what the documents mean
belong to the callers.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote_plus

import aiohttp

from gateway.auth.ports import FetchError, HttpReply

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_MAX_BYTES = 1 << 20  # a JWKS or metadata document is a few KiB


class AiohttpFetcher:
    """Fetch JSON with aiohttp; owns its `ClientSession` unless one is given.

    Open it in an `app.cleanup_ctx` and `await close()` at shutdown.
    """

    def __init__(
        self,
        session: aiohttp.ClientSession | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self._session = session
        self._owned = session is None
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._max_bytes = max_bytes

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # No cookie jar: a cookie an issuer sets must not follow the gateway to
            # another issuer or an upstream's token endpoint.
            self._session = aiohttp.ClientSession(
                timeout=self._timeout, cookie_jar=aiohttp.DummyCookieJar()
            )
            self._owned = True
        return self._session

    async def close(self) -> None:
        if self._owned and self._session is not None and not self._session.closed:
            await self._session.close()

    async def get_json(self, url: str) -> HttpReply:
        return await self._request("GET", url, headers={"Accept": "application/json"})

    async def post_form(
        self,
        url: str,
        form: Mapping[str, str],
        *,
        basic_auth: tuple[str, str] | None = None,
    ) -> HttpReply:
        headers = {"Accept": "application/json"}
        if basic_auth is not None:
            # RFC 6749 §2.3.1: client id and secret are form-encoded before Basic.
            pair = f"{quote_plus(basic_auth[0])}:{quote_plus(basic_auth[1])}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        return await self._request("POST", url, headers=headers, data=dict(form))

    async def _request(self, method: str, url: str, **kwargs: Any) -> HttpReply:
        try:
            async with self._client().request(
                method, url, allow_redirects=False, timeout=self._timeout, **kwargs
            ) as response:
                raw = await self._read_capped(response)
                headers = {k: v for k, v in response.headers.items()}
                status = response.status
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise FetchError(f"{method} {url}: {type(exc).__name__}") from exc
        if not raw.strip():
            return HttpReply(status, None, headers)
        try:
            body = json.loads(raw)
        except ValueError as exc:
            if 200 <= status < 300:
                raise FetchError(f"{method} {url}: status {status}, body is not JSON") from exc
            body = None  # an error page: its status is what the caller needs
        return HttpReply(status, body, headers)

    async def _read_capped(self, response: aiohttp.ClientResponse) -> bytes:
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.content.iter_chunked(64 * 1024):
            size += len(chunk)
            if size > self._max_bytes:
                raise FetchError(f"{response.method} {response.url}: body over {self._max_bytes} B")
            chunks.append(chunk)
        return b"".join(chunks)
