"""The client's reads: catalog objects, ClusterQueues (and their pending workloads), Cohorts,
workloads, lists of workloads from visibility, and the simulated autoscaler's ProvisioningRequests.

Two roads (docs/architecture.md, "Reads"). Machines and lists read what the workflows write in
their memos (admitflow/memos.py), by DescribeWorkflowExecution for one workflow and with the rows
of ListWorkflowExecutions for many: the catalog's objects, every list of workloads, ClusterQueues,
LocalQueues and Cohorts, ProvisioningRequests, a workload an apply or a delete checks, the
workloads an explanation weighs. A person's `get`, `describe` or `explain` of one object asks its
workflow (a query), and only that: `workload`, `cluster_queue_report`, `cohort_status`, a single
ClusterQueue, LocalQueue or Cohort from `get`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import (
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.service import RPCError, RPCStatusCode

from admitflow import contract, ids, memos, visibility
from admitflow import search_attributes as sa
from admitflow.admission.catalog import CatalogState, cohort_root
from admitflow.admission.workload import WorkloadReport
from admitflow.api import LoadedManifest, Workload
from admitflow.api.cohort import CohortStatus
from admitflow.api.provisioning_request import ProvisioningRequest
from admitflow.client.connection import (
    RPC_TIMEOUT,
    AdmitflowError,
    Connection,
    NotAnswering,
    _described,
    _first_line,
    _unanswered_query,
)
from admitflow.client.trouble import (
    FAILING_ATTEMPTS,
    NOT_ANSWERING,
    TASK_FAILING,
    UnansweredWorkload,
    WorkflowTrouble,
    _cause_name,
    _task_failing,
)
from admitflow.codec import PayloadDecodeError
from admitflow.kinds import PLURALS
from admitflow.messages import (
    CohortRef,
    WorkloadInput,
)
from admitflow.admission.protocol import ClusterQueueReport, PendingWorkload, StatusQuery

# A ClusterQueue in a cohort is answered by its tree; one moving between trees may send a reader
# home and back a few times (admitflow/admission/cohort_tree.py).
MOVES_FOLLOWED = 6
MOVE_PAUSE = 0.2
# At most this many workloads asked at once when listing them.
CONCURRENT_READS = 16
# Workflows per ListWorkflowExecutions page (the server's default and maximum for SQL visibility).
LIST_PAGE_SIZE = 1000
# Workflow IDs per visibility query that looks for newer runs of completed workloads, or reads the
# memos of given workloads.
SUPERSEDED_CHUNK = 200
# A running workflow whose memo does not hold what it writes yet (its run started, or continued as
# new, a moment ago: its first workflow task writes it) is described again this often, this many times.
MEMO_PAUSE = 0.2
MEMO_WAITS = 25
QUEUE_TYPES = (contract.CLUSTER_QUEUE_WORKFLOW, contract.COHORT_WORKFLOW)


@dataclass(frozen=True)
class Listed:
    """A running workflow's memo as visibility lists it, and whether its workflow task keeps failing
    (the server's TemporalReportedProblems): then what the memo holds is what it last wrote."""

    memo: dict[str, Any]
    failing: bool = False
    task_queue: str = ""


class Reads(Connection):
    """What the catalog, the queue workflows and visibility hold, and each workload as its workflow
    tells it (or, when it does not answer, as Temporal knows it without its help)."""

    # --- memos -----------------------------------------------------------------------------------

    async def _memo(self, workflow_id: str) -> dict[str, Any] | None:
        """The memo of the running workflow of that ID as its mutable state holds it (no visibility
        lag); None when none runs."""
        desc = await _described(self.client.get_workflow_handle(workflow_id))
        if desc is None or desc.status != WorkflowExecutionStatus.RUNNING:
            return None
        return await desc.memo()

    async def queue_memos(self) -> dict[str, Listed]:
        """The memo of every running ClusterQueue home and cohort tree, by workflow ID: one
        visibility list per 1,000 of them."""
        types = ", ".join(visibility.quoted(t) for t in QUEUE_TYPES)
        query = f"WorkflowType IN ({types}) AND ExecutionStatus = 'Running'"
        out: dict[str, Listed] = {}
        async for wf in self.client.list_workflows(query, page_size=LIST_PAGE_SIZE, rpc_timeout=RPC_TIMEOUT):
            failing = any(pair.key.name == visibility.REPORTED_PROBLEMS for pair in wf.typed_search_attributes)
            out[wf.id] = Listed(memo=await wf.memo(), failing=failing, task_queue=wf.task_queue)
        return out

    # --- the catalog ----------------------------------------------------------------------------

    async def catalog_state(self) -> CatalogState:
        """The catalog's objects and revision, as its memo holds them; an empty catalog when no
        catalog workflow runs (nothing was ever applied)."""
        for _ in range(MEMO_WAITS):
            memo = await self._memo(ids.CATALOG_ID)
            if memo is None:
                return CatalogState()
            state = memos.catalog_state(memo)
            if state is not None:
                return state
            await asyncio.sleep(MEMO_PAUSE)
        raise NotAnswering(
            f"the catalog ({ids.CATALOG_ID}) has not written its objects yet: is a worker polling task queue "
            f'"{self.task_queue}"? (admitflow worker)'
        )

    async def catalog_objects(self, kind: str, key: str | None = None) -> list[Any]:
        """The catalog's objects of a kind (one of that key), from its memo."""
        state = await self.catalog_state()
        if key is None:
            return sorted(state.all(kind), key=lambda o: o.key)
        found = state.get(kind, key)
        return [found] if found is not None else []

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

    # --- ClusterQueues, Cohorts, any kind -------------------------------------------------------

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
        if key is None and kind in ("ClusterQueue", "LocalQueue", "Cohort"):
            return await self._listed_queues(kind, objects)
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

    async def _listed_queues(self, kind: str, objects: Sequence[Any]) -> list[dict[str, Any]]:
        """A list of ClusterQueues, LocalQueues or Cohorts with their statuses as the memos of the
        queues' homes and trees hold them (at most queue_owner.MEMO_EVERY old): one visibility list,
        no query. An object whose queue has not written its memo yet has no status."""
        queues = {wid: listed.memo for wid, listed in (await self.queue_memos()).items()}
        parents = await self._cohort_parents() if kind == "Cohort" else {}
        out = []
        for obj in objects:
            wire = obj.to_wire()
            if kind == "Cohort":
                tree = queues.get(ids.cohort_id(cohort_root(parents, obj.metadata.name)))
                wire["status"] = memos.cohort_status(tree, obj.metadata.name).to_wire()
            else:
                name = obj.metadata.name if kind == "ClusterQueue" else obj.spec.cluster_queue
                held = memos.cluster_queue_held(name, queues.get(ids.cluster_queue_id(name)), queues)
                status = (held or {}).get("status") if kind == "ClusterQueue" else ((held or {}).get("localQueues") or {}).get(obj.key)
                if status is not None:
                    wire["status"] = status
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

    # --- one workload ---------------------------------------------------------------------------

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

    async def recorded_workload(self, key: str, missing_ok: bool = False) -> WorkloadReport | None:
        """The workload as its workflow's memo holds it (admitflow/memos.py: the report without its
        events, verdicts and pods' start information), or its final report once it has finished;
        no query. A workflow whose task keeps failing comes back as an `UnansweredWorkload`."""
        handle = self.client.get_workflow_handle(ids.workload_id(key), result_type=WorkloadReport)
        desc = await _described(handle)
        if desc is not None and desc.status == WorkflowExecutionStatus.RUNNING:
            if _task_failing(desc):
                return await self._unanswered(handle, desc)
            report = memos.workload_report(await desc.memo()) or await self._as_submitted(handle)
            if report is not None and not report.deleted:
                return report
        elif desc is not None and desc.status == WorkflowExecutionStatus.COMPLETED:
            report = await handle.result(rpc_timeout=RPC_TIMEOUT)
            if not report.deleted:
                return report
        if missing_ok:
            return None
        raise AdmitflowError(f'workloads "{key}" not found')

    async def _as_submitted(self, handle: WorkflowHandle) -> WorkloadReport | None:
        """A running workload whose first workflow task has not written its memo yet, as submitted."""
        workload = await self._run_input(handle)
        return WorkloadReport.model_validate(workload.to_wire()) if workload is not None else None

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

    # --- lists of workloads ---------------------------------------------------------------------

    async def _listed(self, query: str, every_run: bool = False) -> dict[str, Any]:
        """The runs the visibility query finds, by workflow ID, each the newest run of its
        workflow: a workload applied again after it finished has an older, completed run under the
        same ID, which a filter may match when the current run does not (phase=Finished). The
        completed ones are checked against every run of their IDs, a few hundred IDs per call,
        unless the query finds `every_run` of its IDs already (it names them, and nothing else)."""
        found: dict[str, Any] = {}
        async for wf in self.client.list_workflows(query, page_size=LIST_PAGE_SIZE, rpc_timeout=RPC_TIMEOUT):
            if wf.id not in found or _started(wf) > _started(found[wf.id]):
                found[wf.id] = wf
        if every_run:
            return found
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
        its memo holds it (`recorded_workload`), in the rows of the list: no query, and one
        ListWorkflowExecutions call per 1,000. For what a table shows, `workload_rows` reads the
        search attributes alone."""
        listed = await self._listed(self._workloads_query(**filters))
        reports = await self._recorded([listed[i] for i in sorted(listed)])
        return [r for r in reports.values() if r is not None]

    async def _reports(self, keys: Sequence[str]) -> dict[str, WorkloadReport | None]:
        """Each workload's report as its memo holds it (None for one that is gone), read with the
        rows of a visibility list, SUPERSEDED_CHUNK workloads per call."""
        unique = list(dict.fromkeys(keys))
        found: dict[str, Any] = {}
        for chunk in (unique[i : i + SUPERSEDED_CHUNK] for i in range(0, len(unique), SUPERSEDED_CHUNK)):
            ids_ = ", ".join(visibility.quoted(ids.workload_id(k)) for k in chunk)
            found.update(await self._listed(f"WorkflowType = '{contract.WORKLOAD_WORKFLOW}' AND WorkflowId IN ({ids_})", every_run=True))
        recorded = await self._recorded(list(found.values()))
        return {k: recorded.get(k) for k in unique}

    async def workload_reports(self, keys: Sequence[str]) -> dict[str, WorkloadReport | None]:
        """The workloads of these keys as their memos hold them (None for one that is gone)."""
        return await self._reports(keys)

    async def _recorded(self, listed: Iterable[Any]) -> dict[str, WorkloadReport | None]:
        """Listed workflows' workloads by key, as their memos hold them; for one whose workflow task
        keeps failing (the server's TemporalReportedProblems), what Temporal knows without it (an
        `UnansweredWorkload`); None for a deleted one. Only those, and running ones whose memo is not
        written yet, cost a call more, CONCURRENT_READS at a time."""
        limit = asyncio.Semaphore(CONCURRENT_READS)

        async def one(wf: Any) -> WorkloadReport | None:
            handle = self.client.get_workflow_handle(wf.id, run_id=wf.run_id, result_type=WorkloadReport)
            running = wf.status == WorkflowExecutionStatus.RUNNING
            if running and any(pair.key.name == visibility.REPORTED_PROBLEMS for pair in wf.typed_search_attributes):
                async with limit:
                    desc = await handle.describe(rpc_timeout=RPC_TIMEOUT)
                    if _task_failing(desc, attempts=2):
                        return await self._unanswered(handle, desc)
            report = memos.workload_report(await wf.memo())
            if report is None and running:
                async with limit:
                    report = await self._as_submitted(handle)
            return None if report is None or report.deleted else report

        listed = [wf for wf in listed if ids.workload_key(wf.id)]
        return dict(zip([ids.workload_key(wf.id) for wf in listed], await asyncio.gather(*(one(wf) for wf in listed))))

    # --- the simulated cluster autoscaler ------------------------------------------------------

    async def provisioning_requests(self, namespace: str | None = None) -> list[ProvisioningRequest]:
        """The simulated autoscaler's ProvisioningRequests, as its memo holds them (none when it does
        not run)."""
        memo = await self._memo(ids.AUTOSCALER_ID)
        return memos.stored_requests(memo or {}, namespace)


def _started(wf: Any) -> datetime:
    return wf.start_time or datetime.min.replace(tzinfo=UTC)


def _lq_key(workload: Workload) -> str:
    return f"{workload.metadata.namespace}/{workload.spec.queue_name}"


def _finished(report: WorkloadReport) -> bool:
    return any(c.type == "Finished" and c.status == "True" for c in report.status.conditions)
