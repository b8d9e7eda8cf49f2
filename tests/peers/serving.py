"""Serve a peer's ASGI app with uvicorn, and say so on stderr once connections are accepted.

The peer scripts run in their own venvs as `python tests/peers/<script>.py`, so they
import this module as `serving` (their directory is on `sys.path`). The socket is bound
and listening before the ready line is printed: a client that connects after reading it
is queued by the kernel until uvicorn serves, never refused. Port 0 picks a free port,
which the ready line reports (no free-port race).
"""

from __future__ import annotations

import socket
import sys
from typing import Any

import uvicorn

READY = "peer listening on"


def serve(app: Any, host: str, port: int) -> None:
    # IPPROTO_TCP spelled out: asyncio sets TCP_NODELAY only on sockets that say so
    # (without it, Nagle adds ~40 ms to small responses).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart on the same port
    sock.bind((host, port))
    sock.listen(128)
    print(f"{READY} {host}:{sock.getsockname()[1]}", file=sys.stderr, flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
