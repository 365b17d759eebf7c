"""Kueue's scheduler benchmark shape (test/performance/scheduler, baseline), scaled down, against
bare Temporal on the same dev server in the same run.

Kueue's baseline: 5 cohorts x 6 ClusterQueues of nominal quota 20 cpu (borrowingLimit 100,
preemption withinClusterQueue LowerPriority, reclaimWithinCohort Any); per ClusterQueue 350 small
(1 cpu, priority 50, runtime 200 ms, one created every 100 ms), 100 medium (5 cpu, 100, 500 ms,
every 500 ms), 50 large (20 cpu, 200, 1000 ms, every 1200 ms). Here cohorts are not built, so the
ClusterQueues run standalone (no cohort, no borrowing, no reclaim); preemption within each
ClusterQueue is on (LowerPriority), as in Kueue's (`--preemption Never` turns it off). Scaled down
by the number of ClusterQueues (`--cqs`, default 6: one cohort's worth, 3,000 workloads; a run
takes 4 to 8 minutes here, and Kueue's 30 would not finish in ten) and, if wanted, the workloads
per ClusterQueue (`--per-cq`, classes kept 350:100:50).

The benchmark plays Kueue's runner: workloads are created per ClusterQueue and class at Kueue's
intervals (one after another, as Kueue's generator does); it watches visibility for `Admitted`
workloads (a list query every `--poll` seconds), and finishes each one (signal `finish`) once it
has run its runtime from when it was seen admitted, after a `workload` query confirms it is still
admitted (a preempted one is not finished; it runs again once readmitted). ClusterQueue usage is
sampled from each queue's `status` query every second.

Prints wall time, workloads/s, usage per ClusterQueue, average time to admission per class (from
submission to the last admission the runner observed, as Kueue's recorder measures it), and the
bare-Temporal rate (bench/bare_workflow.py) measured before and after, with the ratio; then what
limited the run: CPU per workload against a bare workflow, the engine task queue's backlog (sampled
every second), how long new workloads waited for their first workflow task, the ClusterQueues'
workflow tasks, and the pure scheduling pass at the shape's depth. Writes JSON and a PNG under
bench/results/.

    .venv/bin/python bench/kueue_baseline.py [--cqs 6] [--per-cq 500] [--preemption LowerPriority|Never]
        [--cache N] [--bare 500] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from temporalio.api.enums.v1 import EventType, TaskQueueKind, TaskQueueType  # noqa: E402
from temporalio.api.taskqueue.v1 import TaskQueue  # noqa: E402
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest  # noqa: E402
from temporalio.service import RPCError  # noqa: E402

from admitflow import ids  # noqa: E402
from admitflow.admission.workload import WorkloadReport  # noqa: E402
from admitflow.api import parse_manifest  # noqa: E402
from admitflow.api.quantity import parse_quantity  # noqa: E402
from bench.harness import (  # noqa: E402
    CpuMeter,
    Engine,
    bare_rate,
    bounded,
    cpu_seconds,
    engine,
    loaded,
    machine,
    result_paths,
    revision,
    save_figure,
    write_json,
)
from tests.builders import cluster_queue_manifest, flavor_manifest, local_queue_manifest, workload_manifest  # noqa: E402

QUOTA = 20  # cpu per ClusterQueue


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
    "wall_s": 351,
    "workloads_per_s": round(15000 / 351, 1),
    "min_usage_pct": 50,
    "avg_time_to_admission_s": {"small": 215, "medium": 77, "large": 16.5},
}

ADMITTED = "WorkflowType = 'WorkloadWorkflow' AND AdmitflowPhase = 'Admitted'"


def class_counts(per_cq: int) -> dict[str, int]:
    small = round(per_cq * 350 / 500)
    medium = round(per_cq * 100 / 500)
    return {"small": small, "medium": medium, "large": per_cq - small - medium}


def class_of(key: str) -> WorkloadClass:
    return BY_NAME[key.split("/", 1)[1].split("-", 1)[0]]


def cq_of(key: str) -> str:
    return key.split("/", 1)[0]  # the namespace is named after its ClusterQueue, as in Kueue's generator


class Run:
    """The runner's bookkeeping; times are wall-clock seconds (time.time())."""

    def __init__(self, e: Engine, cqs: list[str], counts: dict[str, int], poll: float) -> None:
        self.e = e
        self.cqs = cqs
        self.counts = counts
        self.poll = poll
        self.total = len(cqs) * sum(counts.values())
        self.created: dict[str, float] = {}
        self.running: dict[str, float] = {}  # admitted now, as seen: key -> when it was seen admitted
        self.admitted_at: dict[str, float] = {}  # the last admission seen
        self.seen: dict[str, list[float]] = defaultdict(list)  # every admission seen
        self.finished: dict[str, float] = {}
        self.ran: list[tuple[str, float, float]] = []  # (key, seen admitted, finished): what the runner ran
        self.not_admitted_at_finish = 0  # the query found it preempted after all
        self.samples: list[tuple[float, dict[str, int]]] = []  # (time, reserved cpu per ClusterQueue)
        self.backlog: list[tuple[float, int, float]] = []  # (time, workflow tasks waiting, age of the oldest in s)
        self.cpu: list[tuple[float, float, float]] = []  # (time, cores used by this process, by the server) since the last sample
        self.live: list[int] = []  # workloads submitted and not finished, per sample
        self.sample_errors = 0
        self.errors: list[str] = []
        self.finish_gate = asyncio.Semaphore(50)
        self.tasks: set[asyncio.Task] = set()
        self.done = asyncio.Event()

    # --- Kueue's generator ---------------------------------------------------------------------

    async def generate(self, cq: str, cls: WorkloadClass) -> None:
        for j in range(self.counts[cls.name]):
            await asyncio.sleep(cls.interval)
            name = f"{cls.name}-{j}"
            manifest = workload_manifest(name, cpu=str(cls.cpu), queue="lq", priority=cls.priority, namespace=cq)
            self.created[f"{cq}/{name}"] = time.time()
            await self.e.admitflow.submit(parse_manifest(manifest)[0], cluster_queue=cq)

    # --- Kueue's runner ------------------------------------------------------------------------

    async def watch(self) -> None:
        while not self.done.is_set():
            seen_at = time.time()
            try:
                listed = {ids.workload_key(wf.id) async for wf in self.e.client.list_workflows(ADMITTED, page_size=1000)}
            except RPCError:
                await asyncio.sleep(self.poll)
                continue
            for key in listed:
                if key and key not in self.running and key not in self.finished:
                    self.running[key] = seen_at
                    self.admitted_at[key] = seen_at
                    self.seen[key].append(seen_at)
                    self._spawn(self.run_then_finish(key, seen_at))
            await asyncio.sleep(self.poll)

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def run_then_finish(self, key: str, seen_at: float) -> None:
        await asyncio.sleep(max(0.0, class_of(key).runtime - (time.time() - seen_at)))
        try:
            async with self.finish_gate:
                handle = self.e.client.get_workflow_handle(ids.workload_id(key))
                status = (await handle.query("workload", result_type=WorkloadReport)).status
                if status.has_condition("Admitted") and not status.has_condition("Finished"):
                    await self.e.admitflow.finish(key)
                    now = time.time()
                    self.finished[key] = now
                    self.ran.append((key, seen_at, now))
                    if len(self.finished) == self.total:
                        self.done.set()
                else:
                    # Preempted while it ran: visibility lists it again once it is readmitted.
                    self.not_admitted_at_finish += 1
        except RPCError as err:
            self.errors.append(f"{key}: {err}")  # the watcher sees it again and tries anew
        finally:
            del self.running[key]

    async def sample_usage(self) -> None:
        """Every second: each ClusterQueue's reserved cpu (its `status` query), and the backlog of
        the engine's task queue (workflow tasks no worker has taken yet: a new workload's first
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
            reports = await asyncio.gather(*(self.e.admitflow.cluster_queue_report(cq) for cq in self.cqs),
                                           self.e.client.workflow_service.describe_task_queue(backlog),
                                           return_exceptions=True)
            reserved = {}
            for cq, r in zip(self.cqs, reports):
                if isinstance(r, BaseException) or r is None:
                    self.sample_errors += 1
                    continue
                cpu = sum(
                    parse_quantity(res.total) for f in r.status.flavors_reservation for res in f.resources if res.name == "cpu"
                )
                reserved[cq] = float(cpu)
            self.samples.append((at, reserved))
            queue = reports[-1]
            if not isinstance(queue, BaseException):
                age = queue.stats.approximate_backlog_age
                self.backlog.append((at, queue.stats.approximate_backlog_count, age.seconds + age.nanos / 1e9))
            await asyncio.sleep(max(0.0, 1.0 - (time.time() - at)))


def pure_pass_ms(counts: dict[str, int], policy: str) -> dict[str, float]:
    """One ClusterQueue's scheduling pass alone, outside any workflow, with every workload of the
    shape pending (in creation order) and the quota full of small ones: the pass after one of them
    releases its quota, which is what each finish triggers. Median of 5."""
    from datetime import UTC, datetime, timedelta

    from admitflow.admission import cluster_queue as cqs
    from admitflow.admission import scheduler
    from admitflow.admission.cluster_queue import ClusterQueueState, ClusterQueueView, LocalQueueInfo
    from admitflow.admission.pending_queue import QueueEntry
    from admitflow.admission.requests import PodSetRequest

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    manifest = cluster_queue_manifest(quotas={"default": {"cpu": str(QUOTA)}}, preemption={"withinClusterQueue": policy})
    view = ClusterQueueView(name="cq", revision=1, spec=parse_manifest(manifest)[0].spec,
                            flavors={"default": parse_manifest(flavor_manifest())[0].spec},
                            local_queues={"default/lq": LocalQueueInfo()})
    arrivals = sorted(((j * c.interval, c, j) for c in CLASSES for j in range(counts[c.name])), key=lambda a: (a[0], a[1].name))
    times = []
    for _ in range(5):
        st = ClusterQueueState(name="cq")
        cqs.set_view(st, view, t0)
        for k, (at, c, j) in enumerate(arrivals):
            cqs.enqueue(st, QueueEntry(key=f"default/{c.name}-{j}", uid=f"u{k}", ticket=1, local_queue="lq",
                                       priority=0 if c.name == "small" and j < QUOTA else c.priority,
                                       timestamp=t0 + timedelta(seconds=at),
                                       pod_sets=[PodSetRequest(name="main", count=1, per_pod={"cpu": c.cpu * 1000})]))
        scheduler.schedule([st], t0)  # the first smalls (given priority 0 here) fill the quota
        held = next(iter(st.reservations.values()))
        cqs.release(st, held.key, held.uid, held.ticket)
        started = time.perf_counter()
        scheduler.schedule([st], t0)
        times.append((time.perf_counter() - started) * 1000)
    return {"pending": len(arrivals), "pass_after_release_ms": round(statistics.median(times), 1)}


def time_weighted_usage(samples: list[tuple[float, dict[str, float]]], cq: str, start: float, end: float) -> float:
    """Average of reserved cpu / quota over [start, end], each sample holding until the next."""
    points = [(t, r[cq]) for t, r in samples if cq in r and start <= t <= end]
    if len(points) < 2:
        return float("nan")
    area = sum(v * (points[k + 1][0] - t) for k, (t, v) in enumerate(points[:-1]))
    return area / (points[-1][0] - points[0][0]) / QUOTA


def cores_when(run: Run, backlogged) -> dict[str, float]:
    """Mean cores used by this process and by the server over the samples whose backlog matched."""
    backlog = {round(t, 3): b for t, b, _ in run.backlog}
    rows = [(py, srv) for t, py, srv in run.cpu if backlogged(backlog.get(round(t, 3), -1))]
    return {"samples": len(rows), "python": round(mean(py for py, _ in rows), 2), "server": round(mean(s for _, s in rows), 2)}


async def final_reports(e: Engine, keys: list[str]) -> dict[str, WorkloadReport]:
    async def one(key: str) -> tuple[str, WorkloadReport]:
        handle = e.client.get_workflow_handle(ids.workload_id(key), result_type=WorkloadReport)
        return key, await handle.result()

    return dict(await bounded(one(k) for k in keys))


async def history_figures(e: Engine, run: Run, keys: list[str]) -> dict:
    """From a sample of workload histories: how long a workload's first workflow task waited after
    it was submitted (where its creationTimestamp was set, before `created-at-submission`), and how late the runner saw the last
    `AdmitflowPhase=Admitted` upsert (visibility's delay plus the poll interval; the workloads it
    did not see after that upsert, preempted again in between, are left out)."""

    async def one(key: str) -> tuple[float | None, float | None]:
        history = await e.client.get_workflow_handle(ids.workload_id(key)).fetch_history()
        started = first_task = last_admitted = None
        for ev in history.events:
            at = ev.event_time.ToDatetime().timestamp()
            if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
                started = at
            elif ev.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED and first_task is None:
                first_task = at
            elif ev.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
                field = ev.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields.get("AdmitflowPhase")
                if field is not None and json.loads(field.data) == "Admitted":
                    last_admitted = at
        delay = None if started is None or first_task is None else first_task - started
        # The first time the runner saw it admitted after that upsert.
        lag = min((t - last_admitted for t in run.seen[key] if t >= last_admitted), default=None) if last_admitted else None
        return delay, lag

    found = await bounded((one(k) for k in keys), 10)
    delays = [d for d, _ in found if d is not None]
    lags = [g for _, g in found if g is not None]
    return {
        "sample": len(keys),
        "first_task_delay_s": {"mean": round(mean(delays), 2), "max": round(max(delays, default=float("nan")), 2)},
        "visibility_lag_s": {"mean": round(mean(lags), 3), "max": round(max(lags, default=float("nan")), 3)},
    }


async def queue_task_figures(e: Engine, cq: str) -> dict:
    """The ClusterQueue workflow's tasks (every run): count, and wall time from task start to completion."""
    durations = []
    async for wf in e.client.list_workflows(f"WorkflowId = '{ids.cluster_queue_id(cq)}'"):
        history = await e.client.get_workflow_handle(ids.cluster_queue_id(cq), run_id=wf.run_id).fetch_history()
        started = None
        for ev in history.events:
            if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                started = ev.event_time.ToDatetime()
            elif ev.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and started is not None:
                durations.append((ev.event_time.ToDatetime() - started).total_seconds())
    return {"tasks": len(durations), "mean_s": round(mean(durations), 3), "max_s": round(max(durations, default=0), 3),
            "total_s": round(sum(durations), 1)}


