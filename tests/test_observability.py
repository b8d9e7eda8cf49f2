"""What an operator sees: metrics moving during a real MRTR call, logs that explain, probes."""

from __future__ import annotations

import re
import uuid

import pytest
import structlog

from gateway import logging as log_context
from tests.support.inprocess import Gateway
from tests.support.legacy import ALICE, greet
from tests.support.wire import rpc

pytestmark = pytest.mark.peers


async def scrape(gateway: Gateway) -> dict[str, float]:
    async with gateway.http.get(gateway.url.replace("/mcp", "/metrics")) as resp:
        assert resp.status == 200
        text = await resp.text()
    samples = {}
    for line in text.splitlines():
        match = re.match(r"^([a-z_]+(?:\{[^}]*\})?) ([0-9.e+-]+)$", line)
        if match:
            samples[match.group(1)] = float(match.group(2))
    return samples


async def test_metrics_follow_a_real_mrtr_call(gateway: Gateway) -> None:
    run_id = uuid.uuid4().hex
    before = await scrape(gateway)
    assert before["mrtr_parked_calls"] == 0
    status, first, _ = await gateway.post(greet(run_id))
    parked = await scrape(gateway)
    assert parked["mrtr_parked_calls"] == 1
    key = 'mrtr_round_duration_seconds_count{outcome="input_required",upstream="legacy"}'
    assert parked[key] == before.get(key, 0) + 1
    state = first["result"]["requestState"]
    status, done, _ = await gateway.post(greet(run_id, rid=2, state=state, answers=ALICE))
    assert done["result"]["content"][0]["text"] == "Hello, alice!"
    after = await scrape(gateway)
    assert after["mrtr_parked_calls"] == 0
    assert after['mrtr_round_duration_seconds_count{outcome="complete",upstream="legacy"}'] >= 1
    assert after['mrtr_resume_duration_seconds_count{upstream="legacy"}'] == 1
    assert (
        after["mrtr_rounds_per_call_count"] >= 1
        and after['mrtr_rounds_per_call_bucket{le="1.0"}'] >= 1
    )
    assert after['mrtr_requests_total{method="tools/call",outcome="complete"}'] >= 1
    assert after['mrtr_store_duration_seconds_count{op="claim"}'] >= 1
    assert after['mrtr_upstream_sessions{upstream="legacy"}'] >= 1
    assert after['mrtr_upstream_callers{upstream="legacy"}'] == 1  # the anonymous caller
    assert after['mrtr_upstream_caller_sessions_max{upstream="legacy"}'] >= 1
    status, again, _ = await gateway.post(greet(run_id, rid=3, state=state, answers=ALICE))
    refused = await scrape(gateway)
    reason = "no live call (finished, expired or never parked)"
    assert refused[f'mrtr_request_state_refusals_total{{reason="{reason}"}}'] == 1


async def test_logs_explain_each_request_and_round_and_never_carry_secrets(
    gateway: Gateway,
) -> None:
    run_id = uuid.uuid4().hex
    with structlog.testing.capture_logs(processors=[log_context.merge_bound]) as logs:
        status, first, _ = await gateway.post(
            greet(run_id), headers={"Authorization": "Bearer s3cret-token"}
        )
        state = first["result"]["requestState"]
        await gateway.post(
            greet(run_id, rid=2, state=state, answers=ALICE),
            headers={"Authorization": "Bearer s3cret-token"},
        )
        await gateway.post(greet(run_id, rid=3, state=state + "x", answers=ALICE))  # refused
        await gateway.post(greet(run_id, rid=4, state=state, answers={"elicit.username": 5}))  # bad
    events = [entry["event"] for entry in logs]
    served = [entry for entry in logs if entry["event"] == "request_served"]
    # At info a request is one line: what happened to its call rides on request_served.
    chatty = [e for e in logs if e["log_level"] != "debug" and e["event"].startswith("call_")]
    assert chatty == []
    assert [entry["outcome"] for entry in served] == [
        "input_required",
        "complete",
        "error",
        "error",
    ]
    assert "request_state_refused" in events
    for entry in served:
        assert {
            "status",
            "duration_ms",
            "principal",
            "rpc_method",
            "upstream",
            "request_id",
        } <= set(entry)
    for entry in served[:2]:  # the tampered state's request names no call
        assert "call_id" in entry and entry["principal"].startswith("p_")
    assert [entry["tool"] for entry in served] == ["greet"] * 4  # which tool, even refused
    assert served[0]["round"] == 1 and served[0]["asked"] == ["elicit.username"]
    assert served[1]["answered"] == ["elicit.username"] and served[1]["rounds"] == 1
    everything = repr(logs)
    assert state not in everything and "gw1." not in everything and "s3cret" not in everything


