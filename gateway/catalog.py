"""The catalog: what clients see of each legacy server's lists, served from what the
server last said, and which names they may reach.

Per upstream, the four lists (`tools/list`, `prompts/list`, `resources/list`,
`resources/templates/list`, every page) are fetched from the server at most every
`catalog.ttl_s` and as soon as a `list_changed` for that list is heard (here, or by
another replica: `gateway.fleet.changes`), on the gateway's own session (or, with
`catalog.per_caller`, on the caller's, and kept per caller). Both eras are served from
it, with the exposure rules applied (`gateway.protocol.exposure`). A call to a hidden
name is answered, without reaching the server, with what the server answers a name it
does not know (asked of it once, with a name of nothing of its, and kept), so a client
cannot tell hidden from absent; a name the rules do not hide goes to the server as before.
With `ttl_s: 0` every list is asked of the server as before.

Each tool seen is pinned (`gateway.store.pins`); a definition that differs from its
pin is `catalog_drift` in the log (once per definition seen, on every replica that sees
it) and counted; with `pinning: block` the tool is refused until an operator approves
what it became (`mrtr-gateway pins approve`).

A list request touches no store: pins are read and written when a list is fetched.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from gateway import logging as log_context
from gateway.aio import spawn
from gateway.audit.trail import OFF, Audit, who
from gateway.clock import Clock
from gateway.config import PINNING_BLOCK, PINNING_OFF, UpstreamConfig
from gateway.errors import InvalidParams, RpcError, StoreError, UpstreamError
from gateway.protocol import pins as pinning
from gateway.protocol import translate
from gateway.protocol.audit import Era, Refusal, RequestRefused
from gateway.protocol.capabilities import NO_CAPABILITIES, ClientCaps
from gateway.protocol.era import Lane
from gateway.protocol.methods import LISTS
from gateway.protocol.translate import CachePolicy
from gateway.seams import NO_SEAMS, Answered, RequestServed, Seams
from gateway.store.pins import PinStore
from gateway.upstream.port import UpstreamPool

log = structlog.get_logger("gateway.catalog")

#: The most pages of one list fetched (a server that pages without end is cut off here).
MAX_PAGES = 100

#: The names the server is asked for to learn what it answers an unknown one (each with
#: random letters after it).
PROBE = "mrtr-gateway-unknown-"


def _escaped(name: str) -> str:
    """`name` as it appears inside a JSON string."""
    return json.dumps(name)[1:-1]


#: What a request about one target is told when the name is hidden or absent.
UNKNOWN = {
    "tools/call": "Unknown tool: {}",
    "prompts/get": "Unknown prompt: {}",
    "resources/read": "Resource not found: {}",
}
#: The list that holds what a request is about.
LIST_OF = {"tools/call": "tools/list", "prompts/get": "prompts/list"}


class UnknownTarget(InvalidParams):
    """A tool, prompt or resource hidden by the exposure rules, or absent from the list:
    the answer an unknown name gets (spec: -32602; a resource's with its URI in `data`,
    as 2026-07-28 asks of a resource not found)."""

    def __init__(self, method: str, name: str) -> None:
        super().__init__(
            UNKNOWN[method].format(name), {"uri": name} if method == "resources/read" else None
        )


class ToolNotApproved(RpcError):
    """A tool whose definition changed since it was pinned, under `pinning: block`."""

    code = -32603
    http_status = 403
    reason = "tool_not_approved"
    public_detail = True

    def __init__(self, tool: str, drift: pinning.Drift) -> None:
        super().__init__(
            f"The tool {tool} changed since it was approved ({', '.join(drift.changed)}); "
            "an operator must approve it before it can be called"
        )
        self.data = {"reason": self.reason, "tool": tool, "changed": list(drift.changed)}


@dataclass(slots=True)
class _Listed:
    """One list as the server last gave it (every page), and when."""

    result: dict[str, Any]
    at: float


class UpstreamCatalog:
    def __init__(
        self,
        upstream: UpstreamConfig,
        pool: UpstreamPool,
        pins: PinStore,
        clock: Clock,
        on_drift: Callable[[str, pinning.Drift], None] | None = None,
    ) -> None:
        self.upstream = upstream
        self.pool = pool
        self.pins = pins
        self.clock = clock
        self.on_drift = on_drift
        self.ttl_s = upstream.catalog.ttl_s
        self._lists: dict[tuple[str, str | None], _Listed] = {}
        self._fetching: dict[tuple[str, str | None], asyncio.Future[_Listed]] = {}
        self._drifted: dict[str, pinning.Drift] = {}  # by own tool name
        # What the server answers a name it does not know, per method: (the name asked, its
        # reply), the answer a hidden name gets.
        self._unknown: dict[str, tuple[str, dict[str, Any]]] = {}
        self._told: set[tuple[str, str]] = set()  # (tool, fingerprint seen) logged here

    @property
    def caching(self) -> bool:
        return self.ttl_s > 0

    @property
    def judges_calls(self) -> bool:
        """Whether a call may be refused or renamed here: some name hidden or shown under
        another, or a drifted tool blocked. Else every call goes on as it came."""
        return self.upstream.exposure.hides_any() or self.upstream.catalog.pinning == PINNING_BLOCK

    def _key(self, method: str, principal: str) -> tuple[str, str | None]:
        return method, principal if self.upstream.catalog.per_caller else None

    # -- lists ------------------------------------------------------------------------------

    async def listed(
        self, method: str, caps: ClientCaps, principal: str, params: dict[str, Any]
    ) -> tuple[dict[str, Any], CachePolicy]:
        """The `method` list's result as the server gave it (every page; the rules are
        the `listing` seam's to apply), and the cache hints it gets.

        Raises:
            RpcError: the upstream's error, translated; UpstreamError.
        """
        if not self.caching:  # as before: the client's page, asked of the server now
            return await self._ask(method, caps, principal, params), self.upstream.cache
        listed = await self._fresh(method, caps, principal)
        if params.get("cursor") is not None:
            raise InvalidParams("Invalid cursor: the catalog serves each list in one page")
        left_ms = max(0, round((listed.at + self.ttl_s - self.clock.monotonic()) * 1000))
        scope = "private" if self.upstream.catalog.per_caller else self.upstream.cache.scope
        return listed.result, CachePolicy(ttl_ms=left_ms, scope=scope)

    async def tool(self, own: str, principal: str) -> dict[str, Any] | None:
        """The entry of the tool the server calls `own` in its latest `tools/list` (fetched
        now when the catalog serves no list or its list is stale); None when the server
        does not list it.

        Raises:
            RpcError: the upstream's error, translated; UpstreamError.
        """
        listed = await self._fresh("tools/list", NO_CAPABILITIES, principal)
        for entry in listed.result.get("tools", ()):
            if isinstance(entry, dict) and entry.get("name") == own:
                return entry
        return None

    def last_listed(self, method: str, principal: str) -> dict[str, Any] | None:
        """The `method` list as the server last gave it, however old (None: never had):
        what an upstream that cannot be asked now is known to serve."""
        listed = self._lists.get(self._key(method, principal))
        return None if listed is None else listed.result

    def changed(self, method: str) -> None:
        """The server's `notifications/<list>/list_changed` (heard anywhere): its list is
        fetched again when next asked."""
        for key in [k for k in self._lists if _changes(k[0]) == method]:
            del self._lists[key]

    async def _fresh(self, method: str, caps: ClientCaps, principal: str) -> _Listed:
        key = self._key(method, principal)
        listed = self._lists.get(key)
        if listed is not None and self.clock.monotonic() - listed.at < self.ttl_s:
            return listed
        fetching = self._fetching.get(key)
        if fetching is None:  # one fetch for everyone asking meanwhile
            fetching = spawn(self._fetch(method, caps, principal), name=f"catalog-{method}")
            self._fetching[key] = fetching
            fetching.add_done_callback(lambda _: self._fetching.pop(key, None))
        return await asyncio.shield(fetching)

    async def _fetch(self, method: str, caps: ClientCaps, principal: str) -> _Listed:
        started = self.clock.monotonic()
        member = LISTS[method].member
        entries: list[Any] = []
        params: dict[str, Any] = {}
        first: dict[str, Any] = {}
        for _ in range(MAX_PAGES):
            page = await self._ask(method, caps, principal, params)
            first = first or page
            got = page.get(member)
            entries.extend(got if isinstance(got, list) else [])
            cursor = page.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                break
            params = {"cursor": cursor}
        else:
            log.warning(
                "catalog_list_cut", upstream=self.upstream.name, method=method, pages=MAX_PAGES
            )
        result = {k: v for k, v in first.items() if k != "nextCursor"}
        result[member] = entries
        if method == "tools/list":
            await self._pin(entries)
        listed = _Listed(result, started)
        self._lists[self._key(method, principal)] = listed
        return listed

    async def _ask(
        self, method: str, caps: ClientCaps, principal: str, params: dict[str, Any]
    ) -> dict[str, Any]:
        """One page of a list from the server (on the gateway's own session unless lists
        are per caller). Raises: RpcError, UpstreamError."""
        who = principal if self.upstream.catalog.per_caller else None
        reply = await self.pool.request(caps, who, method, params)
        error = reply.get("error")
        if isinstance(error, dict):
            raise translate.translate_error(error)
        result = reply.get("result")
        if not isinstance(result, dict):
            raise UpstreamError(f"upstream answered {method} without a result")
        return result

    # -- names ------------------------------------------------------------------------------

    async def admit(self, method: str, name: str, caps: ClientCaps, principal: str) -> str:
        """The server's own name (or URI) for what a client asks for by `name`.

        Raises:
            Answered: hidden by the rules: the answer the server gives a name it does not
                know (`unknown`), so that hidden and absent cannot be told apart.
            RpcError: likewise, where the server's answer to an unknown name is an error.
            ToolNotApproved: a tool that drifted, under `pinning: block`.
            UpstreamError: the list (under block) or the server's answer could not be had.
        """
        own = self.upstream.exposure.upstream_name(method, name)
        if own is None:
            await self.unknown(method, name)
        assert own is not None
        if method == "tools/call" and self.upstream.catalog.pinning == PINNING_BLOCK:
            if self.caching:  # what drifted is known as of the list's last fetch
                await self._fresh("tools/list", caps, principal)
            drift = self._drifted.get(own)
            if drift is not None:
                raise ToolNotApproved(self.upstream.exposure.exposed_name(own), drift)
        return own

    async def unknown(self, method: str, name: str) -> None:
        """Answer for `name` what the server answers a name it does not know: asked of it
        once (a name of no tool, prompt or resource of its), and kept.

        Raises:
            Answered: the server answers an unknown name with a result (a tool's error).
            RpcError: it answers with an error (translated as any upstream error is).
        """
        reply = self._unknown.get(method)
        if reply is None:
            probe = f"{PROBE}{secrets.token_hex(8)}"
            member = "uri" if method == "resources/read" else "name"
            params: dict[str, Any] = {member: probe if member == "name" else f"{probe}://x"}
            if method == "tools/call":
                params["arguments"] = {}
            asked = await self.pool.request(NO_CAPABILITIES, None, method, params)
            reply = self._unknown[method] = (params[member], asked)
        probe, asked = reply
        said = json.loads(json.dumps(asked).replace(json.dumps(probe)[1:-1], _escaped(name)))
        error = said.get("error")
        if isinstance(error, dict):
            raise translate.translate_error(error)
        result = said.get("result")
        raise Answered(result if isinstance(result, dict) else {})

    def own_ref(self, ref: Any) -> Any:
        """A completion's reference as the server knows it: a prompt by its own name (a
        prefixed name without its prefix), a resource (template) by its URI; either
        must be shown.

        Raises:
            UnknownTarget
        """
        if not isinstance(ref, dict):
            return ref
        exposure = self.upstream.exposure
        if ref.get("type") == "ref/prompt" and isinstance(ref.get("name"), str):
            own = exposure.upstream_name("prompts/get", ref["name"])
            if own is None:
                raise UnknownTarget("prompts/get", ref["name"])
            return ref if own == ref["name"] else {**ref, "name": own}
        if ref.get("type") == "ref/resource" and isinstance(ref.get("uri"), str):
            if not exposure.shows("resources/read", ref["uri"]):
                raise UnknownTarget("resources/read", ref["uri"])
        return ref

    # -- pins -------------------------------------------------------------------------------

    async def _pin(self, tools: list[Any]) -> None:
        """Pin what is new, and say what drifted (a pin that cannot be read keeps the
        last verdict: a tool blocked stays blocked)."""
        if self.upstream.catalog.pinning == PINNING_OFF:
            return
        definitions = {
            t["name"]: pinning.definition(t)
            for t in tools
            if isinstance(t, dict) and isinstance(t.get("name"), str)
        }
        try:
            pins = await self.pins.pin(self.upstream.name, definitions, self.clock.wall_ms())
        except StoreError as exc:
            log.warning("catalog_pins_unreadable", upstream=self.upstream.name, error=str(exc))
            return
        drifted = {}
        for name, pin in pins.items():
            drift = pinning.drift(name, pin.definition, definitions[name])
            if drift is None:
                continue
            drifted[name] = drift
            if (name, drift.seen) not in self._told:
                self._told.add((name, drift.seen))
                self._tell(drift)
        self._drifted = drifted

    def _tell(self, drift: pinning.Drift) -> None:
        log.warning(
            "catalog_drift",
            upstream=self.upstream.name,
            tool=drift.tool,
            severity=drift.severity,
            changed=list(drift.changed),
            weakened=list(drift.weakened),
            pinned=drift.pinned,
            seen=drift.seen,
            blocked=self.upstream.catalog.pinning == PINNING_BLOCK,
        )
        if self.on_drift is not None:
            self.on_drift(self.upstream.name, drift)


def _changes(method: str) -> str:
    """The notification that says a list changed."""
    return "notifications/" + method.split("/", 1)[0] + "/list_changed"


class Catalog:
    """Every upstream's catalog on this replica, and the seams it serves requests of both
    eras through (`gateway.seams`): `lists` (a list from the catalog), `listing` (a list
    as clients see it), `calling` (a name admitted, or refused as unknown)."""

    def __init__(self, catalogs: Mapping[str, UpstreamCatalog], audit: Audit = OFF) -> None:
        """`audit`: the trail, told of each hidden or blocked name a client asked for."""
        self._catalogs = dict(catalogs)
        self.audit = audit

    def __getitem__(self, upstream: str) -> UpstreamCatalog:
        return self._catalogs[upstream]

    def changed(self, upstream: str, method: str) -> None:
        """A list change of `upstream`'s, heard here or relayed from another replica."""
        catalog = self._catalogs.get(upstream)
        if catalog is not None:
            catalog.changed(method)

    def seams(self, others: Seams = NO_SEAMS) -> Seams:
        """`others` with the catalog's seams first (a hidden name is refused before any
        other capability sees the call; a list is shown as the rules say before another
        sees it). Where no upstream's rules judge calls, the `calling` seam is not
        plugged: a call would pass it unchanged, for a few coroutines per call."""
        judging = any(catalog.judges_calls for catalog in self._catalogs.values())
        return dataclasses.replace(
            others,
            lists=self.lists if others.lists is None else others.lists,
            listing=(self.listing, *others.listing),
            calling=(self.calling, *others.calling) if judging else others.calling,
        )

    async def lists(
        self, served: RequestServed, method: str, params: dict[str, Any]
    ) -> tuple[dict[str, Any], CachePolicy] | None:
        catalog = self._catalogs.get(served.upstream)
        if catalog is None or not catalog.caching:
            return None  # asked upstream, the client's page, as before
        return await catalog.listed(method, NO_CAPABILITIES, served.caller.principal, params)

    def listing(self, served: RequestServed, method: str, result: dict[str, Any]) -> dict[str, Any]:
        catalog = self._catalogs.get(served.upstream)
        return result if catalog is None else catalog.upstream.exposure.view(method, result)

    async def calling(self, served: RequestServed, params: dict[str, Any]) -> dict[str, Any]:
        """The params a call goes on with: the server's own name in them.

        Raises:
            UnknownTarget, ToolNotApproved
        """
        catalog = self._catalogs.get(served.upstream)
        if catalog is None or not catalog.judges_calls:
            return params
        method = served.method
        if method == "completion/complete":
            ref = params.get("ref")
            own_ref = catalog.own_ref(ref)
            return params if own_ref is ref else {**params, "ref": own_ref}
        member = "uri" if method == "resources/read" else "name"
        name = params.get(member)
        if not isinstance(name, str):
            return params  # malformed: the request's own checks answer it
        try:
            own = await catalog.admit(method, name, NO_CAPABILITIES, served.caller.principal)
        except (Answered, RpcError) as exc:
            if isinstance(exc, ToolNotApproved):
                self._refused(served, Refusal.TOOL_BLOCKED, exc.message, name, exc.http_status)
            elif catalog.upstream.exposure.upstream_name(method, name) is None:
                self._refused(served, Refusal.TOOL_HIDDEN, "hidden by the exposure rules", name)
            raise
        return params if own == name else {**params, member: own}

    def _refused(
        self, served: RequestServed, refusal: Refusal, reason: str, name: str, status: int = 400
    ) -> None:
        """A refusal of the catalog's in the audit trail (the client gets the answer an
        unknown name gets, or the tool's refusal)."""
        if not self.audit.on:
            return
        caller = served.caller
        self.audit.emit(
            RequestRefused(
                principal=who(caller.principal, caller.log_id, caller.identity),
                request_id=log_context.bound("request_id"),
                refusal=refusal,
                reason=reason,
                era=Era.MODERN if served.lane is Lane.MODERN else Era.LEGACY,
                upstream=served.upstream,
                method=served.method,
                target=name,
                status=status,
                session=served.session,
            )
        )
