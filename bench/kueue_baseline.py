"""Kueue's scheduler benchmark shape (test/performance/scheduler, baseline), scaled down, against
bare Temporal on the same dev server in the same run.

Kueue's baseline (configs/baseline/generator.yaml): 5 cohorts x 6 ClusterQueues of nominal quota
20 cpu (borrowingLimit 100, preemption withinClusterQueue LowerPriority, reclaimWithinCohort Any);
per ClusterQueue 350 small (1 cpu, priority 50, runtime 200 ms, one created every 100 ms), 100
medium (5 cpu, 100, 500 ms, every 500 ms), 50 large (20 cpu, 200, 1000 ms, every 1200 ms). Built
as Kueue's generator (runner/generator/generator.go) builds it: cohort `cohort-<i>` exists only
as the name its ClusterQueues give in `spec.cohortName` (no Cohort object), ClusterQueue
`cq-0-<j>-cohort-<i>`, a namespace named after it, and a LocalQueue of the same name in it. The
ClusterQueues of a cohort share their 6 x 20 cpu: each may borrow up to 100 cpu of its neighbours'
unused quota, and takes it back by preemption (reclaim) when it needs its own. In admitflow one
entity schedules the whole cohort tree (`cohort/<root>`); each ClusterQueue's own workflow stays
its address and forwards its messages there.

Scaled down by the number of cohorts (`--cohorts`, default 1: one cohort's worth, 3,000
workloads, about ten minutes here with the bare runs and the collection; Kueue runs 5) of
`--cqs-per-cohort` ClusterQueues (Kueue: 6) and, if wanted, the workloads per ClusterQueue
(`--per-cq`, classes kept 350:100:50). `--standalone` builds the same number of ClusterQueues
without a cohort (no borrowing, no reclaim; `cq-<k>`, withinClusterQueue only), as the runs before
cohorts were built did, for comparison.

The benchmark plays Kueue's runner (runner/controller/controller.go, which watches Workloads and
finishes each one its runtime after it saw it admitted) through admitflow's runner contract
(docs/runners.md): every LocalQueue names the benchmark's runner (`admitflow.io/runner`), the
engine runs `start_workload` there when it admits a workload, and the runner returns that
admission's finish from it once the workload's runtime has passed; when the engine runs `stop_workload`
(the workload was preempted), the runtime stops there and the workload runs again once
readmitted. Each ClusterQueue's `status` is sampled every second, asked where its state is (its
cohort tree, once its home has handed it over).

Prints wall time, workloads/s and the bare-Temporal rate (bench/bare_workflow.py) measured before
and after, with the ratio; usage per ClusterQueue as Kueue's recorder measures it (time-weighted
`flavorsUsage` cpu over the 20 cpu nominal quota, so a ClusterQueue that borrows can exceed 100 %;
its cohort's, over the cohort's nominal quota, cannot), with the peak and the average borrowed;
average time to admission per class (from submission to the last admission the runner observed,
as Kueue's recorder measures it); admissions, and preemptions by reason (`InClusterQueue`,
`InCohortReclamation`, ..., read from the workloads' `Preempted` messages); then what limited the
run: CPU per workload against a bare workflow, this process's peak memory, the engine task queue's
backlog (sampled every second), how long new workloads waited for their first workflow task, a
workload's events by kind and the signals it got by name, the workflow tasks of each
cohort tree's entity (where the cohort's scheduling happens) and of the ClusterQueues' own
workflows (which forward to it), and the pure scheduling pass at the shape's depth. Writes JSON
and a PNG under bench/results/.

    .venv/bin/python bench/kueue_baseline.py [--cohorts 1] [--cqs-per-cohort 6] [--per-cq 500]
        [--standalone | --cqs N] [--preemption LowerPriority|Never] [--reclaim Any|LowerPriority|Never]
        [--cache N] [--workflow-tasks N] [--pollers N] [--bare 500] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import os
import random
import re
import statistics
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from temporalio.api.enums.v1 import EventType, TaskQueueKind, TaskQueueType, WorkflowTaskFailedCause  # noqa: E402
from temporalio.api.taskqueue.v1 import TaskQueue  # noqa: E402
from temporalio import activity  # noqa: E402
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest  # noqa: E402
from temporalio.worker import PollerBehaviorAutoscaling, Worker  # noqa: E402

from admitflow import contract, ids  # noqa: E402
from admitflow.admission.workload import WorkloadReport  # noqa: E402
from admitflow.api import parse_manifest  # noqa: E402
from admitflow.api.quantity import parse_quantity  # noqa: E402
from admitflow.api.workload import RUNNER_ANNOTATION  # noqa: E402
from admitflow.messages import StopWorkload  # noqa: E402
from admitflow.admission.protocol import ClusterQueueReport, StatusQuery
from admitflow.admission.protocol import FinishRequest, StartWorkload
from admitflow.worker.main import sdk_options  # noqa: E402
from bench.harness import (  # noqa: E402
    CpuMeter,
    Engine,
    bare_rate,
    bounded,
    cpu_seconds,
    engine,
    loaded,
    machine,
    peak_rss_mib,
    result_paths,
    revision,
    save_figure,
    write_json,
)
from tests.builders import cluster_queue_manifest, flavor_manifest, local_queue_manifest, workload_manifest  # noqa: E402

QUOTA = 20  # nominal cpu per ClusterQueue
BORROWING_LIMIT = 100  # cpu each ClusterQueue may borrow from its cohort


@dataclass(frozen=True)
class WorkloadClass:
    name: str
    cpu: int
    priority: int
    runtime: float  # seconds
    interval: float  # seconds between creations, per ClusterQueue


CLASSES = (
    WorkloadClass("small", 1, 50, 0.2, 0.1),
    WorkloadClass("medium", 5, 100, 0.5, 0.5),
    WorkloadClass("large", 20, 200, 1.0, 1.2),
)
BY_NAME = {c.name: c for c in CLASSES}

# Kueue's CI on the full shape, as issue 9 quotes it. (The rangespec in Kueue's repository,
# test/performance/scheduler/default_rangespec.yaml, records averages of 351 s, usage 58.7 %, and
# 215.5 s / 76.8 s / 6.7 s.)
KUEUE = {
    "workloads": 15000,
    "cluster_queues": 30,
    "cohorts": 5,
    "wall_s": 351,
    "workloads_per_s": round(15000 / 351, 1),
    "min_usage_pct": 50,
    "avg_time_to_admission_s": {"small": 215, "medium": 77, "large": 16.5},
}

# Kueue's HumanReadablePreemptionReasons (pkg/scheduler/preemption): the words a victim's
# Preempted message uses after "due to", longest first so that a reason never matches a prefix.
PREEMPTION_REASONS = sorted(
    {
        "prioritization in the ClusterQueue": "InClusterQueue",
        "reclamation within the cohort while borrowing": "InCohortReclaimWhileBorrowing",
        "reclamation within the cohort": "InCohortReclamation",
        "fair sharing within the cohort": "InCohortFairSharing",
    }.items(),
    key=lambda kv: -len(kv[0]),
)
PREEMPTION_MESSAGE = re.compile(r"due to (?P<why>.+?); preemptor path: (?P<by>\S+); preemptee path: (?P<of>\S+)")

RUNNER = "kueue-runner"  # the benchmark runner's task queue, named by every LocalQueue


@dataclass(frozen=True)
class Shape:
    cohorts: int
    cqs_per_cohort: int
    standalone: bool
    within: str  # withinClusterQueue
    reclaim: str  # reclaimWithinCohort

    def queues(self) -> dict[str, str | None]:
        """Every ClusterQueue and its cohort (None standalone), named as Kueue's generator names them."""
        if self.standalone:
            return {f"cq-{k}": None for k in range(self.cohorts * self.cqs_per_cohort)}
        return {f"cq-0-{j}-cohort-{i}": f"cohort-{i}" for i in range(self.cohorts) for j in range(self.cqs_per_cohort)}

    def roots(self) -> list[str]:
        return [] if self.standalone else [f"cohort-{i}" for i in range(self.cohorts)]

    def preemption(self) -> dict[str, str]:
        if self.standalone:
            return {"withinClusterQueue": self.within}
        return {"withinClusterQueue": self.within, "reclaimWithinCohort": self.reclaim}

    def cluster_queue(self, name: str, cohort: str | None) -> dict:
        m = cluster_queue_manifest(name, quotas={"default": {"cpu": str(QUOTA)}}, preemption=self.preemption(),
                                   **({"cohortName": cohort} if cohort else {}))
        if cohort:
            m["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"] = str(BORROWING_LIMIT)
        return m

    def manifests(self) -> list[dict]:
        # minimalkueue (test/performance/scheduler/minimalkueue) runs Kueue's controllers with an
        # empty Configuration, so without WaitForPodsReady (admitflow's default follows Kueue's config
        # v1beta2 defaults, which turn it on): no PodsReady timer per admitted workload.
        docs = [flavor_manifest(), {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
                                    "featureGates": {"DisableWaitForPodsReady": True}}]
        for cq, cohort in self.queues().items():
            docs.append(self.cluster_queue(cq, cohort))
            lq = local_queue_manifest(cq, cq, namespace=cq)  # Kueue's: namespace and LocalQueue named after it
            lq["metadata"]["annotations"] = {RUNNER_ANNOTATION: RUNNER}
            docs.append(lq)
        return docs

    def short(self) -> str:
        n = self.cohorts * self.cqs_per_cohort
        return f"{n} standalone ClusterQueues" if self.standalone else f"{n} ClusterQueues in {self.cohorts} cohort(s)"

    def describe(self) -> str:
        n = self.cohorts * self.cqs_per_cohort
        if self.standalone:
            return f"{n} standalone ClusterQueues (no cohort), {QUOTA} cpu each, preemption withinClusterQueue {self.within}"
        return (f"{self.cohorts} cohort(s) x {self.cqs_per_cohort} ClusterQueues, {QUOTA} cpu nominal each, "
                f"borrowingLimit {BORROWING_LIMIT}, preemption withinClusterQueue {self.within}, reclaimWithinCohort {self.reclaim}")


