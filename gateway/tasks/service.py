"""The tasks extension's front: which `tools/call` becomes a task, and `tasks/*`.

A tool with a task policy (`tools.<name>.task`) called by a client that declared the
extension in the request starts as any call; if it is still running after the policy's
`after_s` it becomes a task: its record is written (sealed, as `requestState` is) and
only then is `CreateTaskResult` answered, so a `tasks/get` on any replica finds it. A
question asked sooner is an ordinary MRTR round; a result given sooner is the answer
(for a `required` tool, a task created completed). A client that did not declare the
extension gets today's behaviour for an `optional` tool, and -32021 for a `required` one.

`tasks/get`, `tasks/update` and `tasks/cancel` are gated on the extension first (-32021),
then find the task: unknown, expired and another principal's are one error (-32602).
The owner's run (`gateway.tasks.run`) takes the answers and the cancel; on a fleet,
another replica's are forwarded to it. When the owner dies, a task whose call was
running ends `failed`; one whose call waits for answers is carried on by the replica
its answers reach (from the round's `requestState` in the record), once: the store's
`take` decides who.
Caps: running tasks per replica (`limits.max_tasks`) and per principal on it
(`limits.max_tasks_per_principal`), a result's size (`limits.max_task_result_bytes`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from typing import Any

import structlog

from gateway import clock as clocks
from gateway.aio import cancel_and_wait, spawn
from gateway.audit.trail import OFF, Audit, acting
from gateway.calls.bridge import Bridge
from gateway.calls.runner import Notifier
from gateway.config import (
    NO_TASKS,
    TASK_OPTIONAL,
    TASK_REQUIRED,
    LimitsConfig,
    TaskPolicy,
    UpstreamConfig,
)
from gateway.errors import (
    Draining,
    InvalidRequestState,
    PrincipalTasksBusy,
    StoreError,
    TasksFull,
    TasksHeldBack,
)
from gateway.fleet import messages
from gateway.fleet.port import Bus
from gateway.protocol import (
    approval,
    formats,
    inputs,
    jsonrpc,
    legacy_tasks,
    state,
    tasks,
    translate,
)
from gateway.protocol.audit import TaskChanged, Who
from gateway.protocol.formats import Kind
from gateway.protocol.inbound import PROTOCOL_VERSION_KEY, FrontRequest, read_envelope
from gateway.protocol.methods import NAME_FIELD
from gateway.protocol.tasks import ACK, Task
from gateway.protocol.versions import Version
from gateway.quota import Quota
from gateway.store.tasks import TaskStore
from gateway.tasks.legacy import LegacyTaskRun
from gateway.tasks.run import TaskRun
from gateway.upstream.port import UpstreamPool

log = structlog.get_logger("gateway.tasks")

#: The prefix of a sealed task record: the `requestState` keys, another kind of token.
RECORD_PREFIX = "tk1."


class Tasks:
    def __init__(
        self,
        *,
        bridge: Bridge,
        store: TaskStore,
        codec: state.StateCodec,
        limits: LimitsConfig,
        owner: str,
        pools: Mapping[str, UpstreamPool],
        bus: Bus,
        audit: Audit = OFF,
    ) -> None:
        """`owner`: this replica, as records name it; `bus`: the other replicas (a task's
        answers and cancel go to its owner through their inboxes; alone, the fleet of
        one), and the fleet's format level (no task while a replica of the previous
        release, which knows none, still lives)."""
        self.bridge = bridge
        self.audit = audit  # told each task's changes, as its record is written
        self._callers: dict[str, Who | None] = {}  # who each task run here is for
        self.store = store
        self.codec = codec
        self.limits = limits
        self.owner = owner
        self.bus = bus
        self.level = bus.level
        self.metrics = bridge.metrics
        self.metrics.tasks.set_function(lambda: float(len(self.runs)))
        self.pools = pools
        self.upstreams = {u.name: u for u in bridge.config.upstreams}
        self.runs: dict[str, TaskRun | LegacyTaskRun] = {}  # the tasks run here, by id
        # Calls that are, or may become, tasks here.
        self.quota = Quota(
            limits.max_tasks,
            limits.max_tasks_per_principal,
            full=TasksFull,
            busy=PrincipalTasksBusy,
        )
        self._locks: dict[str, asyncio.Lock] = {}

    @property
    def clock(self) -> clocks.Clock:
        return self.bridge.clock

    # -- tools/call ----------------------------------------------------------------------

    def call(
        self,
        upstream: UpstreamConfig,
        front: FrontRequest,
        principal: str,
        notify: Notifier,
        task_support: str | None = None,
    ) -> Awaitable[dict[str, Any]]:
        """A tool call, run as a task where its policy and the client say so, or where
        the upstream runs the tool as a legacy task (`task_support`: the tool's
        `execution.taskSupport` in the upstream's listing): its result, to await. (A call
        that is no task is the bridge's coroutine itself, not one of ours around it: a
        frame fewer to resume at every wake of the call.)

        Raises:
            RpcError: as `Bridge.handle`; -32021 for a `required` tool without the
            extension; TasksFull, PrincipalTasksBusy at the caps.
        """
        self.audit.act_for(principal)  # what the trail records names the caller
        policy = upstream.target(front.method, front.target).task
        if front.method != "tools/call":
            policy, task_support = NO_TASKS, None
        if task_support is not None:
            return self._declared(upstream, front, principal, notify, policy, task_support)
        return self._served(upstream, front, principal, notify, policy)

    async def _declared(
        self,
        upstream: UpstreamConfig,
        front: FrontRequest,
        principal: str,
        notify: Notifier,
        policy: TaskPolicy,
        task_support: str,
    ) -> dict[str, Any]:
        """A call of a tool whose listing declares its task support: the upstream's
        legacy task where it runs them, else as any other call."""
        if await self._serves_legacy_tasks(upstream):
            if front.envelope.tasks and self.level.served(Kind.TASK):
                return await self._legacy(upstream, front, principal, policy)
            if task_support == TASK_REQUIRED:
                if front.envelope.tasks:
                    raise TasksHeldBack()
                raise tasks.extension_required(f"The tool {front.target!r}")
            return await self.bridge.handle(upstream, front, principal, notify)
        return await self._served(upstream, front, principal, notify, policy)

    def _served(
        self,
        upstream: UpstreamConfig,
        front: FrontRequest,
        principal: str,
        notify: Notifier,
        policy: TaskPolicy,
    ) -> Awaitable[dict[str, Any]]:
        """A call not run as the upstream's legacy task: through the bridge, or as a task
        of the gateway's where its policy and the client say so."""
        if not front.envelope.tasks or not policy.enabled:
            if policy.support == TASK_REQUIRED:
                raise tasks.extension_required(f"The tool {front.target!r}")
            return self.bridge.handle(upstream, front, principal, notify)
        if not self.level.served(Kind.TASK):  # a replica of the previous release still lives
            if policy.support == TASK_REQUIRED:
                raise TasksHeldBack()
            return self.bridge.handle(upstream, front, principal, notify)
        if self.bridge.draining and "requestState" not in front.params:
            raise Draining()  # refused now, rather than as a task failed at once
        return self._as_task(upstream, front, principal, policy)

    async def _as_task(
        self, upstream: UpstreamConfig, front: FrontRequest, principal: str, policy: TaskPolicy
    ) -> dict[str, Any]:
        """A call run as a task: its result when it comes within the policy's wait, else
        the task created for it."""
        self.quota.take(principal)
        run = TaskRun(
            bridge=self.bridge,
            upstream=upstream,
            front=front,
            principal=principal,
            max_result_bytes=self.limits.max_task_result_bytes,
            answer_within_s=self.limits.suspension_ttl_s,
            write=self._write,
            on_end=self._ended,
        )
        adopted = False
        try:
            round_ = run.start()
            try:
                async with clocks.timeout(self.clock, policy.after_s):
                    await asyncio.wait({round_})  # its outcome, or its error, is read below
            except TimeoutError:
                pass
            except asyncio.CancelledError:
                await cancel_and_wait(round_)  # the client left before it was a task
                raise
            if round_.done():
                result = round_.result()  # raises the round's error: the request's
                # An approval the gateway asks is the task's first question, not an MRTR round.
                asking = approval.is_approval_state(result.get("requestState"))
                if not asking and (
                    result.get("resultType") == "input_required" or policy.support == TASK_OPTIONAL
                ):
                    return result  # an MRTR round, or an optional tool's quick answer
            now = self.clock.wall_ms()
            task = Task(
                id=tasks.new_task_id(),
                principal=principal,
                upstream=upstream.name,
                owner=self.owner,
                created_ms=now,
                ttl_ms=round(policy.ttl_s * 1000),
                poll_ms=policy.poll_interval_ms,
                request=_request_of(front),
                changes=["created"],
            )
            self._callers[task.id] = acting()
            run.task = task
            try:
                await self._write(task)  # found by tasks/get before the client hears of it
            except BaseException:
                await cancel_and_wait(round_)
                raise
            self.runs[task.id] = run
            adopted = True
            await run.adopt(task)
            log.info("task_created", task=task.id, tool=front.target)
            return task.created()
        finally:
            if not adopted:
                self.quota.release(principal)

    async def _serves_legacy_tasks(self, upstream: UpstreamConfig) -> bool:
        info = await self.pools[upstream.name].upstream_info()
        return legacy_tasks.serves_legacy_tasks(info.capabilities)

    async def _legacy(
        self, upstream: UpstreamConfig, front: FrontRequest, principal: str, policy: TaskPolicy
    ) -> dict[str, Any]:
        """A task whose source is the upstream's own legacy task (`gateway.tasks.legacy`)."""
        self.quota.take(principal)
        pool = self.pools[upstream.name]
        run = LegacyTaskRun(
            pool=pool,
            upstream=upstream,
            front=front,
            principal=principal,
            clock=self.clock,
            ttl_ms=round(policy.ttl_s * 1000),
            max_result_bytes=self.limits.max_task_result_bytes,
            write=self._write,
            on_end=self._ended,
        )
        adopted = False
        try:
            legacy, result = await run.begin()
            if legacy is None:  # the server answered at once
                info = pool.info
                return translate.decorate_result(
                    front.method,
                    result,
                    server_info=info.server_info if info is not None else None,
                    cache=upstream.cache,
                )
            status = legacy.get("statusMessage")
            task = Task(
                id=tasks.new_task_id(),
                principal=principal,
                upstream=upstream.name,
                owner=self.owner,
                created_ms=self.clock.wall_ms(),
                # As the server keeps its task: the 2026 task cannot outlive its source.
                ttl_ms=_ms(legacy.get("ttl"), round(policy.ttl_s * 1000)),
                poll_ms=_ms(legacy.get("pollInterval"), policy.poll_interval_ms),
                message=status if isinstance(status, str) else None,
                changes=["created"],
            )
            self._callers[task.id] = acting()
            run.task = task
            try:
                await self._write(task)
            except BaseException:
                await run.cancel_upstream()
                raise
            self.runs[task.id] = run
            adopted = True
            await run.adopt(task)
            log.info("task_created", task=task.id, tool=front.target, source="legacy task")
            return task.created()
        finally:
            if not adopted:
                self.quota.release(principal)

    def _ended(self, run: TaskRun | LegacyTaskRun) -> None:
        task = run.task
        if task is not None:
            self.runs.pop(task.id, None)
            self._locks.pop(task.id, None)
            if not task.final:  # its time to live passed
                task.changes.append("expired")
                self._recorded(task)
            self._callers.pop(task.id, None)
            self.metrics.task_endings.labels(str(task.status) if task.final else "expired").inc()
        self.quota.release(run.principal)

    # -- tasks/* -------------------------------------------------------------------------

    async def serve(self, front: FrontRequest, principal: str) -> dict[str, Any]:
        """`tasks/get`, `tasks/update` or `tasks/cancel`.

        Raises:
            MissingClientCapability: the request did not declare the extension.
            InvalidParams: no such task (unknown, expired, another principal's), or
                malformed params or answers.
        """
        if not front.envelope.tasks:
            raise tasks.extension_required(front.method)
        self.audit.act_for(principal)
        task_id = tasks.read_task_id(front.params)
        if front.method == "tasks/update":
            responses = tasks.read_responses(front.params)
            task = await self.find(task_id, principal)
            for key, answer in responses.items():
                if key in task.inputs:
                    inputs.check_shape(key, str(task.inputs[key].get("method")), answer)
            if not task.final:
                await self._to_owner(task, answers=responses)
            return dict(ACK)
        task = await self.find(task_id, principal)
        if front.method == "tasks/cancel":
            if not task.final:
                await self._to_owner(task)
            return dict(ACK)
        return task.detailed()

    def _hidden(self, task: Task) -> bool:
        """Whether the task's tool is hidden now (a rule changed since it was created):
        its task is then unknown, as the tool is (`gateway.catalog`)."""
        upstream = self.upstreams.get(task.upstream)
        request = task.request
        if upstream is None or upstream.exposure.everything or request is None:
            return False
        method = str(request.get("method"))
        member = NAME_FIELD.get(method)
        name = (request.get("params") or {}).get(member) if member else None
        return isinstance(name, str) and not upstream.exposure.shows(method, name)

    async def find(self, task_id: str, principal: str) -> Task:
        """The task, as its record says now.

        Raises:
            InvalidParams: unknown, expired, or another principal's (one error for all).
        """
        run = self.runs.get(task_id)
        task = run.task if run is not None else await self._read(task_id)
        if task is None or task.principal != principal or self._hidden(task):
            raise tasks.unknown_task()
        if task.expires_ms <= self.clock.wall_ms():
            raise tasks.unknown_task()
        if run is None and not task.final and task.owner != self.owner:
            if not task.resumable and not await self.bus.alive(task.owner):
                task = await self._owner_lost(task)
        return task

    async def _to_owner(self, task: Task, *, answers: dict[str, Any] | None = None) -> None:
        """Answers (or, without them, a cancel) for the task's run: here, or pushed into
        its owner's inbox. An owner without a heartbeat lost the task's call, unless the
        call waits for answers: then this replica carries it on."""
        for _ in range(2):  # a second look once another replica carried it on first
            run = self.runs.get(task.id)
            if run is not None:
                await (run.cancel() if answers is None else run.give(answers))
                return
            if task.owner == self.owner:
                return  # its run has ended: the record is being written final
            message = messages.ForTask(
                task=task.id,
                principal=task.principal,
                answers=answers or {},
                cancel=answers is None,
            )
            version = self.bus.level.version(Kind.MESSAGE)
            if await self.bus.deliver(task.owner, messages.encode(message, version)):
                return
            if not task.resumable:
                await self._owner_lost(task)
                return
            if not await self._carry_on(task):
                fresh = await self._read(task.id)
                if fresh is None or fresh.final:
                    return
                task = fresh

    async def told(self, message: messages.ForTask) -> None:
        """Another replica's `tasks/update` or `tasks/cancel` for a task run here."""
        run = self.runs.get(message.task)
        if run is None or run.principal != message.principal:
            return  # ended meanwhile (its record says how)
        await (run.cancel() if message.cancel else run.give(message.answers))

    async def _carry_on(self, task: Task) -> bool:
        """Run here the call of a task whose owner died while it waited for answers; False
        when another replica took it first (or it ended)."""
        upstream = self.upstreams.get(task.upstream)
        try:
            front = _front_of(task.request or {})
        except ValueError:
            upstream = None
        if upstream is None:  # a record this configuration cannot carry on
            await self._owner_lost(task)
            return True
        if not await self.store.take(task.id, task.owner, self.owner):
            return False
        dead, task.owner = task.owner, self.owner
        run = TaskRun(
            bridge=self.bridge,
            upstream=upstream,
            front=front,
            principal=task.principal,
            max_result_bytes=self.limits.max_task_result_bytes,
            answer_within_s=self.limits.suspension_ttl_s,
            write=self._write,
            on_end=self._ended,
        )
        self.quota.add(task.principal)  # over the caps, rather than lose the call
        self.runs[task.id] = run
        self._callers[task.id] = acting()
        run.carry_on(task)
        await self._write(task)
        log.warning("task_carried_on", task=task.id, dead_owner=dead)
        return True

    async def _owner_lost(self, task: Task) -> Task:
        """The replica running the task's call died with the call: the task fails, by
        this replica's hand (unless another replica decided first: then as it did)."""
        if not await self.store.take(task.id, task.owner, self.owner):
            return await self._read(task.id) or task
        task.owner = self.owner
        task.failed(
            {
                "code": -32603,
                "message": "The task's call was lost: the gateway replica running it "
                "stopped; start the call again",
            },
            self.clock.wall_ms(),
        )
        log.warning("task_owner_lost", task=task.id)
        await self._write(task)
        return task

    # -- records -------------------------------------------------------------------------

    def _recorded(self, task: Task) -> None:
        """The audit trail told the task's changes since its last record (once each)."""
        changes, task.changes = task.changes, []
        if not self.audit.on:
            return
        who = acting() or self._callers.get(task.id)
        request = task.request or {}
        params = request.get("params") if isinstance(request.get("params"), dict) else {}
        name = params.get("name") if isinstance(params, dict) else None
        for change in changes:
            self.audit.emit(
                TaskChanged(
                    principal=who,
                    task_id=task.id,
                    change=change,
                    upstream=task.upstream,
                    target=name if isinstance(name, str) else None,
                )
            )

    async def _write(self, task: Task) -> None:
        """Seal and keep the task's record (one write at a time per task: the last one
        made holds the newest state). A record another replica ended (its owner taken
        for dead) is not written over: the call it ran here is stopped instead."""
        lock = self._locks.setdefault(task.id, asyncio.Lock())
        async with lock:
            # Replicas that know no tasks never read a task's record: one made before a
            # rollback began is still written in the version its readers know.
            level = self.level.level if self.level.known(Kind.TASK) else formats.LEVEL
            version = formats.written(Kind.TASK, level)
            record = formats.stamped(Kind.TASK, task.to_record(), version)
            sealed = self.codec.seal(jsonrpc.dumps(record))
            written = await self.store.put(
                task.id, sealed, task.expires_ms, final=task.final, owner=task.owner
            )
            if written:
                self._recorded(task)
        run = self.runs.get(task.id)
        if not written and run is not None and not run.stopping:
            log.warning("task_ended_elsewhere", task=task.id)
            spawn(run.stop("ended by another replica"), name=f"task-stop-{task.id}")

    async def _read(self, task_id: str) -> Task | None:
        sealed = await self.store.get(task_id)
        if sealed is None:
            return None
        try:
            record = jsonrpc.loads(self.codec.unseal(sealed))
            if not isinstance(record, dict):
                raise ValueError("a task record that is not an object")
            _, fields = formats.unstamped(Kind.TASK, record)
            return Task.from_record(fields)
        except (InvalidRequestState, ValueError):
            log.warning("task_record_unreadable", task=task_id)
            return None

    async def close(self) -> None:
        """Shut down: every task run here fails, its call cancelled upstream."""
        for run in list(self.runs.values()):
            try:
                await run.shut_down()
            except StoreError as exc:
                log.warning("task_not_failed_at_shutdown", error=str(exc))


def _ms(value: Any, default: int) -> int:
    """A legacy task's duration in milliseconds, or `default` when it gives none."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return default


def _request_of(front: FrontRequest) -> dict[str, Any]:
    """What of the request that started a task its record keeps (for `_front_of`): its
    MRTR members left out, a retry of it carries its own."""
    params = {k: v for k, v in front.params.items() if k not in ("requestState", "inputResponses")}
    return {"id": front.id, "method": front.method, "params": params}


def _front_of(request: dict[str, Any]) -> FrontRequest:
    """The request a task's record keeps, as the front read it (validated then).

    Raises:
        ValueError: a record of another shape.
    """
    params = request.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    version = Version.parse(meta.get(PROTOCOL_VERSION_KEY)) if isinstance(meta, dict) else None
    if version is None or not isinstance(params, dict) or not isinstance(meta, dict):
        raise ValueError("a task's request without its protocol version")
    envelope = read_envelope(version, meta)
    return FrontRequest(request.get("id", 0), str(request.get("method")), params, envelope)
