"""A deep queue: N workloads (default 10,000) through one ClusterQueue with quota for 100.

The workloads are submitted 50 at a time as fast as the engine takes them; a runner (admitflow's
runner contract, named by the LocalQueue) hears of each admission, runs the workload for
`--runtime` seconds (default 0) and returns its finish from `start_workload`, so that the queue admits the next while
the rest are still being submitted, as a cluster would. Prints the submission rate, the time until
the last workload finished, the longest gap between two admissions (a stalled queue shows there),
the longest workflow task of the ClusterQueue (one scheduling pass and the messages it handled),
the largest continue-as-new payload it carried (as stored, after the codec), the most workloads
pending at once, and the peak memory of this process (worker and client). The worker and the dev
server's CPU per workload, and their share of the wall, are measured over the workloads' phase,
against `--bare` bare workflows of one activity (`bench/bare_workflow.py`) run before and after in
the same process: the ratio of the two rates says how far the engine is from bare Temporal on the
same machine at that moment. Runs on the embedded dev server with a file database, with the worker
set up as `admitflow dev` sets it up (`bench/harness.py`'s `engine`).

    .venv/bin/python bench/queue_depth.py [--n 10000] [--quota 100] [--runtime 0] [--minutes 10] [--cache N] [--workflow-tasks N] [--pollers N] [--bare 500] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from statistics import mean
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from temporalio import activity  # noqa: E402
from temporalio.api.enums.v1 import EventType  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.service import RPCError  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from admitflow import contract, ids  # noqa: E402
from admitflow.api import LoadedManifest, parse_manifest  # noqa: E402
from admitflow.api.workload import RUNNER_ANNOTATION  # noqa: E402
from admitflow.messages import StopWorkload  # noqa: E402
from admitflow.admission.protocol import FinishRequest, StartWorkload
from admitflow.client import AdmitflowError  # noqa: E402
from bench.admission_throughput import bounded  # noqa: E402
from bench.harness import CpuMeter, bare_rate, engine, peak_rss_mib, revision  # noqa: E402
from admitflow.worker.main import sdk_options  # noqa: E402
from tests.builders import cluster_queue_manifest, configuration_manifest, flavor_manifest, local_queue_manifest, workload_manifest  # noqa: E402


RUNNER = "depth-runner"  # the runner's task queue, named by the LocalQueue


def pure_pass_ms(n: int, quota: int) -> dict:
    """The scheduling pass alone, outside any workflow, on a queue of n pending (worst case: every
    workload a different shape, so no equivalence shortcut): the first pass, and the pass after one
    release, which is what each finished workload triggers."""
    from datetime import UTC, datetime, timedelta

    from admitflow.admission import cluster_queue as cq
    from admitflow.admission import scheduler
    from admitflow.admission.cluster_queue import ClusterQueueState, ClusterQueueView, LocalQueueInfo
    from admitflow.admission.pending_queue import QueueEntry
    from admitflow.admission.requests import PodSetRequest

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    st = ClusterQueueState(name="cq")
    spec = parse_manifest(cluster_queue_manifest(quotas={"default": {"cpu": str(quota)}}))[0].spec
    flavor = parse_manifest(flavor_manifest())[0].spec
    view = ClusterQueueView(name="cq", revision=1, spec=spec, flavors={"default": flavor}, local_queues={"default/lq": LocalQueueInfo()})
    cq.set_view(st, view, t0)
    for i in range(n):
        cq.enqueue(st, QueueEntry(key=f"default/w{i}", uid=f"u{i}", ticket=1, local_queue="lq", priority=i % 5,
                                  timestamp=t0 + timedelta(seconds=i), pod_sets=[PodSetRequest(name="main", count=1, per_pod={"cpu": 1000 + i})]))
    t = time.perf_counter()
    scheduler.schedule([st], t0)
    first = time.perf_counter() - t
    held = next(iter(st.reservations.values()))
    cq.release(st, held.key, held.uid, held.ticket)
    t = time.perf_counter()
    scheduler.schedule([st], t0)
    return {"pure_first_pass_ms": round(first * 1000), "pure_pass_after_release_ms": round((time.perf_counter() - t) * 1000)}


async def queue_history_figures(client: Client, workflow_id: str) -> dict:
    """Longest workflow task and largest continue-as-new input, over every run of the queue."""
    longest, largest, runs = 0.0, 0, 0
    async for wf in client.list_workflows(f"WorkflowId = '{workflow_id}'"):
        runs += 1
        history = await client.get_workflow_handle(workflow_id, run_id=wf.run_id).fetch_history()
        started = None
        for e in history.events:
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                started = e.event_time.ToDatetime()
            elif e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and started is not None:
                longest = max(longest, (e.event_time.ToDatetime() - started).total_seconds())
            elif e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                largest = max(largest, e.workflow_execution_continued_as_new_event_attributes.input.ByteSize())
    return {"runs": runs, "longest_task_s": round(longest, 3), "largest_can_payload_kib": round(largest / 1024, 1)}


class Runner:
    """Runs each admitted workload for `runtime` seconds and returns its finish (docs/runners.md)."""

    def __init__(self, client: Client, runtime: float) -> None:
        self.client = client
        self.runtime = runtime
        self.admitted: list[float] = []  # when each admission was told, in order
        self.finished: dict[str, float] = {}

    @activity.defn(name=contract.START_WORKLOAD)
    async def start_workload(self, request: StartWorkload) -> FinishRequest:
        self.admitted.append(time.monotonic())
        await asyncio.sleep(self.runtime)
        self.finished[request.workflow_id] = time.monotonic()
        return FinishRequest(succeeded=True, message="done")

    @activity.defn(name=contract.STOP_WORKLOAD)
    async def stop_workload(self, request: StopWorkload) -> None:
        pass  # nothing preempts here


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--quota", type=int, default=100)
    p.add_argument("--runtime", type=float, default=0.0, help="seconds each admitted workload runs before its finish")
    p.add_argument("--minutes", type=float, default=10.0, help="give up after this long")
    p.add_argument("--cache", type=int, help="the engine worker's max_cached_workflows (default: the SDK's, 1000)")
    p.add_argument("--workflow-tasks", type=int, help="the engine worker's max_concurrent_workflow_tasks (default: the SDK's, 100)")
    p.add_argument("--pollers", type=int, help="the engine worker's workflow and activity task pollers, each, as a simple maximum (default: the SDK's 5, as admitflow worker's)")
    p.add_argument("--bare", type=int, default=500, help="bare workflows measured before and after")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    n, deadline = args.n, time.monotonic() + args.minutes * 60
    out: dict = {"n": n, "quota": args.quota, "runtime_s": args.runtime, "worker_max_cached_workflows": args.cache or 1000,
                 "worker_max_concurrent_workflow_tasks": args.workflow_tasks or 100, "worker_task_pollers": args.pollers or 5,
                 "revision": revision(), **pure_pass_ms(n, args.quota)}
    print(f"pure scheduling pass at {n} pending: {out}", flush=True)

    settings = {"max_cached_workflows": args.cache, "max_concurrent_workflow_tasks": args.workflow_tasks,
                "workflow_task_pollers": args.pollers, "activity_task_pollers": args.pollers}
    async with engine(**sdk_options(**{k: v for k, v in settings.items() if v})) as e:
        client, af = e.client, e.admitflow
        bare_cpu = [CpuMeter(e.server), CpuMeter(e.server)]
        bare_before = await bare_rate(client, args.bare, "before", bare_cpu[0])
        print(f"bare Temporal before: {bare_before:.1f} wf/s", flush=True)
        runner = Runner(client, args.runtime)
        async with Worker(
            client, task_queue=RUNNER, activities=[runner.start_workload, runner.stop_workload], max_concurrent_activities=1000
        ):
            lq = local_queue_manifest()
            lq["metadata"]["annotations"] = {RUNNER_ANNOTATION: RUNNER}
            # The runner shares this process with the worker: on a loaded machine a `start_workload`
            # has missed its 10 s heartbeat timeout before it ran (RunnerLost: one workload in each of
            # two runs on 2026-12-02), and that workload waits for its PodsReady timeout, 30 min by
            # default, well past the run. So the timeout is short, as in tests/chaos.py: such a
            # workload is evicted and admitted again, as Kueue recovers pods that never start.
            ready = {"timeout": f"{int(max(60, 3 * args.runtime + 30))}s", "requeuingStrategy": {"backoffBaseSeconds": 5}}
            docs = [configuration_manifest(**ready), flavor_manifest(), cluster_queue_manifest(quotas={"default": {"cpu": str(args.quota)}}), lq]
            await af.apply([LoadedManifest(source="bench", index=i, obj=parse_manifest(d)[0], warnings=[]) for i, d in enumerate(docs, 1)])
            workloads = [parse_manifest(workload_manifest(f"w{i:05d}", cpu="1"))[0] for i in range(n)]
            routes = await af.routes()

            pending_peak = 0

            async def watch_pending() -> None:
                nonlocal pending_peak
                while True:
                    try:
                        report = await af.cluster_queue_report("cq")
                        pending_peak = max(pending_peak, report.status.pending_workloads if report else 0)
                    except (RPCError, AdmitflowError):
                        pass  # a busy worker answers a query late
                    await asyncio.sleep(1.0)

            watching = asyncio.ensure_future(watch_pending())
            meter = CpuMeter(e.server).start()
            start = time.monotonic()
            await bounded(af.submit(w, cluster_queue=routes["default/lq"]) for w in workloads)
            out["submitted_s"] = round(time.monotonic() - start, 1)
            out["submit_per_s"] = round(n / out["submitted_s"], 1)
            print(f"submitted {n} in {out['submitted_s']} s ({out['submit_per_s']} /s)", flush=True)
            while len(runner.finished) < n and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
            meter.stop()
            wall = time.monotonic() - start
            watching.cancel()
            done = len(runner.finished)
            out["finished"] = done
            out["all_finished"] = done >= n
            out["total_s"] = round((max(runner.finished.values(), default=time.monotonic()) - start), 1)
            gaps = [b - a for a, b in zip(runner.admitted, runner.admitted[1:])]
            out["admissions"] = len(runner.admitted)
            out["longest_admission_gap_s"] = round(max(gaps, default=0.0), 2)
            out["admission_gaps_over_1s"] = sum(g > 1 for g in gaps)
            out["through_per_s"] = round(done / out["total_s"], 1) if out["total_s"] else None
            out["pending_peak"] = pending_peak
            print(f"{done} of {n} through in {out['total_s']} s; longest gap between admissions "
                  f"{out['longest_admission_gap_s']} s", flush=True)
            out.update(await queue_history_figures(client, ids.cluster_queue_id("cq")))
        bare_after = await bare_rate(client, args.bare, "after", bare_cpu[1])
        print(f"bare Temporal after: {bare_after:.1f} wf/s", flush=True)
    out["bare_per_s"] = {"before": round(bare_before, 1), "after": round(bare_after, 1)}
    if out["through_per_s"]:
        out["ratio_to_bare"] = round(out["through_per_s"] / mean((bare_before, bare_after)), 3)
    out["limits"] = {
        # Over the workloads' phase (submission to the last finish, and the pending watcher's
        # queries), divided by the workloads that finished.
        "cpu_per_workload_ms": meter.per(done or 1),
        "cpu_share_of_wall": {"python": round(meter.python_s / wall, 2), "server": round(meter.server_s / wall, 2)},
        "cpu_per_bare_workflow_ms": {k: round(mean(m.per(args.bare)[k] for m in bare_cpu), 1) for k in ("python_ms", "server_ms")},
    }
    out["peak_rss_mib"] = peak_rss_mib()
    print(json.dumps(out))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
