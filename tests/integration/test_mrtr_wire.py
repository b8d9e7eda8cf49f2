"""MRTR on the wire against a real legacy server: what a careless or hostile client can
do with `requestState` and `inputResponses`, and what happens when nobody comes back."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import aiohttp
import pytest

from gateway.aio import spawn
from gateway.errors import InvalidRequestState
from tests.support.inprocess import Gateway
from tests.support.legacy import (  # test_cli.py, test_robustness.py import ALICE, greet here
    ALICE,
    await_journal,
    body_runs,
    greet,
)
from tests.support.wire import FROZEN, default_headers, rpc

pytestmark = pytest.mark.peers


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
    assert status == 502 and reply["error"]["code"] == -32603  # the upstream kept asking
    assert reply["error"]["data"] == {"reason": "max_rounds"}
    assert gateway.bridge.calls == {}


async def test_an_abandoned_call_is_released_and_cancelled_upstream_at_its_deadline(
    make_gateway,
) -> None:
    gateway = await make_gateway(limits={"suspension_ttl_s": 0.3})
    run_id = uuid.uuid4().hex
    status, reply, _ = await gateway.post(
        rpc("tools/call", {"name": "hold", "arguments": {"run_id": run_id}})
    )
    state = reply["result"]["requestState"]
    await gateway.until_calls_ended()  # nobody comes back: it ends at its deadline
    journal = await await_journal(gateway.upstream_url, run_id, "cancelled")
    assert journal == ["answer:cancel", "cancelled"]
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
    async with aiohttp.ClientSession() as http:

        async def send_retry() -> None:
            async with http.post(gateway.url, json=retry, headers=default_headers(retry)) as resp:
                await resp.read()

        sending = spawn(send_retry(), name="test-retry")
        # The answer reached the tool, which now holds: the round is under way upstream.
        journal = await await_journal(gateway.upstream_url, run_id, "answer:accept")
        assert journal == ["answer:accept"] and not sending.done()
        sending.cancel()  # the client goes away mid-round (its connection closes)
        with contextlib.suppress(asyncio.CancelledError):
            await sending
    async with asyncio.timeout(10):
        await call.ended.wait()
    journal = await await_journal(gateway.upstream_url, run_id, "cancelled")
    assert journal == ["answer:accept", "cancelled"]
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
