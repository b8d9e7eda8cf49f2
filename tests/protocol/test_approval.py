"""Which calls need a person's approval, the question, what an answer says, and the sealed
state of an approval round (every binding checked, fail-closed)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.errors import InvalidRequestState
from gateway.protocol import approval, formats, jsonrpc
from gateway.protocol.formats import Kind
from gateway.protocol.state import AesGcmKeyRing, Claims, request_digest, seal_claims

RING = AesGcmKeyRing.ephemeral()
CODEC = RING.with_prefix(approval.PREFIX)
NOW = 1_800_000_000_000


def tool(**annotations: Any) -> dict[str, Any]:
    return {"name": "t", "inputSchema": {"type": "object"}, "annotations": annotations}


@pytest.mark.parametrize(
    ("upstream", "own", "entry", "asked"),
    [
        ("none", None, tool(), False),
        ("all", None, tool(readOnlyHint=True), True),
        ("destructive", None, tool(readOnlyHint=True), False),
        ("destructive", None, tool(readOnlyHint=True, destructiveHint=True), False),
        ("destructive", None, tool(destructiveHint=False), False),
        ("destructive", None, tool(destructiveHint=True), True),
        ("destructive", None, tool(), True),  # the spec's defaults: may destroy
        ("destructive", None, {"name": "t"}, True),  # no annotations at all
        ("destructive", None, None, True),  # not listed: nothing says it is safe
        ("destructive", None, tool(readOnlyHint="yes"), True),  # not a boolean: not said
        ("none", "required", tool(readOnlyHint=True), True),  # the tool's own wins
        ("all", "none", tool(), False),
    ],
)
def test_which_calls_are_asked(
    upstream: str, own: str | None, entry: dict[str, Any] | None, asked: bool
) -> None:
    assert approval.required(upstream, own, entry) is asked


def test_the_question_names_the_tool_the_upstream_and_the_arguments_cut_short() -> None:
    asked = approval.question("wipe", "notes", {"id": "n-1", "zbody": "x" * 1000})
    params = asked["params"]
    assert asked["method"] == "elicitation/create" and params["mode"] == "form"
    assert "'wipe'" in params["message"] and "'notes'" in params["message"]
    assert '"id": "n-1"' in params["message"] and len(params["message"]) < 600
    schema = params["requestedSchema"]
    assert schema["properties"] == {"approve": schema["properties"]["approve"]}
    assert schema["properties"]["approve"]["type"] == "boolean"
    assert schema["required"] == ["approve"]


@pytest.mark.parametrize(
    ("answer", "yes"),
    [
        ({"action": "accept", "content": {"approve": True}}, True),
        ({"action": "accept", "content": {"approve": False}}, False),
        ({"action": "accept", "content": {"approve": "true"}}, False),
        ({"action": "accept"}, False),
        ({"action": "decline"}, False),
        ({"action": "cancel"}, False),
        (None, False),
        ("accept", False),
    ],
)
def test_only_an_accepted_true_approves(answer: Any, yes: bool) -> None:
    assert approval.approved(answer) is yes


def test_a_declined_call_ends_with_a_tool_error_saying_so() -> None:
    result = approval.declined("wipe", {"action": "decline"})
    assert result["isError"] is True and "declined" in result["content"][0]["text"]
    assert "cancelled" in approval.declined("wipe", {"action": "cancel"})["content"][0]["text"]


def claims(**changes: Any) -> approval.ApprovalClaims:
    values: dict[str, Any] = {
        "approval": "a-1",
        "principal": "alice",
        "digest": request_digest("tools/call", "wipe", {"id": 1}),
        "audience": "gw|notes",
        "upstream": "notes",
        "tool": "wipe",
        "definition": "",
        "issued_ms": NOW,
        "expires_ms": NOW + 60_000,
    }
    values.update(changes)
    return approval.ApprovalClaims(**values)


def opened(token: str, **changes: Any) -> approval.ApprovalClaims:
    binding: dict[str, Any] = {
        "now_ms": NOW + 1,
        "principal": "alice",
        "digest": request_digest("tools/call", "wipe", {"id": 1}),
        "audience": "gw|notes",
    }
    binding.update(changes)
    return approval.open_claims(CODEC, token, **binding)


def test_a_sealed_approval_opens_for_its_caller_and_request_only() -> None:
    token = claims().seal(CODEC)
    assert token.startswith("ap1.") and approval.is_approval_state(token)
    assert opened(token) == claims()
    for changes in (
        {"principal": "bob"},
        {"digest": request_digest("tools/call", "wipe", {"id": 2})},
        {"audience": "gw|tickets"},
        {"now_ms": NOW + 60_000},
    ):
        with pytest.raises(InvalidRequestState):
            opened(token, **changes)


def test_a_calls_state_never_opens_as_an_approval_nor_an_approval_as_a_calls() -> None:
    call = Claims(
        call="c",
        round=1,
        principal="alice",
        digest="d",
        audience="gw|notes",
        issued_ms=NOW,
        expires_ms=NOW + 60_000,
    )
    call_token = seal_claims(RING, call)
    assert not approval.is_approval_state(call_token)
    with pytest.raises(InvalidRequestState):
        opened("ap1." + call_token.removeprefix("gw1."))
    with pytest.raises(InvalidRequestState):
        RING.unseal("gw1." + claims().seal(CODEC).removeprefix("ap1."))


def test_tampered_or_malformed_claims_are_refused() -> None:
    token = claims().seal(CODEC)
    with pytest.raises(InvalidRequestState):
        opened(token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1])
    odd = formats.stamped(Kind.APPROVAL_STATE, {"approval": 1}, 1)
    with pytest.raises(InvalidRequestState):
        opened(CODEC.seal(jsonrpc.dumps(odd)))
    newer = formats.stamped(Kind.APPROVAL_STATE, {**vars_of(claims())}, 1) | {"v": 9}
    with pytest.raises(InvalidRequestState):
        opened(CODEC.seal(jsonrpc.dumps(newer)))


def vars_of(c: approval.ApprovalClaims) -> dict[str, Any]:
    return {name: getattr(c, name) for name in c.__dataclass_fields__}
