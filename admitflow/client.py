"""Typed facade over a Temporal client: apply, submit, get, list, finish, delete.

Everything here is a plain Temporal call a user could make from any SDK or the `temporal` CLI; the
facade adds kubectl's manners (per-object outcomes, one-line errors naming file and document) and
assembles Kueue-shaped objects from the catalog and the queue workflows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.api.enums.v1 import PendingActivityState, TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowUpdateFailedError,
)
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
)
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from admitflow import contract, ids
from admitflow import search_attributes as sa
from admitflow.admission.catalog import CATALOG_KINDS, PLURALS, ObjectRef, Outcome
from admitflow.admission import workload as wl
from admitflow.admission import pods_ready
from admitflow.admission.workload import WorkloadReport
from admitflow.api import LoadedManifest, Workload
from admitflow.admission.checks import CheckRequest, Verdict
from admitflow.api import WorkloadStatus
from admitflow.api.admission_check import PROVISIONING_REQUEST_CONTROLLER_NAME
from admitflow.api.provisioning_request import ProvisioningRequest
from admitflow.messages import (
    AdmissionCheckActive,
    ApplyRequest,
    ApplyResult,
    CatalogInput,
    ClusterQueueReport,
    DeleteRequest,
    DeleteWorkload,
    FinishRequest,
    ObjectList,
    ObjectQuery,
    PendingWorkload,
    ProvisioningRequestCondition,
    ProvisioningRequestList,
    ProvisioningRequestQuery,
    StatusQuery,
    WorkloadInput,
)

# What `get`, `describe` and `delete` accept, kubectl-style: kind, plural, short names.
KIND_NAMES = {
    "ResourceFlavor": ("resourceflavor", "resourceflavors", "rf", "flavor", "flavors"),
    "ClusterQueue": ("clusterqueue", "clusterqueues", "cq"),
    "LocalQueue": ("localqueue", "localqueues", "lq", "queue", "queues"),
    "AdmissionCheck": ("admissioncheck", "admissionchecks", "ac"),
    "ProvisioningRequestConfig": ("provisioningrequestconfig", "provisioningrequestconfigs", "prc"),
    "AdmissionCheckParameters": ("admissioncheckparameters", "acp", "parameters"),
    "Configuration": ("configuration", "configurations", "config"),
    "SimulatedNodeGroup": ("simulatednodegroup", "simulatednodegroups", "nodegroup", "nodegroups", "ng"),
    "Workload": ("workload", "workloads", "wl"),
}
NAMESPACED = {"LocalQueue", "Workload"}

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


class AdmitflowError(Exception):
    """A refusal to show the user as one line (the CLI exits 2 with it)."""


def kind_of(name: str) -> str:
    lowered = name.lower()
    for kind, names in KIND_NAMES.items():
        if lowered == kind.lower() or lowered in names:
            return kind
    raise AdmitflowError(f'the server doesn\'t have a resource type "{name}"')


@dataclass
class AdmitflowClient:
    client: Client
    task_queue: str = ids.DEFAULT_TASK_QUEUE

    # --- apply ----------------------------------------------------------------------------------

    async def apply(self, manifests: Sequence[LoadedManifest]) -> list[Outcome]:
        """Apply catalog objects in one all-or-nothing update, then submit workloads.

        Workloads are checked first (a changed spec of a submitted workload is refused), so a bad
        invocation applies nothing."""
        catalog_items = [m for m in manifests if m.obj.kind in CATALOG_KINDS]
        workload_items = [m for m in manifests if m.obj.kind == "Workload"]
        existing = await asyncio.gather(*(self._existing_workload(m) for m in workload_items))
        outcomes: list[Outcome] = []
        if catalog_items:
            outcomes.extend(await self._apply_catalog(catalog_items))
        routes = await self.routes() if workload_items else {}
        checks = await self.admission_checks_by_queue() if workload_items else {}
        for m, report in zip(workload_items, existing, strict=True):
            cq = routes.get(_lq_key(m.obj))
            outcomes.append(await self.submit(m.obj, report, cq, checks.get(cq or "", [])))
        return outcomes

    async def admission_checks_by_queue(self) -> dict[str, list[str]]:
        """ClusterQueue -> the AdmissionChecks it names, in one query to the catalog."""
        out = {}
        for cq in await self.catalog_objects("ClusterQueue"):
            strategy = cq.spec.admission_checks_strategy
            out[cq.metadata.name] = sorted(r.name for r in (strategy.admission_checks if strategy else None) or ())
        return out

    async def routes(self) -> dict[str, str]:
        """LocalQueue (namespace/name) -> ClusterQueue, in one query to the catalog."""
        return {lq.key: lq.spec.cluster_queue for lq in await self.catalog_objects("LocalQueue")}

    async def _apply_catalog(self, items: Sequence[LoadedManifest]) -> list[Outcome]:
        start = WithStartWorkflowOperation(
            contract.CATALOG_WORKFLOW,
            CatalogInput(),
            id=ids.CATALOG_ID,
            task_queue=self.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary="admitflow catalog: ResourceFlavors, ClusterQueues, LocalQueues, AdmissionChecks",
        )
        try:
            result = await self.client.execute_update_with_start_workflow(
                contract.CATALOG_APPLY,
                ApplyRequest(objects=[m.obj for m in items]),
                start_workflow_operation=start,
                result_type=ApplyResult,
            )
        except WorkflowUpdateFailedError as err:
            raise _located(err, items) from None
        return result.outcomes

    async def _existing_workload(self, m: LoadedManifest) -> WorkloadReport | None:
        """The running workload of that name, if any. A finished or deleted one does not count:
        its name may be used again, and its history stays in Temporal."""
        wl: Workload = m.obj
        report = await self.workload(wl.key, missing_ok=True)
        if report is not None and _finished(report):
            return None
        if report is not None and report.spec.to_wire() != wl.spec.to_wire():
            raise AdmitflowError(
                f"{m.source}: document {m.index} (Workload {wl.metadata.name}): spec: Forbidden: the spec of a "
                "submitted workload is immutable; delete it and apply again"
            )
        return report

    async def submit(
        self,
        workload: Workload,
        existing: WorkloadReport | None = None,
        cluster_queue: str | None = None,
        admission_checks: Sequence[str] = (),
    ) -> Outcome:
        """Start the workload's workflow; `unchanged` if it already runs. `cluster_queue`, when the
        caller knows where the LocalQueue leads, is recorded at start (the workflow checks it), and
        with the queue's `admission_checks` it goes into the workflow's summary and details."""
        if existing is not None:
            return Outcome(kind="Workload", key=workload.key, action="unchanged")
        spec = workload.spec
        attributes = [
            SearchAttributePair(sa.LOCAL_QUEUE, spec.queue_name or ""),
            SearchAttributePair(sa.PHASE, "Pending"),
            SearchAttributePair(sa.PRIORITY, spec.priority or 0),
        ]
        if cluster_queue:
            attributes.append(SearchAttributePair(sa.CLUSTER_QUEUE, cluster_queue))
        try:
            await self.client.start_workflow(
                contract.WORKLOAD_WORKFLOW,
                WorkloadInput(workload=workload),
                id=ids.workload_id(workload.key),
                task_queue=self.task_queue,
                static_summary=wl.static_summary(workload, cluster_queue),
                static_details=wl.static_details(workload, admission_checks),
                search_attributes=TypedSearchAttributes(attributes),
            )
        except WorkflowAlreadyStartedError:
            # Submitted concurrently by someone else between our check and our start.
            return Outcome(kind="Workload", key=workload.key, action="unchanged")
        return Outcome(kind="Workload", key=workload.key, action="created")

    # --- delete ---------------------------------------------------------------------------------

    async def delete(self, kind: str, key: str) -> Outcome:
        if kind == "Workload":
            report = await self.workload(key)
            if _finished(report):
                raise AdmitflowError(
                    f'workloads "{key}" is finished: it holds nothing, its history stays in Temporal, '
                    "and applying it again starts a new run"
                )
            await self._signal_workload(key, contract.DELETE, DeleteWorkload())
            return Outcome(kind=kind, key=key, action="deleted")
        try:
            result = await self.client.get_workflow_handle(ids.CATALOG_ID).execute_update(
                contract.CATALOG_DELETE, DeleteRequest(objects=[ObjectRef(kind=kind, key=key)]), result_type=ApplyResult
            )
        except WorkflowUpdateFailedError as err:
            raise AdmitflowError(_cause(err)) from None
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise AdmitflowError(f'{PLURALS[kind]} "{key}" not found') from None
            raise
        return result.outcomes[0]

    # --- reads ----------------------------------------------------------------------------------

    async def catalog_objects(self, kind: str, key: str | None = None) -> list[Any]:
        try:
            found = await self.client.get_workflow_handle(ids.CATALOG_ID).query(
                contract.CATALOG_GET, ObjectQuery(kind=kind, key=key), result_type=ObjectList
            )
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return []
            raise
        return list(found.items)

    async def cluster_queue_report(self, name: str, query: StatusQuery | None = None) -> ClusterQueueReport | None:
        try:
            return await self.client.get_workflow_handle(ids.cluster_queue_id(name)).query(
                contract.CLUSTER_QUEUE_STATUS, query or StatusQuery(limit=0), result_type=ClusterQueueReport
            )
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return None
            raise

    async def pending_workloads(self, cluster_queue: str, limit: int = 1000, offset: int = 0) -> list[PendingWorkload]:
        """The pending workloads of a ClusterQueue in order, as Kueue's visibility API lists them."""
        if not await self.catalog_objects("ClusterQueue", cluster_queue):
            raise AdmitflowError(f'clusterqueues "{cluster_queue}" not found')
        report = await self.cluster_queue_report(cluster_queue, StatusQuery(limit=limit, offset=offset))
        return list(report.pending) if report else []

    async def position(self, report: WorkloadReport) -> PendingWorkload | None:
        """Where a pending workload waits in its ClusterQueue, if it is queued there."""
        lqs = await self.catalog_objects("LocalQueue", _lq_key(report))
        if not lqs:
            return None
        found = await self.cluster_queue_report(lqs[0].spec.cluster_queue, StatusQuery(workload=report.key))
        return found.pending[0] if found and found.pending else None

    async def get(self, kind: str, key: str | None = None, **filters: str | None) -> list[dict[str, Any]]:
        """Objects in their Kueue wire shape (v1beta2), status included where Kueue has one.
        Workloads may be filtered as `workloads` filters them."""
        if kind == "Workload":
            if key is not None:
                return [(await self.workload(key)).to_wire()]
            reports = await self.workloads(**filters)
            return [r.to_wire() for r in reports]
        objects = await self.catalog_objects(kind, key)
        if key is not None and not objects:
            raise AdmitflowError(f'{PLURALS[kind]} "{key}" not found')
        out = []
        for obj in objects:
            wire = obj.to_wire()
            if kind == "ClusterQueue":
                report = await self.cluster_queue_report(obj.metadata.name)
                if report is not None:
                    wire["status"] = report.status.to_wire()
            elif kind == "LocalQueue":
                report = await self.cluster_queue_report(obj.spec.cluster_queue)
                lq = report.local_queues.get(obj.key) if report else None
                if lq is not None:
                    wire["status"] = lq.to_wire()
            out.append(wire)
        return out

    async def workload(self, key: str, missing_ok: bool = False) -> WorkloadReport | None:
        handle = self.client.get_workflow_handle(ids.workload_id(key), result_type=WorkloadReport)
        try:
            desc = await handle.describe()
            if desc.status == WorkflowExecutionStatus.RUNNING:
                return await handle.query(contract.WORKLOAD_QUERY, result_type=WorkloadReport)
            if desc.status == WorkflowExecutionStatus.COMPLETED:
                report = await handle.result()
                if not report.deleted:
                    return report
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
        if missing_ok:
            return None
        raise AdmitflowError(f'workloads "{key}" not found')

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
        because they are not `Active` (reference §1.8), with whether anyone serves their controllers."""
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

    async def _pollers(self, task_queue: str) -> tuple[int, datetime | None, str]:
        """Activity pollers of a task queue: how many, the latest poll, or why it could not be told."""
        request = DescribeTaskQueueRequest(
            namespace=self.client.namespace,
            task_queue=TaskQueue(name=task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
        )
        try:
            response = await self.client.workflow_service.describe_task_queue(request)
        except RPCError as err:
            return 0, None, err.message
        times = [p.last_access_time.ToDatetime(tzinfo=UTC) for p in response.pollers if p.HasField("last_access_time")]
        return len(response.pollers), max(times, default=None), ""

    async def workloads(
        self, phase: str | None = None, cluster_queue: str | None = None, pending_check: str | None = None
    ) -> list[WorkloadReport]:
        """The workloads that are running or finished (not deleted), found by a visibility query on
        the contract's search attributes: in this phase, ClusterQueue, or with this check not Ready."""
        keys: set[str] = set()
        async for wf in self.client.list_workflows(workloads_query(phase, cluster_queue, pending_check)):
            key = ids.workload_key(wf.id)
            if key and wf.status in (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.COMPLETED):
                keys.add(key)
        reports = await asyncio.gather(*(self.workload(k, missing_ok=True) for k in sorted(keys)))
        return [r for r in reports if r is not None]

    # --- lifecycle -------------------------------------------------------------------------------

    async def finish(self, key: str, succeeded: bool = True, message: str = "") -> None:
        await self._signal_workload(key, contract.FINISH, FinishRequest(succeeded=succeeded, message=message))

    async def pods_ready(self, key: str, ready: bool = True, reason: str | None = None) -> None:
        """Report whether the workload's pods are ready (signal `set_pods_ready`), as a runner or a
        job controller would. A report that is not valid is refused here with its one-line reason."""
        try:
            report = pods_ready.parse({"ready": ready, "reason": reason})
        except pods_ready.PodsReadyError as err:
            raise AdmitflowError(str(err)) from None
        await self._signal_workload(key, contract.SET_PODS_READY, report)

    async def verdict(self, key: str, verdict: Verdict) -> WorkloadStatus:
        """Apply a check verdict through the workload's update; a refusal is one line."""
        handle = self.client.get_workflow_handle(ids.workload_id(key))
        try:
            return await handle.execute_update(
                contract.APPLY_ADMISSION_CHECK_STATE, verdict, result_type=WorkloadStatus
            )
        except WorkflowUpdateFailedError as err:
            raise AdmitflowError(_cause(err)) from None
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise AdmitflowError(f'workloads "{key}" not found or already finished') from None
            raise

    async def activate(self, key: str) -> None:
        await self._signal_workload(key, contract.ACTIVATE, None)

    async def deactivate(self, key: str) -> None:
        await self._signal_workload(key, contract.DEACTIVATE, None)

    async def set_admission_check_active(
        self, name: str, active: bool = True, reason: str | None = None, message: str | None = None
    ) -> bool:
        """Set an AdmissionCheck's `Active` condition, as its controller would; returns whether it changed."""
        request = (
            AdmissionCheckActive(name=name)
            if active
            else AdmissionCheckActive(name=name, active=False, reason="Inactive", message="The admission check is inactive")
        )
        request = request.model_copy(update={"reason": reason or request.reason, "message": message or request.message})
        handle = self.client.get_workflow_handle(ids.CATALOG_ID)
        try:
            return await handle.execute_update(contract.SET_ADMISSION_CHECK_ACTIVE, request, result_type=bool)
        except WorkflowUpdateFailedError as err:
            raise AdmitflowError(_cause(err)) from None

    # --- the simulated cluster autoscaler ------------------------------------------------------

    async def provisioning_requests(self, namespace: str | None = None) -> list[ProvisioningRequest]:
        """The simulated autoscaler's ProvisioningRequests (none when it does not run)."""
        try:
            found = await self.client.get_workflow_handle(ids.AUTOSCALER_ID).query(
                contract.PROVISIONING_REQUESTS_QUERY, ProvisioningRequestQuery(namespace=namespace), result_type=ProvisioningRequestList
            )
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return []
            raise
        return list(found.items)

    async def set_provisioning_request_condition(self, request: ProvisioningRequestCondition) -> ProvisioningRequest:
        """Set a condition of a simulated ProvisioningRequest by hand; a refusal is one line."""
        handle = self.client.get_workflow_handle(ids.AUTOSCALER_ID)
        try:
            return await handle.execute_update(
                contract.SET_PROVISIONING_REQUEST_CONDITION, request, result_type=ProvisioningRequest
            )
        except WorkflowUpdateFailedError as err:
            raise AdmitflowError(_cause(err)) from None
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise AdmitflowError(f'provisioningrequests.autoscaling.x-k8s.io "{request.name}" not found') from None
            raise

    async def _signal_workload(self, key: str, signal: str, payload: Any) -> None:
        try:
            await self.client.get_workflow_handle(ids.workload_id(key)).signal(signal, payload)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise AdmitflowError(f'workloads "{key}" not found or already finished') from None
            raise


