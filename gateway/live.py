"""A call held by this replica, and the pure builders around it.

`LiveCall` ties a `CallMachine` to the upstream session and stream it owns. The
functions turn a call into what leaves the process when it suspends: the store
record, the sealed `requestState`, the `input_required` result.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from gateway.config import REPLAY, UpstreamConfig
from gateway.protocol import state
from gateway.protocol.call import CallMachine, RoundContext
from gateway.protocol.inbound import SERVER_INFO_KEY, FrontRequest
from gateway.store.base import PARKED, SuspendedCall
from gateway.upstream.pool import SessionPool
from gateway.upstream.session import Inbox, LegacySession, StreamCursor


@dataclass(eq=False)
class LiveCall:
    """A call whose upstream stream lives in this process."""

    machine: CallMachine
    upstream: UpstreamConfig
    pool: SessionPool
    session: LegacySession
    inbox: Inbox
    cursor: StreamCursor
    principal: str
    digest: str
    target: str | None
    stateless: bool = False
    pump: asyncio.Task[None] | None = None
    started: float = field(default_factory=time.monotonic)
    expiry: asyncio.Task[None] | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def id(self) -> str:
        return self.machine.call_id


def parked_record(call: LiveCall, owner: str, issued: int, deadline: int) -> SuspendedCall:
    """The store record of a call suspending now, owned by replica `owner`."""
    machine = call.machine
    return SuspendedCall(
        call_id=call.id,
        round=machine.round,
        status=PARKED,
        owner=owner,
        upstream=call.upstream.name,
        method=machine.method,
        target=call.target,
        principal=call.principal,
        digest=call.digest,
        upstream_request_id=machine.upstream_id,
        session_id=call.session.id,
        protocol_version=call.session.version.value,
        caps=call.session.caps.key,
        last_event_id=call.cursor.last_id,
        pending=[p.to_record() for p in machine.pending.values()],
        journal=list(machine.journal),
        deadline_ms=deadline,
        created_ms=issued,
    )


def sealed_state(
    codec: state.StateCodec, call: LiveCall, audience: str, issued: int, deadline: int, *, mode: str
) -> str:
    """The `requestState` naming this round; replay mode carries the journal inside."""
    return state.seal_claims(
        codec,
        state.Claims(
            call=call.id,
            round=call.machine.round,
            principal=call.principal,
            digest=call.digest,
            audience=audience,
            issued_ms=issued,
            expires_ms=deadline,
            mode=mode,
            journal=list(call.machine.journal) if mode == REPLAY else [],
        ),
    )


def input_required_result(call: LiveCall, token: str) -> dict[str, Any]:
    result: dict[str, Any] = {
        "resultType": "input_required",
        "inputRequests": call.machine.input_required(),
        "requestState": token,
    }
    info = server_info(call)
    if info is not None:
        result["_meta"] = {SERVER_INFO_KEY: info}
    return result


def server_info(call: LiveCall) -> dict[str, Any] | None:
    info = call.session.info or call.pool.info
    return info.server_info if info is not None else None


def round_context(front: FrontRequest) -> RoundContext:
    envelope = front.envelope
    return RoundContext(
        caps=envelope.capabilities,
        progress_token=envelope.progress_token,
        log_level=envelope.log_level,
    )
