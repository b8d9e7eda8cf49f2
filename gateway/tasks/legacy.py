"""A 2026 task whose source is a legacy task: the upstream is itself task-capable.

A tool whose upstream marks `execution.taskSupport` (2025-11-25 tasks) is called with
task augmentation on an upstream session the run keeps for the task's life (legacy
task ids are scoped to their session). The server answers a legacy `CreateTaskResult`;
the run then calls the blocking legacy `tasks/result` in the background: the
questions the server asks on that stream (`elicitation/create` with its
`related-task`; any other is answered as outside a client request) are published
as the task's `inputRequests`, each answer from
`tasks/update` goes back as the response to its request as it arrives, and the same
stream finally carries the tool's result (or its JSON-RPC error). Progress and the
legacy `notifications/tasks/status` become the `statusMessage`. A cancel is the
legacy `tasks/cancel`, and the session is closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog

from gateway import clock as clocks
from gateway.aio import cancel_and_wait, spawn
from gateway.config import UpstreamConfig
from gateway.errors import UpstreamError, UpstreamTimeout
from gateway.protocol import jsonrpc, keys, legacy_tasks, methods, tasks, translate
from gateway.protocol.inbound import FrontRequest
from gateway.protocol.jsonrpc import RequestId
from gateway.protocol.outside import answer_outside_call
from gateway.protocol.tasks import Task, TaskEnded
from gateway.tasks.run import TaskEnds, Write
from gateway.upstream.port import Inbox, StreamCursor, StreamEnd, UpstreamPool, UpstreamSession

log = structlog.get_logger("gateway.tasks")

#: A legacy server's news of its task (its `statusMessage` becomes the 2026 task's).
LEGACY_STATUS = "notifications/tasks/status"


class LegacyTaskRun(TaskEnds):
    """One legacy task of an upstream, run as the source of one 2026 task."""

    source = "legacy task"

    def __init__(
        self,
        *,
        pool: UpstreamPool,
        upstream: UpstreamConfig,
        front: FrontRequest,
        principal: str,
        clock: clocks.Clock,
        ttl_ms: int,
        max_result_bytes: int,
        write: Write,
        on_end: Callable[[LegacyTaskRun], None],
    ) -> None:
        self.pool = pool
        self.upstream = upstream
        self.front = front
        self.principal = principal
        self.clock = clock
        self.ttl_ms = ttl_ms
        self.max_result_bytes = max_result_bytes
        self.write = write
        self.on_end = on_end
        self.rules = upstream.rules_for(front.method, front.target)
        self.task: Task | None = None
        self.follower: asyncio.Task[None] | None = None
        self.session: UpstreamSession | None = None
        self.inbox = Inbox()
        self.legacy_id = ""
        # The server's open questions: by key, its request id and method.
        self.pending: dict[str, tuple[RequestId, str]] = {}
        self.stopping = False  # cancelled, shut down or ended elsewhere: `stop` ends the session

    def now(self) -> int:
        return self.clock.wall_ms()

    async def begin(self) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """Call the tool with task augmentation: the legacy task (its `task` object), or
        None and the result when the server answered at once.

        Raises:
            RpcError: the upstream's error, translated; UpstreamError.
        """
        session = self.session = await self.pool.acquire(
            self.front.envelope.capabilities, self.principal
        )
        session.attach(self.inbox)
        try:
            # Questions held for the session's caller come before the task exists, with
            # no client to ask: answered as outside any call (the session is retired).
            for question in session.held.lapse():
                answer = answer_outside_call(question)
                if answer is not None:
                    await session.send(answer)
            params = translate.upstream_params(self.front, None)
            params["task"] = {"ttl": self.ttl_ms}
            reply = await self._request("tools/call", params)
            if isinstance(reply.get("error"), dict):
                raise translate.translate_error(reply["error"])
            result = reply.get("result")
            result = result if isinstance(result, dict) else {}
            task = legacy_tasks.legacy_task(result)
            if task is None:  # answered as a plain call
                self._let_go(reuse=True)
                return None, result
            self.legacy_id = task["taskId"]
            return task, result
        except BaseException:
            self._let_go(reuse=False)
            raise

    async def _request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send a request on the task's session; its response, within the upstream's
        `timeout_s` (what else the server says meanwhile is not this request's).

        Raises:
            UpstreamError, UpstreamTimeout
        """
        session = self.session
        assert session is not None
        rid = session.next_id()
        message = jsonrpc.request(rid, method, params)
        try:
            async with clocks.timeout(self.clock, self.upstream.timeout_s):
                await session.start(message, self.inbox, StreamCursor(), self.front.trace)
                while True:
                    item = await self.inbox.get()
                    if isinstance(item, StreamEnd):
                        raise item.error
                    if item.get("id") == rid and "method" not in item:
                        return item
                    answer = answer_outside_call(item)  # before the task: no client to ask
                    if answer is not None:
                        await session.send(answer)
        except TimeoutError:
            raise UpstreamTimeout(
                f"the upstream did not answer {method} within {self.upstream.timeout_s:g} s"
            ) from None

    async def adopt(self, task: Task) -> None:
        """The 2026 task exists (its record written): follow the legacy one to its end."""
        self.task = task
        self.follower = spawn(self._follow(task), name=f"task-{task.id}")

    async def give(self, responses: dict[str, Any]) -> None:
        """`tasks/update`'s answers: each goes to the server's waiting request at once."""
        task, session = self.task, self.session
        if task is None or session is None:
            return
        try:
            answers = task.take_answers(responses, self.now())
        except TaskEnded:
            return
        if not answers:
            return
        await self.write(task)
        for key, answer in answers.items():
            rid, method = self.pending.pop(key)
            result = legacy_tasks.legacy_answer(method, answer)
            try:
                await session.send({"jsonrpc": "2.0", "id": rid, "result": result})
            except UpstreamError as exc:
                log.info("legacy_task_answer_failed", task=task.id, error=str(exc))

    async def stop(self, reason: str) -> None:
        """Stop following the legacy task; cancel it upstream and close its session."""
        self.stopping = True
        await cancel_and_wait(self.follower)
        await self._cancel_upstream(reason)
        self._let_go(reuse=False)

    async def cancel_upstream(self, reason: str = "task not created") -> None:
        """Cancel the legacy task upstream and close its session (the 2026 task was never
        created: its record could not be written)."""
        self.stopping = True
        await self._cancel_upstream(reason)
        self._let_go(reuse=False)

    async def _cancel_upstream(self, reason: str) -> None:
        """The legacy `tasks/cancel` (best effort: the session is closed after it)."""
        if self.session is None or not self.legacy_id:
            return
        try:
            reply = await self._request("tasks/cancel", {"taskId": self.legacy_id})
            log.debug("legacy_task_cancelled", reason=reason, error=reply.get("error"))
        except UpstreamError as exc:
            log.info("legacy_task_cancel_failed", reason=reason, error=str(exc))

    def _let_go(self, *, reuse: bool) -> None:
        session, self.session = self.session, None
        if session is not None:
            session.detach(self.inbox)
            self.pool.release(session, reuse=reuse)

    # -- the legacy task's stream ----------------------------------------------------------

    async def _follow(self, task: Task) -> None:
        expires = self.clock.monotonic() + max(0.0, (task.expires_ms - self.now()) / 1000)
        reuse = False
        try:
            async with clocks.deadline(self.clock, expires):
                reuse = await self._result(task)
        except TimeoutError:
            log.info("task_expired", task=task.id)
            await self._cancel_upstream("expired")
        except TaskEnded:
            pass
        except Exception:  # noqa: BLE001 - a defect must not leave the task working for ever
            log.exception("task_run_failed", task=task.id)
            await self._end(task, error={"code": -32603, "message": "Internal error"})
        finally:
            if not self.stopping:  # else the cancel or shutdown lets go of the session
                self._let_go(reuse=reuse)
            self.on_end(self)

    async def _result(self, task: Task) -> bool:
        """Read the legacy `tasks/result` stream to the task's end; whether the session is
        fit for reuse afterwards."""
        session = self.session
        assert session is not None
        rid = session.next_id()
        message = jsonrpc.request(rid, "tasks/result", {"taskId": self.legacy_id})
        await session.start(message, self.inbox, StreamCursor(), self.front.trace)
        while True:
            item = await self.inbox.get()
            if isinstance(item, StreamEnd):
                error = {"code": -32603, "message": f"The upstream task was lost: {item.error}"}
                await self._end(task, error=error)
                return False
            if item.get("id") == rid and "method" not in item:
                if isinstance(item.get("error"), dict):
                    error = translate.translate_error(item["error"]).error_object()
                    await self._end(task, error=error)
                else:
                    result = item.get("result")
                    await self._end(task, result=result if isinstance(result, dict) else {})
                return True
            await self._heard(task, session, item)

    async def _heard(self, task: Task, session: UpstreamSession, item: dict[str, Any]) -> None:
        """A message of the server other than the result: a question, or news."""
        method = item.get("method")
        params = item.get("params") if isinstance(item.get("params"), dict) else {}
        assert isinstance(params, dict)
        if "id" in item and isinstance(method, str):
            if method in methods.INPUT and legacy_tasks.related_task(params) == self.legacy_id:
                key = keys.assign_key(method, params, self.rules, [*self.pending, *task.used_keys])
                self.pending[key] = (item["id"], method)
                asked = {task.call_keys[k]: v for k, v in task.inputs.items()}
                asked[key] = translate.input_request(method, params)
                task.asked(asked, None, self.now())
                await self.write(task)
                return
            # Not about the task (a server asking its session's client something, e.g.
            # roots at the start): answered as outside any client request.
            answer = answer_outside_call(item)
            if answer is not None:
                await session.send(answer)
            return
        message = None
        if method == "notifications/progress":
            message = tasks.progress_message(params)
        elif method == LEGACY_STATUS and isinstance(params.get("statusMessage"), str):
            message = params["statusMessage"]
        if message is not None:
            task.working(self.now(), message)
            await self.write(task)
