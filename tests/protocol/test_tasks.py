"""The tasks extension's sans-IO core: the status table, question keys, wire shapes."""

from __future__ import annotations

import pytest

from gateway.errors import InvalidParams, MissingClientCapability
from gateway.protocol import tasks
from gateway.protocol.tasks import FINAL, TRANSITIONS, Status, Task, TaskEnded, TaskEvent

ASK_NAME = {"method": "elicitation/create", "params": {"message": "Name?"}}
ASK_CITY = {"method": "elicitation/create", "params": {"message": "City?"}}


def new_task(**overrides: object) -> Task:
    values: dict = dict(
        id="task-1", principal="p", upstream="u", owner="r1", created_ms=1_000, ttl_ms=60_000
    )
    values.update(overrides)
    return Task(poll_ms=500, **values)


def test_only_a_live_task_moves_and_nothing_leaves_a_final_status() -> None:
    assert {s for s, _ in TRANSITIONS} == {Status.WORKING, Status.INPUT_REQUIRED}
    for final in FINAL:
        for event in TaskEvent:
            task = new_task(status=final)
            with pytest.raises(TaskEnded):
                task.fire(event, 2_000)
            assert task.status is final


def test_a_declaration_is_the_extension_key_under_extensions() -> None:
    assert tasks.declared({"extensions": {tasks.EXTENSION: {}}})
    assert not tasks.declared({"extensions": {}})
    assert not tasks.declared({tasks.EXTENSION: {}})
    assert not tasks.declared({"extensions": {tasks.EXTENSION: True}})
    assert not tasks.declared(None)


def test_the_missing_extension_error_names_it_in_its_data() -> None:
    error = tasks.extension_required("tasks/get")
    assert isinstance(error, MissingClientCapability)
    assert error.error_object()["code"] == -32021
    assert error.error_object()["data"] == {
        "requiredCapabilities": {"extensions": {tasks.EXTENSION: {}}}
    }


def test_created_result_is_flat_with_integer_times_and_iso_dates() -> None:
    created = new_task(created_ms=1_765_000_000_123).created()
    assert created == {
        "resultType": "task",
        "taskId": "task-1",
        "status": "working",
        "createdAt": "2025-12-06T05:46:40.123Z",
        "lastUpdatedAt": "2025-12-06T05:46:40.123Z",
        "ttlMs": 60_000,
        "pollIntervalMs": 500,
    }


def test_questions_keep_their_key_while_outstanding_and_new_ones_never_reuse_a_key() -> None:
    task = new_task()
    task.asked({"name": ASK_NAME, "city": ASK_CITY}, "state-1", 2_000)
    assert task.status is Status.INPUT_REQUIRED and set(task.inputs) == {"name", "city"}
    # A partial answer: the other question stays outstanding, under its key.
    assert task.take_answers({"name": {"action": "accept"}, "bogus": {}}, 3_000) == {
        "name": {"action": "accept"}
    }
    assert task.status is Status.INPUT_REQUIRED and set(task.inputs) == {"city"}
    # The call asks again: "city" is the same question; a new "name" gets a new key.
    task.asked({"city": ASK_CITY, "name": ASK_NAME}, "state-2", 4_000)
    assert task.inputs == {"city": ASK_CITY, "name-2": ASK_NAME}
    assert task.call_keys == {"city": "city", "name-2": "name"}
    assert task.state == "state-2"


def test_answering_every_question_makes_the_task_work_again_and_late_answers_are_ignored() -> None:
    task = new_task()
    task.asked({"name": ASK_NAME}, "state-1", 2_000)
    assert task.take_answers({"name": {"action": "accept"}}, 3_000) == {
        "name": {"action": "accept"}
    }
    assert task.status is Status.WORKING and task.inputs == {}
    assert task.take_answers({"name": {"action": "accept"}}, 3_500) == {}
    assert task.updated_ms == 3_000


def test_get_shows_what_each_status_carries() -> None:
    task = new_task()
    task.working(1_500, "step 1 of 3")
    assert task.detailed()["statusMessage"] == "step 1 of 3"
    task.asked({"name": ASK_NAME}, "s", 2_000)
    assert task.detailed()["inputRequests"] == {"name": ASK_NAME}
    assert "requestState" not in task.detailed() and "state" not in task.detailed()
    done = {"content": [], "isError": True, "_meta": {tasks.RELATED_TASK_META: {"taskId": "x"}}}
    task.completed(done, 3_000)
    detail = task.detailed()
    assert detail["status"] == "completed" and detail["result"] == {"content": [], "isError": True}
    assert "inputRequests" not in detail and "statusMessage" not in detail
    failed = new_task()
    failed.failed({"code": -32603, "message": "boom"}, 2_000)
    assert failed.detailed()["error"] == {"code": -32603, "message": "boom"}
    assert "result" not in failed.detailed()


def test_a_record_reads_back_as_the_same_task() -> None:
    task = new_task()
    task.asked({"name": ASK_NAME}, "state-1", 2_000)
    task.working(2_500, "half way")
    assert Task.from_record(task.to_record()) == task
    with pytest.raises(ValueError):
        Task.from_record({"id": "x"})
    with pytest.raises(ValueError):
        Task.from_record([])


@pytest.mark.parametrize("params", [{}, {"taskId": ""}, {"taskId": 7}])
def test_a_task_id_must_be_a_non_empty_string(params: dict) -> None:
    with pytest.raises(InvalidParams):
        tasks.read_task_id(params)


def test_progress_becomes_a_status_message() -> None:
    assert tasks.progress_message({"progress": 1, "total": 3, "message": "loading"}) == "loading"
    assert tasks.progress_message({"progress": 1, "total": 3}) == "1/3"
    assert tasks.progress_message({"progress": 2.5}) == "2.5"
    assert tasks.progress_message({"progress": True}) is None


def test_task_ids_are_unguessable_and_header_safe() -> None:
    ids = {tasks.new_task_id() for _ in range(100)}
    assert len(ids) == 100
    assert all(i.isascii() and len(i) > 30 for i in ids)


def test_a_call_ends_its_task_completed_failed_over_the_cap_or_not_once_cancelled() -> None:
    result = {"content": [{"type": "text", "text": "done"}], "resultType": "complete"}
    task = new_task()
    assert task.ended(2_000, result=result, max_result_bytes=1_000)
    assert task.status is Status.COMPLETED
    assert task.result == {"content": [{"type": "text", "text": "done"}]}  # no envelope
    task = new_task()
    assert task.ended(2_000, result=result, max_result_bytes=10)
    assert task.status is Status.FAILED and task.result is None
    assert task.error is not None and task.error["data"]["reason"] == "max_task_result_bytes"
    task = new_task()
    assert task.ended(2_000, error={"code": -32603, "message": "lost"}, max_result_bytes=10)
    assert task.status is Status.FAILED and task.error == {"code": -32603, "message": "lost"}
    task = new_task()
    task.cancelled(2_000)
    assert not task.ended(3_000, result=result, max_result_bytes=1_000)
    assert task.status is Status.CANCELLED and task.result is None
