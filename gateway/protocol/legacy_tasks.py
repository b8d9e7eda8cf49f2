"""A legacy server's own tasks (2025-11-25 `tasks`), sans-IO: the shapes the gateway reads
and writes when a tool the upstream runs as a task is the source of a 2026 task.

Such a tool is marked `execution.taskSupport` in `tools/list`, by a server whose
`initialize` declares `tasks.requests.tools.call`; it is called with task augmentation
and answers a legacy `CreateTaskResult`; the server asks about the task with requests
carrying `related-task` `_meta`, answered with their legacy results. How the gateway
runs one is `gateway.tasks.legacy`'s.
"""

from __future__ import annotations

from typing import Any

from gateway.protocol.tasks import RELATED_TASK_META

#: `execution.taskSupport` values under which a tool is called as a legacy task.
LEGACY_TASK_TOOLS = frozenset({"optional", "required"})


def legacy_support(tool: Any) -> str | None:
    """A `tools/list` entry's `execution.taskSupport` (`required`, `optional`), or None."""
    if not isinstance(tool, dict):
        return None
    execution = tool.get("execution")
    support = execution.get("taskSupport") if isinstance(execution, dict) else None
    return support if support in LEGACY_TASK_TOOLS else None


def serves_legacy_tasks(capabilities: Any) -> bool:
    """Whether an upstream's `initialize` declares `tasks.requests.tools.call`."""
    tasks = capabilities.get("tasks") if isinstance(capabilities, dict) else None
    requests = tasks.get("requests") if isinstance(tasks, dict) else None
    tools = requests.get("tools") if isinstance(requests, dict) else None
    return isinstance(tools, dict) and isinstance(tools.get("call"), dict)


def legacy_task(result: Any) -> dict[str, Any] | None:
    """The `task` of a legacy `CreateTaskResult` (`{task: {taskId, status, ...}}`), or None
    when the server answered the call as a plain one."""
    task = result.get("task") if isinstance(result, dict) else None
    if not isinstance(task, dict) or not isinstance(task.get("taskId"), str):
        return None
    return task


def related_task(params: dict[str, Any]) -> str | None:
    """The legacy task a server request is about (its `related-task` `_meta`), or None."""
    meta = params.get("_meta")
    related = meta.get(RELATED_TASK_META) if isinstance(meta, dict) else None
    task_id = related.get("taskId") if isinstance(related, dict) else None
    return task_id if isinstance(task_id, str) else None


def legacy_answer(method: str, answer: dict[str, Any]) -> dict[str, Any]:
    """The result of a legacy server request from a client's `inputResponses` answer."""
    if method == "elicitation/create":
        result: dict[str, Any] = {"action": answer["action"]}
        if answer["action"] == "accept" and "content" in answer:
            result["content"] = answer["content"]
        return result
    return {k: v for k, v in answer.items() if k != "_meta"}
