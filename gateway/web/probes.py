"""What an orchestrator and a scraper ask of a replica: `GET /healthz` (alive), `GET
/readyz` (ready to take calls) and `GET /metrics` (Prometheus), apart from the MCP routes.

Ready means: the store answers, every upstream is reachable, the fleet asks nothing more
(on a fleet, the lease is held: a replica whose lease lapsed resumes none of its calls, so
a call parked on it now would be refused on its retry until the next heartbeat), and the
replica is not draining. Otherwise 503, with the reason in the body. No handler here
reads a request's body or needs a credential.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from gateway.observability import Metrics
from gateway.store.base import SuspendedCallStore
from gateway.upstream.port import UpstreamPool
from gateway.web import front


class Probes:
    def __init__(
        self,
        *,
        store: SuspendedCallStore,
        pools: Mapping[str, UpstreamPool],
        draining: Callable[[], bool],
        metrics: Metrics,
        leases: Mapping[str, Callable[[], bool]],
    ) -> None:
        """`leases`: what the fleet must hold for the replica to be ready, by the name it
        has in `/readyz`'s body (none alone)."""
        self.store = store
        self.pools = pools
        self.draining = draining
        self.metrics = metrics
        self.leases = leases

    def add_routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/healthz", front.routed(self.healthz))
        app.router.add_route("*", "/readyz", front.routed(self.readyz))
        app.router.add_route("*", "/metrics", front.routed(self.prometheus))

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "alive"})

    async def readyz(self, request: web.Request) -> web.Response:
        store_ok = await self.store.ping()
        upstreams = {name: await pool.check() for name, pool in self.pools.items()}
        held = {name: holds() for name, holds in self.leases.items()}
        draining = self.draining()
        ready = store_ok and all(held.values()) and all(upstreams.values()) and not draining
        body: dict[str, Any] = {
            "ready": ready,
            "store": "ok" if store_ok else "unreachable",
            "upstreams": {name: "ok" if ok else "unreachable" for name, ok in upstreams.items()},
            "draining": draining,
        }
        body.update({name: "ok" if ok else "lapsed" for name, ok in held.items()})
        return web.json_response(body, status=200 if ready else 503)

    async def prometheus(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), content_type="text/plain", charset="utf-8")