def mean(xs) -> float:
    xs = list(xs)
    return statistics.fmean(xs) if xs else float("nan")


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

    ts = [t - start for t, r in run.samples]
    total = [sum(r.values()) / (QUOTA * max(1, len(r))) * 100 for _, r in run.samples]
    a2.plot(ts, total, color="tab:green", label="all ClusterQueues")
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
    a2.set_ylabel("reserved cpu / nominal quota (%)")
    a2.set_title("ClusterQueue usage (status query, every second)", fontsize=10)
    a2.legend(fontsize=8, loc="center left")
    a2.grid(True, lw=0.3)

    names = [c.name for c in CLASSES]
    ours = [out["avg_time_to_admission_s"][n] for n in names]
    theirs = [KUEUE["avg_time_to_admission_s"][n] for n in names]
    x = range(len(names))
    a3.bar([i - 0.2 for i in x], ours, width=0.4, label=f"admitflow, {out['shape']['cluster_queues']} standalone CQs")
    a3.bar([i + 0.2 for i in x], theirs, width=0.4, label="Kueue CI, 30 CQs in 5 cohorts")
    for i, (o, t) in enumerate(zip(ours, theirs)):
        a3.text(i - 0.2, o, f"{o:.1f}", ha="center", va="bottom", fontsize=8)
        a3.text(i + 0.2, t, f"{t:g}", ha="center", va="bottom", fontsize=8)
    a3.set_xticks(list(x), names)
    a3.set_yscale("log")
    a3.set_ylabel("average time to admission (s, log scale)")
    a3.set_title("time to admission per class", fontsize=10)
    a3.legend(fontsize=8)
    a3.grid(True, axis="y", which="both", lw=0.3)

    fig.suptitle(
        f"Kueue's scheduler baseline shape, {out['workloads']} workloads, {out['shape']['cluster_queues']} ClusterQueue(s) without cohorts, "
        f"preemption {out['shape']['preemption']['withinClusterQueue']}: "
        f"{out['wall_s']:.0f} s, {out['workloads_per_s']:.1f} workloads/s (bare Temporal {out['bare_per_s']['mean']:.1f} wf/s, ratio {out['ratio_to_bare']:.2f})",
        fontsize=10,
    )
    save_figure(fig, path)


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cqs", type=int, default=6, help="standalone ClusterQueues (Kueue: 30 in 5 cohorts)")
    p.add_argument("--per-cq", type=int, default=500, help="workloads per ClusterQueue, split 350:100:50 (Kueue: 500)")
    p.add_argument("--preemption", default="LowerPriority", choices=["LowerPriority", "Never"],
                   help="withinClusterQueue of every ClusterQueue (Kueue's baseline: LowerPriority)")
    p.add_argument("--cache", type=int, help="the engine worker's max_cached_workflows (default: the SDK's, 1000)")
    p.add_argument("--bare", type=int, default=500, help="bare workflows measured before and after")
    p.add_argument("--poll", type=float, default=0.25, help="seconds between the runner's visibility lists")
    p.add_argument("--minutes", type=float, default=9.0, help="give up on the workloads after this long (the run stays near ten minutes)")
    p.add_argument("--out", type=Path, help="JSON path (the PNG goes beside it); default bench/results/kueue_baseline-<date>.json")
    args = p.parse_args()
    json_path, png_path = result_paths("kueue_baseline", args.out)
    counts = class_counts(args.per_cq)
    cqs = [f"cq-{i}" for i in range(args.cqs)]
    print(f"{args.cqs} standalone ClusterQueues (no cohort: borrowing is not built), preemption {args.preemption}, "
          f"x {counts}: {args.cqs * args.per_cq} workloads", flush=True)

    pure = {policy: pure_pass_ms(counts, policy) for policy in ("LowerPriority", "Never")}
    print(f"pure scheduling pass after a release, {pure['Never']['pending']} pending: "
          + ", ".join(f"preemption {k} {v['pass_after_release_ms']} ms" for k, v in pure.items()), flush=True)
    rev, before = revision(), machine()  # the code this process imported, and the machine's load
    async with engine(**({"max_cached_workflows": args.cache} if args.cache else {})) as e:
        bare_cpu = [CpuMeter(e.server), CpuMeter(e.server)]
        bare_before = await bare_rate(e.client, args.bare, "before", bare_cpu[0])
        print(f"bare Temporal before: {bare_before:.1f} wf/s", flush=True)

        docs = [flavor_manifest()]
        for cq in cqs:
            docs.append(cluster_queue_manifest(cq, quotas={"default": {"cpu": str(QUOTA)}},
                                               preemption={"withinClusterQueue": args.preemption}))
            docs.append(local_queue_manifest("lq", cq, namespace=cq))
        await e.admitflow.apply(loaded(docs))

        run = Run(e, cqs, counts, args.poll)
        meter = CpuMeter(e.server).start()
        start = time.time()
        background = [asyncio.ensure_future(run.watch()), asyncio.ensure_future(run.sample_usage())]
        generators = asyncio.gather(*(run.generate(cq, cls) for cq in cqs for cls in CLASSES))

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
        await asyncio.gather(*background, *run.tasks, return_exceptions=True)
        creation_s = max(run.created.values()) - start
        print(f"all {len(run.finished)} finished in {end - start:.1f} s (creation took {creation_s:.1f} s); collecting", flush=True)

        keys = sorted(run.finished)
        reports = await final_reports(e, keys)
        sampled = await history_figures(e, run, random.Random(9).sample(keys, min(100, len(keys))))
        queue_tasks = {cq: await queue_task_figures(e, cq) for cq in cqs}

        bare_after = await bare_rate(e.client, args.bare, "after", bare_cpu[1])
        print(f"bare Temporal after: {bare_after:.1f} wf/s", flush=True)

    wall = end - start
    usage = {cq: time_weighted_usage(run.samples, cq, start, end) for cq in cqs}
    ran_usage = defaultdict(float)
    for key, seen, fin in run.ran:
        ran_usage[cq_of(key)] += class_of(key).cpu * (fin - seen)
    tta = {c.name: [run.admitted_at[k] - run.created[k] for k in keys if class_of(k) is c] for c in CLASSES}
    engine_tta = defaultdict(list)
    admissions, preempted = Counter(), Counter()
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
            elif ev.reason == "Finished":
                finished = True
                if not admitted:
                    unadmitted.append(k)
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
        "shape": {"cluster_queues": args.cqs, "cohorts": None, "per_cluster_queue": counts, "quota_cpu": QUOTA,
                  "preemption": {"withinClusterQueue": args.preemption},
                  "note": "standalone ClusterQueues: cohorts (borrowing, reclaim) are not built"},
        "workloads": run.total,
        "finished": len(run.finished),
        "wall_s": round(wall, 1),
        "creation_s": round(creation_s, 1),
        "ideal_wall_s": round(ideal, 1),
        "workloads_per_s": round(rate, 2),
        "bare_per_s": {"before": round(bare_before, 1), "after": round(bare_after, 1), "mean": round(bare_mean, 1)},
        "ratio_to_bare": round(rate / bare_mean, 3),
        "usage": {
            "per_cluster_queue_pct": {cq: round(u * 100, 1) for cq, u in usage.items()},
            "mean_pct": round(mean(usage.values()) * 100, 1),
            "min_pct": round(min(usage.values()) * 100, 1),
            "runtime_share_pct": round(sum(counts[c.name] * c.cpu * c.runtime for c in CLASSES) / (QUOTA * wall) * 100, 1),
            "ran_mean_pct": round(mean(ran_usage[cq] / (QUOTA * wall) for cq in cqs) * 100, 1),
            "samples": len(run.samples),
            "sample_errors": run.sample_errors,
        },
        "avg_time_to_admission_s": {c: round(mean(v), 2) for c, v in tta.items()},
        "p50_time_to_admission_s": {c: round(statistics.median(v), 2) if v else None for c, v in tta.items()},
        "max_time_to_admission_s": {c: round(max(v), 2) if v else None for c, v in tta.items()},
        "engine_avg_time_to_admission_s": {c: round(mean(engine_tta[c]), 2) for c in BY_NAME},
        "admissions": dict(admissions),
        "preemptions": dict(preempted),
        "runner": {
            "admissions_seen": sum(len(v) for v in run.seen.values()),
            "found_preempted_at_finish": run.not_admitted_at_finish,
            "errors": run.errors[:20],
            "finished_while_not_admitted": len(unadmitted),
            "evicted_after_finished": len(evicted_after_finish),
            "visibility_lag_s": sampled["visibility_lag_s"],
        },
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
            "worker_max_cached_workflows": args.cache or 1000,
            "history_sample": sampled["sample"],
            "cluster_queue_tasks": queue_tasks,
            "cluster_queue_task_time_share_of_wall": round(sum(q["total_s"] for q in queue_tasks.values()) / wall, 2),
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
    print(f"shape: {args.cqs} standalone ClusterQueues (no cohorts: borrowing is not built), quota {QUOTA} cpu each, "
          f"preemption within the ClusterQueue {args.preemption}, per ClusterQueue {counts}")
    print(f"wall {wall:.1f} s for {len(run.finished)} workloads: {rate:.2f} workloads/s "
          f"(the shape's own floor: {ideal:.0f} s; Kueue CI: 15,000 in 351 s, {KUEUE['workloads_per_s']}/s)")
    print(f"bare Temporal: {bare_before:.1f} wf/s before, {bare_after:.1f} after; ratio {rate / bare_mean:.3f}")
    print("usage per ClusterQueue (time-weighted reserved cpu / 20): "
          + ", ".join(f"{cq} {u * 100:.1f} %" for cq, u in usage.items())
          + f"; mean {out['usage']['mean_pct']} % (Kueue CI: >= 50 %)")
    print(f"  of which workload runtime: {out['usage']['runtime_share_pct']} %; from seen admitted until the finish was "
          f"sent: {out['usage']['ran_mean_pct']} %")
    print("average time to admission (submitted -> last admission the runner saw):")
    for c in CLASSES:
        print(f"  {c.name:6} {out['avg_time_to_admission_s'][c.name]:7.2f} s  (Kueue CI: {KUEUE['avg_time_to_admission_s'][c.name]} s; "
              f"the engine's own creationTimestamp -> last Admitted event, 1 s resolution: "
              f"{out['engine_avg_time_to_admission_s'][c.name]:.2f} s)")
    print(f"admissions {dict(admissions)}, preemptions {dict(preempted)}; runner: {out['runner']}")
    print(f"limits: {out['limits']}")
    write_json(json_path, out)
    plot(run, out, start, png_path)
    print(f"wrote {json_path} and {png_path}")


if __name__ == "__main__":
    asyncio.run(main())
