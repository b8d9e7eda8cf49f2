"""Which transport a configured upstream speaks: its session factory for the pool.

Streamable HTTP and HTTP+SSE sessions share the gateway's HTTP client; a stdio
session is a process started from the upstream's command.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import aiohttp

from gateway import __version__
from gateway.config import SSE, STDIO, UpstreamConfig
from gateway.protocol.capabilities import ClientCaps
from gateway.upstream.http.client import Http1Client
from gateway.upstream.http.session import HttpSession
from gateway.upstream.http.wire import Endpoint
from gateway.upstream.port import PooledSession, SessionFactory
from gateway.upstream.sse.session import SseSession
from gateway.upstream.stdio.session import Command, StdioSession

#: A stdio server that keeps failing to start is tried again after this, doubling to 30 s.
STDIO_RESTART_BACKOFF_S = 0.5


def session_factory(
    http: aiohttp.ClientSession,
    upstream: UpstreamConfig,
    authorization: Callable[[], Awaitable[str]] | None = None,
    unauthorized: Callable[[], None] | None = None,
    *,
    h1: Http1Client,
) -> SessionFactory:
    """Sessions of `upstream`'s transport; `authorization` gives the gateway's own token.

    Streamable HTTP sessions use the gateway's own HTTP/1.1 client `h1` (their hot
    path); HTTP+SSE sessions use aiohttp's `http`.
    """
    if upstream.transport == STDIO:
        command = Command(
            name=upstream.name,
            argv=upstream.command,
            env=dict(upstream.env),
            cwd=upstream.cwd,
            timeout_s=upstream.timeout_s,
            max_message_bytes=upstream.max_message_bytes,
            client_version=__version__,
        )

        def stdio(caps: ClientCaps) -> PooledSession:
            return StdioSession(command, caps)

        return stdio
    headers = dict(upstream.headers)
    if not any(name.lower() == "user-agent" for name in headers):
        headers["User-Agent"] = f"mrtr-gateway/{__version__}"  # what the upstream's logs show
    endpoint = Endpoint(
        name=upstream.name,
        url=upstream.url,
        headers=headers,
        timeout_s=upstream.timeout_s,
        client_version=__version__,
        authorization=authorization,
        unauthorized=unauthorized,
    )
    if upstream.transport == SSE:

        def sse(caps: ClientCaps) -> PooledSession:
            return SseSession(http, endpoint, caps)

        return sse

    def streamable_http(caps: ClientCaps) -> PooledSession:
        return HttpSession(h1, endpoint, caps)

    return streamable_http


def restart_backoff_s(upstream: UpstreamConfig) -> float:
    """How long the pool waits after a failed start before it tries again (0: not at all)."""
    return STDIO_RESTART_BACKOFF_S if upstream.transport == STDIO else 0.0
