"""The client's diagnostics: why a workload is not admitted and when it could be (explain), who
is asked for its checks' verdicts and whether anyone serves them, and the ways out for a workload
whose workflow does not answer (reset, release)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import PendingActivityState, TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest, ResetWorkflowExecutionRequest
from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError, RPCStatusCode

from admitflow import contract, ids
from admitflow import search_attributes as sa
from admitflow.admission import explain
from admitflow.admission import workload as wl
from admitflow.admission.checks import CheckRequest
from admitflow.admission.cluster_queue import ForceReleaseOutcome
from admitflow.admission.workload import WorkloadReport
from admitflow.api.admission_check import PROVISIONING_REQUEST_CONTROLLER_NAME
from admitflow.client.connection import RPC_TIMEOUT, AdmitflowError, NotAnswering, _cause, _described, _taken
from admitflow.client.reads import LIST_PAGE_SIZE, MOVE_PAUSE, MOVES_FOLLOWED, Reads, _finished, _lq_key
from admitflow.client.trouble import UnansweredWorkload, WorkflowTrouble, _task_failing
from admitflow.admission.protocol import ForceRelease, StatusQuery
from admitflow.admission.protocol import PendingWorkload

# The contract: a workload asks a check's controller through this activity, on the task queue
# named by the AdmissionCheck's controllerName.
ADMISSION_CHECK_ACTIVITY = contract.ADMISSION_CHECK
# A live worker polls again within a minute (a poll waits up to 60 s on the server); a task queue
# whose last poll is older than this has nobody serving it.
SERVED_WITHIN = timedelta(seconds=90)
_OUTSTANDING = {
    PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED: "scheduled",
    PendingActivityState.PENDING_ACTIVITY_STATE_STARTED: "started",
}


@dataclass(frozen=True)
class ControllerCall:
    """What a workload waits for from a check's controller: the call of activity `admission_check`
    on the controller's task queue if one is outstanding (a Pending check of a workload holding
    quota), or the check's `Active` condition (`inactive`); and whether any worker polls that queue."""

    check: str
    controller: str
    activity_state: str | None = None  # "scheduled" (no worker took it yet) or "started"; None: no call outstanding
    activity_attempt: int | None = None  # Temporal's attempt of that activity (its retries of the call)
    worker: str = ""  # identity of the worker that last took it
    last_error: str = ""  # why the previous attempt failed
    pollers: int = 0
    last_poll: datetime | None = None
    served: bool = False
    lookup_error: str = ""  # the task queue could not be described
    inactive: bool = False  # the AdmissionCheck is not Active: the workload's ClusterQueue admits nothing new

    @property
    def unanswered(self) -> bool:
        """Nobody serves the controller: a person has to act in its place."""
        return not self.served and not self.lookup_error


