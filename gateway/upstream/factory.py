"""Which transport a configured upstream speaks: its session factory for the pool.

Streamable HTTP and HTTP+SSE sessions share the gateway's HTTP/1.1 client
(`gateway.http1`); a stdio session is a process started from the upstream's command.
`link_factory` makes the same stdio and HTTP+SSE transports for the legacy lane's
clients, who speak the protocol themselves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from gateway import __version__
from gateway.clock import Clock
from gateway.config import SSE, STDIO, UpstreamConfig
from gateway.http1 import Http1Client
from gateway.protocol import sse as event_stream
from gateway.protocol.capabilities import ClientCaps
from gateway.upstream.duplex import DuplexSession
from gateway.upstream.http.session import HttpSession
from gateway.upstream.http.wire import Endpoint
from gateway.upstream.port import PooledSession, SessionFactory
from gateway.upstream.sse.session import SseSession
from gateway.upstream.stdio.session import Command, StdioSession

#: A stdio server that keeps failing to start is tried again after this, doubling to 30 s.
STDIO_RESTART_BACKOFF_S = 0.5


def session_factory(
    http: Http1Client,
    upstream: UpstreamConfig,
    authorization: Callable[[], Awaitable[str]] | None = None,
    unauthorized: Callable[[], None] | None = None,
    *,
    clock: Clock,
    max_message_bytes: int = event_stream.MAX_EVENT_BYTES,
) -> SessionFactory:
    """Sessions of `upstream`'s transport; `authorization` gives the gateway's own token.
    `max_message_bytes` bounds what an HTTP upstream sends: a JSON body, an SSE event."""
    if upstream.transport == STDIO:
        command = stdio_command(upstream)

        def stdio(caps: ClientCaps) -> PooledSession:
            return StdioSession(command, caps, clock=clock)

        return stdio
    endpoint = http_endpoint(
        upstream, authorization, unauthorized, max_message_bytes=max_message_bytes
    )
    if upstream.transport == SSE:

        def sse(caps: ClientCaps) -> PooledSession:
            return SseSession(http, endpoint, caps)

        return sse

    def streamable_http(caps: ClientCaps) -> PooledSession:
        return HttpSession(http, endpoint, caps, clock=clock)

    return streamable_http


def link_factory(
    http: Http1Client,
    upstream: UpstreamConfig,
    authorization: Callable[[], Awaitable[str]] | None = None,
    unauthorized: Callable[[], None] | None = None,
    *,
    clock: Clock,
    max_message_bytes: int = event_stream.MAX_EVENT_BYTES,
) -> Callable[[], DuplexSession]:
    """A stdio or HTTP+SSE upstream's transport for a client that speaks the protocol
    itself (the legacy lane's, `DuplexSession.connect`): a new process or connection
    each time, declaring nothing of the gateway's own (the client declares its own).

    Raises:
        ValueError: `upstream` is a Streamable HTTP one (its sessions are passed through).
    """
    if upstream.transport == STDIO:
        command = stdio_command(upstream)
        return lambda: StdioSession(command, ClientCaps(), clock=clock)
    if upstream.transport == SSE:
        endpoint = http_endpoint(
            upstream, authorization, unauthorized, max_message_bytes=max_message_bytes
        )
        return lambda: SseSession(http, endpoint, ClientCaps())
    raise ValueError(f"{upstream.name} is a {upstream.transport} upstream, not a duplex one")


def stdio_command(upstream: UpstreamConfig) -> Command:
    """How to start `upstream`'s server."""
    return Command(
        name=upstream.name,
        argv=upstream.command,
        env=dict(upstream.env),
        cwd=upstream.cwd,
        timeout_s=upstream.timeout_s,
        max_message_bytes=upstream.max_message_bytes,
        client_version=__version__,
    )


def http_endpoint(
    upstream: UpstreamConfig,
    authorization: Callable[[], Awaitable[str]] | None = None,
    unauthorized: Callable[[], None] | None = None,
    *,
    max_message_bytes: int = event_stream.MAX_EVENT_BYTES,
) -> Endpoint:
    """Where and how to reach an HTTP upstream: its URL, its configured headers (and the
    gateway's User-Agent unless they name one), the gateway's own token, the bounds."""
    headers = dict(upstream.headers)
    if not any(name.lower() == "user-agent" for name in headers):
        headers["User-Agent"] = f"mrtr-gateway/{__version__}"  # what the upstream's logs show
    return Endpoint(
        name=upstream.name,
        url=upstream.url,
        headers=headers,
        timeout_s=upstream.timeout_s,
        max_message_bytes=max_message_bytes,
        client_version=__version__,
        authorization=authorization,
        unauthorized=unauthorized,
    )


def restart_backoff_s(upstream: UpstreamConfig) -> float:
    """How long the pool waits after a failed start before it tries again (0: not at all)."""
    return STDIO_RESTART_BACKOFF_S if upstream.transport == STDIO else 0.0
