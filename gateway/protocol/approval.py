"""A person's approval of a tool call, asked by the gateway itself before the call
reaches the server, sans-IO: which calls need one, the question, what an answer says, and
the sealed state an approval round travels in.

Which calls: an upstream's `approval` (`none`, `destructive`, `all`) and a tool's own
(`required`, `none`: it wins). `destructive` reads the tool's annotations as the spec
defines them: a tool is asked for unless it says `readOnlyHint: true`, or says
`destructiveHint: false` (a hint the spec defaults to true, and reads only of a tool that
is not read-only). A tool the server does not list is asked for: nothing says it is safe.

The question is a form elicitation under the reserved key `gateway.approval` (`KEY`): its
message names the tool as the client knows it, the upstream and a short rendering of the
arguments; its one boolean field is `approve`. Approved is an `accept` whose `approve` is
`true`; a `decline`, a `cancel` or `false` is not.

A 2026 client answers in a retry, so the round's state travels in `requestState`, sealed by
the gateway's keys under a prefix of its own (`ap1.`: it never opens as a call's state nor a
call's as it): who may answer (`principal`), the request it approves (`digest`: method,
tool and arguments, as a call's state binds them), the deployment and route
(`audience`), until when, and a random `approval` id, which the store lets be used once.
The claims carry their version (`formats.Kind.APPROVAL_STATE`).

Pure: no I/O, no clock (the time is handed in).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict, dataclass
from typing import Any

from gateway.errors import InvalidRequestState
from gateway.protocol import formats, jsonrpc
from gateway.protocol.formats import Kind
from gateway.protocol.state import StateCodec, check_binding

#: The `inputRequests` key of the gateway's own question (`gateway.` keys are the gateway's).
KEY = "gateway.approval"
#: The sealed state's prefix: a requestState that starts so is an approval round's.
PREFIX = "ap1."
#: The question's one field.
FIELD = "approve"
#: How much of the arguments the question shows (the client holds them all).
ARGUMENTS_SHOWN = 400

NONE, DESTRUCTIVE, ALL = "none", "destructive", "all"  # an upstream's `approval`
REQUIRED = "required"  # a tool's own `approval` (or `none`)


def required(upstream_policy: str, tool_policy: str | None, tool: dict[str, Any] | None) -> bool:
    """Whether a call of `tool` (its entry in the server's `tools/list`; None when the
    server does not list it) needs a person's approval."""
    if tool_policy is not None:
        return tool_policy == REQUIRED
    if upstream_policy == ALL:
        return True
    if upstream_policy != DESTRUCTIVE:
        return False
    annotations = tool.get("annotations") if tool is not None else None
    if not isinstance(annotations, dict):
        return True  # the spec's defaults: not read-only, destructive
    if annotations.get("readOnlyHint") is True:
        return False
    return annotations.get("destructiveHint") is not False


def new_id() -> str:
    """A fresh approval's id: random, used once."""
    return secrets.token_urlsafe(16)


def shown_arguments(arguments: Any) -> str:
    """The arguments as the question shows them: compact JSON, cut to `ARGUMENTS_SHOWN`."""
    text = json.dumps(
        arguments if arguments is not None else {},
        ensure_ascii=False,
        sort_keys=True,
        separators=(", ", ": "),
    )
    if len(text) > ARGUMENTS_SHOWN:
        text = text[: ARGUMENTS_SHOWN - 1] + "…"
    return text


def question(tool: str, upstream: str, arguments: Any) -> dict[str, Any]:
    """The `elicitation/create` request asking a person to approve a call of `tool` (as
    the client knows it) on `upstream` with `arguments`."""
    message = (
        f"Approve the call of the tool {tool!r} on {upstream!r}? "
        f"Arguments: {shown_arguments(arguments)}"
    )
    schema = {
        "type": "object",
        "properties": {
            FIELD: {
                "type": "boolean",
                "title": "Approve",
                "description": f"Run {tool} with these arguments",
            }
        },
        "required": [FIELD],
    }
    return {
        "method": "elicitation/create",
        "params": {"mode": "form", "message": message, "requestedSchema": schema},
    }


def approved(answer: Any) -> bool:
    """Whether an elicitation's answer (an ElicitResult) approves: accepted with `approve`
    true. Anything else is not an approval: a decline, a cancel, `false`, a malformed one."""
    if not isinstance(answer, dict) or answer.get("action") != "accept":
        return False
    content = answer.get("content")
    return isinstance(content, dict) and content.get(FIELD) is True


def declined(tool: str, answer: Any) -> dict[str, Any]:
    """The tool result a call that was not approved ends with (`isError`: the server was
    never called)."""
    action = answer.get("action") if isinstance(answer, dict) else None
    how = {"decline": "declined", "cancel": "cancelled"}.get(str(action), "did not approve")
    text = f"The call of {tool!r} was not run: the person asked to approve it {how} it."
    return {"content": [{"type": "text", "text": text}], "isError": True}


#: The version of the claims this release seals.
CLAIMS_VERSION = formats.written(Kind.APPROVAL_STATE, formats.LEVEL)


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalClaims:
    """What an approval round's sealed state asserts."""

    approval: str  # its id: one answer is taken for it, fleet-wide
    principal: str  # who may answer
    digest: str  # the request approved: method, the tool's own name, arguments
    audience: str  # which deployment and route asked
    upstream: str
    tool: str  # the server's own name
    definition: str  # the tool's definition's fingerprint when asked ("" unknown)
    issued_ms: int
    expires_ms: int

    def seal(self, codec: StateCodec, version: int = CLAIMS_VERSION) -> str:
        claims = formats.stamped(Kind.APPROVAL_STATE, asdict(self), version)
        return codec.seal(jsonrpc.dumps(claims))


_FIELDS: dict[str, type] = {
    "approval": str,
    "principal": str,
    "digest": str,
    "audience": str,
    "upstream": str,
    "tool": str,
    "definition": str,
    "issued_ms": int,
    "expires_ms": int,
}


def is_approval_state(token: Any) -> bool:
    """Whether a `requestState` is an approval round's (by its prefix; opening it decides
    whether it is genuine)."""
    return isinstance(token, str) and token.startswith(PREFIX)


def open_claims(
    codec: StateCodec,
    token: str,
    *,
    now_ms: int,
    principal: str,
    digest: str,
    audience: str,
) -> ApprovalClaims:
    """Unseal an approval round's state and check every binding, fail-closed.

    Raises:
        InvalidRequestState: with the reason (log only) of the first failed check.
    """
    payload = codec.unseal(token)
    try:
        data = jsonrpc.loads(payload)
        _, data = formats.unstamped(Kind.APPROVAL_STATE, data)
    except (ValueError, RecursionError, TypeError, AttributeError) as exc:
        raise InvalidRequestState("approval payload") from exc
    if set(data) != set(_FIELDS):
        raise InvalidRequestState("approval payload shape")
    for name, kind in _FIELDS.items():
        if not isinstance(data[name], kind) or isinstance(data[name], bool):
            raise InvalidRequestState(f"approval claim {name} has the wrong type")
    claims = ApprovalClaims(**data)
    check_binding(claims, now_ms=now_ms, principal=principal, digest=digest, audience=audience)
    return claims
