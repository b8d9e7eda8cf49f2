"""A legacy server's own tasks: the 2025-11-25 shapes the gateway reads and writes."""

from __future__ import annotations

from gateway.protocol import legacy_tasks
from gateway.protocol.tasks import RELATED_TASK_META


def test_a_legacy_task_tool_is_read_from_its_listing_and_its_server_from_initialize() -> None:
    assert legacy_tasks.legacy_support({"name": "t", "execution": {"taskSupport": "required"}}) == (
        "required"
    )
    assert legacy_tasks.legacy_support({"execution": {"taskSupport": "optional"}}) == "optional"
    assert legacy_tasks.legacy_support({"execution": {"taskSupport": "forbidden"}}) is None
    assert legacy_tasks.legacy_support({"execution": "required"}) is None
    assert legacy_tasks.legacy_support({"name": "t"}) is None
    assert legacy_tasks.serves_legacy_tasks({"tasks": {"requests": {"tools": {"call": {}}}}})
    assert not legacy_tasks.serves_legacy_tasks({"tasks": {"requests": {}}})
    assert not legacy_tasks.serves_legacy_tasks({"tasks": True})


def test_a_legacy_create_task_result_is_told_from_a_plain_result() -> None:
    created = {"task": {"taskId": "up-1", "status": "working", "ttl": 300000}}
    assert legacy_tasks.legacy_task(created) == created["task"]
    assert legacy_tasks.legacy_task({"content": []}) is None
    assert legacy_tasks.legacy_task({"task": {"status": "working"}}) is None


def test_a_question_about_a_legacy_task_names_it_in_its_meta() -> None:
    meta = {"_meta": {RELATED_TASK_META: {"taskId": "up-1"}}, "message": "?"}
    assert legacy_tasks.related_task(meta) == "up-1"
    assert legacy_tasks.related_task({"message": "?"}) is None
    assert legacy_tasks.related_task({"_meta": {RELATED_TASK_META: "up-1"}}) is None


def test_an_answer_goes_back_to_a_legacy_server_in_its_methods_shape() -> None:
    accept = {"action": "accept", "content": {"x": 1}, "_meta": {"k": 1}}
    assert legacy_tasks.legacy_answer("elicitation/create", accept) == {
        "action": "accept",
        "content": {"x": 1},
    }
    decline = {"action": "decline", "content": {"x": 1}}
    assert legacy_tasks.legacy_answer("elicitation/create", decline) == {"action": "decline"}
    roots = {"roots": [{"uri": "file:///a"}], "_meta": {"k": 1}}
    assert legacy_tasks.legacy_answer("roots/list", roots) == {"roots": [{"uri": "file:///a"}]}