def class_counts(per_cq: int) -> dict[str, int]:
    small = round(per_cq * 350 / 500)
    medium = round(per_cq * 100 / 500)
    return {"small": small, "medium": medium, "large": per_cq - small - medium}


def class_of(key: str) -> WorkloadClass:
    return BY_NAME[key.split("/", 1)[1].split("-", 1)[0]]


def cq_of(key: str) -> str:
    return key.split("/", 1)[0]  # the namespace is named after its ClusterQueue, as in Kueue's generator


def preemption_reason(message: str) -> tuple[str, bool | None]:
    """A Preempted message's reason (Kueue's word for it, or `unrecognised`), and whether the
    preemptor was in another ClusterQueue than the victim (None when the paths are not given)."""
    found = PREEMPTION_MESSAGE.search(message)
    if found is None:
        reason = next((r for text, r in PREEMPTION_REASONS if f"due to {text}".lower() in message.lower()), "unrecognised")
        return reason, None
    reason = next((r for text, r in PREEMPTION_REASONS if found["why"].lower() == text.lower()), "unrecognised")
    return reason, found["by"] != found["of"]


class Run:
    """The runner's bookkeeping; times are wall-clock seconds (time.time())."""

    def __init__(self, e: Engine, queues: dict[str, str | None], counts: dict[str, int]) -> None:
        self.e = e
        self.queues = queues
        self.cqs = list(queues)
        self.counts = counts
        self.total = len(self.cqs) * sum(counts.values())
        self.created: dict[str, float] = {}
        self.running: dict[tuple[str, int], asyncio.Task] = {}  # (key, admission) -> its runtime, until finished or stopped
        self.admitted_at: dict[str, float] = {}  # the last admission the runner was told of
        self.seen: dict[str, list[float]] = defaultdict(list)  # every admission it was told of
        self.finished: dict[str, float] = {}  # finish sent for the workload's last admission
        self.ran: list[tuple[str, float, float]] = []  # (key, told admitted, finished): what the runner ran
        self.stopped = 0  # admissions the engine stopped before their runtime was over (preempted)
        self.stale_finishes = 0  # admissions that began again after their finish was sent (preempted in between)
        # (time, cpu per ClusterQueue: (in use by admitted workloads, reserved)), from `status`.
        self.samples: list[tuple[float, dict[str, tuple[float, float]]]] = []
        self.where: dict[str, str] = {}  # the workflow that last answered for a ClusterQueue's state
        self.backlog: list[tuple[float, int, float]] = []  # (time, workflow tasks waiting, age of the oldest in s)
        self.cpu: list[tuple[float, float, float]] = []  # (time, cores used by this process, by the server) since the last sample
        self.live: list[int] = []  # workloads submitted and not finished, per sample
        self.sample_errors = 0
        self.done = asyncio.Event()

    # --- Kueue's generator ---------------------------------------------------------------------

    async def generate(self, cq: str, cls: WorkloadClass) -> None:
        for j in range(self.counts[cls.name]):
            await asyncio.sleep(cls.interval)
            name = f"{cls.name}-{j}"
            manifest = workload_manifest(name, cpu=str(cls.cpu), queue=cq, priority=cls.priority, namespace=cq)
            self.created[f"{cq}/{name}"] = time.time()
            await self.e.admitflow.submit(parse_manifest(manifest)[0], cluster_queue=cq)

    # --- Kueue's runner, as an admitflow runner ------------------------------------------------

    def worker(self) -> Worker:
        # As many runs at once as there can be admitted workloads (a 1-cpu workload per cpu of quota).
        # Kueue's runner watches Workloads and sees an admission as it happens; so does this one,
        # with pollers that follow the bursts of admissions a pass makes (with the SDK's 5 it took
        # up to 0.44 s to start a run once the engine took its tasks sooner).
        return Worker(self.e.client, task_queue=RUNNER, activities=[self.start_workload, self.stop_workload],
                      max_concurrent_activities=max(1000, QUOTA * len(self.cqs) * 2),
                      activity_task_poller_behavior=PollerBehaviorAutoscaling())

    @activity.defn(name=contract.START_WORKLOAD)
    async def start_workload(self, request: StartWorkload) -> FinishRequest | None:
        """Runs for as long as the workload does (its runtime) and returns its finish, as a runner
        that runs the workload inside `start_workload` does (docs/runners.md)."""
        told = time.time()
        key = ids.workload_key(request.workflow_id)
        if self.finished.pop(key, None) is not None:
            self.stale_finishes += 1
        self.admitted_at[key] = told
        self.seen[key].append(told)
        runtime = asyncio.ensure_future(asyncio.sleep(class_of(key).runtime))
        self.running[(key, request.admission)] = runtime
        try:
            await runtime
        except asyncio.CancelledError:
            if not runtime.cancelled():
                raise  # the runner shuts down
            self.stopped += 1  # the engine stopped it (stop_workload): preempted
            return None
        finally:
            self.running.pop((key, request.admission), None)
        now = time.time()
        self.finished[key] = now
        self.ran.append((key, told, now))
        return FinishRequest(succeeded=True, message="By test runner")

    async def until_all_finished(self) -> None:
        """Sets `done` once a finish was sent for every workload and none of them runs any more:
        a finish sent just as the workload was preempted is ignored, and it is admitted again."""
        while True:
            if len(self.finished) == self.total and not self.running:
                left = await self.e.client.count_workflows("WorkflowType = 'WorkloadWorkflow' AND ExecutionStatus = 'Running'")
                if left.count == 0:
                    self.done.set()
                    return
            await asyncio.sleep(0.25)

    @activity.defn(name=contract.STOP_WORKLOAD)
    async def stop_workload(self, request: StopWorkload) -> None:
        runtime = self.running.get((ids.workload_key(request.workflow_id), request.admission))
        if runtime is not None:
            runtime.cancel()

    async def report(self, cq: str) -> ClusterQueueReport | None:
        """The ClusterQueue's status, asked first where it answered last (its cohort tree once its
        home handed its state over), following `moved_to` as AdmitflowClient.cluster_queue_report
        does, without asking the home again every second."""
        workflow_id = self.where.get(cq, ids.cluster_queue_id(cq))
        for _ in range(6):
            found = await self.e.client.get_workflow_handle(workflow_id).query(
                contract.CLUSTER_QUEUE_STATUS, StatusQuery(limit=0, cluster_queue=cq), result_type=ClusterQueueReport,
                rpc_timeout=timedelta(seconds=10),
            )
            if not found.moved_to:
                self.where[cq] = workflow_id
                return found
            workflow_id = found.moved_to
            await asyncio.sleep(0.2)
        return None

    async def reports(self) -> dict[str, ClusterQueueReport | BaseException | None]:
        """Every ClusterQueue's status; the queues one workflow holds are asked one after another,
        since a busy workflow buffers only a few queries while it runs a task (Temporal refuses
        the rest: "consistent query buffer is full")."""

        async def in_turn(cqs: list[str]) -> dict:
            out = {}
            for cq in cqs:
                try:
                    out[cq] = await self.report(cq)
                except Exception as err:
                    out[cq] = err
            return out

        by_holder = defaultdict(list)
        for cq in self.cqs:
            by_holder[self.where.get(cq, ids.cluster_queue_id(cq))].append(cq)
        found: dict = {}
        for part in await asyncio.gather(*(in_turn(cqs) for cqs in by_holder.values())):
            found.update(part)
        return found

    async def sample_usage(self) -> None:
        """Every second: each ClusterQueue's cpu in use and reserved (its `status`), and the backlog
        of the engine's task queue (workflow tasks no worker has taken yet: a new workload's first
        task, and those of workflows the worker no longer holds in its cache)."""
        backlog = DescribeTaskQueueRequest(
            namespace=self.e.client.namespace,
            task_queue=TaskQueue(name=self.e.admitflow.task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            report_stats=True,
        )
        last = (time.time(), *cpu_seconds(self.e.server))
        while not self.done.is_set():
            at = time.time()
            now = (at, *cpu_seconds(self.e.server))
            if now[0] - last[0] > 0.5:
                self.cpu.append((at, (now[1] - last[1]) / (now[0] - last[0]), (now[2] - last[2]) / (now[0] - last[0])))
            last = now
            self.live.append(len(self.created) - len(self.finished))
            found, queue = await asyncio.gather(self.reports(),
                                                self.e.client.workflow_service.describe_task_queue(backlog),
                                                return_exceptions=True)
            cpu = {}
            for cq, r in found.items():
                if isinstance(r, BaseException) or r is None:
                    self.sample_errors += 1
                    continue
                cpu[cq] = (cpu_of(r.status.flavors_usage), cpu_of(r.status.flavors_reservation))
            self.samples.append((at, cpu))
            if not isinstance(queue, BaseException):
                age = queue.stats.approximate_backlog_age
                self.backlog.append((at, queue.stats.approximate_backlog_count, age.seconds + age.nanos / 1e9))
            await asyncio.sleep(max(0.0, 1.0 - (time.time() - at)))


def cpu_of(flavors) -> float:
    return float(sum(parse_quantity(res.total) for f in flavors for res in f.resources if res.name == "cpu"))


def pure_pass_ms(shape: Shape, counts: dict[str, int], policy: str) -> dict:
    """One scheduling pass alone, outside any workflow, over one cohort tree's ClusterQueues (one
    ClusterQueue standalone), with every workload of the shape pending in each (in creation order)
    and the quota full: the pass after one workload releases its quota, which is what each finish
    triggers. Median of 5."""
    from datetime import UTC, datetime, timedelta

    from admitflow.admission import cluster_queue as cqs
    from admitflow.admission import scheduler
    from admitflow.admission.cluster_queue import ClusterQueueState, ClusterQueueView, LocalQueueInfo
    from admitflow.admission.pending_queue import QueueEntry
    from admitflow.admission.requests import PodSetRequest

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    tree = None
    names: dict[str, str | None] = {"cq": None}
    if not shape.standalone:
        from admitflow.admission.quota_tree import CohortInfo, CohortTree

        tree = CohortTree(root="cohort-0", cohorts={"cohort-0": CohortInfo(name="cohort-0")})
        names = {f"cq-0-{j}-cohort-0": "cohort-0" for j in range(shape.cqs_per_cohort)}
    tried = Shape(shape.cohorts, shape.cqs_per_cohort, shape.standalone, policy, shape.reclaim)
    flavors = {"default": parse_manifest(flavor_manifest())[0].spec}
    arrivals = sorted(((j * c.interval, c, j) for c in CLASSES for j in range(counts[c.name])), key=lambda a: (a[0], a[1].name))
    times = []
    for _ in range(5):
        states = []
        for name, cohort in names.items():
            view = ClusterQueueView(name=name, revision=1, spec=parse_manifest(tried.cluster_queue(name, cohort))[0].spec,
                                    flavors=flavors, local_queues={f"{name}/{name}": LocalQueueInfo()}, cohort_tree=tree)
            st = ClusterQueueState(name=name)
            cqs.set_view(st, view, t0)
            for k, (at, c, j) in enumerate(arrivals):
                cqs.enqueue(st, QueueEntry(key=f"{name}/{c.name}-{j}", uid=f"{name}-u{k}", ticket=1, local_queue=name,
                                           priority=0 if c.name == "small" and j < QUOTA else c.priority,
                                           timestamp=t0 + timedelta(seconds=at),
                                           pod_sets=[PodSetRequest(name="main", count=1, per_pod={"cpu": c.cpu * 1000})]))
            states.append(st)
        scheduler.schedule(states, t0)  # the first smalls (given priority 0 here) fill the quota
        st = next(s for s in states if s.reservations)
        held = next(iter(st.reservations.values()))
        cqs.release(st, held.key, held.uid, held.ticket)
        started = time.perf_counter()
        scheduler.schedule(states, t0)
        times.append((time.perf_counter() - started) * 1000)
    return {"cluster_queues": len(names), "pending": len(names) * len(arrivals),
            "pass_after_release_ms": round(statistics.median(times), 1)}


def time_weighted(samples: list[tuple[float, dict[str, tuple[float, float]]]], cq: str, start: float, end: float,
                  value=lambda used: used) -> float:
    """Time-weighted average of `value(cpu in use)` over [start, end], each sample holding until the next."""
    points = [(t, value(r[cq][0])) for t, r in samples if cq in r and start <= t <= end]
    if len(points) < 2:
        return float("nan")
    area = sum(v * (points[k + 1][0] - t) for k, (t, v) in enumerate(points[:-1]))
    return area / (points[-1][0] - points[0][0])


def cores_when(run: Run, backlogged) -> dict[str, float]:
    """Mean cores used by this process and by the server over the samples whose backlog matched."""
    backlog = {round(t, 3): b for t, b, _ in run.backlog}
    rows = [(py, srv) for t, py, srv in run.cpu if backlogged(backlog.get(round(t, 3), -1))]
    return {"samples": len(rows), "python": round(mean(py for py, _ in rows), 2), "server": round(mean(s for _, s in rows), 2)}


async def final_reports(e: Engine, keys: list[str]) -> dict[str, WorkloadReport]:
    """Each workload's report: its workflow's result, or, for one that still runs (wedged: its
    finish never took), the report it gives now."""

    async def one(key: str) -> tuple[str, WorkloadReport]:
        handle = e.client.get_workflow_handle(ids.workload_id(key), result_type=WorkloadReport)
        try:
            return key, await asyncio.wait_for(handle.result(), 10)
        except TimeoutError:
            return key, await handle.query(contract.WORKLOAD_QUERY, result_type=WorkloadReport)

    return dict(await bounded(one(k) for k in keys))


async def still_running(e: Engine) -> list[str]:
    """Workloads whose workflow still runs after the run: each one's quota or place is held for good."""
    query = "WorkflowType = 'WorkloadWorkflow' AND ExecutionStatus = 'Running'"
    return sorted([ids.workload_key(wf.id) async for wf in e.client.list_workflows(query, limit=50)])
# A workload's last admission, step by step, from its own history: its reservation's signal recorded
# -> the workflow task that applies it starts -> ends (Admitted; `start_workload` scheduled) -> the runner
# takes `start_workload` -> returns the finish -> the task that takes it starts -> the workflow completes
# (its `release` taken by the queue). The queue holds the quota from before the first to the last.
QUOTA_PATH = ("to_task", "task", "to_runner", "runtime", "to_finish_task", "finish_task")


def quota_path(events) -> dict[str, float] | None:
    """The steps of QUOTA_PATH, in seconds, for a history that ends with a run's own finish; None otherwise."""
    at: dict[str, float] = {}
    runs: set[int] = set()
    for ev in events:
        t = ev.event_time.ToDatetime().timestamp()
        kind = ev.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED and ev.workflow_execution_signaled_event_attributes.signal_name == contract.QUOTA_RESERVED:
            at = {"reserved": t}
        elif not at:
            continue
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            at.setdefault("task_started" if "runner_done" not in at else "finish_task_started", t)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and "task_started" in at:
            at.setdefault("task_done", t)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED and ev.activity_task_scheduled_event_attributes.activity_type.name == contract.START_WORKLOAD:
            runs.add(ev.event_id)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED and ev.activity_task_started_event_attributes.scheduled_event_id in runs:
            at.setdefault("runner_started", t)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED and ev.activity_task_completed_event_attributes.scheduled_event_id in runs:
            at.setdefault("runner_done", t)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            at["completed"] = t
    marks = ("reserved", "task_started", "task_done", "runner_started", "runner_done", "finish_task_started", "completed")
    if any(m not in at for m in marks):
        return None
    return {step: at[b] - at[a] for step, (a, b) in zip(QUOTA_PATH, itertools.pairwise(marks), strict=True)}


async def history_figures(e: Engine, run: Run, keys: list[str]) -> dict:
    """From a sample of workload histories: how long a workload's first workflow task waited after
    it was submitted (where its creationTimestamp was set, before `created-at-submission`), and how
    long after the workflow task that published its last admission (`AdmitflowPhase=Admitted`) the
    runner's `start_workload` began (the activity's dispatch)."""

    kinds: Counter = Counter()
    signals: Counter = Counter()

    async def one(key: str) -> tuple[float | None, float | None, int, int, list[str], dict[str, float] | None]:
        history = await e.client.get_workflow_handle(ids.workload_id(key)).fetch_history()
        started = first_task = last_admitted = None
        tasks, failed = 0, []
        for ev in history.events:
            kinds[EventType.Name(ev.event_type).removeprefix("EVENT_TYPE_")] += 1
            if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
                signals[ev.workflow_execution_signaled_event_attributes.signal_name] += 1
            at = ev.event_time.ToDatetime().timestamp()
            if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
                started = at
            elif ev.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                tasks += 1
                if first_task is None:
                    first_task = at
            elif ev.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                failed.append(WorkflowTaskFailedCause.Name(ev.workflow_task_failed_event_attributes.cause))
            elif ev.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
                field = ev.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields.get("AdmitflowPhase")
                if field is not None and json.loads(field.data) == "Admitted":
                    last_admitted = at
        delay = None if started is None or first_task is None else first_task - started
        # The first time the runner was told of an admission after that upsert.
        lag = min((t - last_admitted for t in run.seen[key] if t >= last_admitted), default=None) if last_admitted else None
        return delay, lag, len(history.events), tasks, failed, quota_path(history.events)

    found = await bounded((one(k) for k in keys), 10)
    delays = [f[0] for f in found if f[0] is not None]
    lags = [f[1] for f in found if f[1] is not None]
    paths = [f[5] for f in found if f[5] is not None]
    return {
        "quota_path_s": {
            "workloads": len(paths),
            **({step: round(mean(p[step] for p in paths), 3) for step in QUOTA_PATH} if paths else {}),
        },
        "sample": len(keys),
        "first_task_delay_s": {"mean": round(mean(delays), 2), "max": round(max(delays, default=float("nan")), 2)},
        "runner_lag_s": {"mean": round(mean(lags), 3), "max": round(max(lags, default=float("nan")), 3)},
        # A workload's own history: events and workflow tasks, and its failed tasks by cause.
        "events_per_workload": round(mean(f[2] for f in found), 1),
        "workflow_tasks_per_workload": round(mean(f[3] for f in found), 2),
        "events_per_workload_by_kind": {k: round(n / len(found), 2) for k, n in kinds.most_common()} if found else {},
        "signals_per_workload_by_name": {k: round(n / len(found), 2) for k, n in signals.most_common()} if found else {},
        "failed_workflow_tasks": dict(Counter(c for f in found for c in f[4])),
    }


async def entity_task_figures(e: Engine, workflow_id: str) -> dict:
    """An entity workflow's tasks over all its runs: count, wall time from task start to completion,
    runs (continue-as-new) and history events, the wait from a task's scheduling to its start, and
    the tasks that held a local activity (sent signals in the task) with their mean duration; and its
    message rate: signals and updates received, signals it sent, over its active span (first to last
    event), and in its busiest 10 s."""
    durations, runs, events, sent, stamps, arrivals = [], 0, 0, 0, [], []
    # A local activity's marker is recorded with the completion of the task that ran it.
    to_start, with_local = [], []
    async for wf in e.client.list_workflows(f"WorkflowId = '{workflow_id}'"):
        runs += 1
        history = await e.client.get_workflow_handle(workflow_id, run_id=wf.run_id).fetch_history()
        events += len(history.events)
        scheduled = started = None
        marked = False
        for ev in history.events:
            at = ev.event_time.ToDatetime()
            stamps.append(at.timestamp())
            if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
                scheduled, marked = at, False
            elif ev.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                started = at
                if scheduled is not None:
                    to_start.append((at - scheduled).total_seconds())
            elif ev.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and started is not None:
                durations.append((at - started).total_seconds())
                marked = True
            elif ev.event_type == EventType.EVENT_TYPE_MARKER_RECORDED and marked and durations:
                with_local.append(durations[-1])
                marked = False
            elif ev.event_type in (EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED):
                arrivals.append(at.timestamp())
            elif ev.event_type == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
                sent += 1
    span = max(stamps) - min(stamps) if stamps else 0.0
    arrivals.sort()
    busiest, lo = 0, 0
    for hi, t in enumerate(arrivals):
        while arrivals[lo] < t - 10:
            lo += 1
        busiest = max(busiest, hi - lo + 1)

    def per_s(n: int) -> float:
        return round(n / span, 1) if span else 0.0

    return {"tasks": len(durations), "mean_s": round(mean(durations), 3), "max_s": round(max(durations, default=0), 3),
            "total_s": round(sum(durations), 1), "runs": runs, "events": events, "active_s": round(span, 1),
            "messages_received": len(arrivals), "signals_sent": sent, "events_per_s": per_s(events),
            "messages_received_per_s": per_s(len(arrivals)), "busiest_10s_messages_per_s": round(busiest / 10, 1),
            "tasks_per_s": per_s(len(durations)), "to_start_mean_s": round(mean(to_start), 3),
            "with_local_activity": {"tasks": len(with_local), "mean_s": round(mean(with_local), 3)}}


def mean(xs) -> float:
    xs = list(xs)
    return statistics.fmean(xs) if xs else float("nan")


class StderrTally:
    """Counts the warnings and errors written to this process's stderr while passing them through:
    the SDK's core (Rust) logs there directly, not through Python's logging. Counted by kind (the
    message with numbers and ids taken out); the first few are kept whole."""

    LINE = re.compile(r"\b(?P<level>WARN|ERROR)\s+(?P<target>\S+?):\s+(?P<message>.*)")

    def __init__(self) -> None:
        self.counts: Counter = Counter()
        self.first: list[str] = []

    def __enter__(self) -> StderrTally:
        sys.stdout.flush()
        sys.stderr.flush()
        self._saved = os.dup(2)
        read, write = os.pipe()
        os.dup2(write, 2)
        os.close(write)
        self._pump = threading.Thread(target=self._read, args=(read,), daemon=True)
        self._pump.start()
        return self

    def __exit__(self, *exc) -> None:
        sys.stderr.flush()
        os.dup2(self._saved, 2)  # the pipe's last writer goes: the reader sees its end
        self._pump.join(timeout=5)
        os.close(self._saved)

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as pipe:
            for raw in pipe:
                try:
                    os.write(self._saved, raw)
                except OSError:  # closed by __exit__ while a late writer (a child) still held the pipe
                    return
                line = re.sub(r"\x1b\[[0-9;]*m", "", raw.decode(errors="replace")).strip()
                found = self.LINE.search(line)
                if found is None:
                    continue
                message = re.sub(r"\s(workflow_type|run_id)=\S+", "", found["message"]).split(" event_id=")[0]
                kind = re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}|\d+", "N", message)[:140]
                workflow_type = re.search(r"workflow_type=(\w+)", line)
                self.counts[f"{found['level']} {kind}" + (f" ({workflow_type[1]})" if workflow_type else "")] += 1
                if len(self.first) < 10:
                    self.first.append(line[:400])


