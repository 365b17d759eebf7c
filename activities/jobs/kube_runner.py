"""The Kubernetes runner (`admitflow kube-runner`): admitflow as a cluster's admission engine for
batch/v1 Jobs, doing what Kueue's job reconciler does (pkg/controller/jobframework/reconciler.go,
pkg/controller/jobs/job), with the Workloads kept in admitflow's workflows instead of the cluster.

Two halves, on one event loop (no thread per Job, none per request):

- **The reconciler**, driven by one list+watch of every Job in the cluster (KubernetesJobs, the
  shared informer). Each Job that changes is reconciled, one at a time per Job, a few Jobs at once
  (client-go's work queue), by `admitflow.jobs.framework.next_step` on the Job and what is known of
  its Workload: a Job with the queue-name label, in a namespace `managed_namespaces` selects
  (Kueue's managedJobsNamespaceSelector: by default every namespace but kube-system and
  kueue-system; a cluster that also runs Kueue gives each its own namespaces), gets its Workload (Kueue's name, `job-<name>-<hash>`, so a
  Job seen again after a restart maps to the same one) once none of its pods is active, and is
  suspended first when it was created unsuspended (there is no webhook to suspend it at creation,
  as Kueue's does); a Job that ended without its run here finishes its Workload; a Job that runs
  while its Workload is not admitted is suspended again; a deleted Job deletes its Workload; a
  Workload deleted while its Job lives is made again, with the same name. The Workload names this
  runner's task queue (`admitflow.io/runner`) and carries the label `admitflow.io/kube-runner`
  with it, by which this runner lists its Workloads.
- **The runner contract** (docs/runners.md) on its task queue: `start_workload` injects the
  admission's podSet info into the Job's pod template and resumes it (Kueue's
  RunWithPodSetsInfo, activities/jobs/reconciler.py), then runs as long as the Job does,
  heartbeating: it reports `set_pods_ready` as Kueue's PodsReady() counts the Job's status, and
  returns the finish (failed with the Job's message) when the Job's Complete or Failed condition
  comes; `stop_workload` suspends the Job and restores its template as Kueue's stopJob does.

No Workload is queried: one is read from its workflow's description (its status and its
`AdmitflowPhase`, both current) when nothing in this process knows of it, and listed from
visibility once per `resync_seconds`, which finds what no event told: a Job deleted while the
runner was down (its Workload is deleted), a Workload deleted while it waited (it is made again).
admitflow's WorkloadPriorityClasses come from the client's catalog read, for a Job that names one,
at most once per `resync_seconds`.

Kueue's events are written on each Job: CreatedWorkload, Started, Stopped, FinishedWorkload.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import structlog
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from admitflow import contract, ids, visibility
from admitflow import search_attributes as sa
from admitflow.activities.informer import Key
from admitflow.activities.jobs import reconciler
from admitflow.activities.jobs.api import JobNotFound
from admitflow.activities.jobs.kubernetes import KubernetesJobs, parse_job
from admitflow.activities.jobs.workloads import job_owner, patiently, workload_of
from admitflow.admission.pod_set_updates import PodSetUpdateConflict
from admitflow.admission.pods_ready import PodsReadyReport
from admitflow.admission.priority import PriorityError
from admitflow.admission.protocol import FinishRequest, StartWorkload, StopWorkload
from admitflow.api.job import Job
from admitflow.api.meta import LabelSelector, LabelSelectorRequirement
from admitflow.api.names import label_value_errors
from admitflow.api.priority_class import PriorityClass
from admitflow.api.workload import RUNNER_ANNOTATION, PodSet, Workload
from admitflow.client import AdmitflowClient
from admitflow.jobs import batch_job, framework
from admitflow.jobs.batch_job import BatchJob, PodSetInfoError
from admitflow.messages import DeleteWorkload

log = structlog.get_logger("admitflow.kube_runner")

DEFAULT_TASK_QUEUE = "kubernetes"
# On each Workload this runner makes: its task queue, which names the cluster it runs in.
RUNNER_LABEL = "admitflow.io/kube-runner"
HEARTBEAT_EVERY = 2.0  # seconds; the engine gives up on a run after 10 s without a heartbeat
# How long what a Workload's description said of its admission is taken as current; a Job that runs
# without its run here is asked about again this often.
ASK_EVERY = 5.0
RESYNC_SECONDS = 30.0
# After the engine cancels a run (the admission is over), its `stop_workload` stops the Job with
# the eviction's message: the reconciler leaves a running Job to it this long.
STOP_GRACE = 10.0
RECONCILERS = 8  # Jobs reconciled at once
# Runs (`start_workload` activities) at once: each is a coroutine waiting on the shared watch.
MAX_RUNS = 100_000
RPC_TIMEOUT = timedelta(seconds=10)


# kubectl's selector operators as a LabelSelector's (admitflow.visibility.parse_selector's names).
_OPERATORS = {"=": "In", "!=": "NotIn", "in": "In", "notin": "NotIn", "exists": "Exists", "!": "DoesNotExist"}


def namespace_selector(text: str) -> LabelSelector:
    """A kubectl label selector (`a=b`, `a!=b`, `a in (b,c)`, `a notin (b)`, `a`, `!a`) as the
    LabelSelector Kueue's managedJobsNamespaceSelector is; ValueError with one line when kubectl
    would not parse it. An empty one selects every namespace."""
    requirements = visibility.parse_selector(text)
    return LabelSelector(match_expressions=[
        LabelSelectorRequirement(key=r.key, operator=_OPERATORS[r.operator], values=list(r.values) or None) for r in requirements
    ])


def check_task_queue(task_queue: str) -> None:
    """A runner's task queue names it in the label RUNNER_LABEL: a label value, or ValueError."""
    if not task_queue:
        raise ValueError('"": a runner needs a task queue')
    for message in label_value_errors(task_queue):
        raise ValueError(f'"{task_queue}": it names the runner in the label {RUNNER_LABEL}: {message}')


