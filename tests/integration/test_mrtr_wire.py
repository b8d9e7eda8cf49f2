"""MRTR on the wire against a real legacy server: what a careless or hostile client can
do with `requestState` and `inputResponses`, and what happens when nobody comes back."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import aiohttp
import pytest

from gateway.errors import InvalidRequestState
from tests.conftest import Gateway, default_headers, rpc
from tests.integration.test_bridge_peers import body_runs

pytestmark = pytest.mark.peers

FROZEN = {"code": -32602, "message": InvalidRequestState.WIRE_MESSAGE}
ALICE = {"elicit.username": {"action": "accept", "content": {"username": "alice"}}}


def greet(
    run_id: str, *, rid: int = 1, state: str | None = None, answers: Any = None, **meta: Any
) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "greet", "arguments": {"run_id": run_id}}
    if state is not None:
        params["requestState"] = state
    if answers is not None:
        params["inputResponses"] = answers
    return rpc("tools/call", params, rid=rid, **meta)


async def first_round(gateway: Gateway, run_id: str, **headers: str) -> str:
    status, reply, _ = await gateway.post(greet(run_id), headers=headers)
    assert status == 200, reply
    result = reply["result"]
    assert result["resultType"] == "input_required"
    assert list(result["inputRequests"]) == ["elicit.username"]
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "peers-legacy-py"
    return str(result["requestState"])


async def test_a_replayed_request_state_is_refused_and_the_tool_ran_once(gateway: Gateway) -> None:
    run_id = uuid.uuid4().hex
    state = await first_round(gateway, run_id)
    status, reply, _ = await gateway.post(greet(run_id, rid=2, state=state, answers=ALICE))
    assert status == 200 and reply["result"]["content"][0]["text"] == "Hello, alice!"
    status, reply, _ = await gateway.post(greet(run_id, rid=3, state=state, answers=ALICE))
    assert (status, reply["error"]) == (400, FROZEN)
    assert await body_runs(gateway, "greet", run_id) == 1


async def test_two_simultaneous_retries_of_one_round_resume_it_once(gateway: Gateway) -> None:
    run_id = uuid.uuid4().hex
    state = await first_round(gateway, run_id)
    replies = await asyncio.gather(
        *(gateway.post(greet(run_id, rid=10 + i, state=state, answers=ALICE)) for i in range(4))
    )
    statuses = sorted(status for status, _, _ in replies)
    assert statuses == [200, 400, 400, 400]
    assert sum(1 for _, reply, _ in replies if "result" in reply) == 1
    assert all(reply["error"] == FROZEN for status, reply, _ in replies if status == 400)
    assert await body_runs(gateway, "greet", run_id) == 1


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda s: s[:-2] + ("A" if s[-2] != "A" else "B") + s[-1], id="last-bytes"),
        pytest.param(lambda s: s[:10] + ("x" if s[10] != "x" else "y") + s[11:], id="key-id"),
        pytest.param(lambda s: s[: len(s) // 2], id="truncated"),
        pytest.param(lambda s: "gw2." + s[4:], id="version-prefix"),
        pytest.param(lambda s: s + "==", id="padding"),
        pytest.param(lambda s: "", id="empty"),
    ],
)
async def test_a_tampered_request_state_is_refused_without_using_up_the_round(
    gateway: Gateway, tamper
) -> None:
    run_id = uuid.uuid4().hex
    state = await first_round(gateway, run_id)
    status, reply, _ = await gateway.post(greet(run_id, rid=2, state=tamper(state), answers=ALICE))
    assert (status, reply["error"]) == (400, FROZEN)
    status, reply, _ = await gateway.post(greet(run_id, rid=3, state=state, answers=ALICE))
    assert status == 200 and reply["result"]["content"][0]["text"] == "Hello, alice!"


async def test_a_request_state_presented_by_another_principal_is_refused(gateway: Gateway) -> None:
    run_id = uuid.uuid4().hex
    state = await first_round(gateway, run_id, Authorization="Bearer alice-token")
    for other in ({"Authorization": "Bearer mallory-token"}, {}):
        status, reply, _ = await gateway.post(
            greet(run_id, rid=2, state=state, answers=ALICE), headers=other
        )
        assert (status, reply["error"]) == (400, FROZEN)
    status, reply, _ = await gateway.post(
        greet(run_id, rid=3, state=state, answers=ALICE),
        headers={"Authorization": "Bearer alice-token"},
    )
    assert status == 200 and "result" in reply


async def test_a_request_state_on_another_request_is_refused(gateway: Gateway) -> None:
    run_id = uuid.uuid4().hex
    state = await first_round(gateway, run_id)
    status, reply, _ = await gateway.post(greet("someone-else", rid=2, state=state, answers=ALICE))
    assert (status, reply["error"]) == (400, FROZEN)
    other_tool = rpc(
        "tools/call",
        {
            "name": "register",
            "arguments": {"run_id": run_id},
            "requestState": state,
            "inputResponses": ALICE,
        },
    )
    status, reply, _ = await gateway.post(other_tool)
    assert (status, reply["error"]) == (400, FROZEN)


async def test_a_request_state_from_another_gateway_deployment_is_refused(
    gateway: Gateway, make_gateway
) -> None:
    other = await make_gateway(sealing={"audience": "another-deployment"})
    run_id = uuid.uuid4().hex
    state = await first_round(other, run_id)
    status, reply, _ = await gateway.post(greet(run_id, rid=2, state=state, answers=ALICE))
    assert (status, reply["error"]) == (400, FROZEN)


async def test_missing_answers_are_asked_for_again(gateway: Gateway) -> None:
    run_id = uuid.uuid4().hex
    state = await first_round(gateway, run_id)
    status, reply, _ = await gateway.post(
        greet(run_id, rid=2, state=state, answers={"unrelated": {"x": 1}})
    )
    assert status == 200
    again = reply["result"]
    assert again["resultType"] == "input_required"
    assert list(again["inputRequests"]) == ["elicit.username"]
    assert again["requestState"] != state
    status, reply, _ = await gateway.post(
        greet(run_id, rid=3, state=again["requestState"], answers=ALICE)
    )
    assert status == 200 and reply["result"]["content"][0]["text"] == "Hello, alice!"
    assert await body_runs(gateway, "greet", run_id) == 1


@pytest.mark.parametrize(
    "answers",
    [
        {"elicit.username": {"action": "yes"}},
        {"elicit.username": {"action": "accept", "content": {"username": {"nested": 1}}}},
        {"elicit.username": "accept"},
        [],
    ],
    ids=["bad-action", "nested-content", "not-an-object", "not-a-map"],
)
async def test_a_malformed_answer_is_minus_32602_and_loses_nothing(
    gateway: Gateway, answers: Any
) -> None:
    run_id = uuid.uuid4().hex
    state = await first_round(gateway, run_id)
    status, reply, _ = await gateway.post(greet(run_id, rid=2, state=state, answers=answers))
    assert status == 400 and reply["error"]["code"] == -32602
    assert reply["error"]["message"] != InvalidRequestState.WIRE_MESSAGE
    status, reply, _ = await gateway.post(greet(run_id, rid=3, state=state, answers=ALICE))
    assert status == 200 and reply["result"]["content"][0]["text"] == "Hello, alice!"


async def test_a_form_answer_that_does_not_fit_the_schema_is_asked_again(gateway: Gateway) -> None:
    run_id = uuid.uuid4().hex
    state = await first_round(gateway, run_id)
    misfit = {"elicit.username": {"action": "accept", "content": {"username": 42}}}
    status, reply, _ = await gateway.post(greet(run_id, rid=2, state=state, answers=misfit))
    assert status == 200 and reply["result"]["resultType"] == "input_required"
    assert list(reply["result"]["inputRequests"]) == ["elicit.username"]


async def test_pre_supplied_answers_complete_without_a_round(gateway: Gateway) -> None:
    run_id = uuid.uuid4().hex
    status, reply, _ = await gateway.post(greet(run_id, answers=ALICE))
    assert status == 200
    assert reply["result"]["resultType"] == "complete"
    assert reply["result"]["content"][0]["text"] == "Hello, alice!"
    assert await body_runs(gateway, "greet", run_id) == 1


async def test_a_round_cap_ends_the_call_with_an_error(make_gateway) -> None:
    gateway = await make_gateway(limits={"max_rounds": 1})
    run_id = uuid.uuid4().hex
    register = rpc("tools/call", {"name": "register", "arguments": {"run_id": run_id}})
    status, reply, _ = await gateway.post(register)
    state = reply["result"]["requestState"]
    retry = rpc(
        "tools/call",
        {
            "name": "register",
            "arguments": {"run_id": run_id},
            "requestState": state,
            "inputResponses": ALICE,
        },
        rid=2,
    )
    status, reply, _ = await gateway.post(retry)
    assert status == 400 and reply["error"]["code"] == -32603
    assert reply["error"]["data"] == {"reason": "max_rounds"}
    assert gateway.bridge.calls == {}


async def journal(gateway: Gateway, run_id: str) -> list[str]:
    _, reply, _ = await gateway.post(
        rpc("tools/call", {"name": "journal", "arguments": {"run_id": run_id}})
    )
    text = reply["result"]["content"][0]["text"]
    return text.split(",") if text else []


async def until_journal(gateway: Gateway, run_id: str, entry: str) -> list[str]:
    """The legacy server applies a cancellation asynchronously: poll its journal, bounded."""
    async with asyncio.timeout(10):
        while entry not in (seen := await journal(gateway, run_id)):
            await asyncio.sleep(0.05)
    return seen


async def test_an_abandoned_call_is_released_and_cancelled_upstream_at_its_deadline(
    make_gateway,
) -> None:
    gateway = await make_gateway(limits={"suspension_ttl_s": 0.3})
    run_id = uuid.uuid4().hex
    status, reply, _ = await gateway.post(
        rpc("tools/call", {"name": "hold", "arguments": {"run_id": run_id}})
    )
    state = reply["result"]["requestState"]
    (call,) = gateway.bridge.calls.values()
    async with asyncio.timeout(5):
        await call.ended.wait()
    assert await until_journal(gateway, run_id, "cancelled") == ["answer:cancel", "cancelled"]
    retry = rpc(
        "tools/call",
        {
            "name": "hold",
            "arguments": {"run_id": run_id},
            "requestState": state,
            "inputResponses": {},
        },
        rid=2,
    )
    status, reply, _ = await gateway.post(retry)
    assert (status, reply["error"]) == (400, FROZEN)
    assert gateway.bridge.parked == 0


async def test_a_client_that_disconnects_mid_round_cancels_the_upstream_call(
    gateway: Gateway,
) -> None:
    run_id = uuid.uuid4().hex
    status, reply, _ = await gateway.post(
        rpc("tools/call", {"name": "hold", "arguments": {"run_id": run_id}})
    )
    state = reply["result"]["requestState"]
    (call,) = gateway.bridge.calls.values()
    retry = rpc(
        "tools/call",
        {
            "name": "hold",
            "arguments": {"run_id": run_id},
            "requestState": state,
            "inputResponses": {
                "elicit.confirm": {"action": "accept", "content": {"confirm": True}}
            },
        },
        rid=2,
    )
    with pytest.raises(TimeoutError):
        async with aiohttp.ClientSession() as http:
            await http.post(
                gateway.url,
                json=retry,
                headers=default_headers(retry),
                timeout=aiohttp.ClientTimeout(total=0.5),
            )
    async with asyncio.timeout(5):
        await call.ended.wait()
    assert await until_journal(gateway, run_id, "cancelled") == ["answer:accept", "cancelled"]
    assert gateway.bridge.calls == {}


async def test_relayed_notifications_switch_the_answer_to_sse(gateway: Gateway) -> None:
    run_id = uuid.uuid4().hex
    body = rpc(
        "tools/call",
        {"name": "progress_then_ask", "arguments": {"steps": 2, "run_id": run_id}},
        progressToken="p1",
    )
    status, messages, resp = await gateway.post(body)
    assert status == 200 and resp.headers["Content-Type"] == "text/event-stream"
    assert resp.headers["X-Accel-Buffering"] == "no"
    *notes, final = messages
    assert [n["params"]["progressToken"] for n in notes] == ["p1", "p1"]
    state = final["result"]["requestState"]
    retry = rpc(
        "tools/call",
        {
            "name": "progress_then_ask",
            "arguments": {"steps": 2, "run_id": run_id},
            "requestState": state,
            "inputResponses": {
                "elicit.confirm": {"action": "accept", "content": {"confirm": True}}
            },
        },
        rid=2,
        progressToken=7,
    )
    status, messages, _ = await gateway.post(retry)
    *notes, final = messages
    assert [(n["params"]["progressToken"], n["params"]["message"]) for n in notes] == [
        (7, "after 1"),
        (7, "after 2"),
    ]
    assert final["id"] == 2 and final["result"]["resultType"] == "complete"


async def test_a_round_without_a_progress_token_gets_no_progress_and_plain_json(
    gateway: Gateway,
) -> None:
    body = rpc("tools/call", {"name": "progress_then_ask", "arguments": {"steps": 2}})
    status, reply, resp = await gateway.post(body)
    assert resp.headers["Content-Type"].startswith("application/json")
    assert reply["result"]["resultType"] == "input_required"


async def test_a_legacy_url_elicitation_required_error_becomes_a_round(gateway: Gateway) -> None:
    run_id = uuid.uuid4().hex
    call = {"name": "needs_connection", "arguments": {"run_id": run_id}}
    status, reply, _ = await gateway.post(rpc("tools/call", call))
    assert status == 200, reply
    result = reply["result"]
    assert result["resultType"] == "input_required"
    assert result["inputRequests"] == {
        "elicit.url": {
            "method": "elicitation/create",
            "params": {
                "mode": "url",
                "message": "Connect your account first",
                "url": f"https://example.com/connect/{run_id}",
            },
        }
    }
    await gateway.post(
        rpc("tools/call", {"name": "connect", "arguments": {"run_id": run_id}})
    )  # the user's visit
    retry = rpc(
        "tools/call",
        {
            **call,
            "requestState": result["requestState"],
            "inputResponses": {"elicit.url": {"action": "accept"}},
        },
        rid=2,
    )
    status, reply, _ = await gateway.post(retry)
    assert reply["result"]["content"][0]["text"] == f"connected {run_id}"
    assert (
        await body_runs(gateway, "needs_connection", run_id) == 2
    )  # it refused, then ran: as the legacy flow


async def test_a_url_elicitation_required_error_needs_the_url_capability(gateway: Gateway) -> None:
    call = {"name": "needs_connection", "arguments": {"run_id": uuid.uuid4().hex}}
    status, reply, _ = await gateway.post(
        rpc("tools/call", call, caps={"elicitation": {"form": {}}})
    )
    assert status == 400
    assert reply["error"] == {
        "code": -32021,
        "message": reply["error"]["message"],
        "data": {"requiredCapabilities": {"elicitation": {"url": {}}}},
    }