class Diagnostics(Reads):
    """Why a workload waits and for whom, and the ways out for one whose workflow does not answer."""

    # --- who is asked for a verdict -------------------------------------------------------------

    async def controller_calls(self, report: WorkloadReport, now: datetime | None = None) -> list[ControllerCall]:
        """For each Pending check of a workload that holds quota (the built-in ProvisioningRequest
        check aside): who was asked, the call still outstanding, and whether anyone serves it."""
        status = report.status
        if not wl.holds_quota(status):
            return []
        pending = [c.name for c in status.admission_checks or () if c.state == "Pending"]
        if not pending:
            return []
        catalog = {ac.metadata.name: ac.spec.controller_name for ac in await self.catalog_objects("AdmissionCheck")}
        controllers = {
            name: catalog[name]
            for name in pending
            if name in catalog and catalog[name] != PROVISIONING_REQUEST_CONTROLLER_NAME
        }
        if not controllers:
            return []
        handle = self.client.get_workflow_handle(ids.workload_id(report.key))
        desc = await handle.describe()
        activities = [
            a
            for a in desc.raw_description.pending_activities
            if a.activity_type.name == ADMISSION_CHECK_ACTIVITY and a.state in _OUTSTANDING
        ]
        calls = await self._calls_by_check(handle, activities, controllers)
        out = []
        for served in await self._served(controllers, now):
            a = calls.get(served.check)
            if a is None:
                out.append(served)
                continue
            out.append(
                replace(
                    served,
                    activity_state=_OUTSTANDING[a.state],
                    activity_attempt=a.attempt,
                    worker=a.last_worker_identity,
                    last_error=a.last_failure.message.splitlines()[0] if a.last_failure.message else "",
                )
            )
        return out

    async def inactive_checks(self, report: WorkloadReport, now: datetime | None = None) -> list[ControllerCall]:
        """The AdmissionChecks that keep a waiting workload's ClusterQueue from admitting anything
        because they are not `Active` (Kueue's `AdmissionCheckInactive`), with whether anyone serves their controllers."""
        status = report.status
        if wl.holds_quota(status) or status.has_condition("Finished"):
            return []
        lqs = await self.catalog_objects("LocalQueue", _lq_key(report))
        cqs = await self.catalog_objects("ClusterQueue", lqs[0].spec.cluster_queue) if lqs else []
        strategy = cqs[0].spec.admission_checks_strategy if cqs else None
        if strategy is None:
            return []
        wanted = {rule.name for rule in strategy.admission_checks}
        controllers = {
            ac.metadata.name: ac.spec.controller_name
            for ac in await self.catalog_objects("AdmissionCheck")
            if ac.metadata.name in wanted
            and not ac.active
            and ac.spec.controller_name != PROVISIONING_REQUEST_CONTROLLER_NAME
        }
        return [replace(c, inactive=True) for c in await self._served(controllers, now)]

    async def _served(self, controllers: dict[str, str], now: datetime | None = None) -> list[ControllerCall]:
        """For each check (name -> its controller's task queue): whether any worker polls that queue."""
        queues = sorted(set(controllers.values()))
        polled = dict(zip(queues, await asyncio.gather(*(self._pollers(q) for q in queues)), strict=True))
        now = now or datetime.now(UTC)
        out = []
        for name, queue in controllers.items():
            pollers, last_poll, lookup_error = polled[queue]
            out.append(
                ControllerCall(
                    check=name,
                    controller=queue,
                    pollers=pollers,
                    last_poll=last_poll,
                    served=last_poll is not None and now - last_poll <= SERVED_WITHIN,
                    lookup_error=lookup_error,
                )
            )
        return out

    async def _calls_by_check(
        self, handle: Any, activities: list[PendingActivityInfo], controllers: dict[str, str]
    ) -> dict[str, PendingActivityInfo]:
        """Which check each outstanding `admission_check` activity asks about. Its task queue tells
        when only one pending check has that controller; otherwise its input, in the history."""
        checks_of: dict[str, list[str]] = {}
        for name, queue in controllers.items():
            checks_of.setdefault(queue, []).append(name)
        found: dict[str, PendingActivityInfo] = {}
        unsure: dict[str, PendingActivityInfo] = {}
        for a in activities:
            names = checks_of.get(a.activity_options.task_queue.name, [])
            if len(names) == 1:
                found[names[0]] = a
            else:
                unsure[a.activity_id] = a
        if unsure:
            async for event in handle.fetch_history_events():
                if not event.HasField("activity_task_scheduled_event_attributes"):
                    continue
                attrs = event.activity_task_scheduled_event_attributes
                if attrs.activity_id in unsure and attrs.activity_type.name == ADMISSION_CHECK_ACTIVITY:
                    (request,) = await self.client.data_converter.decode(attrs.input.payloads, [CheckRequest])
                    found[request.admission_check] = unsure[attrs.activity_id]
        return found

    async def workflows_served(self, task_queues: Iterable[str], now: datetime | None = None) -> dict[str, bool]:
        """For each task queue: whether a worker polled its workflow tasks within SERVED_WITHIN."""
        queues = sorted(set(task_queues))
        polled = await asyncio.gather(*(self._pollers(q, TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW) for q in queues))
        now = now or datetime.now(UTC)
        return {q: last is not None and now - last <= SERVED_WITHIN for q, (_, last, _) in zip(queues, polled, strict=True)}

    async def _pollers(
        self, task_queue: str, kind: int = TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY
    ) -> tuple[int, datetime | None, str]:
        """Pollers of a task queue (its activity tasks unless `kind` says otherwise): how many, the
        latest poll, or why it could not be told."""
        request = DescribeTaskQueueRequest(
            namespace=self.client.namespace,
            task_queue=TaskQueue(name=task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
            task_queue_type=kind,
        )
        try:
            response = await self.client.workflow_service.describe_task_queue(request)
        except RPCError as err:
            return 0, None, err.message
        times = [p.last_access_time.ToDatetime(tzinfo=UTC) for p in response.pollers if p.HasField("last_access_time")]
        return len(response.pollers), max(times, default=None), ""

    # --- explain (admitflow/admission/explain.py) ---------------------------------------------------

    async def explanation(self, key: str, now: datetime | None = None) -> explain.Explanation:
        """Why a workload is not admitted now, and when it could be: its report, its place in its
        ClusterQueue, and, for one that waits there for quota, the workloads ahead of it and those
        holding quota (one query each, at most explain.MAX_AHEAD ahead)."""
        now = now or datetime.now(UTC)
        report = await self.workload(key)
        trouble = report.workflow if isinstance(report, UnansweredWorkload) else None
        lqs = await self.catalog_objects("LocalQueue", _lq_key(report))
        route = lqs[0].spec.cluster_queue if lqs else ""
        position = None
        if trouble is None and route and not wl.holds_quota(report.status) and not _finished(report):
            found = await self.cluster_queue_report(route, StatusQuery(workload=report.key))
            position = found.pending[0] if found and found.pending else None
        cause = explain.cause(
            report, now, position=position, not_answering=trouble.summary() if trouble else "",
            last_phase=trouble.phase if trouble else "", cluster_queue=route,
        )
        if cause.cause in explain.QUEUE_CAUSES and position is not None:
            estimate = await self._estimate(report, route, position, now)
        else:
            estimate = explain.no_estimate(cause)
        return explain.Explanation(workload=report.key, cause=cause, estimate=estimate)

    async def _estimate(
        self, report: WorkloadReport, cluster_queue: str, position: PendingWorkload, now: datetime
    ) -> explain.Estimate:
        ahead = position.position_in_cluster_queue
        if ahead > explain.MAX_AHEAD:
            return explain.Estimate(unknown=f"{ahead} workloads ahead of it, more than the {explain.MAX_AHEAD} an estimate reads")
        specs = await self.catalog_objects("ClusterQueue", cluster_queue)
        found = await self.cluster_queue_report(cluster_queue, StatusQuery(limit=ahead))
        if not specs or found is None:
            return explain.Estimate(unknown=f"ClusterQueue {cluster_queue} is gone")
        quota = explain.capacity(specs[0].spec)
        ahead_keys = [k for k in (f"{p.namespace}/{p.name}" for p in found.pending) if k != report.key]
        reports = await self._reports([*ahead_keys, *(f"{r.namespace}/{r.name}" for r in found.reserving)])
        contenders = [explain.contender(reports[k], quota) for k in ahead_keys if reports.get(k) is not None]
        holding = [explain.running(r, reports.get(f"{r.namespace}/{r.name}")) for r in found.reserving]
        return explain.estimate(explain.contender(report, quota), contenders, holding, quota, now)

    async def cluster_queue_explanation(self, name: str, now: datetime | None = None) -> explain.QueueExplanation:
        """Every workload of a ClusterQueue that waits for admission, once, under its one cause: those
        in its queue or holding quota there, and those whose LocalQueue leads there but that take no
        place in it (gated, in backoff, inactive), found by visibility. Each is asked for its report."""
        now = now or datetime.now(UTC)
        if not await self.catalog_objects("ClusterQueue", name):
            raise AdmitflowError(f'clusterqueues "{name}" not found')
        routes = {lq.key: lq.spec.cluster_queue for lq in await self.catalog_objects("LocalQueue")}
        rows = await self.workload_rows(cluster_queue=name, finished=False)
        for lq_key in sorted(k for k, cq in routes.items() if cq == name):
            namespace, local_queue = ids.split_key(lq_key)
            rows += await self.workload_rows(namespace=namespace, local_queue=local_queue, finished=False)
        positions = await self._queue_positions(name)
        keys = {f"{r['metadata']['namespace']}/{r['metadata']['name']}" for r in rows} | set(positions)
        causes: dict[str, explain.Cause] = {}
        for key, report in (await self._reports(sorted(keys))).items():
            if report is None:
                continue
            trouble = report.workflow if isinstance(report, UnansweredWorkload) else None
            reserved_in = trouble.cluster_queue if trouble is not None and trouble.phase in ("QuotaReserved", "Admitted") else ""
            if explain.cluster_queue_of(report, routes, reserved_in) != name:
                continue
            causes[key] = explain.cause(
                report, now, position=positions.get(key), not_answering=trouble.summary() if trouble else "",
                last_phase=trouble.phase if trouble else "", cluster_queue=name,
            )
        return explain.tally(name, causes)

    async def _queue_positions(self, name: str) -> dict[str, PendingWorkload | None]:
        """The workloads a ClusterQueue holds: every page of its queue, with their positions, and
        its reservations (None)."""
        held: dict[str, PendingWorkload | None] = {}
        offset = 0
        while True:
            found = await self.cluster_queue_report(name, StatusQuery(limit=LIST_PAGE_SIZE, offset=offset))
            if found is None:
                return held
            held.update({f"{r.namespace}/{r.name}": None for r in found.reserving})
            held.update({f"{p.namespace}/{p.name}": p for p in found.pending})
            if len(found.pending) < LIST_PAGE_SIZE:
                return held
            offset += LIST_PAGE_SIZE

    # --- a wedged workload: the ways out ---------------------------------------------------------

    async def reset(self, key: str, reason: str = "") -> tuple[WorkflowTrouble, str, WorkflowTrouble | None]:
        """Reset a workload whose workflow task fails to its last completed workflow task, with
        Temporal's reset: a new run replays its history up to that task and gets again every signal
        it received after it (its ClusterQueue's notices, verdicts, finish ...). Useful once the
        worker no longer has the fault. A run none of whose tasks completed (one reset while the
        fault was still there, a workload admitted in its first task) goes back to its first task,
        which then runs at once rather than after Temporal's retry backoff (up to ten minutes).
        Returns the trouble it had, the new run's ID, and the trouble of the new run if it fails
        again (None when it answers). One failed task is enough to reset: an operator who was just
        told that a reset's new run fails is not told, a moment later, that it answers because its
        task had failed only once (its third attempt, which reads wait for, follows within
        milliseconds)."""
        trouble = await self.trouble(key, attempts=2)
        if trouble is None:
            raise AdmitflowError(f'workloads "{key}" answers: its workflow tasks complete, so there is nothing to reset')
        point = trouble.reset_point()
        if point is None:
            raise AdmitflowError(f'workloads "{key}": its run has not started a workflow task yet, so there is nothing to reset')
        note = f"admitflow reset workload {key}: {trouble.summary()}" + (f"; {reason}" if reason else "")
        response = await self.client.workflow_service.reset_workflow_execution(
            ResetWorkflowExecutionRequest(
                namespace=self.client.namespace,
                workflow_execution=WorkflowExecution(workflow_id=trouble.workflow_id, run_id=trouble.run_id),
                reason=note[:1000],
                workflow_task_finish_event_id=point[0],
                request_id=str(uuid.uuid4()),
                identity=self.client.identity,
            ),
            retry=True,
            timeout=RPC_TIMEOUT,
        )
        # Does the new run answer? A query waits for its first workflow task.
        handle = self.client.get_workflow_handle(trouble.workflow_id, run_id=response.run_id)
        try:
            await self._query_workload(handle)
            again = None
        except (RPCError, WorkflowQueryFailedError, WorkflowQueryRejectedError):
            desc = await handle.describe(rpc_timeout=RPC_TIMEOUT)
            again = await self._trouble(handle, desc, timed_out=not _task_failing(desc, attempts=2))
        return trouble, response.run_id, again

    async def release(self, key: str, force: bool = False, cluster_queue: str | None = None) -> tuple[str, ForceReleaseOutcome]:
        """Give back, in its ClusterQueue, what a workload holds there (its quota or its place)
        without its workflow: for a workload whose workflow task fails, or whose workflow no longer
        runs. A workload that answers gives its quota back itself (finish, deactivate, delete), so it
        is refused unless `force`. The ClusterQueue records it as an event and tells the workload as
        if evicted. Safe to repeat. Returns the ClusterQueue and what was given back."""
        handle = self.client.get_workflow_handle(ids.workload_id(key))
        desc = await _described(handle)
        if desc is not None and desc.status == WorkflowExecutionStatus.RUNNING:
            if _task_failing(desc):
                why = (await self._trouble(handle, desc)).summary()
            elif force:
                why = "forced while its workflow answers"
            else:
                raise AdmitflowError(
                    f'workloads "{key}" answers: it gives its quota back itself (admitflow finish, deactivate or delete); '
                    "add --force to release it anyway (it is evicted and queues again)"
                )
        else:
            why = "its workflow does not run" if desc is None else f"its workflow is {desc.status.name.lower()}"
        cq = cluster_queue or (desc.typed_search_attributes.get(sa.CLUSTER_QUEUE) if desc is not None else None)
        if not cq and desc is not None:
            # Not resolved yet when it was submitted: where its LocalQueue leads now.
            lq = desc.typed_search_attributes.get(sa.LOCAL_QUEUE)
            cq = (await self.routes()).get(f"{ids.split_key(key)[0]}/{lq}") if lq else None
        if not cq:
            raise AdmitflowError(f'workloads "{key}": cannot tell which ClusterQueue holds it; give it with --clusterqueue')
        workflow_id = ids.cluster_queue_id(cq)
        for _ in range(MOVES_FOLLOWED):
            try:
                outcome = await _taken(lambda: self.client.get_workflow_handle(workflow_id).execute_update(
                    contract.FORCE_RELEASE,
                    ForceRelease(key=key, message=why[:1024], cluster_queue=cq),
                    result_type=ForceReleaseOutcome,
                    rpc_timeout=self.query_timeout,
                ))
            except WorkflowUpdateFailedError as err:
                raise AdmitflowError(_cause(err)) from None
            except WorkflowUpdateRPCTimeoutOrCancelledError:
                raise NotAnswering(f'clusterqueues "{cq}" did not answer within {int(self.query_timeout.total_seconds())}s') from None
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    raise AdmitflowError(f'clusterqueues "{cq}" not found') from None
                raise
            if not outcome.moved_to:
                return cq, outcome
            workflow_id = outcome.moved_to
            await asyncio.sleep(MOVE_PAUSE)
        raise NotAnswering(f'clusterqueues "{cq}" is moving between cohort trees; try again')