@dataclass
class Tracked:
    """What the reconciler knows of one Job's Workload."""

    uid: str
    workload: str  # namespace/name, Kueue's name for the Job's Workload
    presence: framework.Presence | None = None  # None: to be asked
    admitted: bool | None = None  # what the Workload said of its admission, at `asked_at`
    asked_at: float = 0.0
    submitted_at: float = 0.0
    run_cancelled_at: float = float("-inf")  # when the engine last cancelled its run
    last_workload: Workload | None = None  # as submitted or run: its podSets restore the Job's template

    @property
    def workflow_id(self) -> str:
        return ids.workload_id(self.workload)


@dataclass
class Run:
    """One admission run here: `start_workload` for it is running."""

    admission: int
    workload: Workload
    key: Key
    uid: str | None
    ready_told: bool | None = None


@dataclass(frozen=True)
class Listed:
    """A running Workload of this runner as visibility lists it."""

    phase: str | None
    job_uid: str | None


class WorkQueue:
    """Keys to reconcile, each in the queue at most once and reconciled by one reconciler at a
    time (client-go's work queue): a key that changes while it is reconciled goes again after."""

    def __init__(self) -> None:
        self._ready: asyncio.Queue[Key] = asyncio.Queue()
        self._queued: set[Key] = set()
        self._busy: set[Key] = set()
        self._again: set[Key] = set()
        self._later: dict[Key, asyncio.TimerHandle] = {}

    def add(self, key: Key) -> None:
        if key in self._busy:
            self._again.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._ready.put_nowait(key)

    def add_after(self, key: Key, seconds: float) -> None:
        """`add(key)` in `seconds`, unless it is due sooner already."""
        loop = asyncio.get_running_loop()
        due = loop.time() + seconds
        pending = self._later.get(key)
        if pending is not None and not pending.cancelled() and pending.when() <= due:
            return
        if pending is not None:
            pending.cancel()
        self._later[key] = loop.call_at(due, self._due, key)

    def _due(self, key: Key) -> None:
        self._later.pop(key, None)
        self.add(key)

    async def get(self) -> Key:
        key = await self._ready.get()
        self._queued.discard(key)
        self._busy.add(key)
        return key

    def done(self, key: Key) -> None:
        self._busy.discard(key)
        if key in self._again:
            self._again.discard(key)
            self.add(key)

    def close(self) -> None:
        for handle in self._later.values():
            handle.cancel()
        self._later.clear()

    def __len__(self) -> int:
        return len(self._queued) + len(self._busy)