async def test_probes_tell_the_truth(gateway: Gateway, make_gateway) -> None:
    async with gateway.http.get(gateway.url.replace("/mcp", "/healthz")) as resp:
        assert resp.status == 200
    async with gateway.http.get(gateway.url.replace("/mcp", "/readyz")) as resp:
        assert resp.status == 200
        assert (await resp.json())["upstreams"] == {"legacy": "ok"}
    dead = await make_gateway("http://127.0.0.1:9/mcp")
    async with dead.http.get(dead.url.replace("/mcp", "/readyz")) as resp:
        assert resp.status == 503
        body = await resp.json()
    assert body["upstreams"] == {"legacy": "unreachable"} and body["store"] == "ok"
    status, reply, _ = await dead.post(rpc("tools/list"))
    assert status == 502 and reply["error"]["code"] == -32603


TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    ("meta", "headers"),
    [({"traceparent": TRACE}, {}), ({}, {"traceparent": TRACE})],
    ids=["from-meta", "from-header"],
)
async def test_trace_context_reaches_the_upstream(
    gateway: Gateway, meta: dict, headers: dict
) -> None:
    status, reply, _ = await gateway.post(
        rpc("tools/call", {"name": "traced", "arguments": {}}, **meta), headers=headers
    )
    text = reply["result"]["content"][0]["text"]
    assert f"meta={TRACE}" in text
    assert f"header={TRACE}" in text  # and as the W3C HTTP header


async def test_every_response_names_its_request_id_whether_json_or_a_stream(
    gateway: Gateway,
) -> None:
    """The id a client sent (or one the gateway made) is on the response, as in the logs:
    on a JSON answer, and on a stream the gateway committed to for a notification."""
    echo = rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    _, reply, resp = await gateway.post(echo, headers={"X-Request-Id": "json-1"})
    assert resp.headers["Content-Type"].startswith("application/json")
    assert reply["result"]["content"][0]["text"] == "hi"
    assert resp.headers["X-Request-Id"] == "json-1"
    steps = {"name": "slow_progress", "arguments": {"steps": 2}}
    _, events, resp = await gateway.post(
        rpc("tools/call", steps, progressToken="p1"), headers={"X-Request-Id": "stream-1"}
    )
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    assert events[-1]["result"]["content"][0]["text"] == "done after 2 steps"
    assert resp.headers["X-Request-Id"] == "stream-1"
    _, _, resp = await gateway.post(rpc("tools/list"))
    assert len(resp.headers["X-Request-Id"]) == 16  # made here: a prefix and a counter
    # Refusals too, the HTTP layer's and aiohttp's own (a path nothing is served at).
    for method, path, status in (("PUT", "/mcp", 405), ("POST", "/nope", 404)):
        url = gateway.url.replace("/mcp", path)
        async with gateway.http.request(method, url, headers={"X-Request-Id": "r-1"}) as resp:
            assert resp.status == status and resp.headers["X-Request-Id"] == "r-1"


async def test_a_body_that_is_not_a_request_leaves_a_log_line(gateway: Gateway) -> None:
    """Refused before it could be read as a request, it is still one line at info."""
    with structlog.testing.capture_logs(processors=[log_context.merge_bound]) as logs:
        status, reply, _ = await gateway.post(b"{not json", headers={"X-Request-Id": "bad-1"})
    assert status == 400 and reply["error"]["code"] == -32700
    (line,) = [entry for entry in logs if entry["event"] == "request_rejected"]
    assert line["code"] == -32700 and line["status"] == 400 and line["request_id"] == "bad-1"
