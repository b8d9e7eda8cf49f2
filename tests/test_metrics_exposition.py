"""The exposition operators' dashboards and alerts read: every metric's name, type, label
set, help text and buckets, as `gateway.observability` has always exposed them.

The expected text was written down from the gateway's output before its hot-path
tallies became a collector of their own (issue 38); a metric renamed, retyped,
relabelled, re-bucketed or reworded fails here. `_created` samples carry the time
their series started, so only their place and labels are compared, and that they
are a time of this test's run.
"""

from __future__ import annotations

import re
import time

from gateway.observability import Metrics

CREATED = re.compile(r"^(\w+_created(?:\{[^}]*\})?) (\S+)$", re.MULTILINE)


class Pool:
    size = 3

    def sessions_per_caller(self) -> dict[str, int]:
        return {"key:ci-bot": 2, "key:ops": 1}


def touched() -> Metrics:
    """A gateway's metrics with every one of them moved (two series for one counter)."""
    metrics = Metrics()
    metrics.bind(
        parked=lambda: 2,
        live=lambda: 5,
        pools={"legacy": Pool()},
        lease=lambda: True,
        lost=lambda: 1,
    )
    metrics.requests.labels("tools/call", "complete").inc()
    metrics.requests.labels("tools/call", "complete").inc()
    metrics.requests.labels("tools/list", "error").inc()
    metrics.request_seconds.labels("tools/call").observe(0.02)
    metrics.request_seconds.labels("tools/call").observe(1000.0)  # past every bound: +Inf
    metrics.upstream_seconds.labels("legacy", "tools/list").observe(0.003)
    metrics.round_seconds.labels("legacy", "input_required").observe(0.2)
    metrics.resume_seconds.labels("legacy").observe(1.5)
    metrics.forward_seconds.observe(0.07)
    metrics.listens.set(4)
    metrics.tasks.set(3)
    metrics.task_endings.labels("completed").inc()
    metrics.rounds_per_call.observe(2)
    metrics.rounds_per_call.observe(0)  # on a bound: in its bucket
    metrics.state_refusals.labels("expired").inc()
    metrics.call_endings.labels("done").inc()
    metrics.upstream_errors.labels("legacy", "open").inc()
    metrics.catalog_drift.labels("legacy", "high").inc()
    metrics.approvals.labels("legacy", "approved").inc()
    metrics.orphaned_sessions.labels("legacy", "ended").inc()
    metrics.store_seconds.labels("claim").observe(0.0004)
    metrics.store_errors.labels("claim").inc()
    metrics.handoffs.labels("forwarded").inc()
    metrics.drain_timeouts.inc()
    metrics.store_data_losses.inc()
    return metrics


def test_every_metric_is_exposed_as_it_was_before_the_tallies_became_a_collector() -> None:
    started = time.time()
    text = touched().render().decode()
    for _, created in CREATED.findall(text):
        assert started - 1 <= float(created) <= time.time() + 1
    assert CREATED.sub(r"\1 <created>", text) == EXPOSITION


def test_a_scrape_reads_the_counts_and_adds_nothing_of_its_own() -> None:
    metrics = touched()
    first = CREATED.sub(r"\1 <created>", metrics.render().decode())
    assert CREATED.sub(r"\1 <created>", metrics.render().decode()) == first == EXPOSITION
    metrics.requests.labels("tools/list", "error").inc(2.5)
    assert 'mrtr_requests_total{method="tools/list",outcome="error"} 3.5' in (
        metrics.render().decode()
    )


