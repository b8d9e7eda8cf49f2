"""An HTTP/1.1 client that stands alone: the gateway's toward its legacy servers.

`framing` is sans-IO (request heads out, llhttp's parse of responses in); `connection`
is one keep-alive connection's asyncio protocol; `client` pools connections per origin
and hands out responses read whole or streamed. Nothing here imports any other part
of the gateway, knows MCP or logs: failures are builtins (`OSError`, `TimeoutError`,
`ValueError`) for the caller to map.
"""

from gateway.http1.client import BodySink, Http1Client, Http1Response
from gateway.http1.framing import BadResponse, Incomplete, TooLarge

__all__ = ["BadResponse", "BodySink", "Http1Client", "Incomplete", "Http1Response", "TooLarge"]
