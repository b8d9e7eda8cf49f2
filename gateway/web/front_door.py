"""Who is calling, on one MCP route: authentication, scopes and the per-principal rate.

With an `auth` section, every request (an MRTR retry too: it is a request of its
own) must carry a valid bearer token or API key; the route's scopes are needed
for any access, and a tool's own scopes for calling it or seeing it in
`tools/list` (such a list is then `cacheScope: private`). The principal sealed into
`requestState` and keying the limits is `jwt:<iss>|<sub>|<client>` or `key:<id>`,
so a refreshed token of the same subject and application resumes its calls. Without
`auth` the gateway works as before: the principal is a hash of whatever
`Authorization` arrived. Either way logs carry a hash of the principal keyed by a
secret derived from the sealing key (`state.log_id_of`), never the principal.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

import structlog
from aiohttp import web

from gateway import logging as log_context
from gateway.audit.trail import OFF, Audit, who
from gateway.auth import (
    Authenticator,
    HttpFetcher,
    Identity,
    WallClock,
    build_authenticator,
    metadata_url,
    route_metadata,
    well_known_paths,
)
from gateway.auth.errors import AuthError, InsufficientScope, RateLimited, Unauthenticated
from gateway.auth.ratelimit import RateLimiter, retry_after_header
from gateway.config import GatewayConfig, UpstreamConfig
from gateway.protocol import state
from gateway.protocol.audit import Refusal, RequestRefused
from gateway.protocol.lists import MaySee, field_of, filtered_result
from gateway.protocol.methods import LISTS
from gateway.seams import Caller
from gateway.web import front

log = structlog.get_logger("gateway.web")

#: What refused a request, by the refusal raised (the audit trail's `refusal`).
_REFUSALS = {
    Unauthenticated: Refusal.AUTHENTICATION,
    InsufficientScope: Refusal.SCOPE,
    RateLimited: Refusal.RATE,
}


class FrontDoor:
    def __init__(
        self,
        upstream: UpstreamConfig,
        authenticator: Authenticator | None,
        limiter: RateLimiter | None,
        log_salt: bytes = b"",
        audit: Audit = OFF,
    ) -> None:
        """`audit`: the trail, told every refusal (authentication, scope, rate) with its
        reason, which the client is not told."""
        self.upstream = upstream
        self.audit = audit
        self.log_salt = log_salt or state.log_salt(())
        self.authenticator = authenticator
        self.limiter = limiter
        self._guarded_resources = authenticator is not None and any(
            t.scopes for t in upstream.resources.values()
        )
        self._scoped_targets = any(
            t.scopes
            for table in (upstream.tools, upstream.prompts, upstream.resources)
            for t in table.values()
        )

    async def admit(self, authorization: str | None) -> Caller:
        """The caller, or the refusal to send.

        Raises:
            Unauthenticated (401), InsufficientScope (403), AuthUnavailable (503),
            RateLimited (429), StoreError (the shared rate limit's store failed)
        """
        caller = None
        try:
            if self.authenticator is None:
                principal = state.principal_of(authorization)
                caller = Caller(principal, state.log_id_of(principal, self.log_salt), None)
            else:
                identity = await self.authenticator.authenticate(authorization)
                key = identity.principal.key
                caller = Caller(key, state.log_id_of(key, self.log_salt), identity)
                self.authenticator.require(identity, self.authenticator.scopes)
            if self.limiter is not None:
                decision = await self.limiter.take(caller.principal)
                if not decision.allowed:
                    raise RateLimited(
                        f"rate limit for {caller.log_id}",
                        retry_after=retry_after_header(decision.retry_after_s),
                    )
        except AuthError as refused:
            self._refused(refused, caller)
            raise
        return caller

    def _needs(self, method: str, target: str | None) -> tuple[str, ...]:
        return self.upstream.target(method, target).scopes

    def check_request(self, caller: Caller, method: str, params: dict[str, Any]) -> None:
        """Refuse a request about a tool, prompt or resource the caller lacks scopes for:
        calling or reading it, and completing its arguments (`completion/complete`).

        Raises:
            InsufficientScope: 403 naming every scope needed.
        """
        if method == "completion/complete":
            ref = params.get("ref")
            if isinstance(ref, dict):
                kinds = {
                    "ref/prompt": ("prompts/get", "name"),
                    "ref/resource": ("resources/read", "uri"),
                }
                kind = kinds.get(str(ref.get("type")))
                if kind is not None:
                    target = ref.get(kind[1])
                    self.check_target(caller, kind[0], target if isinstance(target, str) else None)
            return
        target = params.get("uri") if method == "resources/read" else params.get("name")
        self.check_target(caller, method, target if isinstance(target, str) else None)

    def check_result(self, caller: Caller, method: str, result: dict[str, Any]) -> None:
        """Refuse a `resources/read` result holding a resource the caller lacks scopes for,
        by the URIs the server gave its contents: a spelling of a guarded URI that
        `uris.normal` did not map to it still reaches no one without the scopes.

        Raises:
            InsufficientScope: 403 naming every scope needed.
        """
        if method != "resources/read" or not self._guarded_resources:
            return
        contents = result.get("contents")
        if isinstance(contents, list):
            for content in contents:
                self.check_target(caller, method, field_of(content, "uri"))

    def check_target(self, caller: Caller, method: str, target: str | None) -> None:
        """Refuse a tool, prompt or resource the caller lacks the scopes for.

        Raises:
            InsufficientScope: 403 naming every scope needed.
        """
        if self.authenticator is None or caller.identity is None:
            return
        needs = self._needs(method, target)
        if needs:
            try:
                self.authenticator.require(caller.identity, (*self.authenticator.scopes, *needs))
            except AuthError as refused:
                self._refused(refused, caller, method, target)
                raise

    def _refused(
        self,
        error: AuthError,
        caller: Caller | None,
        method: str | None = None,
        target: str | None = None,
    ) -> None:
        """A refusal in the audit trail, with its reason (the client gets the challenge)."""
        refusal = _REFUSALS.get(type(error))
        if not self.audit.on or refusal is None:
            return  # (the gateway unable to check tokens refuses nobody in particular)
        principal = None
        if caller is not None:
            principal = who(caller.principal, caller.log_id, caller.identity)
        self.audit.emit(
            RequestRefused(
                principal=principal,
                request_id=log_context.bound("request_id"),
                refusal=refusal,
                reason=error.reason,
                upstream=self.upstream.name,
                method=method,
                target=target,
                status=error.http_status,
            )
        )

    def visible(self, caller: Caller, method: str, result: dict[str, Any]) -> dict[str, Any]:
        """A list (`gateway.protocol.methods.LISTS`) as this caller may see it: entries
        it lacks scopes for are left out, and a list that depends on who asks is private
        to the caller.
        """
        listed = LISTS.get(method)
        if listed is None or not isinstance(result.get(listed.member), list):
            return result
        may_see = self.list_filter(caller)
        if may_see is None:
            return result
        if not any(t.scopes for t in self.upstream.targets(listed.used_by).values()):
            return result
        kept = filtered_result(result, method, may_see)
        return {**(result if kept is None else kept), "cacheScope": "private"}

    def list_filter(self, caller: Caller) -> MaySee | None:
        """What `caller` may see of a list, entry by entry (the method using an entry, its
        name or URI), or None when no entry any list holds is hidden from it: the legacy
        lane then passes list results on untouched."""
        identity = caller.identity
        if self.authenticator is None or identity is None or not self._scoped_targets:
            return None

        def may_see(method: str, name: str | None) -> bool:
            return _may(identity, self._needs(method, name))

        return may_see


def _may(identity: Identity, needs: Iterable[str]) -> bool:
    return not identity.lacks(frozenset(needs))


def build_front_doors(
    config: GatewayConfig,
    *,
    fetcher: HttpFetcher,
    wall_s: WallClock,
    limiter: RateLimiter | None,
    audit: Audit = OFF,
) -> dict[str, FrontDoor]:
    """One front door per upstream route; `limiter`: the rate limit every route shares
    (on Redis for a fleet; None when `limits.rate_per_principal` is off); `audit`: the
    trail its refusals are recorded in."""
    doors = {}
    salt = state.log_salt(config.sealing.keys)
    for upstream in config.upstreams:
        authenticator = None
        if config.auth is not None:
            settings = config.auth.route(upstream.path)
            authenticator = build_authenticator(settings, fetcher=fetcher, clock=wall_s)
        doors[upstream.name] = FrontDoor(upstream, authenticator, limiter, salt, audit)
    return doors


def add_metadata_routes(app: web.Application, config: GatewayConfig) -> None:
    """RFC 9728 protected resource metadata of every OAuth-protected route (no auth needed):
    at `/.well-known/oauth-protected-resource/<path>`, and at the root with one upstream."""
    auth = config.auth
    if auth is None or auth.oauth is None:
        return
    served = sorted({u.path for u in config.upstreams})  # an endpoint's upstreams share one
    for route in served:
        document = route_metadata(auth.route(route))
        inserted, root = well_known_paths(route)
        # Behind a proxy that adds a path prefix (public_url https://h/base), the challenge
        # names .../oauth-protected-resource/base/mcp: the proxy may pass it on unchanged.
        advertised = urlsplit(metadata_url(auth.public_url, route)).path
        paths = {inserted, advertised} | ({root} if len(served) == 1 else set())
        for path in sorted(paths):
            app.router.add_route("*", path, front.routed(_serve_document(document)))


def _serve_document(document: dict[str, Any]) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def serve(request: web.Request) -> web.Response:
        return web.json_response(document, headers={"Access-Control-Allow-Origin": "*"})

    return serve
