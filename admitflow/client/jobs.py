"""The client's batch/v1 Jobs: `apply` and `create` take them beside the other kinds, and each new
Job is stored in a JobWorkflow of its own (workflows/job_store.py) with the Workload Kueue's job framework
makes from it (admitflow.jobs) submitted beside it; `get`, `describe` and `delete` reach them.

A Job goes through what the apiserver and Kueue's webhooks would do to it at creation, in order:
Kueue's validating webhook (`batch_job.validate_create`), its defaults (the LocalQueue `default`,
the WorkloadPriorityClass `default`, `suspend: true`), the refusal of a Job Kueue would not manage
(no queue name), then the apiserver's create (name from `generateName`, UID, defaults, the pod
labels and selector) and the Workload (`framework.construct_workload`: name, queue, podSet,
priority, owner). Every check runs before anything is sent, so a bad invocation changes nothing.

The Workload names its runner: the Job's `admitflow.io/runner` annotation, else its LocalQueue's
(read live, as for any Workload), else `local` (the local runner, which runs a stored Job's pods as
processes: docs/runners.md).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import WorkflowExecutionStatus
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from admitflow import contract, ids, visibility
from admitflow.admission.catalog import CATALOG_KINDS, Outcome
from admitflow.admission.priority import PriorityError
from admitflow.api import LoadedManifest, Workload
from admitflow.api.job import Job
from admitflow.api.workload import RUNNER_ANNOTATION
from admitflow.client.connection import RPC_TIMEOUT, AdmitflowError
from admitflow.client.reads import _finished
from admitflow.client.writes import Writes
from admitflow.jobs import batch_job, framework, store
from admitflow.jobs.batch_job import BatchJob
from admitflow.messages import DeleteWorkload, JobDeletion, JobInput

# The runner a stored Job's Workload goes to when neither the Job nor its LocalQueue names one.
DEFAULT_JOB_RUNNER = "local"
# Jobs per ListWorkflowExecutions page.
LIST_PAGE_SIZE = 1000


@dataclass(frozen=True)
class JobPlan:
    """What `apply` or `create` does with one Job manifest, decided before anything is sent."""

    job: Job
    workload: Workload
    action: str  # created | unchanged


class Jobs(Writes):
    """Jobs beside the other kinds: `apply`, `create`, `get`, `delete` and reads of one Job."""

    # --- apply and create -------------------------------------------------------------------

    async def apply(
        self, manifests: Sequence[LoadedManifest], dry_run: str | None = None, timeout: timedelta | None = None
    ) -> list[Outcome]:
        """kubectl apply: as `Writes.apply`, and each Job stored with its Workload submitted, once
        (an applied Job that is stored already is `unchanged`; one whose spec differs is refused). A
        Job with only `generateName` is refused, as kubectl refuses it: `create` takes it."""
        items = [m for m in manifests if m.obj.kind == "Job"]
        if not items:
            return await super().apply(manifests, dry_run, timeout)
        for m in items:
            if not m.obj.metadata.name:
                raise AdmitflowError(
                    f"{_where(m)}: from {m.obj.metadata.generate_name}: cannot use generate name with apply "
                    "(admitflow create makes a name)"
                )
        others = [m for m in manifests if m.obj.kind != "Job"]
        plans = await self._plan_jobs(items, others, creating=False)
        outcomes = await super().apply(others, dry_run, timeout) if others else []
        return outcomes + await self._carry_out(plans, dry_run is not None)

    async def create(
        self, manifests: Sequence[LoadedManifest], dry_run: str | None = None, timeout: timedelta | None = None
    ) -> list[Outcome]:
        """kubectl create: every object is new. One that exists already is refused (AlreadyExists)
        before anything is created; a Job with `generateName` gets its name here, as the apiserver
        gives one: the prefix's first 58 characters and 5 random ones."""
        for m in manifests:
            if m.obj.kind == "Job":
                continue
            if m.obj.kind == "Workload":
                report = await self.workload(m.obj.key, missing_ok=True)
                exists = report is not None and not _finished(report)
            elif m.obj.kind in CATALOG_KINDS:
                exists = bool(await self.catalog_objects(m.obj.kind, m.obj.key))
            else:
                exists = False
            if exists:
                raise AdmitflowError(f"{_where(m)}: {m.obj.kind.lower()}s \"{m.obj.key}\" already exists")
        items = [m for m in manifests if m.obj.kind == "Job"]
        others = [m for m in manifests if m.obj.kind != "Job"]
        plans = await self._plan_jobs(items, others, creating=True)
        outcomes = await super().apply(others, dry_run, timeout) if others else []
        return outcomes + await self._carry_out(plans, dry_run is not None)

    async def _plan_jobs(self, items: Sequence[LoadedManifest], others: Sequence[LoadedManifest], creating: bool) -> list[JobPlan]:
        """Each Job as it would be stored, and its Workload; the first refusal raises, one line
        naming its file and document."""
        if not items:
            return []
        local_queues = {lq.key: lq for lq in await self.catalog_objects("LocalQueue")}
        local_queues.update({m.obj.key: m.obj for m in others if m.obj.kind == "LocalQueue"})
        priority_classes = {pc.metadata.name: pc for pc in await self.catalog_objects("PriorityClass")}
        priority_classes.update({m.obj.metadata.name: m.obj for m in others if m.obj.kind == "PriorityClass"})
        workload_priority_classes = await self.priority_class_values([m for m in others if m.obj.kind in CATALOG_KINDS])
        now = datetime.now(UTC)
        chooser = random.SystemRandom().choice
        plans: list[JobPlan] = []
        for m in items:
            where = _where(m)
            job: Job = m.obj
            errors = batch_job.validate_create(job)
            namespace = job.metadata.namespace
            queues = [lq.metadata.name for lq in local_queues.values() if lq.metadata.namespace == namespace]
            job = framework.apply_webhook_defaults(BatchJob(job), queues, workload_priority_classes).job
            refusal = framework.unmanaged_reason(BatchJob(job))
            if errors or refusal:
                raise AdmitflowError(f"{where}: {errors[0] if errors else refusal}")
            existing = await self.job(f"{namespace}/{job.metadata.name}") if job.metadata.name else None
            if existing is not None:
                if creating:
                    raise AdmitflowError(f"{where}: {store.JobAlreadyExists(existing.metadata.name or '')}")
                stored, action = existing, "unchanged"
                if _content(store.created(job, existing.metadata.uid or "", now)) != _content(existing):
                    raise AdmitflowError(
                        f"{where}: spec: Forbidden: the Job {existing.metadata.name} is stored already and differs; "
                        "delete it (admitflow delete job) and apply again"
                    )
            else:
                try:
                    stored = store.created(job, str(uuid.uuid4()), now, chooser)
                except store.JobStoreError as err:
                    raise AdmitflowError(f"{where}: {err}") from None
                stored, action = store.with_suspension(stored, now), "created"
            try:
                workload = framework.construct_workload(BatchJob(stored), workload_priority_classes, priority_classes)
            except (PriorityError, framework.JobError) as err:
                raise AdmitflowError(f"{where}: {err}") from None
            lq = local_queues.get(f"{namespace}/{workload.spec.queue_name}")
            plans.append(JobPlan(job=stored, workload=_with_runner(workload, stored, lq), action=action))
        return plans

    async def _carry_out(self, plans: Sequence[JobPlan], dry_run: bool) -> list[Outcome]:
        """Store each new Job (its JobWorkflow, the Job in its memo) and submit its Workload. A Job
        stored already has its Workload submitted only if it never was (a create cut short between
        the two): a Workload that ran and ended stays ended."""
        outcomes = []
        routes = await self.routes() if plans and not dry_run else {}
        checks = await self.admission_checks_by_queue() if plans and not dry_run else {}
        for plan in plans:
            key = f"{plan.job.metadata.namespace}/{plan.job.metadata.name}"
            outcome = Outcome(kind="Job", key=key, action=plan.action)
            outcomes.append(outcome)
            if dry_run:
                continue
            if plan.action == "created":
                try:
                    await self.client.start_workflow(
                        contract.JOB_WORKFLOW, JobInput(job=plan.job), id=ids.job_id(key), task_queue=self.task_queue,
                        memo={contract.JOB_MEMO: plan.job.to_wire()}, static_summary=f"Job {key} (Workload {plan.workload.metadata.name})",
                    )
                except WorkflowAlreadyStartedError:
                    raise AdmitflowError(f"{store.JobAlreadyExists(plan.job.metadata.name or '')}") from None
            elif await self._submitted(plan.workload.key):
                continue
            cq = routes.get(f"{plan.workload.metadata.namespace}/{plan.workload.spec.queue_name}")
            await self.submit(plan.workload, None, cq, checks.get(cq or "", []))
        return outcomes

    async def _submitted(self, key: str) -> bool:
        try:
            await self.client.get_workflow_handle(ids.workload_id(key)).describe(rpc_timeout=RPC_TIMEOUT)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return True

    # --- reads ------------------------------------------------------------------------------

    async def job(self, key: str) -> Job | None:
        """The stored Job (namespace/name) as its workflow's memo holds it; None when there is none."""
        handle = self.client.get_workflow_handle(ids.job_id(key))
        try:
            desc = await handle.describe(rpc_timeout=RPC_TIMEOUT)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        if desc.status != WorkflowExecutionStatus.RUNNING:
            return None
        return Job.model_validate(await desc.memo_value(contract.JOB_MEMO))

    async def jobs(self, namespace: str | None = None, label_selector: str | None = None) -> list[Job]:
        """The stored Jobs, from visibility (each workflow's memo), sorted by namespace and name."""
        try:
            requirements = visibility.parse_selector(label_selector or "")
        except visibility.SelectorError as err:
            raise AdmitflowError(str(err)) from None
        query = f"WorkflowType = '{contract.JOB_WORKFLOW}' AND ExecutionStatus = 'Running'"
        if namespace is not None:
            query += f" AND WorkflowId STARTS_WITH {visibility.quoted(ids.job_id(f'{namespace}/'))}"
        found: dict[str, Job] = {}
        async for wf in self.client.list_workflows(query, page_size=LIST_PAGE_SIZE, rpc_timeout=RPC_TIMEOUT):
            job = Job.model_validate(await wf.memo_value(contract.JOB_MEMO))
            if visibility.labels_match(requirements, job.metadata.labels or {}):
                found[wf.id] = job
        return sorted(found.values(), key=lambda j: (j.metadata.namespace, j.metadata.name or ""))

    async def job_workload(self, key: str) -> str | None:
        """The key of the Workload of the stored Job `key`, or None when there is no such Job."""
        job = await self.job(key)
        return None if job is None else f"{job.metadata.namespace}/{framework.workload_name_for(BatchJob(job))}"

    async def get(self, kind: str, key: str | None = None, **kwargs: Any) -> list[dict[str, Any]]:
        if kind != "Job":
            return await super().get(kind, key, **kwargs)
        if key is not None:
            job = await self.job(key)
            if job is None:
                raise AdmitflowError(f'{store.RESOURCE} "{ids.split_key(key)[1]}" not found')
            return [job.to_wire()]
        filters = {k: v for k, v in kwargs.items() if k not in ("namespace", "label_selector", "full") and v is not None}
        if filters:
            raise AdmitflowError(f"{', '.join(sorted(filters))}: only workloads are filtered so")
        return [j.to_wire() for j in await self.jobs(kwargs.get("namespace"), kwargs.get("label_selector"))]

    # --- delete -----------------------------------------------------------------------------

    async def delete(self, kind: str, key: str) -> Outcome:
        """As `Writes.delete`; a Job is deleted with its Workload, as Kubernetes' garbage collector
        deletes the Workload it owns: the Workload first (its runner stops the Job's pods), then
        the Job's workflow ends."""
        if kind != "Job":
            return await super().delete(kind, key)
        job = await self.job(key)
        if job is None:
            raise AdmitflowError(f'{store.RESOURCE} "{ids.split_key(key)[1]}" not found')
        workload = f"{job.metadata.namespace}/{framework.workload_name_for(BatchJob(job))}"
        report = await self.workload(workload, missing_ok=True)
        if report is not None and not _finished(report):
            await self._signal_workload(workload, contract.DELETE, DeleteWorkload(reason=f"its Job {key} was deleted"))
        try:
            await self.client.get_workflow_handle(ids.job_id(key)).signal(contract.DELETE_JOB, JobDeletion(), rpc_timeout=RPC_TIMEOUT)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise AdmitflowError(f'{store.RESOURCE} "{ids.split_key(key)[1]}" not found') from None
            raise
        return Outcome(kind="Job", key=key, action="deleted")


