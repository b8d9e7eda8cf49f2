"""The legacy lane: 2025 clients (`initialize`, `Mcp-Session-Id`, GET streams) served on
the same endpoint as 2026 clients, with the same identity, scopes, limits and logs.

    upstream.py    the seam: `LegacyUpstream`, what the lane asks of an upstream, and
                   `HttpPassThrough`, its Streamable HTTP implementation (one client
                   session is one upstream session, passed through one to one)
    bound.py       `BoundUpstream`, its stdio and HTTP+SSE implementation: each session a
                   process or a connection of its own, held by the replica that opened it
    forwarding.py  a bound session's requests that reach another replica, passed to its
                   owner over the fleet bus and answered back
    relay.py       an upstream's SSE answer relayed to the client event by event
    streams.py     the GET streams open on this replica: counted, ended on drain
    lane.py        the handlers the endpoint calls for a legacy POST, GET or DELETE

The session state is the gateway's session id (`gateway.protocol.legacy_session`), so
any replica serves any request of a Streamable HTTP upstream's session; a stdio or
HTTP+SSE one's is served by its owner, whichever replica the client reaches. This part
may use the gateway's web-independent parts (protocol, upstream client, front door); the
call core (`gateway.calls`) never imports it, and it reaches the fleet only through what
it is handed (`gateway.fleet.port.Bus`), in the messages of `gateway.fleet.messages`.
"""