class LogTally(logging.Handler):
    """Warnings and errors logged in this process (the engine worker, the SDK) while it runs."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: Counter = Counter()
        self.first: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[f"{record.levelname} {record.name}"] += 1
        if len(self.first) < 10:
            self.first.append(f"{record.levelname} {record.name}: {record.getMessage()[:300]}")


def plot(run: Run, out: dict, start: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(16, 5))
    colors = {"small": "tab:blue", "medium": "tab:orange", "large": "tab:red"}
    for cls in CLASSES:
        created = sorted(t - start for k, t in run.created.items() if class_of(k) is cls)
        admitted = sorted(t - start for k, t in run.admitted_at.items() if class_of(k) is cls)
        a1.plot(created, range(1, len(created) + 1), ls=":", color=colors[cls.name], label=f"{cls.name} created")
        a1.plot(admitted, range(1, len(admitted) + 1), color=colors[cls.name], label=f"{cls.name} admitted (last time)")
    a1.set_xlabel("seconds since the first creation")
    a1.set_ylabel("workloads")
    a1.set_title("created and admitted over time, per class", fontsize=10)
    a1.legend(fontsize=8)
    a1.grid(True, lw=0.3)

    groups = defaultdict(list)
    for cq, cohort in run.queues.items():
        groups[cohort or "all ClusterQueues"].append(cq)
    for label, members in groups.items():
        whole = [(t, r) for t, r in run.samples if all(cq in r for cq in members)]  # every member answered
        pct = [sum(r[cq][0] for cq in members) / (QUOTA * len(members)) * 100 for _, r in whole]
        a2.plot([t - start for t, _ in whole], pct, lw=0.9, label=label)
    a2.axhline(out["usage"]["mean_pct"], color="tab:green", ls="--", lw=0.8, label=f"average {out['usage']['mean_pct']:.1f} %")
    a2.axhline(KUEUE["min_usage_pct"], color="grey", ls=":", lw=0.8, label="Kueue's CI floor, 50 %")
    if run.backlog:
        b2 = a2.twinx()
        b2.plot([t - start for t, _, _ in run.backlog], [b for _, b, _ in run.backlog], color="tab:purple", lw=0.8,
                label="workflow tasks waiting for the worker")
        b2.set_ylabel("workflow task backlog (engine task queue)", color="tab:purple")
        b2.legend(fontsize=8, loc="upper left")
    a2.set_ylim(0, 105)
    a2.set_xlabel("seconds since the first creation")
    a2.set_ylabel("cpu in use / nominal quota (%)")
    a2.set_title("usage per cohort (status query, every second)", fontsize=10)
    a2.legend(fontsize=8, loc="center left")
    a2.grid(True, lw=0.3)

    names = [c.name for c in CLASSES]
    ours = [out["avg_time_to_admission_s"][n] for n in names]
    theirs = [KUEUE["avg_time_to_admission_s"][n] for n in names]
    x = range(len(names))
    a3.bar([i - 0.2 for i in x], ours, width=0.4, label=f"admitflow, {out['shape']['short']}")
    a3.bar([i + 0.2 for i in x], theirs, width=0.4, label="Kueue CI, 30 CQs in 5 cohorts")
    for i, (o, t) in enumerate(zip(ours, theirs)):
        a3.text(i - 0.2, o, f"{o:.1f}", ha="center", va="bottom", fontsize=8)
        a3.text(i + 0.2, t, f"{t:g}", ha="center", va="bottom", fontsize=8)
    a3.set_xticks(list(x), names)
    a3.set_yscale("log")
    a3.set_ylabel("average time to admission (s, log scale)")
    a3.set_title("time to admission per class", fontsize=10)
    a3.legend(fontsize=7)
    a3.grid(True, axis="y", which="both", lw=0.3)

    fig.suptitle(
        f"Kueue's scheduler baseline shape, {out['finished']} of {out['workloads']} workloads, {out['shape']['short']}: "
        f"{out['wall_s']:.0f} s, {out['workloads_per_s']:.1f} workloads/s (bare Temporal {out['bare_per_s']['mean']:.1f} wf/s, ratio {out['ratio_to_bare']:.2f})",
        fontsize=9,
    )
    save_figure(fig, path)


async def wait_for_trees(run: Run, limit: float = 60.0) -> float | None:
    """Seconds until every ClusterQueue in a cohort answered from its tree's entity, or None."""
    started = time.time()
    while time.time() - started < limit:
        await run.reports()
        if all(run.where.get(cq) == ids.cohort_id(cohort) for cq, cohort in run.queues.items() if cohort):
            return round(time.time() - started, 1)
        await asyncio.sleep(0.5)
    return None


