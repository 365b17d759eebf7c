"""Typed facade over a Temporal client: apply, submit, get, list, finish, delete.

Everything here is a plain Temporal call a user could make from any SDK or the `temporal` CLI; the
facade adds kubectl's manners (per-object outcomes, one-line errors naming file and document) and
assembles Kueue-shaped objects from the catalog and the queue workflows.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from pydantic import Field, ValidationError, computed_field
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import (
    EventType,
    PendingActivityState,
    TaskQueueKind,
    TaskQueueType,
    WorkflowTaskFailedCause,
)
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    GetWorkflowExecutionHistoryReverseRequest,
    ResetWorkflowExecutionRequest,
)
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
)
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from admitflow import contract, ids, kinds, visibility
from admitflow import search_attributes as sa
from admitflow.admission.catalog import CATALOG_KINDS, ObjectRef, Outcome, cohort_root
from admitflow.admission.cluster_queue import ForceReleaseOutcome
from admitflow.admission import workload as wl
from admitflow.admission import pods_ready
from admitflow.admission import admission_gates
from admitflow.admission import priority
from admitflow.admission import explain
from admitflow.admission.workload import WorkloadReport
from admitflow.api import LoadedManifest, Workload
from admitflow.admission.checks import CheckRequest, Verdict
from admitflow.api import WorkloadStatus
from admitflow.api.admission_check import PROVISIONING_REQUEST_CONTROLLER_NAME
from admitflow.api.cohort import CohortStatus
from admitflow.api.provisioning_request import ProvisioningRequest
from admitflow.codec import PayloadDecodeError
from admitflow.kinds import PLURALS
from admitflow.messages import (
    AdmissionCheckActive,
    ApplyRequest,
    ApplyResult,
    CatalogInput,
    ClusterQueueReport,
    CohortRef,
    DeleteRequest,
    DeleteWorkload,
    FinishRequest,
    ForceRelease,
    ObjectList,
    ObjectQuery,
    PendingWorkload,
    ProvisioningRequestCondition,
    ProvisioningRequestList,
    ProvisioningRequestQuery,
    StatusQuery,
    WorkloadInput,
)
from admitflow.wire import WireModel


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
T = TypeVar("T")
# How long a read waits for one workflow to answer a query. A workflow whose task fails never
# answers: Temporal holds the query for the task's next attempt, and retries it with a backoff of up
# to ten minutes. Every other call to Temporal gets RPC_TIMEOUT.
QUERY_TIMEOUT = timedelta(seconds=10)
# A ClusterQueue in a cohort is answered by its tree; one moving between trees may send a reader
# home and back a few times (admitflow/admission/cohort_tree.py).
MOVES_FOLLOWED = 6
MOVE_PAUSE = 0.2
RPC_TIMEOUT = timedelta(seconds=10)
# How often a query the engine's worker refused ("ask again": a worker died or the server restarted
# a moment ago) is asked again, a second apart.
STALE_RETRIES = 5
# An update the server rejected unread (`contract.UNPROCESSED_UPDATE`) changed nothing: it is sent
# again, this many times in all.
UNPROCESSED_ATTEMPTS = 3
# At most this many workloads asked at once when listing them.
CONCURRENT_READS = 16
# Workflows per ListWorkflowExecutions page (the server's default and maximum for SQL visibility).
LIST_PAGE_SIZE = 1000
# Workflow IDs per visibility query that looks for newer runs of completed workloads.
SUPERSEDED_CHUNK = 200
# The statuses `get` shows for a workload whose workflow does not answer.
TASK_FAILING = "TaskFailing"
NOT_ANSWERING = "NotAnswering"
# A workflow task that failed once is retried at once and usually completes (a signal that raced a
# continue-as-new, a worker killed mid-task): only the third attempt in a row says it is wedged,
# when the server sets TemporalReportedProblems as admitflow configures it (two failures in a row).
FAILING_ATTEMPTS = 3


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


class NotAnswering(AdmitflowError):
    """The request was fine, but a workflow cannot take it now (the CLI exits 1 with it)."""

    code = 1


class WorkflowTrouble(WireModel):
    """Why a workload's workflow does not answer, told from what Temporal knows without its help:
    its description (the pending workflow task and its attempt), the end of its history (the last
    failure and the last workflow task that completed) and its search attributes, which hold what
    it last wrote: a failing task changes nothing, so they are its state as it stands."""

    status: str = Field(description=f"{TASK_FAILING}: its workflow task fails and is retried; {NOT_ANSWERING}: a query timed out.")
    workflow_id: str
    run_id: str
    task_attempt: int = Field(default=0, description="The attempt of its pending workflow task (1 when nothing failed).")
    last_failure: str = Field(default="", description="The first line of its workflow task's last failure.")
    cause: str = Field(default="", description="Temporal's cause of that failure, e.g. NonDeterministicError.")
    failing_since: datetime | None = Field(default=None, description="The first failure after its last completed task.")
    last_good_task: int | None = Field(default=None, description="Event ID of its last completed workflow task: where a reset goes back to.")
    first_task: int | None = Field(
        default=None,
        description="Event ID of its run's first workflow task (started), when no task of the run completed: where a reset goes back to then.",
    )
    phase: str = ""
    cluster_queue: str = ""
    local_queue: str = ""
    task_queue: str = ""

    @computed_field
    @property
    def message(self) -> str:
        """One line: what is wrong, for a table's warning or a refusal."""
        return self.summary()

    def summary(self) -> str:
        if self.status == TASK_FAILING:
            failure = f": {self.last_failure}" if self.last_failure else ""
            return f"its workflow task fails (attempt {self.task_attempt}){failure}"
        return f"its workflow did not answer a query within {int(QUERY_TIMEOUT.total_seconds())}s (is a worker polling task queue {self.task_queue}?)"

    def reset_point(self) -> tuple[int, str] | None:
        """Where `reset` takes it back to (an event ID) and how to say so; None when its run has not
        started a workflow task yet."""
        if self.last_good_task is not None:
            return self.last_good_task, f"its last completed workflow task (event {self.last_good_task})"
        if self.first_task is not None:
            return self.first_task, f"its first workflow task (event {self.first_task}; none of its run completed)"
        return None


