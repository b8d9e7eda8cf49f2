"""One task on the replica that owns it: its call driven through the bridge.

The run is the task's MRTR client. It sends the call's first round (or the retry that
became a task), and while the call asks it publishes the questions (`input_required`)
and waits for `tasks/update` to bring answers; each batch of answers goes back as a
retry with the round's `requestState`, so the call core resumes the parked call as
it resumes any. A question still outstanding when a retry answers its siblings stays
published under its key; answers that arrive while a retry is under way wait for the
round it leads to. The record is rewritten at every change, before anyone is told.

Every question the call has open is shown, on every replica: a question that comes
after its round closed (a sibling later than `limits.coalesce_ms`, on a busy server)
finds the call parked, where nobody reads its stream; the run is told as it comes and
sends a retry without answers at once, whose round gathers it with those still open
(`limits.coalesce_ms` more), and the record shows them all. A client waiting to see
every question before it answers is never left waiting for one it is not shown.

A cancel stops the round under way (the call core cancels it upstream) or ends the
parked call (`Bridge.abandon`); the task's TTL does the same, and then forgets it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import structlog

from gateway import clock as clocks
from gateway.aio import cancel_and_wait, spawn
from gateway.calls.bridge import Bridge
from gateway.config import UpstreamConfig
from gateway.errors import GatewayError, InvalidRequestState, RpcError
from gateway.protocol import tasks
from gateway.protocol.inbound import FrontRequest
from gateway.protocol.state import RequestDigest
from gateway.protocol.tasks import Task, TaskEnded
from gateway.upstream.held import is_question
from gateway.upstream.port import Inbox

log = structlog.get_logger("gateway.tasks")

#: The progress token the run asks the call core to relay under: progress becomes the
#: task's `statusMessage` (progress itself is not carried on tasks).
PROGRESS_TOKEN = "task"


Write = Callable[[Task], Awaitable[None]]


class TaskEnds:
    """How a run of a task (the gateway's call, `TaskRun`; a legacy server's own task,
    `gateway.tasks.legacy.LegacyTaskRun`) ends it: cancelled by its client, failed when the
    replica stops, or as its call ended. Each run says how it stops its call (`stop`)."""

    task: Task | None
    write: Write
    max_result_bytes: int
    #: What the run follows, as `task_ended` lines say.
    source: ClassVar[str]

    def now(self) -> int:
        raise NotImplementedError

    async def stop(self, reason: str) -> None:
        raise NotImplementedError

    async def cancel(self) -> None:
        """`tasks/cancel`: the task is cancelled at once, and its call stopped."""
        task = self.task
        if task is None:
            return
        try:
            task.cancelled(self.now())
        except TaskEnded:
            return
        await self.write(task)
        await self.stop("cancelled")

    async def shut_down(self) -> None:
        """The replica stops: the task fails, and its call is stopped with it."""
        task = self.task
        if task is None or not task.ended(
            self.now(), error=REPLICA_STOPPED, max_result_bytes=self.max_result_bytes
        ):
            return
        await self.write(task)
        await self.stop("gateway shutting down")

    async def _end(
        self,
        task: Task,
        *,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> None:
        if not task.ended(
            self.now(), result=result, error=error, max_result_bytes=self.max_result_bytes
        ):
            return  # cancelled meanwhile: that stands
        log.info("task_ended", task=task.id, status=str(task.status), source=self.source)
        await self.write(task)


#: A task whose replica stops fails with this.
REPLICA_STOPPED = {"code": -32603, "message": "The gateway replica running the task stopped"}


class TaskRun(TaskEnds):
    """A task's call on its owner, from the request that started it to its end."""

    source = "call"

    def __init__(
        self,
        *,
        bridge: Bridge,
        upstream: UpstreamConfig,
        front: FrontRequest,
        principal: str,
        max_result_bytes: int,
        answer_within_s: float,
        write: Write,
        on_end: Callable[[TaskRun], None],
    ) -> None:
        self.bridge = bridge
        self.upstream = upstream
        self.principal = principal
        self.max_result_bytes = max_result_bytes
        self.answer_within_s = answer_within_s  # as long as a parked call waits
        self.write = write
        self.on_end = on_end
        envelope = dataclasses.replace(front.envelope, progress_token=PROGRESS_TOKEN)
        # Every round is this request again: the first one as the client sent it (its
        # answers and requestState, if it was a retry), the later ones as retries.
        self.front = dataclasses.replace(front, envelope=envelope)
        self.task: Task | None = None
        self.message: str | None = None  # progress said before the task existed
        self.answers: dict[str, Any] = {}  # by the call's keys, not yet sent
        self.stirred = asyncio.Event()  # answers came, or the parked call asked more
        self.round: asyncio.Task[dict[str, Any]] | None = None
        self.follower: asyncio.Task[None] | None = None
        self._state: str | None = None  # the parked round's requestState
        self.stopping = False  # cancelled, shut down, or ended elsewhere

    @property
    def clock(self) -> clocks.Clock:
        return self.bridge.clock

    def now(self) -> int:
        return self.clock.wall_ms()

    # -- the first round -----------------------------------------------------------------

    def start(self) -> asyncio.Task[dict[str, Any]]:
        """Send the request's own round; its outcome, unless it becomes a task first."""
        self.round = spawn(self._round(self.front), name="task-round")
        return self.round

    async def adopt(self, task: Task) -> None:
        """The round outlived the policy's wait: it is this task now (its record written
        by the caller), followed to its end in the background."""
        self.task = task
        if self.message is not None:
            task.working(self.now(), self.message)
        self.follower = spawn(self._follow(), name=f"task-{task.id}")

    def carry_on(self, task: Task) -> None:
        """The task's owner died while its call waited for answers: this replica now runs
        it from its record (the round's `requestState`), its retries going wherever the
        call can go on (`gateway.calls.routing`: takeover, replay, or lost)."""
        self.task = task
        self._state = task.state
        self.follower = spawn(self._follow(), name=f"task-{task.id}")

    # -- while it runs -------------------------------------------------------------------

    async def give(self, responses: dict[str, Any]) -> None:
        """`tasks/update`'s answers: those to outstanding questions go to the call (now,
        or after the round under way); the others are ignored."""
        task = self.task
        if task is None:
            return
        try:
            answers = task.take_answers(responses, self.now())
        except TaskEnded:
            return
        if not answers:
            return
        self.answers.update(answers)
        await self.write(task)
        self.stirred.set()

    async def stop(self, reason: str) -> None:
        """Stop the call: the round under way cancelled (the call core cancels it
        upstream), or the parked call ended."""
        self.stopping = True
        log.debug("task_run_stopped", reason=reason)
        state = self._state
        await cancel_and_wait(self.follower)
        await cancel_and_wait(self.round)
        if state is None:
            state = _parked_by(self.round)  # a round that parked before the run heard of it
        if state is not None:
            await self.bridge.abandon(self.upstream, state, self.principal, self.front)

    async def _notify(self, notification: dict[str, Any]) -> None:
        if notification.get("method") != "notifications/progress":
            return  # a task's client gets no notifications; logs stay upstream's
        message = tasks.progress_message(notification.get("params") or {})
        if message is None:
            return
        if self.task is None:
            self.message = message
            return
        if message == self.task.message:
            return  # nothing new to write (a record write per notification otherwise)
        try:
            self.task.working(self.now(), message)
        except TaskEnded:
            return
        await self.write(self.task)

    async def _round(self, front: FrontRequest) -> dict[str, Any]:
        return await self.bridge.handle(self.upstream, front, self.principal, self._notify)

    async def _follow(self) -> None:
        task = self.task
        assert task is not None
        expires = self.clock.monotonic() + max(0.0, (task.expires_ms - self.now()) / 1000)
        try:
            async with clocks.deadline(self.clock, expires):
                await self._drive(task, self.round)
        except TimeoutError:
            log.info("task_expired", task=task.id)
            await cancel_and_wait(self.round)
            if self._state is not None:
                await self.bridge.abandon(self.upstream, self._state, self.principal, self.front)
        except TaskEnded:
            pass  # cancelled meanwhile: its cancel stops the call
        except Exception:  # noqa: BLE001 - a defect must not leave the task working for ever
            log.exception("task_run_failed", task=task.id)
            await self._end(task, error={"code": -32603, "message": "Internal error"})
        finally:
            self.on_end(self)

    async def _drive(self, task: Task, round_: asyncio.Task[dict[str, Any]] | None) -> None:
        """Follow the call's rounds to its end; with no round under way (`carry_on`), from
        its parked round, whose questions are published already."""
        while True:
            if round_ is None:
                answers = await self._answers()
            else:
                try:
                    result = await round_
                except InvalidRequestState:
                    # The round's state no longer opens a parked call (it expired, or a
                    # replica that died had resumed it): said as what it means for the task.
                    lost = "The task's call was lost: its round can no longer be resumed"
                    await self._end(task, error={"code": -32603, "message": lost})
                    return
                except RpcError as exc:
                    await self._end(task, error=exc.error_object())
                    return
                except GatewayError as exc:
                    await self._end(task, error={"code": -32603, "message": str(exc)})
                    return
                self._state = None
                if result.get("resultType") != "input_required":
                    await self._end(task, result=result)
                    return
                answers = await self._publish(task, result) or await self._answers()
            if answers is None:
                message = (
                    f"The task's questions were not answered within {self.answer_within_s:g} s "
                    "(limits.suspension_ttl_s); its call was given up"
                )
                reason = {"reason": "suspension_ttl_s"}
                await self._end(task, error={"code": -32603, "message": message, "data": reason})
                if self._state is not None:  # ended now, not at its own deadline a moment later
                    await self.bridge.abandon(
                        self.upstream, self._state, self.principal, self.front
                    )
                return
            retry = dict(self.front.params)
            retry["requestState"] = self._state
            retry["inputResponses"] = answers
            front = dataclasses.replace(self.front, params=retry)
            self._state = None
            round_ = self.round = spawn(self._round(front), name=f"task-round-{task.id}")

    async def _publish(self, task: Task, result: dict[str, Any]) -> dict[str, Any]:
        """The call asks: its questions published, except those whose answers came while
        the round ran (returned, to be sent at once)."""
        requests = result.get("inputRequests") or {}
        state = result.get("requestState")
        if not isinstance(requests, dict) or not isinstance(state, str):
            raise ValueError("an input_required result without inputRequests or requestState")
        self._state = state
        ready = {k: v for k, v in self.answers.items() if k in requests}
        self.answers.clear()
        waiting = {k: v for k, v in requests.items() if k not in ready}
        if waiting:
            task.asked(waiting, state, self.now())
        else:
            task.working(self.now())
        await self.write(task)
        return ready

    async def _answers(self) -> dict[str, Any] | None:
        """The next answers, as soon as any come; as soon as the parked call asks more
        (a question that came after its round closed), those that came, maybe none: the
        retry that carries them gathers the new question into a round the task shows.
        None when nothing came as long as the call can wait parked
        (`limits.suspension_ttl_s`: its deadline ends it then)."""
        inbox = self._parked_inbox()
        if inbox is not None:
            inbox.on_request = self._asked_more
        try:
            async with clocks.timeout(self.clock, self.answer_within_s):
                while not self.answers and not (inbox is not None and _asks(inbox)):
                    self.stirred.clear()
                    await self.stirred.wait()
        except TimeoutError:
            return None
        finally:
            if inbox is not None and inbox.on_request == self._asked_more:
                inbox.on_request = None
        answers, self.answers = self.answers, {}
        return answers

    def _asked_more(self, request: dict[str, Any]) -> None:
        """A server request reached the parked call (`Inbox.on_request`): a question,
        or not (a ping: `_asks` tells)."""
        self.stirred.set()

    def _parked_inbox(self) -> Inbox | None:
        """The inbox of the call the round under `_state` parked, if it is parked here
        (a task carried on after its owner died has its call elsewhere until a retry)."""
        if self._state is None:
            return None
        front = self.front
        digest = RequestDigest(front.method, front.target, front.params.get("arguments"))
        try:
            claims = self.bridge.admission.open(
                self.upstream, self._state, self.principal, digest.value
            )
        except RpcError:
            return None  # expired meanwhile: its deadline ends it
        call = self.bridge.calls.get(claims.call)
        return call.inbox if call is not None else None


def _asks(inbox: Inbox) -> bool:
    """Whether a question of the server's waits in a parked call's inbox, unread."""
    return any(isinstance(item, dict) and is_question(item) for item in inbox.waiting())


def _parked_by(round_: asyncio.Task[dict[str, Any]] | None) -> str | None:
    """The `requestState` of a round that ended parked (answered `input_required`)."""
    if round_ is None or not round_.done() or round_.cancelled() or round_.exception():
        return None
    result = round_.result()
    state = result.get("requestState")
    return (
        state if result.get("resultType") == "input_required" and isinstance(state, str) else None
    )
