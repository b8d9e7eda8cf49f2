"""The probes (`gateway.web.probes`): readiness says why not, and a replica alone has no
fleet to report on."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from gateway.observability import Metrics
from gateway.web.probes import Probes


class Answers:
    """A store or a pool that is reachable, or not, as the test says."""

    def __init__(self, reachable: bool = True) -> None:
        self.reachable = reachable

    async def ping(self) -> bool:
        return self.reachable

    async def check(self) -> bool:
        return self.reachable


async def ready(
    aiohttp_client: Any,
    *,
    store: bool = True,
    upstream: bool = True,
    draining: bool = False,
    leases: Mapping[str, Callable[[], bool]] | None = None,
) -> tuple[int, dict[str, Any]]:
    probes = Probes(
        store=Answers(store),  # type: ignore[arg-type]
        pools={"up": Answers(upstream)},  # type: ignore[dict-item]
        draining=lambda: draining,
        metrics=Metrics(),
        leases=leases or {},
    )
    app = web.Application()
    probes.add_routes(app)
    client = await aiohttp_client(app)
    answer = await client.get("/readyz")
    return answer.status, await answer.json()


async def test_a_replica_alone_is_ready_and_says_nothing_of_a_fleet(aiohttp_client) -> None:
    assert await ready(aiohttp_client) == (
        200,
        {"ready": True, "store": "ok", "upstreams": {"up": "ok"}, "draining": False},
    )


async def test_a_replica_whose_lease_lapsed_is_not_ready_and_says_so(aiohttp_client) -> None:
    status, body = await ready(aiohttp_client, leases={"fleet": lambda: False})
    assert (status, body["ready"], body["fleet"]) == (503, False, "lapsed")
    status, body = await ready(aiohttp_client, leases={"fleet": lambda: True})
    assert (status, body["fleet"]) == (200, "ok")


async def test_a_replica_is_not_ready_without_its_store_an_upstream_or_while_draining(
    aiohttp_client,
) -> None:
    status, body = await ready(aiohttp_client, store=False)
    assert (status, body["store"]) == (503, "unreachable")
    status, body = await ready(aiohttp_client, upstream=False)
    assert (status, body["upstreams"]) == (503, {"up": "unreachable"})
    status, body = await ready(aiohttp_client, draining=True)
    assert (status, body["draining"]) == (503, True)


async def test_liveness_and_metrics_are_served(aiohttp_client) -> None:
    probes = Probes(
        store=Answers(),  # type: ignore[arg-type]
        pools={},
        draining=lambda: False,
        metrics=Metrics(),
        leases={},
    )
    app = web.Application()
    probes.add_routes(app)
    client = await aiohttp_client(app)
    alive = await client.get("/healthz")
    assert (alive.status, await alive.json()) == (200, {"status": "alive"})
    scraped = await client.get("/metrics")
    assert scraped.status == 200 and scraped.content_type == "text/plain"
    assert "# TYPE" in await scraped.text()