class KubeRunner:
    """See the module doc. `async with KubeRunner(admitflow, jobs, task_queue):` lists the Jobs,
    lists its Workloads, then reconciles and serves its task queue until the block ends.
    `admitflow` submits the Workloads to the engine (its task queue is the engine's)."""

    def __init__(
        self,
        admitflow: AdmitflowClient,
        jobs: KubernetesJobs,
        task_queue: str = DEFAULT_TASK_QUEUE,
        *,
        resync_seconds: float = RESYNC_SECONDS,
        heartbeat_seconds: float = HEARTBEAT_EVERY,
        ask_every: float = ASK_EVERY,
        reconcilers: int = RECONCILERS,
        sync_seconds: float = 60.0,
        managed_namespaces: LabelSelector | None = framework.DEFAULT_MANAGED_JOBS_NAMESPACE_SELECTOR,
    ) -> None:
        check_task_queue(task_queue)
        self.admitflow = admitflow
        self.client: Client = admitflow.client
        self.jobs = jobs
        self.task_queue = task_queue
        self.resync_seconds = resync_seconds
        self.heartbeat_seconds = heartbeat_seconds
        self.ask_every = ask_every
        self.reconcilers = reconcilers
        self.sync_seconds = sync_seconds
        self.managed_namespaces = managed_namespaces
        # Kueue's default selector reads a namespace's name alone; any other, its labels.
        self._reads_namespaces = managed_namespaces != framework.DEFAULT_MANAGED_JOBS_NAMESPACE_SELECTOR
        self._namespaces: dict[str, dict[str, str]] = {}
        self._namespaces_at = float("-inf")
        self.queue = WorkQueue()
        self.tracked: dict[Key, Tracked] = {}
        self.runs: dict[str, Run] = {}  # by workflow ID
        self.listed: dict[str, Listed] = {}  # by Workload key, from the last resync
        self._failures: dict[Key, int] = {}
        self._tasks: list[asyncio.Task] = []
        self._worker: Worker | None = None
        self._priority_classes: tuple[float, dict[str, PriorityClass]] | None = None
        self._workload_priority_classes: tuple[float, dict[str, int]] | None = None

    # --- lifecycle ---------------------------------------------------------------------------------

    def worker(self) -> Worker:
        """The Temporal worker of the runner contract on its task queue. At shutdown the runs are
        cancelled at once (the engine starts them again: the Jobs run on in the cluster)."""
        return Worker(
            self.client, task_queue=self.task_queue, activities=[self.start_workload, self.stop_workload],
            max_concurrent_activities=MAX_RUNS, graceful_shutdown_timeout=timedelta(0),
        )

    async def __aenter__(self) -> KubeRunner:
        self.jobs.on_change = self._changed
        self.jobs.start()
        if not await self.jobs.informer.sync(self.sync_seconds):
            raise TimeoutError(f"the Jobs of {self.jobs.host} were not listed within {self.sync_seconds:.0f}s")
        await self._resync()
        self._tasks = [asyncio.ensure_future(self._reconcile_forever()) for _ in range(self.reconcilers)]
        self._tasks.append(asyncio.ensure_future(self._resync_forever()))
        self._worker = self.worker()
        await self._worker.__aenter__()
        log.info("kube_runner_started", task_queue=self.task_queue, host=self.jobs.host, jobs=len(self.jobs.informer.keys()))
        return self

    async def __aexit__(self, *exc: Any) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            await worker.__aexit__(*exc)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        self.queue.close()
        await self.jobs.close()

    def _changed(self, key: Key, obj: dict[str, Any] | None) -> None:
        self.queue.add(key)

    # --- the reconciler ----------------------------------------------------------------------------

    async def _reconcile_forever(self) -> None:
        while True:
            key = await self.queue.get()
            try:
                await self.reconcile(key)
                self._failures.pop(key, None)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - every failure is retried, later each time
                failures = self._failures[key] = self._failures.get(key, 0) + 1
                delay = min(0.5 * 2 ** (failures - 1), 30.0)
                log.warning("reconcile_failed", job=f"{key[0]}/{key[1]}", error=str(exc), retry_in=delay)
                self.queue.add_after(key, delay)
            finally:
                self.queue.done(key)

    async def reconcile(self, key: Key) -> None:
        """One turn of Kueue's reconciler for the Job `key` (namespace, name)."""
        obj = self.jobs.stored(key)
        tracked = self.tracked.get(key)
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            if tracked is not None:
                await self._delete_workload(tracked, f"its Job {key[0]}/{key[1]} was deleted")
                if obj is None:
                    del self.tracked[key]
            return
        job = parse_job(obj)
        labels = await self._namespace_labels(key[0])
        if framework.unmanaged_reason(BatchJob(job), labels, self.managed_namespaces) is not None:
            self.tracked.pop(key, None)
            return
        uid = job.metadata.uid or ""
        if tracked is None or tracked.uid != uid:
            if tracked is not None:
                await self._delete_workload(tracked, f"its Job {key[0]}/{key[1]} was deleted and another made")
            tracked = self.tracked[key] = Tracked(uid=uid, workload=f"{key[0]}/{framework.workload_name_for(BatchJob(job))}")
        if tracked.presence is None:
            await self._ask(tracked)
        run = self.runs.get(tracked.workflow_id)
        step = framework.next_step(BatchJob(job), tracked.presence, self._admitted(tracked, run), run is not None)
        if isinstance(step, framework.AskAdmitted):
            await self._ask(tracked)
            # Asked again while it runs without its run here: a lost eviction is carried out late, not never.
            self.queue.add_after(key, self.ask_every)
            step = framework.next_step(BatchJob(job), tracked.presence, tracked.admitted, False)
        await self._carry_out(step, job, tracked)

    async def _namespace_labels(self, namespace: str) -> dict[str, str] | None:
        """The labels of a namespace, for the managed namespaces' selector (None: its name alone
        says, as with Kueue's default). A namespace not seen yet is read again, at most once a
        second; one still unknown has no labels."""
        if not self._reads_namespaces:
            return None
        if namespace not in self._namespaces and time.monotonic() - self._namespaces_at > 1.0:
            await self._read_namespaces()
        return self._namespaces.get(namespace, {framework.NAMESPACE_NAME_LABEL: namespace})

    async def _read_namespaces(self) -> set[str]:
        """Read every namespace's labels; the names of those whose labels changed."""
        before, self._namespaces = self._namespaces, await self.jobs.namespace_labels()
        self._namespaces_at = time.monotonic()
        return {n for n in before.keys() | self._namespaces.keys() if before.get(n) != self._namespaces.get(n)}

    def _admitted(self, tracked: Tracked, run: Run | None) -> bool | None:
        if run is not None:
            return True
        fresh = time.monotonic() - tracked.asked_at < self.ask_every
        return tracked.admitted if fresh else None

    async def _carry_out(self, step: framework.Step, job: Job, tracked: Tracked) -> None:
        namespace, name = job.metadata.namespace, job.metadata.name or ""
        waited = time.monotonic() - tracked.run_cancelled_at
        if isinstance(step, framework.StopJob) and step.message == framework.NOT_ADMITTED and waited < STOP_GRACE:
            # Its eviction's stop_workload is on its way, with the eviction's message.
            self.queue.add_after((namespace, name), STOP_GRACE - waited)
            return
        if isinstance(step, framework.StopJob):
            pod_sets = await self._pod_sets_of_deleted(tracked) if tracked.presence == "deleted" else []
            sent, stopped_now = await reconciler.stop_job(self.jobs, namespace, name, pod_sets, uid=tracked.uid)
            if stopped_now:
                await self.jobs.record_event(sent.job, "Stopped", step.message)
            log.info("job_stopped", job=f"{namespace}/{name}", message=step.message, requests=sent.requests)
        elif isinstance(step, framework.CreateWorkload):
            await self._submit(job, tracked)
        elif isinstance(step, framework.FinishWorkload):
            finish = FinishRequest(succeeded=step.finished.succeeded, message=step.finished.message)
            if await self._signal(tracked.workflow_id, contract.FINISH, finish):
                await self.jobs.record_event(job, "FinishedWorkload", f"Workload '{tracked.workload}' is declared finished")
            tracked.presence = "finished"

    async def _pod_sets_of_deleted(self, tracked: Tracked) -> list[PodSet]:
        """The podSets of the Workload that was deleted (they restore the Job's template)."""
        workload = tracked.last_workload or await workload_of(self.client, tracked.workflow_id)
        return list(workload.spec.pod_sets) if workload is not None else []

    async def _ask(self, tracked: Tracked) -> None:
        """What the Workload's workflow says of it: absent, deleted, finished, or present and
        whether it is admitted (its AdmitflowPhase, as current as its status). A Workload the last
        resync listed needs no question the first time."""
        listed = self.listed.pop(tracked.workload, None)
        if listed is not None and tracked.presence is None:
            tracked.presence, tracked.admitted = "present", listed.phase == "Admitted"
            tracked.asked_at = time.monotonic()
            return
        try:
            desc = await self.client.get_workflow_handle(tracked.workflow_id).describe(rpc_timeout=RPC_TIMEOUT)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            tracked.presence, tracked.admitted = "absent", None
        else:
            phase = desc.typed_search_attributes.get(sa.PHASE)
            if desc.status == WorkflowExecutionStatus.RUNNING:
                tracked.presence, tracked.admitted = "present", phase == "Admitted"
            else:
                # Ended: finished, or deleted (or terminated) while its Job lives.
                tracked.presence, tracked.admitted = ("finished" if phase == "Finished" else "deleted"), None
        tracked.asked_at = time.monotonic()

    async def _submit(self, job: Job, tracked: Tracked) -> None:
        """The Job's Workload, as Kueue's ConstructWorkload makes it, submitted to the engine."""
        labels = job.metadata.labels or {}
        wpcs = await self._workload_priority_class_values(labels.get(framework.PRIORITY_CLASS_LABEL))
        try:
            workload = framework.construct_workload(BatchJob(job), wpcs, await self._cluster_priority_classes(job))
        except PriorityError as err:
            if labels.get(framework.PRIORITY_CLASS_LABEL):
                await self.jobs.record_event(job, "WorkloadPriorityClassNotFound", str(err), "Warning")
            self._priority_classes = self._workload_priority_classes = None  # read again at the next try
            raise
        meta = workload.metadata
        annotations = {**(meta.annotations or {}), RUNNER_ANNOTATION: self.task_queue}
        workload = workload.model_copy(update={"metadata": meta.model_copy(update={
            "labels": {**(meta.labels or {}), RUNNER_LABEL: self.task_queue}, "annotations": annotations,
        })})
        await self.admitflow.submit(workload)
        tracked.presence, tracked.admitted, tracked.last_workload = "present", False, workload
        tracked.submitted_at = tracked.asked_at = time.monotonic()
        await self.jobs.record_event(job, "CreatedWorkload", f"Created Workload: {tracked.workload}")
        log.info("workload_created", job=f"{job.metadata.namespace}/{job.metadata.name}", workload=tracked.workload)

    async def _cluster_priority_classes(self, job: Job) -> dict[str, PriorityClass]:
        """The cluster's PriorityClasses, read again after `resync_seconds` or when the Job's pods
        name one the last read did not have."""
        wanted = (job.spec.template.spec.model_extra or {}).get("priorityClassName")
        cached = self._priority_classes
        if cached is None or time.monotonic() - cached[0] > self.resync_seconds or (wanted and wanted not in cached[1]):
            cached = self._priority_classes = (time.monotonic(), await self.jobs.priority_classes())
        return cached[1]

    async def _workload_priority_class_values(self, wanted: str | None) -> dict[str, int]:
        """admitflow's WorkloadPriorityClasses (name -> value), read only for a Job that names one."""
        if not wanted:
            return {}
        cached = self._workload_priority_classes
        if cached is None or time.monotonic() - cached[0] > self.resync_seconds or wanted not in cached[1]:
            cached = self._workload_priority_classes = (time.monotonic(), await self.admitflow.priority_class_values())
        return cached[1]

    async def _delete_workload(self, tracked: Tracked, reason: str) -> None:
        """Delete the Workload of a Job that is gone, as Kubernetes' garbage collector deletes what a
        Job owns."""
        if tracked.presence in (None, "present"):
            await self._signal(tracked.workflow_id, contract.DELETE, DeleteWorkload(reason=reason))
            log.info("workload_deleted", workload=tracked.workload, reason=reason)
        tracked.presence = "deleted"

    async def _signal(self, workflow_id: str, signal: str, payload: Any) -> bool:
        """Signal a Workload's workflow; False when it has ended or never was."""
        try:
            await self.client.get_workflow_handle(workflow_id).signal(signal, payload, rpc_timeout=RPC_TIMEOUT)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            return False
        return True

    # --- what only a list of its Workloads finds ---------------------------------------------------

    async def _resync_forever(self) -> None:
        while True:
            await asyncio.sleep(self.resync_seconds)
            try:
                await self._resync()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - tried again at the next resync
                log.warning("resync_failed", error=str(exc))

    async def _resync(self) -> None:
        """List this runner's running Workloads (visibility): one whose Job is not in the cluster
        is deleted (its Job went while nobody watched); a Job whose Workload is not listed any more
        is reconciled again, its Workload asked about (deleted while it waited: made again). With a
        selector of managed namespaces that reads labels, the namespaces are read again too, and the
        Jobs of one whose labels changed are reconciled again."""
        if self._reads_namespaces:
            changed = await self._read_namespaces()
            for key in self.jobs.informer.keys():
                if key[0] in changed:
                    self.queue.add(key)  # selected, or no more
        listed = await self._list_workloads()
        jobs = {(obj.get("metadata") or {}).get("uid") for key in self.jobs.informer.keys() if (obj := self.jobs.informer.get(key))}
        for key, entry in listed.items():
            if entry.job_uid and entry.job_uid not in jobs:
                await self._signal(ids.workload_id(key), contract.DELETE, DeleteWorkload(reason="its Job is not in the cluster"))
                log.info("workload_deleted", workload=key, reason="its Job is not in the cluster")
        now = time.monotonic()
        for job_key, tracked in self.tracked.items():
            if tracked.presence == "present" and tracked.workload not in listed and now - tracked.submitted_at > self.resync_seconds:
                tracked.presence = None
                self.queue.add(job_key)
        self.listed = listed

    async def _list_workloads(self) -> dict[str, Listed]:
        query = (
            f"WorkflowType = {visibility.quoted(contract.WORKLOAD_WORKFLOW)} AND ExecutionStatus = 'Running' "
            f"AND {sa.LABELS.name} = {visibility.quoted(f'{RUNNER_LABEL}={self.task_queue}')}"
        )
        found: dict[str, Listed] = {}
        async for wf in self.client.list_workflows(query, page_size=1000, rpc_timeout=RPC_TIMEOUT):
            key = ids.workload_key(wf.id)
            if key is None:
                continue
            attributes = wf.typed_search_attributes
            found[key] = Listed(phase=attributes.get(sa.PHASE), job_uid=_label(attributes.get(sa.LABELS) or (), framework.JOB_UID_LABEL))
        return found

    # --- the runner contract -----------------------------------------------------------------------

    @activity.defn(name=contract.START_WORKLOAD)
    async def start_workload(self, request: StartWorkload) -> FinishRequest | None:
        owner = job_owner(request.workload)
        if owner is None:
            return FinishRequest(
                succeeded=False, admission=request.admission,
                message="the Kubernetes runner runs the Workloads of batch/v1 Jobs, and this one has no Job",
            )
        workload = Workload.model_validate(request.workload)
        namespace, name, uid = workload.metadata.namespace, owner["name"], owner.get("uid")
        key = (namespace, name)
        run = self.runs[request.workflow_id] = Run(request.admission, workload, key, uid)
        tracked = self.tracked.get(key)
        if tracked is not None and tracked.uid == uid:
            tracked.presence, tracked.last_workload = "present", workload
        try:
            try:
                sent = await reconciler.start_job(self.jobs, namespace, name, request.pod_sets_info, workload, uid=uid)
            except (PodSetUpdateConflict, PodSetInfoError) as err:
                # Kueue's FailedToStart: this admission cannot start this Job.
                return FinishRequest(succeeded=False, message=str(err), admission=request.admission)
            except JobNotFound:
                await self._signal(request.workflow_id, contract.DELETE, DeleteWorkload(reason=f"its Job {namespace}/{name} is gone"))
                return None
            if sent.changed:
                cluster_queue = workload.status.admission.cluster_queue if workload.status.admission else ""
                await self.jobs.record_event(sent.job, "Started", f"Admitted by clusterQueue {cluster_queue}")
                log.info("job_started", job=f"{namespace}/{name}", admission=request.admission, requests=sent.requests)
            return await self._run(run, request.workflow_id)
        except asyncio.CancelledError:
            details = activity.cancellation_details()
            if tracked is not None and not (details is not None and details.worker_shutdown):
                # The admission is over: evicted (stop_workload comes), or the Workload deleted
                # (nothing comes): ask the Workload again shortly.
                tracked.presence, tracked.run_cancelled_at = None, time.monotonic()
                self.queue.add_after(key, 1.0)
            raise
        finally:
            if self.runs.get(request.workflow_id) is run:
                del self.runs[request.workflow_id]

    async def _run(self, run: Run, workflow_id: str) -> FinishRequest | None:
        """Watch the Job while it runs, heartbeating: its pods' readiness to the Workload, and its
        end as the finish."""
        handle = self.client.get_workflow_handle(workflow_id)
        while True:
            activity.heartbeat()
            obj = self.jobs.stored(run.key)
            job = parse_job(obj) if obj is not None else None
            if job is None or job.metadata.uid != run.uid:
                await self._signal(workflow_id, contract.DELETE, DeleteWorkload(reason=f"its Job {run.key[0]}/{run.key[1]} was deleted"))
                return None
            ended = batch_job.finished(job)
            if ended is not None:
                tracked = self.tracked.get(run.key)
                if tracked is not None and tracked.uid == run.uid:
                    tracked.presence = "finished"
                await self.jobs.record_event(job, "FinishedWorkload", f"Workload '{run.workload.key}' is declared finished")
                return FinishRequest(succeeded=ended.succeeded, message=ended.message, admission=run.admission)
            ready = batch_job.pods_ready(job)
            if ready != bool(run.ready_told):
                report = PodsReadyReport(ready=ready, admission=run.admission)
                await patiently(lambda: handle.signal(contract.SET_PODS_READY, report, rpc_timeout=RPC_TIMEOUT),
                                contract.SET_PODS_READY, workflow_id)
                run.ready_told = ready
            waiter = self.jobs.informer.wait_for(run.key, obj["metadata"].get("resourceVersion") or "")
            try:
                await asyncio.wait({waiter}, timeout=self.heartbeat_seconds)
            finally:
                self.jobs.informer.forget(run.key, waiter)

    @activity.defn(name=contract.STOP_WORKLOAD)
    async def stop_workload(self, request: StopWorkload) -> None:
        run = self.runs.get(request.workflow_id)
        workload = run.workload if run is not None else await workload_of(self.client, request.workflow_id)
        owner = job_owner(workload.to_wire()) if workload is not None else None
        if workload is None or owner is None:
            return
        namespace, name = workload.metadata.namespace, owner["name"]
        try:
            sent, stopped_now = await reconciler.stop_job(self.jobs, namespace, name, workload.spec.pod_sets, uid=owner.get("uid"))
        except JobNotFound:
            return
        if stopped_now:
            await self.jobs.record_event(sent.job, "Stopped", request.message or request.reason or "the admission is over")
        log.info("job_stopped", job=f"{namespace}/{name}", admission=request.admission, reason=request.reason,
                 stopped_now=stopped_now, requests=sent.requests)


def _label(entries: Iterable[str], key: str) -> str | None:
    """The value of label `key` among AdmitflowLabels' `key=value` entries."""
    prefix = f"{key}="
    return next((e[len(prefix):] for e in entries if e.startswith(prefix)), None)