def workloads_query(phase: str | None = None, cluster_queue: str | None = None, pending_check: str | None = None) -> str:
    """The visibility query for `workloads`, e.g. `WorkflowType = 'WorkloadWorkflow' AND
    AdmitflowPhase = 'Backoff'`; what the Temporal UI's filter box takes too."""
    if phase is not None and phase not in wl.PHASES:
        raise AdmitflowError(f'unknown phase "{phase}": must be one of {", ".join(wl.PHASES)}')
    clauses = [f"WorkflowType = '{contract.WORKLOAD_WORKFLOW}'"]
    for attribute, value in ((sa.PHASE, phase), (sa.CLUSTER_QUEUE, cluster_queue), (sa.PENDING_CHECKS, pending_check)):
        if value is not None:
            quoted = value.replace("\\", "\\\\").replace("'", "\\'")
            clauses.append(f"{attribute.name} = '{quoted}'")
    return " AND ".join(clauses)


def _lq_key(workload: Workload) -> str:
    return f"{workload.metadata.namespace}/{workload.spec.queue_name}"


def _finished(report: WorkloadReport) -> bool:
    return any(c.type == "Finished" and c.status == "True" for c in report.status.conditions)


def _cause(err: WorkflowUpdateFailedError) -> str:
    cause = err.cause
    return cause.message if isinstance(cause, ApplicationError) else str(cause or err)


def _located(err: WorkflowUpdateFailedError, items: Sequence[LoadedManifest]) -> AdmitflowError:
    """Put the file and document in front of the catalog's refusal."""
    cause = err.cause
    if isinstance(cause, ApplicationError) and cause.details:
        index = (cause.details[0] or {}).get("index")
        if isinstance(index, int) and 0 <= index < len(items):
            m = items[index]
            return AdmitflowError(f"{m.source}: document {m.index} ({m.obj.kind} {m.obj.metadata.name}): {cause.message}")
    return AdmitflowError(_cause(err))