def _where(m: LoadedManifest) -> str:
    meta = m.obj.metadata
    return f"{m.source}: document {m.index} ({m.obj.kind} {meta.name or getattr(meta, 'generate_name', None) or '?'})"


def _content(job: Job) -> dict[str, Any]:
    """What `apply` compares of a Job: its labels, annotations and spec, but what Kueue changes on
    admission and eviction (`suspend`, the stopping annotation, the pod template's scheduling
    directives)."""
    wire = job.to_wire()
    spec = {k: v for k, v in wire["spec"].items() if k != "suspend"}
    template = spec["template"]
    for part, key in store.MUTABLE_SCHEDULING_DIRECTIVES:
        (template.get(part) or {}).pop(key, None)
    meta = wire["metadata"]
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != batch_job.STOPPING_ANNOTATION}
    return {"spec": spec, "labels": meta.get("labels"), "annotations": annotations}


def _with_runner(workload: Workload, job: Job, local_queue: Any) -> Workload:
    """The Workload with the runner that runs its Job: the Job's `admitflow.io/runner`, else none
    when its LocalQueue names one (the LocalQueue's then applies), else DEFAULT_JOB_RUNNER."""
    runner = (job.metadata.annotations or {}).get(RUNNER_ANNOTATION)
    if runner is None and local_queue is not None and (local_queue.metadata.annotations or {}).get(RUNNER_ANNOTATION):
        return workload
    annotations = {**(workload.metadata.annotations or {}), RUNNER_ANNOTATION: runner or DEFAULT_JOB_RUNNER}
    return workload.model_copy(update={"metadata": workload.metadata.model_copy(update={"annotations": annotations})})
