"""The Redis store on a Redis Cluster: a call's record, a principal's parked set and a
replica's inbox live in different slots, which one script may not touch, so the steps
that join them elsewhere are each their own trips here, with the same outcome."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from gateway.store.base import PARKED, RESUMING, Delivery, Reply
from gateway.store.redis import RedisStore
from gateway.store.redis_client import connect
from tests.fakes.clock import ManualClock
from tests.peers.redis_topologies import ClusterSet
from tests.peers.tooling import BUS_OFFSET, ephemeral_start
from tests.store.test_stores import record


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterSet]:
    nodes = ClusterSet()
    yield nodes
    nodes.stop()


@pytest.fixture
async def store(cluster: ClusterSet) -> AsyncIterator[RedisStore]:
    backend = RedisStore(
        connect(cluster.url), prefix=f"t{uuid.uuid4().hex[:6]}:", clock=ManualClock()
    )
    yield backend
    await backend.close()


def test_the_cluster_listens_below_the_ports_outgoing_connections_are_given(
    cluster: ClusterSet,
) -> None:
    # chosen among the ephemeral ports, a node's port or bus could be taken by an outgoing
    # connection before the node bound it: a chaos run in CI once failed so
    buses = [port + BUS_OFFSET for port in cluster.ports]
    assert max(buses) < ephemeral_start()
    assert len(set(cluster.ports) | set(buses)) == 2 * len(cluster.ports)


async def test_a_claim_on_a_cluster_claims_and_leaves_the_delivery_to_the_bus(
    store: RedisStore,
) -> None:
    beat, inbox = f"{store.prefix}{{replica:a}}:beat", f"{store.prefix}{{replica:a}}:inbox"
    await store.client.set(beat, "1", px=60_000)  # the owner beats: elsewhere it is pushed
    await store.park(record("c1"))
    delivery = Delivery(beat, inbox, '{"op":"resume"}', 60_000)
    claimed, pushed = await store.claim_delivering("c1", 1, "b", delivery)
    assert claimed is not None and claimed.status == RESUMING and claimed.claimer == "b"
    assert pushed is None  # not pushed: the caller delivers by the bus
    assert await store.client.exists(inbox) == 0
    assert (await store.get("c1")).status == RESUMING
    assert await store.claim_delivering("c1", 1, "b", delivery) == (None, None)
    await store.client.delete(beat)


async def test_forgetting_a_call_on_a_cluster_leaves_the_reply_to_the_caller(
    store: RedisStore,
) -> None:
    assert await store.hold("anonymous", "c1", record().deadline_ms, 10)
    await store.park(record("c1"))
    assert (await store.get("c1")).status == PARKED
    reply = Reply(f"{store.prefix}reply:b:1", '{"op":"outcome"}', 60_000)
    assert await store.forget("c1", "anonymous", reply=reply) is False  # the caller sends it
    assert await store.get("c1") is None
    assert await store.client.exists(reply.key) == 0
    assert await store.client.zcard(store.held_key("anonymous")) == 0  # the hold is gone too