async def main() -> None:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--cohorts", type=int, default=1, help="cohorts (Kueue: 5; 1 takes about ten minutes here)")
    p.add_argument("--cqs-per-cohort", type=int, default=6, help="ClusterQueues per cohort (Kueue: 6)")
    p.add_argument("--per-cq", type=int, default=500, help="workloads per ClusterQueue, split 350:100:50 (Kueue: 500)")
    p.add_argument("--standalone", "--no-cohorts", action="store_true",
                   help="the same number of ClusterQueues without a cohort (no borrowing, no reclaim), as before cohorts")
    p.add_argument("--cqs", type=int, help="the runs before cohorts: this many standalone ClusterQueues "
                   "(--standalone --cohorts 1 --cqs-per-cohort N)")
    p.add_argument("--preemption", default="LowerPriority", choices=["LowerPriority", "Never"],
                   help="withinClusterQueue of every ClusterQueue (Kueue's baseline: LowerPriority)")
    p.add_argument("--reclaim", default="Any", choices=["Any", "LowerPriority", "Never"],
                   help="reclaimWithinCohort of every ClusterQueue in a cohort (Kueue's baseline: Any)")
    p.add_argument("--cache", type=int, help="the engine worker's max_cached_workflows (default: the SDK's, 1000)")
    p.add_argument("--workflow-tasks", type=int, help="the engine worker's max_concurrent_workflow_tasks (default: the SDK's, 100)")
    p.add_argument("--pollers", type=int, help="the engine worker's workflow and activity task pollers, each, as a simple maximum (default: the SDK's 5, as admitflow worker's)")
    p.add_argument("--bare", type=int, default=500, help="bare workflows measured before and after")
    p.add_argument("--minutes", type=float, default=9.0, help="give up on the workloads after this long (the run stays near ten minutes)")
    p.add_argument("--out", type=Path, help="JSON path (the PNG goes beside it); default bench/results/kueue_baseline-<date>.json")
    args = p.parse_args()
    json_path, png_path = result_paths("kueue_baseline", args.out)
    if args.cqs:
        args.standalone, args.cohorts, args.cqs_per_cohort = True, 1, args.cqs
    shape = Shape(args.cohorts, args.cqs_per_cohort, args.standalone, args.preemption, args.reclaim)
    queues = shape.queues()
    counts = class_counts(args.per_cq)
    print(f"{shape.describe()}; per ClusterQueue {counts}: {len(queues) * args.per_cq} workloads", flush=True)

    pure = {}
    for policy in ("LowerPriority", "Never"):
        try:
            pure[policy] = pure_pass_ms(shape, counts, policy)
        except Exception as err:  # the scheduler's internals change under this benchmark; the run goes on
            pure[policy] = {"error": f"{type(err).__name__}: {err}"[:300]}
    print("pure scheduling pass after a release: "
          + ", ".join(f"preemption {k} {v.get('pass_after_release_ms', v.get('error'))} ms" for k, v in pure.items())
          + f" ({pure['Never'].get('cluster_queues', '?')} ClusterQueue(s), {pure['Never'].get('pending', '?')} pending)", flush=True)
    rev, before = revision(), machine()  # the code this process imported, and the machine's load
    tally, core = LogTally(), StderrTally()
    logging.getLogger().addHandler(tally)
    try:
        with core:
            settings = {"max_cached_workflows": args.cache, "max_concurrent_workflow_tasks": args.workflow_tasks,
                        "workflow_task_pollers": args.pollers, "activity_task_pollers": args.pollers}
            async with engine(**sdk_options(**{k: v for k, v in settings.items() if v})) as e:
                bare_cpu = [CpuMeter(e.server), CpuMeter(e.server)]
                bare_before = await bare_rate(e.client, args.bare, "before", bare_cpu[0])
                print(f"bare Temporal before: {bare_before:.1f} wf/s", flush=True)

                await e.admitflow.apply(loaded(shape.manifests()))
                run = Run(e, queues, counts)
                handover_s = None
                if shape.roots():
                    handover_s = await wait_for_trees(run)
                    print(f"every ClusterQueue's state is in its cohort tree after {handover_s} s" if handover_s is not None
                          else f"not every ClusterQueue reached its cohort tree in 60 s: {run.where}", flush=True)

                async with run.worker():
                    meter = CpuMeter(e.server).start()
                    start = time.time()
                    background = [asyncio.ensure_future(run.until_all_finished()), asyncio.ensure_future(run.sample_usage())]
                    generators = asyncio.gather(*(run.generate(cq, cls) for cq in queues for cls in CLASSES))

                    async def progress() -> None:
                        while not run.done.is_set():
                            await asyncio.sleep(15)
                            print(f"{time.time() - start:5.0f} s: created {len(run.created)}, running {len(run.running)}, "
                                  f"finished {len(run.finished)} of {run.total}", flush=True)

                    background.append(asyncio.ensure_future(progress()))
                    try:
                        await asyncio.wait_for(asyncio.gather(generators, run.done.wait()), args.minutes * 60)
                    except TimeoutError:
                        print(f"gave up after {args.minutes} minutes: {len(run.finished)} of {run.total} finished", flush=True)
                    end = max(run.finished.values(), default=time.time())
                    meter.stop()
                    run.done.set()
                    for t in background:
                        t.cancel()
                    await asyncio.gather(*background, return_exceptions=True)
                creation_s = max(run.created.values()) - start
                print(f"all {len(run.finished)} finished in {end - start:.1f} s (creation took {creation_s:.1f} s); collecting", flush=True)

                keys = sorted(run.finished)
                wedged = await still_running(e)
                unfinished = sorted(set(run.created) - set(run.finished) | set(wedged))
                stuck = {}
                for key in unfinished[:10]:  # where the first few that never finished stand
                    try:
                        r = await e.admitflow.workload(key)
                        status = getattr(r, "status", None)
                        stuck[key] = ([f"{c.type}={c.status} {c.reason}: {c.message}"[:200] for c in status.conditions]
                                      if status is not None else repr(r)[:300])
                    except Exception as err:
                        stuck[key] = f"{type(err).__name__}: {err}"[:300]
                reports = await final_reports(e, keys)
                sampled = await history_figures(e, run, random.Random(9).sample(keys, min(100, len(keys))))
                tree_tasks = {root: await entity_task_figures(e, ids.cohort_id(root)) for root in shape.roots()}
                queue_tasks = {cq: await entity_task_figures(e, ids.cluster_queue_id(cq)) for cq in queues}
                catalog_tasks = await entity_task_figures(e, ids.CATALOG_ID)

                bare_after = await bare_rate(e.client, args.bare, "after", bare_cpu[1])
                print(f"bare Temporal after: {bare_after:.1f} wf/s", flush=True)
    finally:
        logging.getLogger().removeHandler(tally)

    wall = end - start
    usage = {cq: time_weighted(run.samples, cq, start, end) / QUOTA for cq in queues}
    borrowed = {cq: time_weighted(run.samples, cq, start, end, lambda used: max(0.0, used - QUOTA)) for cq in queues}
    peak = {cq: max((r[cq][0] for _, r in run.samples if cq in r), default=float("nan")) for cq in queues}
    reserved = {cq: mean(r[cq][1] for t, r in run.samples if cq in r and start <= t <= end) / QUOTA for cq in queues}
    by_cohort = defaultdict(list)
    for cq, cohort in queues.items():
        by_cohort[cohort or "none"].append(usage[cq])
    ran_usage = defaultdict(float)
    for key, seen, fin in run.ran:
        ran_usage[cq_of(key)] += class_of(key).cpu * (fin - seen)
    tta = {c.name: [run.admitted_at[k] - run.created[k] for k in keys if class_of(k) is c] for c in CLASSES}
    engine_tta = defaultdict(list)
    admissions, preempted, reasons, condition_reasons = Counter(), Counter(), Counter(), Counter()
    across_queues = 0
    unadmitted, evicted_after_finish = [], []
    for k, r in reports.items():
        cls = class_of(k).name
        admitted, last_admitted, finished = False, None, False
        for ev in r.events:
            if ev.reason == "Admitted":
                admitted, last_admitted = True, ev.time
                admissions[cls] += 1
            elif ev.reason.startswith("EvictedDueTo"):
                admitted = False
                if finished:
                    evicted_after_finish.append(k)
            elif ev.reason == "Preempted":
                preempted[cls] += 1
                reason, other_queue = preemption_reason(ev.message)
                reasons[reason] += 1
                across_queues += bool(other_queue)
            elif ev.reason == "Finished":
                finished = True
                if not admitted:
                    unadmitted.append(k)
        condition = next((c for c in r.status.conditions if c.type == "Preempted"), None)
        if condition is not None:
            condition_reasons[f"{condition.status} {condition.reason}"] += 1
        if last_admitted is not None:
            engine_tta[cls].append((last_admitted - r.metadata.creation_timestamp).total_seconds())
    bare_mean = (bare_before + bare_after) / 2
    rate = len(run.finished) / wall
    ideal = max(
        max(counts[c.name] * c.interval for c in CLASSES),  # the creation schedule
        sum(counts[c.name] * c.cpu * c.runtime for c in CLASSES) / QUOTA,  # every cpu busy all the time
    )
    out = {
        "benchmark": "kueue_baseline",
        "command": " ".join(["bench/kueue_baseline.py", *sys.argv[1:]]),
        "shape": {"summary": shape.describe(), "short": shape.short(), "cohorts": None if shape.standalone else args.cohorts,
                  "cluster_queues": len(queues), "cluster_queues_per_cohort": None if shape.standalone else args.cqs_per_cohort,
                  "per_cluster_queue": counts, "quota_cpu": QUOTA,
                  "borrowing_limit_cpu": None if shape.standalone else BORROWING_LIMIT,
                  "preemption": shape.preemption(),
                  "note": ("standalone ClusterQueues: no cohort, no borrowing, no reclaim" if shape.standalone
                           else "Kueue's generator: implicit cohorts named by spec.cohortName, no Cohort objects")},
        "workloads": run.total,
        "finished": len(run.finished),
        "wall_s": round(wall, 1),
        "creation_s": round(creation_s, 1),
        "ideal_wall_s": round(ideal, 1),
        "workloads_per_s": round(rate, 2),
        "bare_per_s": {"before": round(bare_before, 1), "after": round(bare_after, 1), "mean": round(bare_mean, 1)},
        "ratio_to_bare": round(rate / bare_mean, 3),
        "usage": {
            "how": ("Kueue's recorder: time-weighted flavorsUsage cpu over the nominal quota (20 cpu) per ClusterQueue; "
                    "a ClusterQueue that borrows exceeds 100 %, a cohort cannot"),
            "per_cluster_queue_pct": {cq: round(u * 100, 1) for cq, u in usage.items()},
            "per_cohort_pct": {c: round(mean(v) * 100, 1) for c, v in by_cohort.items()},
            "mean_pct": round(mean(usage.values()) * 100, 1),
            "min_pct": round(min(usage.values()) * 100, 1),
            "max_pct": round(max(usage.values()) * 100, 1),
            "peak_cpu": {cq: round(v, 1) for cq, v in peak.items()},
            "borrowed_avg_cpu": {cq: round(v, 2) for cq, v in borrowed.items()},
            "reserved_mean_pct": round(mean(reserved.values()) * 100, 1),
            "runtime_share_pct": round(sum(counts[c.name] * c.cpu * c.runtime for c in CLASSES) / (QUOTA * wall) * 100, 1),
            "ran_mean_pct": round(mean(ran_usage[cq] / (QUOTA * wall) for cq in queues) * 100, 1),
            "samples": len(run.samples),
            "sample_errors": run.sample_errors,
            "borrowing_seen": any(v > QUOTA for v in peak.values()),
            "held_by": dict(run.where),
            "handover_s": handover_s,
        },
        "avg_time_to_admission_s": {c: round(mean(v), 2) for c, v in tta.items()},
        "p50_time_to_admission_s": {c: round(statistics.median(v), 2) if v else None for c, v in tta.items()},
        "max_time_to_admission_s": {c: round(max(v), 2) if v else None for c, v in tta.items()},
        "engine_avg_time_to_admission_s": {c: round(mean(engine_tta[c]), 2) for c in BY_NAME},
        "admissions": dict(admissions),
        "preemptions": dict(preempted),
        "preemptions_by_reason": dict(reasons),
        "preemptions_across_cluster_queues": across_queues,
        "preempted_condition_at_end": dict(condition_reasons),
        "runner": {
            "admissions_seen": sum(len(v) for v in run.seen.values()),
            "stopped_by_the_engine": run.stopped,
            "finished_then_admitted_again": run.stale_finishes,
            "finished_while_not_admitted": len(unadmitted),
            "evicted_after_finished": len(evicted_after_finish),
            "told_after_admitted_s": sampled["runner_lag_s"],
            # A workload's last admission, step by step (QUOTA_PATH): where the quota-time that the
            # runtimes do not fill goes, apart from the queue's own pass.
            "quota_path_s": sampled["quota_path_s"],
            "unfinished": len(unfinished),
            "still_running_at_end": wedged,
            "unfinished_examples": stuck,
        },
        # What the worker logged: the SDK's core on stderr, Python's logging (the engine, the SDK).
        "worker_log": {"core": dict(core.counts), "core_first": core.first,
                       "python": dict(tally.counts), "python_first": tally.first},
        "limits": {
            # Over the whole workload phase, divided by the workloads (the runner's lists, queries
            # and finishes and the usage samples count in this process's share).
            "cpu_per_workload_ms": meter.per(len(run.finished) or 1),
            "cpu_share_of_wall": {"python": round(meter.python_s / wall, 2), "server": round(meter.server_s / wall, 2)},
            "cpu_per_bare_workflow_ms": {k: round(mean(m.per(args.bare)[k] for m in bare_cpu), 1) for k in ("python_ms", "server_ms")},
            "workload_first_task_delay_s": sampled["first_task_delay_s"],
            "workflow_task_backlog": {
                "peak": max((b for _, b, _ in run.backlog), default=None),
                "mean": round(mean(b for _, b, _ in run.backlog), 1),
                "oldest_s": round(max((a for _, _, a in run.backlog), default=float("nan")), 1),
                "samples": len(run.backlog),
            },
            # Cores used while more than 100 workflow tasks waited, and while none did.
            "cpu_while_backlogged": cores_when(run, lambda b: b > 100),
            "cpu_while_not_backlogged": cores_when(run, lambda b: b == 0),
            "live_workloads_peak": max(run.live, default=0),
            # This process's (the engine worker's, the runner's and the clients') peak resident set.
            "peak_rss_mib": peak_rss_mib(),
            "worker_max_cached_workflows": args.cache or 1000,
            "worker_max_concurrent_workflow_tasks": args.workflow_tasks or 100,
            "worker_task_pollers": args.pollers or 5,
            "history_sample": sampled["sample"],
            "events_per_workload": sampled["events_per_workload"],
            "workflow_tasks_per_workload": sampled["workflow_tasks_per_workload"],
            "events_per_workload_by_kind": sampled["events_per_workload_by_kind"],
            "signals_per_workload_by_name": sampled["signals_per_workload_by_name"],
            "failed_workflow_tasks": sampled["failed_workflow_tasks"],
            # Where each cohort's scheduling happens: its tree's entity, cohort/<root>.
            "cohort_tree_tasks": tree_tasks,
            "cohort_tree_task_time_share_of_wall": round(sum(q["total_s"] for q in tree_tasks.values()) / wall, 2),
            # The ClusterQueues' own workflows: standalone they schedule; in a cohort they forward.
            "cluster_queue_tasks": queue_tasks,
            "cluster_queue_task_time_share_of_wall": round(sum(q["total_s"] for q in queue_tasks.values()) / wall, 2),
            "catalog_tasks": catalog_tasks,
            "pure_pass": pure,
        },
        "kueue_ci": KUEUE,
        # The histories behind the counts above: the most preempted workload, the first ones the
        # runner finished while they were no longer admitted, and the first ones evicted after
        # they had finished.
        "examples": {
            k: [f"{ev.time:%H:%M:%S} {ev.reason}: {ev.message}" for ev in reports[k].events]
            for k in ([max(reports, key=lambda k: sum(ev.reason == "Preempted" for ev in reports[k].events))] if reports else [])
            + unadmitted[:2] + evicted_after_finish[:2]
        },
        "revision": rev,
        "machine_before": before,
        "machine_after": machine(),
    }
    print()
    print(f"shape: {shape.describe()}; per ClusterQueue {counts}")
    print(f"wall {wall:.1f} s for {len(run.finished)} of {run.total} workloads: {rate:.2f} workloads/s "
          f"(the shape's own floor: {ideal:.0f} s; Kueue CI: 15,000 in 351 s, {KUEUE['workloads_per_s']}/s)")
    print(f"bare Temporal: {bare_before:.1f} wf/s before, {bare_after:.1f} after; ratio {rate / bare_mean:.3f}")
    print("usage per ClusterQueue (time-weighted cpu in use / 20 cpu nominal, as Kueue's recorder; above 100 % is borrowing): "
          + ", ".join(f"{cq} {u * 100:.1f} %" for cq, u in usage.items())
          + f"; mean {out['usage']['mean_pct']} % (Kueue CI: >= 50 %)")
    if not shape.standalone:
        print("  per cohort (over its nominal quota, at most 100 %): "
              + ", ".join(f"{c} {v} %" for c, v in out["usage"]["per_cohort_pct"].items())
              + "; peak cpu in use per ClusterQueue " + ", ".join(f"{v:g}" for v in peak.values())
              + f"; average borrowed {mean(borrowed.values()):.2f} cpu per ClusterQueue; "
              f"states held by {sorted(set(run.where.values()))}")
        if not out["usage"]["borrowing_seen"]:
            print("  no ClusterQueue ever had more than its nominal quota in use: nothing was borrowed in this run")
    print(f"  of which workload runtime: {out['usage']['runtime_share_pct']} % of the nominal quota-time; from told "
          f"admitted until the finish was sent: {out['usage']['ran_mean_pct']} %")
    path = out["runner"]["quota_path_s"]
    print(f"  a workload's last admission, mean seconds over {path['workloads']} sampled: "
          + ", ".join(f"{step} {path[step]}" for step in QUOTA_PATH if step in path))
    print("average time to admission (submitted -> last admission the runner saw):")
    for c in CLASSES:
        print(f"  {c.name:6} {out['avg_time_to_admission_s'][c.name]:7.2f} s  (Kueue CI: {KUEUE['avg_time_to_admission_s'][c.name]} s; "
              f"the engine's own creationTimestamp -> last Admitted event, 1 s resolution: "
              f"{out['engine_avg_time_to_admission_s'][c.name]:.2f} s)")
    print(f"admissions {dict(admissions)}, preemptions {dict(preempted)}: by reason {dict(reasons)}, "
          f"{across_queues} across ClusterQueues; Preempted condition at the end {dict(condition_reasons)}")
    print(f"runner: {out['runner']}")
    if tree_tasks:
        print("cohort tree entities: " + "; ".join(
            f"{ids.cohort_id(root)} {f['tasks']} workflow tasks, mean {f['mean_s']} s, max {f['max_s']} s, "
            f"{f['total_s']} s in all, {f['runs']} run(s), {f['events']} events; each waited {f['to_start_mean_s']} s for "
            f"a worker; {f['with_local_activity']['tasks']} sent signals in the task, mean {f['with_local_activity']['mean_s']} s"
            for root, f in tree_tasks.items()))
    print(f"ClusterQueue workflows: {sum(q['tasks'] for q in queue_tasks.values())} workflow tasks, "
          f"{sum(q['total_s'] for q in queue_tasks.values()):.1f} s in all, max {max(q['max_s'] for q in queue_tasks.values())} s")
    for name, f in [*(("cohort/" + r, f) for r, f in tree_tasks.items()), *(("clusterqueue/" + q, f) for q, f in queue_tasks.items()),
                    ("catalog", catalog_tasks)]:
        if f["active_s"] < 10:  # busy only at setup: a rate over a moment says nothing
            print(f"  {name}: {f['messages_received']} messages, {f['events']} events, {f['tasks']} workflow tasks in all")
            continue
        print(f"  {name}: {f['messages_received_per_s']} messages/s received ({f['busiest_10s_messages_per_s']} in its busiest 10 s), "
              f"{f['events_per_s']} events/s, {f['tasks_per_s']} workflow tasks/s over {f['active_s']} s")
    print(f"worker log: {dict(core.counts + tally.counts) or 'no warnings or errors'}")
    print(f"limits: {out['limits']}")
    write_json(json_path, out)
    plot(run, out, start, png_path)
    print(f"wrote {json_path} and {png_path}")


if __name__ == "__main__":
    asyncio.run(main())
