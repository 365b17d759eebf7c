"""The client's writes: apply (catalog objects in one all-or-nothing update, then workloads),
submit, delete, every message to a workload (finish, pods ready, a verdict, admission gates,
priority, activate, deactivate), an AdmissionCheck's `Active` condition, and a simulated
ProvisioningRequest's conditions. A workload whose workflow task fails is refused before anything
is sent (`WorkloadNotAnswering`)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import (
    WithStartWorkflowOperation,
    WorkflowQueryFailedError,
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

from admitflow import contract, ids, visibility
from admitflow import search_attributes as sa
from admitflow.admission import admission_gates, pods_ready, priority
from admitflow.admission import workload as wl
from admitflow.admission.catalog import CATALOG_KINDS, ObjectRef, Outcome
from admitflow.admission.checks import Verdict
from admitflow.admission.workload import WorkloadReport
from admitflow.api import LoadedManifest, Workload, WorkloadStatus
from admitflow.api.provisioning_request import ProvisioningRequest
from admitflow.client.connection import (
    RPC_TIMEOUT,
    AdmitflowError,
    NotAnswering,
    T,
    _cause,
    _first_line,
    _taken,
    _unanswered_query,
)
from admitflow.client.reads import Reads, _finished, _lq_key
from admitflow.client.trouble import TASK_FAILING, UnansweredWorkload, WorkloadNotAnswering
from admitflow.kinds import PLURALS
from admitflow.messages import (
    AdmissionCheckActive,
    ApplyRequest,
    ApplyResult,
    CatalogInput,
    DeleteRequest,
    DeleteWorkload,
    ProvisioningRequestCondition,
    WorkloadInput,
)
from admitflow.admission.protocol import FinishRequest


class Writes(Reads):
    """Every change a user asks for, checked first against what is read (a bad manifest, a changed
    spec, a workload whose workflow task fails is refused in one line before anything is sent)."""

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
        report = await self.recorded_workload(wl.key, missing_ok=True)
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
            report = await self.recorded_workload(key)
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

    # --- the catalog's AdmissionChecks and the simulated cluster autoscaler --------------------

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