class UnansweredWorkload(WorkloadReport):
    """A workload whose workflow does not answer, as far as it can be shown without it: its
    metadata and spec from its run's input, no status (only its workflow can tell it), and
    `workflow`, what Temporal knows of the trouble."""

    workflow: WorkflowTrouble


class WorkloadNotAnswering(NotAnswering):
    """A write to a workload whose workflow task fails: nothing was sent. A signal would wait unread
    in its history and an update would hang, while the user was told it was done."""

    def __init__(self, key: str, trouble: WorkflowTrouble) -> None:
        super().__init__(
            f'workloads "{key}" does not answer: {trouble.summary()}; nothing was sent; '
            f"once a worker without the fault runs, `admitflow reset workload {key}`; to give its quota to others now, "
            f"`admitflow release workload {key}`"
        )
        self.trouble = trouble


def kind_of(name: str) -> str:
    """admitflow.kinds.kind_of, refusing with the client's error."""
    try:
        return kinds.kind_of(name)
    except kinds.UnknownKind as err:
        raise AdmitflowError(str(err)) from None


@dataclass
class AdmitflowClient:
    client: Client
    task_queue: str = ids.DEFAULT_TASK_QUEUE
    query_timeout: timedelta = QUERY_TIMEOUT

    # --- apply ----------------------------------------------------------------------------------

    async def apply(
        self, manifests: Sequence[LoadedManifest], dry_run: str | None = None, timeout: timedelta | None = None
    ) -> list[Outcome]:
        """Apply catalog objects in one all-or-nothing update, then submit workloads.

        Workloads are checked first (a changed spec of a submitted workload is refused), so a bad
        invocation applies nothing. `dry_run` ("client" or "server", as kubectl's) changes nothing and
        answers what would happen (see `_apply_catalog`); `timeout` bounds the wait for the catalog
        workflow to take the objects (None: until a worker takes them)."""
        catalog_items = [m for m in manifests if m.obj.kind in CATALOG_KINDS]
        workload_items = [m for m in manifests if m.obj.kind == "Workload"]
        values: dict[str, int] = {}
        if any(priority.needs_class(m.obj.spec) for m in workload_items):
            values = await self.priority_class_values(catalog_items)
        checked = await asyncio.gather(*(self._existing_workload(m, values) for m in workload_items))
        removals = _gate_removals(workload_items, [report for _, report in checked])
        changes = {
            w.key: priority.PriorityChange(priority=w.spec.priority or 0, priority_class_ref=w.spec.priority_class_ref)
            for w, report in checked if report is not None and priority.priority_only(report.spec, w.spec)
        }
        configured = {*removals, *changes}
        outcomes: list[Outcome] = []
        if catalog_items:
            outcomes.extend(await self._apply_catalog(catalog_items, dry_run, timeout))
        if dry_run is not None:
            return _configured(outcomes + [await self.submit(w, report, dry_run=True) for w, report in checked], configured)
        routes = await self.routes() if workload_items else {}
        checks = await self.admission_checks_by_queue() if workload_items else {}
        for w, report in checked:
            cq = routes.get(_lq_key(w))
            outcomes.append(await self.submit(w, report, cq, checks.get(cq or "", [])))
        for key, change in changes.items():
            await self.set_priority(key, change)
        for key, gates in removals.items():
            await self.ungate(key, gates)
        return _configured(outcomes, configured)

    async def priority_class_values(self, applied: Sequence[LoadedManifest] = ()) -> dict[str, int]:
        """WorkloadPriorityClass name -> value: the catalog's, and over them those `applied` in the
        same request (its workloads may name them)."""
        values = {c.key: c.value for c in await self.catalog_objects("WorkloadPriorityClass")}
        values.update({m.obj.key: m.obj.value for m in applied if m.obj.kind == "WorkloadPriorityClass"})
        return values

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

    async def _apply_catalog(
        self, items: Sequence[LoadedManifest], dry_run: str | None = None, timeout: timedelta | None = None
    ) -> list[Outcome]:
        """The catalog update `apply`, started with the catalog workflow if it does not run yet. With
        `dry_run` nothing is sent that changes anything: "server" asks the workflow's read-only query
        `dry_run_apply` (its apply's own code on a copy of its state); "client" runs that code here,
        on the objects of those kinds as the catalog holds them. Either refuses as the update would."""
        if dry_run is not None:
            return await self._preview_catalog(items, dry_run)

        def start() -> WithStartWorkflowOperation:
            """A new one each time the update is sent: the SDK refuses one used before."""
            return WithStartWorkflowOperation(
                contract.CATALOG_WORKFLOW,
                CatalogInput(),
                id=ids.CATALOG_ID,
                task_queue=self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                static_summary="admitflow catalog: ResourceFlavors, ClusterQueues, LocalQueues, AdmissionChecks",
            )

        try:
            result = await _taken(lambda: self.client.execute_update_with_start_workflow(
                contract.CATALOG_APPLY,
                ApplyRequest(objects=[m.obj for m in items]),
                start_workflow_operation=start(),
                result_type=ApplyResult,
                rpc_timeout=timeout,
            ))
        except WorkflowUpdateFailedError as err:
            raise _located(err, items) from None
        except WorkflowUpdateRPCTimeoutOrCancelledError:
            raise NotAnswering(
                f"the catalog ({ids.CATALOG_ID}) did not take the objects within {int(timeout.total_seconds()) if timeout else 0}s: "
                f'is a worker polling task queue "{self.task_queue}"? (admitflow worker); they are applied once one does'
            ) from None
        return result.outcomes

    async def _preview_catalog(self, items: Sequence[LoadedManifest], dry_run: str) -> list[Outcome]:
        from admitflow.admission import catalog
        from admitflow.admission.catalog import ApplyPreview, CatalogError, CatalogState

        objects = [m.obj for m in items]
        preview = None
        if dry_run == "server":
            try:
                preview = await self._ask(
                    self.client.get_workflow_handle(ids.CATALOG_ID), contract.CATALOG_DRY_RUN,
                    ApplyRequest(objects=objects), ApplyPreview,
                )
            except WorkflowQueryFailedError as err:
                raise NotAnswering(
                    f"the catalog ({ids.CATALOG_ID}) cannot answer a server dry run ({_first_line(str(err))}): "
                    "is its worker older than this admitflow? --dry-run=client checks here"
                ) from None
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise _unanswered_query(err, f"the catalog ({ids.CATALOG_ID})") from None
                # No catalog workflow yet: nothing is stored, which this client can answer for it.
        if preview is None:
            state = CatalogState()
            for kind in sorted({o.kind for o in objects}):
                for stored in await self.catalog_objects(kind):
                    state.objects.setdefault(kind, {})[stored.key] = stored
            try:
                preview = ApplyPreview(outcomes=catalog.apply(state, objects, lambda: "", datetime.now(UTC)))
            except CatalogError as err:
                preview = ApplyPreview(refused=str(err), index=err.index)
        if preview.refused:
            raise _at(preview.refused, preview.index, items)
        return preview.outcomes

    async def _existing_workload(self, m: LoadedManifest, values: dict[str, int]) -> tuple[Workload, WorkloadReport | None]:
        """The workload to submit, its priority resolved from its WorkloadPriorityClass (`values`,
        admission.priority), and the running workload of that name, if any. A finished or deleted
        one does not count: its name may be used again, and its history stays in Temporal."""
        wl: Workload = m.obj
        report = await self.workload(wl.key, missing_ok=True)
        if report is not None and _finished(report):
            report = None
        where = f"{m.source}: document {m.index} (Workload {wl.metadata.name})"
        try:
            spec = priority.resolve(wl.spec, values, report.spec if report is not None else None)
        except priority.PriorityError as err:
            raise AdmitflowError(f"{where}: {err}") from None
        if report is not None and report.spec.to_wire() != spec.to_wire():
            if not priority.priority_only(report.spec, spec):
                raise AdmitflowError(f"{where}: spec: Forbidden: the spec of a submitted workload is immutable but "
                                     "for its priority; delete it and apply again")
            refusal = priority.change_refusal(report.spec, spec, report.status.has_condition("QuotaReserved"))
            if refusal is not None:
                raise AdmitflowError(f"{where}: {refusal}")
        return wl.model_copy(update={"spec": spec}), report

    async def submit(
        self,
        workload: Workload,
        existing: WorkloadReport | None = None,
        cluster_queue: str | None = None,
        admission_checks: Sequence[str] = (),
        dry_run: bool = False,
    ) -> Outcome:
        """Start the workload's workflow; `unchanged` if it already runs. `cluster_queue`, when the
        caller knows where the LocalQueue leads, is recorded at start (the workflow checks it), and
        with the queue's `admission_checks` it goes into the workflow's summary and details. With
        `dry_run` nothing starts: the outcome says what would happen."""
        if existing is not None:
            return Outcome(kind="Workload", key=workload.key, action="unchanged")
        if dry_run:
            return Outcome(kind="Workload", key=workload.key, action="created")
        if priority.needs_class(workload.spec):  # given here unresolved, not through `apply`
            try:
                resolved = priority.resolve(workload.spec, await self.priority_class_values())
            except priority.PriorityError as err:
                raise AdmitflowError(f"workloads {workload.key}: {err}") from None
            workload = workload.model_copy(update={"spec": resolved})
        if not workload.metadata.uid:
            # Given here, as Kubernetes' API server gives one at creation, so that it is in the
            # workflow's input: one the workflow drew from its randomness would differ between a run
            # reset in Temporal and the replay of that run's history.
            workload = workload.model_copy(update={"metadata": workload.metadata.model_copy(update={"uid": str(uuid.uuid4())})})
        spec = workload.spec
        now = datetime.now(UTC)
        attributes = [
            SearchAttributePair(sa.LOCAL_QUEUE, spec.queue_name or ""),
            SearchAttributePair(sa.PHASE, "Pending"),
            SearchAttributePair(sa.PRIORITY, spec.priority or 0),
            SearchAttributePair(sa.CREATED, workload.metadata.creation_timestamp or now.replace(microsecond=0)),
            SearchAttributePair(sa.UPDATED, now),
        ]
        if workload.metadata.labels:
            attributes.append(SearchAttributePair(sa.LABELS, visibility.label_entries(workload.metadata.labels)))
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
            if isinstance(report, UnansweredWorkload) and report.workflow.status == TASK_FAILING:
                raise WorkloadNotAnswering(key, report.workflow)
            if _finished(report):
                raise AdmitflowError(
                    f'workloads "{key}" is finished: it holds nothing, its history stays in Temporal, '
                    "and applying it again starts a new run"
                )
            await self._signal_workload(key, contract.DELETE, DeleteWorkload())
            return Outcome(kind=kind, key=key, action="deleted")
        try:
            result = await _taken(lambda: self.client.get_workflow_handle(ids.CATALOG_ID).execute_update(
                contract.CATALOG_DELETE, DeleteRequest(objects=[ObjectRef(kind=kind, key=key)]), result_type=ApplyResult
            ))
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
            found = await self._ask(
                self.client.get_workflow_handle(ids.CATALOG_ID), contract.CATALOG_GET, ObjectQuery(kind=kind, key=key), ObjectList
            )
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return []
            raise _unanswered_query(err, f"the catalog ({ids.CATALOG_ID})") from None
        return list(found.items)

    async def cluster_queue_report(self, name: str, query: StatusQuery | None = None) -> ClusterQueueReport | None:
        """Asked of the queue's home, or of its cohort tree when the home says the tree holds it
        (a queue moving between them answers from wherever it is when asked again)."""
        query = (query or StatusQuery(limit=0)).model_copy(update={"cluster_queue": name})
        workflow_id = ids.cluster_queue_id(name)
        for _ in range(MOVES_FOLLOWED):
            try:
                found = await self._ask(
                    self.client.get_workflow_handle(workflow_id), contract.CLUSTER_QUEUE_STATUS, query, ClusterQueueReport
                )
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    return None
                raise _unanswered_query(err, f'clusterqueues "{name}"') from None
            if not found.moved_to:
                return found
            workflow_id = found.moved_to
            await asyncio.sleep(MOVE_PAUSE)
        raise NotAnswering(f'clusterqueues "{name}" is moving between cohort trees; try again')

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

    async def get(
        self,
        kind: str,
        key: str | None = None,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        full: bool = True,
        **filters: str | None,
    ) -> list[dict[str, Any]]:
        """Objects in their Kueue wire shape (v1beta2), status included where Kueue has one.
        `namespace` (Kueue's; None: every one) and `label_selector` (kubectl's -l) narrow the list;
        workloads also by `local_queue`, `phase`, `cluster_queue` and `pending_check`. A list of
        workloads with `full=False` comes from visibility alone (`workload_rows`): what a table
        shows, without asking any workflow."""
        filters = {k: v for k, v in filters.items() if v is not None}
        if kind == "Workload":
            if key is not None:
                return [(await self.workload(key)).to_wire()]
            if not full:
                return await self.workload_rows(namespace=namespace, label_selector=label_selector, **filters)
            reports = await self.workloads(namespace=namespace, label_selector=label_selector, **filters)
            return [r.to_wire() for r in reports]
        if filters:
            raise AdmitflowError(f"{', '.join(sorted(filters))}: only workloads are filtered so")
        try:
            requirements = visibility.parse_selector(label_selector or "")
        except visibility.SelectorError as err:
            raise AdmitflowError(str(err)) from None
        objects = await self.catalog_objects(kind, key)
        if key is not None and not objects:
            raise AdmitflowError(f'{PLURALS[kind]} "{key}" not found')
        objects = [
            o for o in objects
            if (namespace is None or getattr(o.metadata, "namespace", None) in (None, namespace))
            and visibility.labels_match(requirements, o.metadata.labels or {})
        ]
        out, parents = [], None
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
            elif kind == "Cohort":
                parents = parents if parents is not None else await self._cohort_parents()
                wire["status"] = (await self.cohort_status(obj.metadata.name, parents)).to_wire()
            out.append(wire)
        return out

    async def cohort_status(self, name: str, parents: dict[str, str | None] | None = None) -> CohortStatus:
        """A Cohort's status, from the workflow of its tree (empty while no ClusterQueue of the
        tree has been scheduled there). `parents`: every Cohort's parentName, when already read."""
        if parents is None:
            parents = await self._cohort_parents()
        handle = self.client.get_workflow_handle(ids.cohort_id(cohort_root(parents, name)))
        try:
            return await self._ask(handle, contract.COHORT_STATUS, CohortRef(name=name), CohortStatus)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return CohortStatus()
            raise _unanswered_query(err, f'cohorts "{name}"') from None

    async def _cohort_parents(self) -> dict[str, str | None]:
        """Every Cohort's parentName, from the catalog (None at a root)."""
        return {c.key: c.spec.parent_name for c in await self.catalog_objects("Cohort")}

    async def workload(self, key: str, missing_ok: bool = False) -> WorkloadReport | None:
        """The workload as its workflow tells it (query `workload`), or its final report once it has
        finished. A workflow that does not answer (its task fails, or no worker serves it) is not
        waited for beyond QUERY_TIMEOUT: it comes back as an `UnansweredWorkload`."""
        handle = self.client.get_workflow_handle(ids.workload_id(key), result_type=WorkloadReport)
        try:
            desc = await handle.describe(rpc_timeout=RPC_TIMEOUT)
            if desc.status == WorkflowExecutionStatus.RUNNING:
                if _task_failing(desc):
                    return await self._unanswered(handle, desc)
                try:
                    return await self._query_workload(handle)
                except (WorkflowQueryFailedError, WorkflowQueryRejectedError) as err:
                    raise NotAnswering(f'workloads "{key}": its workflow refused the query: {_first_line(str(err))}') from None
                except RPCError as err:
                    if err.status == RPCStatusCode.NOT_FOUND:
                        raise
                    # Timed out, or refused because its task has failed since the description.
                    desc = await handle.describe(rpc_timeout=RPC_TIMEOUT)
                    if desc.status == WorkflowExecutionStatus.RUNNING:
                        return await self._unanswered(handle, desc, timed_out=not _task_failing(desc, attempts=2))
                    return await self.workload(key, missing_ok)
            if desc.status == WorkflowExecutionStatus.COMPLETED:
                report = await handle.result(rpc_timeout=RPC_TIMEOUT)
                if not report.deleted:
                    return report
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
        if missing_ok:
            return None
        raise AdmitflowError(f'workloads "{key}" not found')

    async def _query_workload(self, handle: WorkflowHandle) -> WorkloadReport:
        return await self._ask(handle, contract.WORKLOAD_QUERY, None, WorkloadReport)

    async def _ask(self, handle: WorkflowHandle, query: str, arg: Any, result_type: type[T]) -> T:
        """A query's answer, asked again (up to STALE_RETRIES times, a second apart) when the
        engine's worker refused it (a worker died a moment ago, or the query came with events of no
        workflow task yet, as after a server restart): the run then replays with its next workflow
        task. Any other failure is raised as it comes."""
        args = () if arg is None else (arg,)
        for attempt in range(STALE_RETRIES + 1):
            try:
                return await handle.query(query, *args, result_type=result_type, rpc_timeout=self.query_timeout)
            except WorkflowQueryFailedError as err:
                if str(err) not in contract.REFUSED_QUERIES or attempt == STALE_RETRIES:
                    raise
            await asyncio.sleep(1)
        raise AssertionError("unreachable")

    async def trouble(self, key: str, attempts: int = FAILING_ATTEMPTS) -> WorkflowTrouble | None:
        """Why the workload's running workflow cannot take a message now (its workflow task has
        failed `attempts - 1` times in a row), or None when it can. Raises when no workflow of that
        workload runs."""
        handle = self.client.get_workflow_handle(ids.workload_id(key))
        desc = await _described(handle)
        if desc is None or desc.status != WorkflowExecutionStatus.RUNNING:
            raise AdmitflowError(f'workloads "{key}" not found or already finished')
        return await self._trouble(handle, desc) if _task_failing(desc, attempts) else None

    async def _unanswered(self, handle: WorkflowHandle, desc: WorkflowExecutionDescription, timed_out: bool = False) -> UnansweredWorkload:
        trouble = await self._trouble(handle, desc, timed_out)
        workload = await self._run_input(handle)
        if workload is None:
            key = ids.workload_key(desc.id) or desc.id
            raise NotAnswering(f'workloads "{key}" does not answer ({trouble.summary()}) and its input cannot be read')
        return UnansweredWorkload(metadata=workload.metadata, spec=workload.spec, workflow=trouble)

    async def _trouble(self, handle: WorkflowHandle, desc: WorkflowExecutionDescription, timed_out: bool = False) -> WorkflowTrouble:
        """What Temporal knows of a workflow that does not answer, read from the end of its history:
        its last workflow task failure, when the failures began, and the last task that completed."""
        attributes = desc.typed_search_attributes
        trouble = WorkflowTrouble(
            status=NOT_ANSWERING if timed_out else TASK_FAILING,
            workflow_id=desc.id,
            run_id=desc.run_id,
            task_attempt=desc.raw_description.pending_workflow_task.attempt,
            phase=attributes.get(sa.PHASE) or "",
            cluster_queue=attributes.get(sa.CLUSTER_QUEUE) or "",
            local_queue=attributes.get(sa.LOCAL_QUEUE) or "",
            task_queue=desc.task_queue,
        )
        request = GetWorkflowExecutionHistoryReverseRequest(
            namespace=self.client.namespace,
            execution=WorkflowExecution(workflow_id=desc.id, run_id=desc.run_id),
            maximum_page_size=100,
        )
        while True:
            page = await self.client.workflow_service.get_workflow_execution_history_reverse(request, timeout=RPC_TIMEOUT)
            for event in page.history.events:
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                    return trouble.model_copy(update={"last_good_task": event.event_id, "first_task": None})
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                    trouble.first_task = event.event_id  # read backwards: the last one kept is the first
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                    attrs = event.workflow_task_failed_event_attributes
                    if not trouble.last_failure:
                        failure = attrs.failure
                        kind = failure.application_failure_info.type if failure.HasField("application_failure_info") else ""
                        message = _first_line(failure.message)
                        trouble.last_failure = f"{kind}: {message}" if kind and not message.startswith(kind) else message
                        trouble.cause = _cause_name(attrs.cause)
                    trouble.failing_since = event.event_time.ToDatetime(tzinfo=UTC)
                elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
                    if not trouble.last_failure:
                        trouble.last_failure = "its workflow task timed out: no worker completed it in time"
                    trouble.failing_since = event.event_time.ToDatetime(tzinfo=UTC)
            if not page.next_page_token:
                return trouble  # not one task completed in this run
            request.next_page_token = page.next_page_token

    async def _run_input(self, handle: WorkflowHandle) -> Workload | None:
        """The Workload its current run started with (the first event of its history); a first run
        stamps its creation when it starts, which is when that event was written."""
        async for event in handle.fetch_history_events(page_size=1, rpc_timeout=RPC_TIMEOUT):
            attrs = event.workflow_execution_started_event_attributes
            try:
                (started,) = await self.client.data_converter.decode(attrs.input.payloads, [WorkloadInput])
            except PayloadDecodeError:
                raise
            except (ValueError, ValidationError):
                return None
            workload = started.state.workload if started.state is not None else started.workload
            if workload.metadata.creation_timestamp is None:
                workload.metadata.creation_timestamp = event.event_time.ToDatetime(tzinfo=UTC).replace(microsecond=0)
            return workload
        return None

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

    async def _listed(self, query: str) -> dict[str, Any]:
        """The runs the visibility query finds, by workflow ID, each the newest run of its
        workflow: a workload applied again after it finished has an older, completed run under the
        same ID, which a filter may match when the current run does not (phase=Finished). The
        completed ones are checked against every run of their IDs, a few hundred IDs per call."""
        found: dict[str, Any] = {}
        async for wf in self.client.list_workflows(query, page_size=LIST_PAGE_SIZE, rpc_timeout=RPC_TIMEOUT):
            if wf.id not in found or _started(wf) > _started(found[wf.id]):
                found[wf.id] = wf
        completed = sorted(i for i, wf in found.items() if wf.status != WorkflowExecutionStatus.RUNNING)
        for chunk in (completed[i : i + SUPERSEDED_CHUNK] for i in range(0, len(completed), SUPERSEDED_CHUNK)):
            ids_ = ", ".join(visibility.quoted(i) for i in chunk)
            async for wf in self.client.list_workflows(f"WorkflowId IN ({ids_})", page_size=LIST_PAGE_SIZE, rpc_timeout=RPC_TIMEOUT):
                mine = found.get(wf.id)
                if mine is not None and wf.run_id != mine.run_id and _started(wf) > _started(mine):
                    del found[wf.id]
        return found

    async def workload_rows(self, updated_since: datetime | None = None, **filters: Any) -> list[dict[str, Any]]:
        """Workloads as visibility knows them (admitflow/visibility.py `row`), sorted by namespace
        and name: one ListWorkflowExecutions call per 1,000, and no query to any workflow. Filters
        as `visibility.workloads_query` takes them. A workload whose workflow task keeps failing
        (the server's TemporalReportedProblems) is described, so its row says why."""
        query = self._workloads_query(updated_since=updated_since, **filters)
        rows = []
        for wf in (await self._listed(query)).values():
            attributes = {pair.key.name: pair.value for pair in wf.typed_search_attributes}
            r = visibility.row(wf.id, attributes, wf.start_time)
            if r is None:
                continue
            if "workflow" in r and wf.status == WorkflowExecutionStatus.RUNNING:
                handle = self.client.get_workflow_handle(wf.id, run_id=wf.run_id)
                try:
                    desc = await handle.describe(rpc_timeout=RPC_TIMEOUT)
                    if _task_failing(desc, attempts=2):
                        r["workflow"] = (await self._trouble(handle, desc)).to_wire()
                    else:
                        del r["workflow"]  # it recovered since
                except RPCError as err:
                    if err.status != RPCStatusCode.NOT_FOUND:
                        raise
            rows.append(r)
        return sorted(rows, key=lambda r: (r["metadata"]["namespace"], r["metadata"]["name"]))

    def _workloads_query(self, **filters: Any) -> str:
        try:
            return visibility.workloads_query(**filters)
        except ValueError as err:
            raise AdmitflowError(str(err)) from None

    async def workloads(self, **filters: Any) -> list[WorkloadReport]:
        """The workloads visibility finds for these filters (as `visibility.workloads_query` takes
        them: namespace, local_queue, phase, cluster_queue, pending_check, label_selector), each as
        its workflow tells it: one query per workload found, so narrow the list first. For what a
        table shows, `workload_rows` asks no workflow."""
        listed = await self._listed(self._workloads_query(**filters))
        reports = await self._reports([key for key in map(ids.workload_key, sorted(listed)) if key])
        return [r for r in reports.values() if r is not None]

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

    async def _reports(self, keys: Sequence[str]) -> dict[str, WorkloadReport | None]:
        """Each workload's report (None for one that is gone), CONCURRENT_READS at a time."""
        limit = asyncio.Semaphore(CONCURRENT_READS)

        async def one(key: str) -> WorkloadReport | None:
            async with limit:
                return await self.workload(key, missing_ok=True)

        unique = list(dict.fromkeys(keys))
        return dict(zip(unique, await asyncio.gather(*(one(k) for k in unique))))

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
        return await self._workload_update(
            key, contract.APPLY_ADMISSION_CHECK_STATE, verdict, WorkloadStatus, "the verdict may not have been applied"
        )

    async def ungate(self, key: str, gates: Sequence[str] = (), all: bool = False) -> list[str]:
        """Remove admission gates (`kueue.x-k8s.io/admission-gated-by`) through the workload's
        update; returns the gates left. A refusal (not gated, a gate it does not have) is one line."""
        left = await self._workload_update(
            key, contract.APPLY_ADMISSION_GATE_REMOVAL, admission_gates.GateRemoval(gates=list(gates), all=all),
            admission_gates.AdmissionGates, "the gates may not have been removed",
        )
        return left.gates

    async def set_priority(self, key: str, change: priority.PriorityChange) -> priority.PriorityChange:
        """Change a submitted workload's priority (and the class it comes from) through its update;
        returns what it has then. A change Kueue refuses (while quota is reserved) is one line."""
        got = await self._workload_update(key, contract.APPLY_PRIORITY, change, priority.PriorityChange, "the priority may not have changed")
        if (got.priority, got.priority_class_ref) != (change.priority, change.priority_class_ref):
            raise AdmitflowError(
                f'workloads "{key}": its workflow did not take the priority change (it runs a history from before '
                "admitflow changed priorities); delete the workload and apply it again"
            )
        return got

    async def _workload_update(self, key: str, update: str, arg: Any, result_type: type[T], unsure: str) -> T:
        """Run one of the workload's updates. A workflow that cannot answer is named before anything
        is sent; a refusal is one line; an update that timed out says `unsure` and why."""
        trouble = await self.trouble(key)
        if trouble is not None:
            raise WorkloadNotAnswering(key, trouble)
        handle = self.client.get_workflow_handle(ids.workload_id(key))
        try:
            return await _taken(lambda: handle.execute_update(update, arg, result_type=result_type, rpc_timeout=self.query_timeout))
        except WorkflowUpdateFailedError as err:
            raise AdmitflowError(_cause(err)) from None
        except WorkflowUpdateRPCTimeoutOrCancelledError:
            trouble = await self.trouble(key)
            why = trouble.summary() if trouble else f"it did not answer within {int(self.query_timeout.total_seconds())}s"
            raise NotAnswering(f'workloads "{key}": {unsure}: {why}') from None
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise AdmitflowError(f'workloads "{key}" not found or already finished') from None
            raise

    async def activate(self, key: str) -> None:
        await self._signal_workload(key, contract.ACTIVATE, None)

    async def deactivate(self, key: str) -> None:
        await self._signal_workload(key, contract.DEACTIVATE, None)

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
            return await _taken(lambda: handle.execute_update(contract.SET_ADMISSION_CHECK_ACTIVE, request, result_type=bool))
        except WorkflowUpdateFailedError as err:
            raise AdmitflowError(_cause(err)) from None

    # --- the simulated cluster autoscaler ------------------------------------------------------

    async def provisioning_requests(self, namespace: str | None = None) -> list[ProvisioningRequest]:
        """The simulated autoscaler's ProvisioningRequests (none when it does not run)."""
        try:
            found = await self._ask(
                self.client.get_workflow_handle(ids.AUTOSCALER_ID), contract.PROVISIONING_REQUESTS_QUERY,
                ProvisioningRequestQuery(namespace=namespace), ProvisioningRequestList,
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
            return await _taken(lambda: handle.execute_update(
                contract.SET_PROVISIONING_REQUEST_CONDITION, request, result_type=ProvisioningRequest
            ))
        except WorkflowUpdateFailedError as err:
            raise AdmitflowError(_cause(err)) from None
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise AdmitflowError(f'provisioningrequests.autoscaling.x-k8s.io "{request.name}" not found') from None
            raise

    async def _signal_workload(self, key: str, signal: str, payload: Any) -> None:
        trouble = await self.trouble(key)
        if trouble is not None:
            raise WorkloadNotAnswering(key, trouble)
        try:
            await self.client.get_workflow_handle(ids.workload_id(key)).signal(signal, payload, rpc_timeout=RPC_TIMEOUT)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise AdmitflowError(f'workloads "{key}" not found or already finished') from None
            raise


def _unanswered_query(err: RPCError, what: str) -> Exception:
    """A query to one of the engine's workflows that timed out or was refused because its workflow
    task fails, as one line; any other RPC error as it is. A timeout reads the same whether the
    client's deadline came first ("Timeout expired") or the server's ("query timed out before a
    worker could process it"): which one does is a race."""
    if err.status in (RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED):
        return NotAnswering(f"{what} does not answer: the query timed out")
    if err.status == RPCStatusCode.FAILED_PRECONDITION:
        return NotAnswering(f"{what} does not answer: {_first_line(err.message)}")
    return err


def _task_failing(desc: WorkflowExecutionDescription, attempts: int = FAILING_ATTEMPTS) -> bool:
    """Its workflow task has failed (or timed out) `attempts - 1` times in a row and is being
    retried: it answers no query and handles no message until a task completes. After a query that
    did not answer, one failure (attempts=2) is explanation enough."""
    return desc.raw_description.pending_workflow_task.attempt >= attempts


def _started(wf: Any) -> datetime:
    return wf.start_time or datetime.min.replace(tzinfo=UTC)


def _first_line(text: str, limit: int = 300) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _cause_name(cause: int) -> str:
    """WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR -> NonDeterministicError."""
    try:
        name = WorkflowTaskFailedCause.Name(cause).removeprefix("WORKFLOW_TASK_FAILED_CAUSE_")
    except ValueError:
        return str(cause)
    return "".join(w.capitalize() for w in name.split("_")) if cause else ""


def _lq_key(workload: Workload) -> str:
    return f"{workload.metadata.namespace}/{workload.spec.queue_name}"


async def _described(handle: WorkflowHandle) -> WorkflowExecutionDescription | None:
    """The workflow's description, or None when no workflow of that ID exists."""
    try:
        return await handle.describe(rpc_timeout=RPC_TIMEOUT)
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
        return None


def _gate_removals(items: Sequence[LoadedManifest], existing: Sequence[WorkloadReport | None]) -> dict[str, list[str]]:
    """Workload key -> the admission gates its manifest removes from the running workload; a
    manifest Kueue's webhook refuses (a malformed kueue.x-k8s.io/admission-gated-by, or gates added
    after creation) raises, one line naming the file and document, before anything is applied."""
    out: dict[str, list[str]] = {}
    for m, report in zip(items, existing, strict=True):
        new = admission_gates.annotation(m.obj)
        if report is None:
            errors = admission_gates.format_errors(new)
        else:
            errors = admission_gates.update_errors(admission_gates.annotation(report), new)
        if errors:
            raise AdmitflowError(f"{m.source}: document {m.index} (Workload {m.obj.metadata.name}): {errors[0]}")
        removed = admission_gates.removed_by_update(admission_gates.annotation(report), new) if report is not None else []
        if removed:
            out[m.obj.key] = removed
    return out


def _configured(outcomes: list[Outcome], changed: Iterable[str]) -> list[Outcome]:
    """A running workload whose manifest removed admission gates or changed its priority was
    `configured`, not `unchanged`."""
    keys = set(changed)
    return [
        o.model_copy(update={"action": "configured"}) if o.kind == "Workload" and o.key in keys and o.action == "unchanged" else o
        for o in outcomes
    ]


def _finished(report: WorkloadReport) -> bool:
    return any(c.type == "Finished" and c.status == "True" for c in report.status.conditions)


async def _taken(send: Callable[[], Awaitable[T]]) -> T:
    """What `send()`, an update, returns, sent again when the server rejected it unread."""
    for _ in range(UNPROCESSED_ATTEMPTS - 1):
        try:
            return await send()
        except WorkflowUpdateFailedError as err:
            if not unprocessed_update(err):
                raise
    return await send()


def unprocessed_update(err: WorkflowUpdateFailedError) -> bool:
    """Whether the server rejected the update because no worker took it from its workflow task
    (`contract.UNPROCESSED_UPDATE`): nothing of it was applied."""
    return isinstance(err.cause, ApplicationError) and err.cause.type == contract.UNPROCESSED_UPDATE


def _cause(err: WorkflowUpdateFailedError) -> str:
    cause = err.cause
    return cause.message if isinstance(cause, ApplicationError) else str(cause or err)


def _located(err: WorkflowUpdateFailedError, items: Sequence[LoadedManifest]) -> AdmitflowError:
    """The catalog update's refusal, with the file and document in front."""
    cause = err.cause
    if isinstance(cause, ApplicationError) and cause.details:
        return _at(cause.message, (cause.details[0] or {}).get("index"), items)
    return AdmitflowError(_cause(err))


def _at(refusal: str, index: Any, items: Sequence[LoadedManifest]) -> AdmitflowError:
    """Put the file and document of object `index` in front of the catalog's refusal."""
    if isinstance(index, int) and 0 <= index < len(items):
        m = items[index]
        return AdmitflowError(f"{m.source}: document {m.index} ({m.obj.kind} {m.obj.metadata.name}): {refusal}")
    return AdmitflowError(refusal)
