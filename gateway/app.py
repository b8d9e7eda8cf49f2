"""Wiring only: build the aiohttp application from a `GatewayConfig`.

Middleware order: request id -> errors -> handler. Long-lived resources (the
upstream HTTP client, session pools, the store, the bridge) open and close in
one `cleanup_ctx` generator.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import structlog
from aiohttp import web

from gateway import __version__
from gateway.bridge import Bridge
from gateway.config import GatewayConfig
from gateway.errors import ConfigError
from gateway.protocol.state import AesGcmKeyRing, StateCodec
from gateway.store.base import SuspendedCallStore
from gateway.store.memory import MemoryStore
from gateway.upstream.pool import SessionPool
from gateway.upstream.session import Endpoint
from gateway.web.handlers import McpEndpoint
from gateway.web.middleware import error_middleware, request_id_middleware

log = structlog.get_logger("gateway")

CONFIG = web.AppKey("config", GatewayConfig)
BRIDGE = web.AppKey("bridge", Bridge)
POOLS = web.AppKey("pools", dict[str, SessionPool])
STORE = web.AppKey("store", SuspendedCallStore)


def make_codec(config: GatewayConfig) -> StateCodec:
    if config.sealing.ephemeral:
        log.warning(
            "sealing_key_ephemeral",
            detail="no sealing key configured: a random key was generated for this process. "
            "requestState minted here is refused by any other replica and after a restart. "
            "Set sealing.keys_file or MRTR_GATEWAY_SEALING_KEYS "
            "(generate with: mrtr-gateway keygen).",
        )
        return AesGcmKeyRing.ephemeral()
    return AesGcmKeyRing(list(config.sealing.keys))


def make_store(config: GatewayConfig) -> SuspendedCallStore:
    if config.store.url.startswith("memory://"):
        return MemoryStore()
    raise ConfigError(
        f"store.url: {config.store.url!r} is not supported by this build; use memory://"
    )


def build_app(config: GatewayConfig) -> web.Application:
    app = web.Application(
        middlewares=[request_id_middleware, error_middleware],
        client_max_size=config.limits.max_body_bytes + 1,
    )
    app[CONFIG] = config
    store = make_store(config)
    app[STORE] = store
    codec = make_codec(config)
    pools: dict[str, SessionPool] = {}
    app[POOLS] = pools
    bridge = Bridge(config, store, codec, pools)
    app[BRIDGE] = bridge

    async def resources(app: web.Application) -> AsyncIterator[None]:
        http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        for upstream in config.upstreams:
            endpoint = Endpoint(
                name=upstream.name,
                url=upstream.url,
                headers=dict(upstream.headers),
                timeout_s=upstream.timeout_s,
                client_version=__version__,
            )
            pool = SessionPool(http, endpoint, upstream.pool)
            pool.start()
            pools[upstream.name] = pool
        log.info(
            "gateway_started",
            replica=config.replica_id,
            upstreams={u.path: u.url for u in config.upstreams},
            store=config.store.url.split("@")[-1],
        )
        yield
        await bridge.close()
        for pool in pools.values():
            await pool.close()
        await store.close()
        await http.close()

    app.cleanup_ctx.append(resources)
    for upstream in config.upstreams:
        app.router.add_route(
            "*", upstream.path, McpEndpoint(config, upstream, bridge, pools).handle
        )
    app.router.add_get("/healthz", _healthz)
    return app


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})