#: `Metrics().render()` at 4e9a59f (mrtr_upstream_errors_total counted by kind since), with
#: every metric moved as `touched` moves them. A help text too long for a line goes on after
#: a backslash: in the string it is one line.
EXPOSITION = """\
# HELP mrtr_requests_total Client requests by JSON-RPC method and outcome
# TYPE mrtr_requests_total counter
mrtr_requests_total{method="tools/call",outcome="complete"} 2.0
mrtr_requests_total{method="tools/list",outcome="error"} 1.0
# HELP mrtr_requests_created Client requests by JSON-RPC method and outcome
# TYPE mrtr_requests_created gauge
mrtr_requests_created{method="tools/call",outcome="complete"} <created>
mrtr_requests_created{method="tools/list",outcome="error"} <created>
# HELP mrtr_request_duration_seconds Whole client request
# TYPE mrtr_request_duration_seconds histogram
mrtr_request_duration_seconds_bucket{le="0.01",method="tools/call"} 0.0
mrtr_request_duration_seconds_bucket{le="0.05",method="tools/call"} 1.0
mrtr_request_duration_seconds_bucket{le="0.1",method="tools/call"} 1.0
mrtr_request_duration_seconds_bucket{le="0.5",method="tools/call"} 1.0
mrtr_request_duration_seconds_bucket{le="1.0",method="tools/call"} 1.0
mrtr_request_duration_seconds_bucket{le="5.0",method="tools/call"} 1.0
mrtr_request_duration_seconds_bucket{le="15.0",method="tools/call"} 1.0
mrtr_request_duration_seconds_bucket{le="60.0",method="tools/call"} 1.0
mrtr_request_duration_seconds_bucket{le="300.0",method="tools/call"} 1.0
mrtr_request_duration_seconds_bucket{le="600.0",method="tools/call"} 1.0
mrtr_request_duration_seconds_bucket{le="+Inf",method="tools/call"} 2.0
mrtr_request_duration_seconds_count{method="tools/call"} 2.0
mrtr_request_duration_seconds_sum{method="tools/call"} 1000.02
# HELP mrtr_request_duration_seconds_created Whole client request
# TYPE mrtr_request_duration_seconds_created gauge
mrtr_request_duration_seconds_created{method="tools/call"} <created>
# HELP mrtr_upstream_duration_seconds Plain upstream exchanges (request to response)
# TYPE mrtr_upstream_duration_seconds histogram
mrtr_upstream_duration_seconds_bucket{le="0.001",method="tools/list",upstream="legacy"} 0.0
mrtr_upstream_duration_seconds_bucket{le="0.0025",method="tools/list",upstream="legacy"} 0.0
mrtr_upstream_duration_seconds_bucket{le="0.005",method="tools/list",upstream="legacy"} 1.0
mrtr_upstream_duration_seconds_bucket{le="0.01",method="tools/list",upstream="legacy"} 1.0
mrtr_upstream_duration_seconds_bucket{le="0.025",method="tools/list",upstream="legacy"} 1.0
mrtr_upstream_duration_seconds_bucket{le="0.05",method="tools/list",upstream="legacy"} 1.0
mrtr_upstream_duration_seconds_bucket{le="0.1",method="tools/list",upstream="legacy"} 1.0
mrtr_upstream_duration_seconds_bucket{le="0.25",method="tools/list",upstream="legacy"} 1.0
mrtr_upstream_duration_seconds_bucket{le="0.5",method="tools/list",upstream="legacy"} 1.0
mrtr_upstream_duration_seconds_bucket{le="1.0",method="tools/list",upstream="legacy"} 1.0
mrtr_upstream_duration_seconds_bucket{le="2.5",method="tools/list",upstream="legacy"} 1.0
mrtr_upstream_duration_seconds_bucket{le="5.0",method="tools/list",upstream="legacy"} 1.0
mrtr_upstream_duration_seconds_bucket{le="10.0",method="tools/list",upstream="legacy"} 1.0
mrtr_upstream_duration_seconds_bucket{le="+Inf",method="tools/list",upstream="legacy"} 1.0
mrtr_upstream_duration_seconds_count{method="tools/list",upstream="legacy"} 1.0
mrtr_upstream_duration_seconds_sum{method="tools/list",upstream="legacy"} 0.003
# HELP mrtr_upstream_duration_seconds_created Plain upstream exchanges (request to response)
# TYPE mrtr_upstream_duration_seconds_created gauge
mrtr_upstream_duration_seconds_created{method="tools/list",upstream="legacy"} <created>
# HELP mrtr_round_duration_seconds One round of an interruptible call: from the client request to \
input_required or the result
# TYPE mrtr_round_duration_seconds histogram
mrtr_round_duration_seconds_bucket{le="0.01",outcome="input_required",upstream="legacy"} 0.0
mrtr_round_duration_seconds_bucket{le="0.05",outcome="input_required",upstream="legacy"} 0.0
mrtr_round_duration_seconds_bucket{le="0.1",outcome="input_required",upstream="legacy"} 0.0
mrtr_round_duration_seconds_bucket{le="0.5",outcome="input_required",upstream="legacy"} 1.0
mrtr_round_duration_seconds_bucket{le="1.0",outcome="input_required",upstream="legacy"} 1.0
mrtr_round_duration_seconds_bucket{le="5.0",outcome="input_required",upstream="legacy"} 1.0
mrtr_round_duration_seconds_bucket{le="15.0",outcome="input_required",upstream="legacy"} 1.0
mrtr_round_duration_seconds_bucket{le="60.0",outcome="input_required",upstream="legacy"} 1.0
mrtr_round_duration_seconds_bucket{le="300.0",outcome="input_required",upstream="legacy"} 1.0
mrtr_round_duration_seconds_bucket{le="600.0",outcome="input_required",upstream="legacy"} 1.0
mrtr_round_duration_seconds_bucket{le="+Inf",outcome="input_required",upstream="legacy"} 1.0
mrtr_round_duration_seconds_count{outcome="input_required",upstream="legacy"} 1.0
mrtr_round_duration_seconds_sum{outcome="input_required",upstream="legacy"} 0.2
# HELP mrtr_round_duration_seconds_created One round of an interruptible call: from the client \
request to input_required or the result
# TYPE mrtr_round_duration_seconds_created gauge
mrtr_round_duration_seconds_created{outcome="input_required",upstream="legacy"} <created>
# HELP mrtr_resume_duration_seconds A retry that resumed a parked call: from arrival to its outcome
# TYPE mrtr_resume_duration_seconds histogram
mrtr_resume_duration_seconds_bucket{le="0.01",upstream="legacy"} 0.0
mrtr_resume_duration_seconds_bucket{le="0.05",upstream="legacy"} 0.0
mrtr_resume_duration_seconds_bucket{le="0.1",upstream="legacy"} 0.0
mrtr_resume_duration_seconds_bucket{le="0.5",upstream="legacy"} 0.0
mrtr_resume_duration_seconds_bucket{le="1.0",upstream="legacy"} 0.0
mrtr_resume_duration_seconds_bucket{le="5.0",upstream="legacy"} 1.0
mrtr_resume_duration_seconds_bucket{le="15.0",upstream="legacy"} 1.0
mrtr_resume_duration_seconds_bucket{le="60.0",upstream="legacy"} 1.0
mrtr_resume_duration_seconds_bucket{le="300.0",upstream="legacy"} 1.0
mrtr_resume_duration_seconds_bucket{le="600.0",upstream="legacy"} 1.0
mrtr_resume_duration_seconds_bucket{le="+Inf",upstream="legacy"} 1.0
mrtr_resume_duration_seconds_count{upstream="legacy"} 1.0
mrtr_resume_duration_seconds_sum{upstream="legacy"} 1.5
# HELP mrtr_resume_duration_seconds_created A retry that resumed a parked call: from arrival to \
its outcome
# TYPE mrtr_resume_duration_seconds_created gauge
mrtr_resume_duration_seconds_created{upstream="legacy"} <created>
# HELP mrtr_forward_duration_seconds A retry forwarded to the replica owning its call
# TYPE mrtr_forward_duration_seconds histogram
mrtr_forward_duration_seconds_bucket{le="0.01"} 0.0
mrtr_forward_duration_seconds_bucket{le="0.05"} 0.0
mrtr_forward_duration_seconds_bucket{le="0.1"} 1.0
mrtr_forward_duration_seconds_bucket{le="0.5"} 1.0
mrtr_forward_duration_seconds_bucket{le="1.0"} 1.0
mrtr_forward_duration_seconds_bucket{le="5.0"} 1.0
mrtr_forward_duration_seconds_bucket{le="15.0"} 1.0
mrtr_forward_duration_seconds_bucket{le="60.0"} 1.0
mrtr_forward_duration_seconds_bucket{le="300.0"} 1.0
mrtr_forward_duration_seconds_bucket{le="600.0"} 1.0
mrtr_forward_duration_seconds_bucket{le="+Inf"} 1.0
mrtr_forward_duration_seconds_count 1.0
mrtr_forward_duration_seconds_sum 0.07
# HELP mrtr_forward_duration_seconds_created A retry forwarded to the replica owning its call
# TYPE mrtr_forward_duration_seconds_created gauge
mrtr_forward_duration_seconds_created <created>
# HELP mrtr_parked_calls Calls waiting for a client's answers on this replica
# TYPE mrtr_parked_calls gauge
mrtr_parked_calls 2.0
# HELP mrtr_live_calls Calls whose upstream stream this replica holds
# TYPE mrtr_live_calls gauge
mrtr_live_calls 5.0
# HELP mrtr_listens subscriptions/listen streams open on this replica
# TYPE mrtr_listens gauge
mrtr_listens 4.0
# HELP mrtr_tasks Tasks whose calls this replica runs (the tasks extension)
# TYPE mrtr_tasks gauge
mrtr_tasks 3.0
# HELP mrtr_task_endings_total Tasks run here that ended, by status (completed, failed, \
cancelled, expired)
# TYPE mrtr_task_endings_total counter
mrtr_task_endings_total{status="completed"} 1.0
# HELP mrtr_task_endings_created Tasks run here that ended, by status (completed, failed, \
cancelled, expired)
# TYPE mrtr_task_endings_created gauge
mrtr_task_endings_created{status="completed"} <created>
# HELP mrtr_parked_calls_lost Parked calls here whose upstream stream is gone: their retries are \
told so
# TYPE mrtr_parked_calls_lost gauge
mrtr_parked_calls_lost 1.0
# HELP mrtr_rounds_per_call Rounds a finished call needed
# TYPE mrtr_rounds_per_call histogram
mrtr_rounds_per_call_bucket{le="0.0"} 1.0
mrtr_rounds_per_call_bucket{le="1.0"} 1.0
mrtr_rounds_per_call_bucket{le="2.0"} 2.0
mrtr_rounds_per_call_bucket{le="3.0"} 2.0
mrtr_rounds_per_call_bucket{le="4.0"} 2.0
mrtr_rounds_per_call_bucket{le="6.0"} 2.0
mrtr_rounds_per_call_bucket{le="8.0"} 2.0
mrtr_rounds_per_call_bucket{le="12.0"} 2.0
mrtr_rounds_per_call_bucket{le="16.0"} 2.0
mrtr_rounds_per_call_bucket{le="+Inf"} 2.0
mrtr_rounds_per_call_count 2.0
mrtr_rounds_per_call_sum 2.0
# HELP mrtr_rounds_per_call_created Rounds a finished call needed
# TYPE mrtr_rounds_per_call_created gauge
mrtr_rounds_per_call_created <created>
# HELP mrtr_request_state_refusals_total requestState refused, by reason
# TYPE mrtr_request_state_refusals_total counter
mrtr_request_state_refusals_total{reason="expired"} 1.0
# HELP mrtr_request_state_refusals_created requestState refused, by reason
# TYPE mrtr_request_state_refusals_created gauge
mrtr_request_state_refusals_created{reason="expired"} <created>
# HELP mrtr_call_endings_total Calls ended, by how (done, failed, expired, cancelled)
# TYPE mrtr_call_endings_total counter
mrtr_call_endings_total{phase="done"} 1.0
# HELP mrtr_call_endings_created Calls ended, by how (done, failed, expired, cancelled)
# TYPE mrtr_call_endings_created gauge
mrtr_call_endings_created{phase="done"} <created>
# HELP mrtr_upstream_sessions Open upstream sessions
# TYPE mrtr_upstream_sessions gauge
mrtr_upstream_sessions{upstream="legacy"} 3.0
# HELP mrtr_upstream_callers Callers holding upstream sessions (a session serves one caller)
# TYPE mrtr_upstream_callers gauge
mrtr_upstream_callers{upstream="legacy"} 2.0
# HELP mrtr_upstream_caller_sessions_max The most upstream sessions one caller holds, idle or in use
# TYPE mrtr_upstream_caller_sessions_max gauge
mrtr_upstream_caller_sessions_max{upstream="legacy"} 2.0
# HELP mrtr_upstream_errors_total Upstream failures by kind: open (a session could not \
be opened), and during a request: failed (unreachable, or broke the protocol), timeout, \
exited (a stdio server), session_lost, credentials (the upstream's token endpoint)
# TYPE mrtr_upstream_errors_total counter
mrtr_upstream_errors_total{kind="open",upstream="legacy"} 1.0
# HELP mrtr_upstream_errors_created Upstream failures by kind: open (a session could not \
be opened), and during a request: failed (unreachable, or broke the protocol), timeout, \
exited (a stdio server), session_lost, credentials (the upstream's token endpoint)
# TYPE mrtr_upstream_errors_created gauge
mrtr_upstream_errors_created{kind="open",upstream="legacy"} <created>
# HELP mrtr_catalog_drift_total Tool definitions seen that differ from their pins, by upstream and \
severity (high: a safety hint weakened)
# TYPE mrtr_catalog_drift_total counter
mrtr_catalog_drift_total{severity="high",upstream="legacy"} 1.0
# HELP mrtr_catalog_drift_created Tool definitions seen that differ from their pins, by upstream \
and severity (high: a safety hint weakened)
# TYPE mrtr_catalog_drift_created gauge
mrtr_catalog_drift_created{severity="high",upstream="legacy"} <created>
# HELP mrtr_approvals_total Approvals the gateway asked a person for, by upstream and outcome \
(asked, approved, declined, remembered: covered by an earlier one)
# TYPE mrtr_approvals_total counter
mrtr_approvals_total{outcome="approved",upstream="legacy"} 1.0
# HELP mrtr_approvals_created Approvals the gateway asked a person for, by upstream and outcome \
(asked, approved, declined, remembered: covered by an earlier one)
# TYPE mrtr_approvals_created gauge
mrtr_approvals_created{outcome="approved",upstream="legacy"} <created>
# HELP mrtr_orphaned_sessions_total Upstream sessions of dead replicas that this one ended, by \
outcome (ended, gone, refused, failed)
# TYPE mrtr_orphaned_sessions_total counter
mrtr_orphaned_sessions_total{outcome="ended",upstream="legacy"} 1.0
# HELP mrtr_orphaned_sessions_created Upstream sessions of dead replicas that this one ended, by \
outcome (ended, gone, refused, failed)
# TYPE mrtr_orphaned_sessions_created gauge
mrtr_orphaned_sessions_created{outcome="ended",upstream="legacy"} <created>
# HELP mrtr_store_duration_seconds Suspended-call store operations
# TYPE mrtr_store_duration_seconds histogram
mrtr_store_duration_seconds_bucket{le="0.001",op="claim"} 1.0
mrtr_store_duration_seconds_bucket{le="0.0025",op="claim"} 1.0
mrtr_store_duration_seconds_bucket{le="0.005",op="claim"} 1.0
mrtr_store_duration_seconds_bucket{le="0.01",op="claim"} 1.0
mrtr_store_duration_seconds_bucket{le="0.025",op="claim"} 1.0
mrtr_store_duration_seconds_bucket{le="0.05",op="claim"} 1.0
mrtr_store_duration_seconds_bucket{le="0.1",op="claim"} 1.0
mrtr_store_duration_seconds_bucket{le="0.25",op="claim"} 1.0
mrtr_store_duration_seconds_bucket{le="0.5",op="claim"} 1.0
mrtr_store_duration_seconds_bucket{le="1.0",op="claim"} 1.0
mrtr_store_duration_seconds_bucket{le="2.5",op="claim"} 1.0
mrtr_store_duration_seconds_bucket{le="5.0",op="claim"} 1.0
mrtr_store_duration_seconds_bucket{le="10.0",op="claim"} 1.0
mrtr_store_duration_seconds_bucket{le="+Inf",op="claim"} 1.0
mrtr_store_duration_seconds_count{op="claim"} 1.0
mrtr_store_duration_seconds_sum{op="claim"} 0.0004
# HELP mrtr_store_duration_seconds_created Suspended-call store operations
# TYPE mrtr_store_duration_seconds_created gauge
mrtr_store_duration_seconds_created{op="claim"} <created>
# HELP mrtr_store_errors_total Failed store operations
# TYPE mrtr_store_errors_total counter
mrtr_store_errors_total{op="claim"} 1.0
# HELP mrtr_store_errors_created Failed store operations
# TYPE mrtr_store_errors_created gauge
mrtr_store_errors_created{op="claim"} <created>
# HELP mrtr_fleet_handoffs_total Retries served away from the replica that parked their call, by \
how (forwarded, taken_over, replayed, lost, claimed_from_dead)
# TYPE mrtr_fleet_handoffs_total counter
mrtr_fleet_handoffs_total{kind="forwarded"} 1.0
# HELP mrtr_fleet_handoffs_created Retries served away from the replica that parked their call, \
by how (forwarded, taken_over, replayed, lost, claimed_from_dead)
# TYPE mrtr_fleet_handoffs_created gauge
mrtr_fleet_handoffs_created{kind="forwarded"} <created>
# HELP mrtr_drain_timeouts_total Drains that ended with calls still held
# TYPE mrtr_drain_timeouts_total counter
mrtr_drain_timeouts_total 1.0
# HELP mrtr_drain_timeouts_created Drains that ended with calls still held
# TYPE mrtr_drain_timeouts_created gauge
mrtr_drain_timeouts_created <created>
# HELP mrtr_store_data_losses_total Times the store was found empty (its records written back)
# TYPE mrtr_store_data_losses_total counter
mrtr_store_data_losses_total 1.0
# HELP mrtr_store_data_losses_created Times the store was found empty (its records written back)
# TYPE mrtr_store_data_losses_created gauge
mrtr_store_data_losses_created <created>
# HELP mrtr_fleet_lease 1 while this replica's heartbeat is surely in the store (it may serve its \
calls)
# TYPE mrtr_fleet_lease gauge
mrtr_fleet_lease 1.0
"""
