"""The gateway asks first: a person approves a tool call before the legacy server is
touched (`upstreams[].approval`, a tool's own `approval`; `gateway.protocol.approval`
says which calls, the question and what an answer says).

For a 2026 client, the approval is a round of the gateway's own, in front of the call
core (`gateway.calls.bridge.Bridge.handle` asks `Approvals.admit`, so a task's rounds pass
it too): the first answer to such a call is `input_required` with one question under
`gateway.approval`, and the round's sealed state (`ap1.`); nothing goes upstream. The
retry that answers it is checked (the caller, the tool and its arguments the state was
minted for; its approval used once, fleet-wide, in the store) and then either ends the
call with a tool result saying it was declined, or goes on as the call's first request:
exactly once upstream, its own questions as ordinary rounds.

For a 2025 client on the legacy lane, the `calling` seam (`Approvals.calling`) asks the
client itself: an `elicitation/create` of the gateway's own on the call's response stream
(`gateway.seams.RequestServed.asker`), awaited wherever its answer lands in the fleet.

With `approval_ttl_s`, an approval covers the same caller's next calls of the same tool,
as long as its definition (`gateway.protocol.pins.fingerprint`) is the one approved.
Every approval asked and answered is an audit event (`approval.asked`, `approval.answered`).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any

import structlog

from gateway import logging as log_context
from gateway.audit.trail import OFF, Audit, acting
from gateway.catalog import Catalog
from gateway.clock import Clock
from gateway.config import APPROVAL_NONE, APPROVAL_REQUIRED, UpstreamConfig
from gateway.errors import (
    ApprovalsHeldBack,
    InvalidParams,
    InvalidRequestState,
    MissingClientCapability,
    RpcError,
    StoreError,
    UpstreamError,
)
from gateway.observability import Metrics
from gateway.protocol import approval, inputs, pins, state, translate
from gateway.protocol.audit import ApprovalAnswered, ApprovalAsked, Era, answer_of, question_of
from gateway.protocol.era import Lane
from gateway.protocol.inbound import SERVER_INFO_KEY, FrontRequest
from gateway.protocol.state import StateCodec
from gateway.seams import Answered, RequestServed, Seams
from gateway.store.approvals import ApprovalStore
from gateway.upstream.port import UpstreamPool

log = structlog.get_logger("gateway.approvals")

#: The elicitation capability the question needs of a client.
ELICITATION: dict[str, Any] = {"elicitation": {"form": {}}}


class Approvals:
    def __init__(
        self,
        *,
        catalog: Catalog,
        upstreams: Mapping[str, UpstreamConfig],
        store: ApprovalStore,
        codec: StateCodec,
        audience: str,
        answer_within_s: float,
        clock: Clock,
        pools: Mapping[str, UpstreamPool],
        metrics: Metrics,
        audit: Audit = OFF,
    ) -> None:
        """`codec`: the gateway's sealing keys under `approval.PREFIX`; `answer_within_s`:
        how long an approval's question may wait for its answer (as a parked call's)."""
        self.catalog = catalog
        self.upstreams = upstreams
        #: The upstreams some call of which may need an approval (worked out once).
        self.asking = frozenset(u.name for u in upstreams.values() if self.asks(u))
        self.store = store
        self.codec = codec
        self.audience = audience
        self.answer_within_s = answer_within_s
        self.clock = clock
        self.pools = pools
        self.counted = metrics.approvals
        self.audit = audit

    def seams(self, others: Seams) -> Seams:
        """`others` with the approvals' `calling` seam last (a name the catalog hides is
        refused before anyone is asked to approve it); none where no upstream asks."""
        if not self.asking:
            return others
        return dataclasses.replace(others, calling=(*others.calling, self.calling))

    # -- which calls --------------------------------------------------------------------

    @staticmethod
    def asks(upstream: UpstreamConfig) -> bool:
        """Whether some call of `upstream`'s may need an approval."""
        return upstream.approval != APPROVAL_NONE or any(
            t.approval == APPROVAL_REQUIRED for t in upstream.tools.values()
        )

    async def _needed(
        self, upstream: UpstreamConfig, tool: str, principal: str
    ) -> tuple[bool, str]:
        """Whether a call of `tool` (the server's own name) needs asking now, and the
        fingerprint of its definition where an approval of it is remembered ("" else)."""
        policy = upstream.target("tools/call", tool).approval
        entry = None
        if policy is None and upstream.approval == approval.DESTRUCTIVE:
            entry = await self._listed(upstream, tool, principal)  # its annotations decide
        if not approval.required(upstream.approval, policy, entry):
            return False, ""
        if not upstream.approval_ttl_s:
            return True, ""
        if entry is None:
            entry = await self._listed(upstream, tool, principal)
        if entry is None:
            return True, ""  # no definition to remember an approval of: asked every time
        definition = pins.fingerprint(entry)
        key = _remembered_key(principal, upstream.name, tool, definition)
        try:
            if await self.store.remembered(key):
                log.info("approval_remembered", tool=tool)
                return False, definition
        except StoreError as exc:  # asked again: the safe side
            log.warning("approval_store_unreadable", error=str(exc))
        return True, definition

    async def _listed(
        self, upstream: UpstreamConfig, tool: str, principal: str
    ) -> dict[str, Any] | None:
        """The tool's entry as the server lists it; None when it does not, or the list
        cannot be had (the call is then asked for: nothing says it is safe)."""
        try:
            return await self.catalog[upstream.name].tool(tool, principal)
        except (RpcError, UpstreamError) as exc:
            log.warning("approval_list_unavailable", tool=tool, error=str(exc))
            return None

    # -- 2026 clients: a round of the gateway's own -------------------------------------

    async def admit(
        self, upstream: UpstreamConfig, front: FrontRequest, principal: str
    ) -> FrontRequest | dict[str, Any]:
        """What the call core serves of `front`: the request itself (no approval needed,
        or approved: without the approval's state and answer), or the 2026 result to
        answer at once (the approval's question, or a declined call's result).

        Raises:
            InvalidRequestState: an approval's state that does not open for this caller
                and request, or that was used already.
            InvalidParams: the retry lacks the answer, or it has the wrong shape.
            MissingClientCapability: the client declared no form elicitation.
        """
        if front.method != "tools/call":
            return front
        token = front.params.get("requestState")
        if isinstance(token, str) and approval.is_approval_state(token):
            return await self._answered(upstream, front, principal, token)
        if token is not None or upstream.name not in self.asking or front.target is None:
            return front  # a round of a call under way was approved when it began
        needed, definition = await self._needed(upstream, front.target, principal)
        if not needed:
            return front
        return self._ask(upstream, front, principal, definition)

    def _ask(
        self, upstream: UpstreamConfig, front: FrontRequest, principal: str, definition: str
    ) -> dict[str, Any]:
        tool = front.target
        assert tool is not None
        shown = upstream.exposure.exposed_name(tool)
        if not front.envelope.capabilities.elicitation_form:
            raise MissingClientCapability(
                ELICITATION,
                f"The tool {shown!r} needs a person's approval before it runs: the client "
                "must declare the elicitation capability (form mode) to be asked",
            )
        now = self.clock.wall_ms()
        arguments = front.params.get("arguments")
        claims = approval.ApprovalClaims(
            approval=approval.new_id(),
            principal=principal,
            digest=state.request_digest(front.method, tool, arguments),
            audience=self._audience(upstream),
            upstream=upstream.name,
            tool=tool,
            definition=definition,
            issued_ms=now,
            expires_ms=now + round(self.answer_within_s * 1000),
        )
        asked = approval.question(shown, upstream.name, arguments)
        self._asked(claims, asked, Era.MODERN)
        log.info("approval_asked", tool=tool, approval=claims.approval)
        result: dict[str, Any] = {
            "resultType": "input_required",
            "inputRequests": {approval.KEY: asked},
            "requestState": claims.seal(self.codec),
        }
        info = self._server_info(upstream)
        if info is not None:
            result["_meta"] = {SERVER_INFO_KEY: info}
        return result

    async def _answered(
        self, upstream: UpstreamConfig, front: FrontRequest, principal: str, token: str
    ) -> FrontRequest | dict[str, Any]:
        tool = front.target
        claims = approval.open_claims(
            self.codec,
            token,
            now_ms=self.clock.wall_ms(),
            principal=principal,
            digest=state.request_digest(front.method, tool, front.params.get("arguments")),
            audience=self._audience(upstream),
        )
        if claims.upstream != upstream.name:
            raise InvalidRequestState("another upstream's approval")
        responses = front.params.get("inputResponses")
        answer = responses.get(approval.KEY) if isinstance(responses, dict) else None
        if answer is None:
            raise InvalidParams(
                f"inputResponses[{approval.KEY!r}] is required: the answer to the approval "
                "question this requestState carries"
            )
        inputs.check_shape(approval.KEY, "elicitation/create", answer)
        if not await self.store.use(claims.approval, claims.expires_ms):
            raise InvalidRequestState("approval used already")
        yes = approval.approved(answer)
        self._answer(claims, answer, yes, Era.MODERN)
        if not yes:
            return self._declined(upstream, claims.tool, answer)
        await self._approved(upstream, claims, principal)
        params = {k: v for k, v in front.params.items() if k not in _ROUND_MEMBERS}
        return dataclasses.replace(front, params=params)

    async def _approved(
        self, upstream: UpstreamConfig, claims: approval.ApprovalClaims, principal: str
    ) -> None:
        log.info("approval_granted", tool=claims.tool, approval=claims.approval)
        if not upstream.approval_ttl_s or not claims.definition:
            return
        key = _remembered_key(principal, upstream.name, claims.tool, claims.definition)
        try:
            await self.store.remember(key, upstream.approval_ttl_s)
        except StoreError as exc:  # the next call is asked again
            log.warning("approval_not_remembered", error=str(exc))

    def _declined(self, upstream: UpstreamConfig, tool: str, answer: Any) -> dict[str, Any]:
        log.info("approval_declined", tool=tool)
        result = approval.declined(upstream.exposure.exposed_name(tool), answer)
        return translate.decorate_result(
            "tools/call", result, server_info=self._server_info(upstream), cache=upstream.cache
        )

    # -- 2025 clients: the calling seam -------------------------------------------------

    async def calling(self, served: RequestServed, params: dict[str, Any]) -> dict[str, Any]:
        """A 2025 client's call, once approved (its params unchanged). A 2026 client's
        calls pass: the call core asks them (`admit`).

        Raises:
            Answered: not approved: the declined call's result.
            MissingClientCapability: the client declared no form elicitation.
            ApprovalsHeldBack: a replica of the previous release lives (no client is asked).
            Unanswered: the client did not answer (`gateway.legacy_clients.asking`).
        """
        if served.lane is not _LEGACY or served.method != "tools/call":
            return params
        upstream = self.upstreams.get(served.upstream)
        tool = params.get("name")
        if upstream is None or upstream.name not in self.asking or not isinstance(tool, str):
            return params
        principal = served.caller.principal
        needed, definition = await self._needed(upstream, tool, principal)
        if not needed:
            return params
        shown = upstream.exposure.exposed_name(tool)
        asker = served.asker
        if asker is None:
            raise ApprovalsHeldBack()  # a replica of the previous release lives
        declared = asker.declared("elicitation")
        if declared is False:
            raise MissingClientCapability(
                ELICITATION,
                f"The tool {shown!r} needs a person's approval before it runs: the client "
                "must declare the elicitation capability to be asked",
            )
        now = self.clock.wall_ms()
        claims = approval.ApprovalClaims(
            approval=approval.new_id(),
            principal=principal,
            digest="",
            audience=self.audience,
            upstream=upstream.name,
            tool=tool,
            definition=definition,
            issued_ms=now,
            expires_ms=now + round(self.answer_within_s * 1000),
        )
        asked = approval.question(shown, upstream.name, params.get("arguments"))
        self._asked(claims, asked, Era.LEGACY, served.session)
        log.info("approval_asked", tool=tool, approval=claims.approval)
        # A session whose id does not say what its client declared (minted while the fleet
        # wrote the previous release's format) is asked all the same: a client without
        # elicitation answers with an error, which is the missing capability's.
        reply = await asker.ask(asked["method"], asked["params"])
        answer = reply.get("result")
        yes = approval.approved(answer)
        error = "result" not in reply  # the client answered with an error: not approved
        self._answer(claims, answer, yes, Era.LEGACY, served.session, error=error)
        if error and declared is None:
            raise MissingClientCapability(
                ELICITATION,
                f"The tool {shown!r} needs a person's approval before it runs, and the client "
                "refused the question: it must declare the elicitation capability to be asked",
            )
        if not yes:
            raise Answered(self._declined(upstream, tool, answer))
        await self._approved(upstream, claims, principal)
        return params

    # -- what it says -------------------------------------------------------------------

    def _asked(
        self,
        claims: approval.ApprovalClaims,
        asked: dict[str, Any],
        era: Era,
        session: str | None = None,
    ) -> None:
        self.counted.labels(claims.upstream, "asked").inc()
        if not self.audit.on:
            return
        self.audit.emit(
            ApprovalAsked(
                principal=acting(),
                request_id=log_context.bound("request_id"),
                approval_id=claims.approval,
                era=era,
                upstream=claims.upstream,
                tool=claims.tool,
                session=session,
                question=question_of(approval.KEY, asked["method"], asked["params"]),
            )
        )

    def _answer(
        self,
        claims: approval.ApprovalClaims,
        answer: Any,
        yes: bool,
        era: Era,
        session: str | None = None,
        *,
        error: bool = False,
    ) -> None:
        self.counted.labels(claims.upstream, "approved" if yes else "declined").inc()
        if not self.audit.on:
            return
        self.audit.emit(
            ApprovalAnswered(
                principal=acting(),
                request_id=log_context.bound("request_id"),
                approval_id=claims.approval,
                era=era,
                upstream=claims.upstream,
                tool=claims.tool,
                session=session,
                answer=answer_of(approval.KEY, "elicitation/create", answer, error=error),
                approved=yes,
            )
        )

    def _audience(self, upstream: UpstreamConfig) -> str:
        """What an approval's state is bound to: the deployment and the route's upstream."""
        return f"{self.audience}|{upstream.name}"

    def _server_info(self, upstream: UpstreamConfig) -> dict[str, Any] | None:
        pool = self.pools.get(upstream.name)
        info = pool.info if pool is not None else None
        return info.server_info if info is not None else None


_LEGACY = Lane.LEGACY

#: What a retry carries for its round, left out of the call an approval lets through.
_ROUND_MEMBERS = frozenset({"requestState", "inputResponses"})


def _remembered_key(principal: str, upstream: str, tool: str, definition: str) -> str:
    """Where an approval is remembered: the caller, the upstream, the tool and the
    definition approved, hashed (no principal's key in the store's keys)."""
    material = state.canonical_json([principal, upstream, tool, definition])
    return hashlib.sha256(material.encode()).hexdigest()[:40]
