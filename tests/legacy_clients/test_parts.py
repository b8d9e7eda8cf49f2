"""The legacy lane's parts that need no peer: what of a client's headers crosses to the
upstream, and the count of GET streams a replica holds."""

from __future__ import annotations

import pytest

from gateway.errors import Draining
from gateway.legacy_clients.streams import DRAINED, PrincipalStreaming, Streams, StreamsFull
from gateway.legacy_clients.upstream import crossing_headers

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_only_the_version_the_event_id_and_valid_trace_context_cross_to_the_upstream() -> None:
    client = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": "2025-11-25",
        "last-event-id": "stream-1:7",
        "traceparent": TRACEPARENT,
        "tracestate": "vendor=1",
        "authorization": "Bearer the-clients-own-token",
        "cookie": "sid=1",
        "mcp-session-id": "lg1.the-gateways-id",
        "host": "gateway.example",
        "x-forwarded-for": "10.0.0.1",
    }
    assert crossing_headers(client) == {
        "MCP-Protocol-Version": "2025-11-25",
        "Last-Event-ID": "stream-1:7",
        "traceparent": TRACEPARENT,
        "tracestate": "vendor=1",
    }


def test_a_crossing_header_that_is_too_long_or_not_visible_ascii_stays_behind() -> None:
    assert crossing_headers({"last-event-id": "x" * 257, "mcp-protocol-version": "2025\x7f"}) == {}
    assert crossing_headers({"last-event-id": "é", "traceparent": "not-a-traceparent"}) == {}


def test_streams_are_counted_per_principal_and_in_all_and_given_back() -> None:
    streams = Streams(max_streams=3, max_per_principal=2)
    stopped: list[str] = []
    with streams.opened("alice", stopped.append), streams.opened("alice", stopped.append):
        with pytest.raises(PrincipalStreaming):
            with streams.opened("alice", stopped.append):
                pass
        with streams.opened("bob", stopped.append):
            assert len(streams) == 3
            with pytest.raises(StreamsFull):
                with streams.opened("carol", stopped.append):
                    pass
    assert len(streams) == 0
    with streams.opened("alice", stopped.append), streams.opened("alice", stopped.append):
        pass  # both given back: alice may hold two again
    assert stopped == []


def test_a_draining_replica_stops_every_stream_and_opens_none() -> None:
    streams = Streams(max_streams=10, max_per_principal=10)
    stopped: list[str] = []
    with streams.opened("alice", stopped.append), streams.opened("bob", stopped.append):
        streams.end_all()
        assert stopped == [DRAINED, DRAINED]
    with pytest.raises(Draining):
        with streams.opened("alice", stopped.append):
            pass
