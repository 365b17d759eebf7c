"""One hot ClusterQueue: admissions per second with N workloads pending and quota for all of them,
against the whole engine's admission rate in the same run.

N workloads of 1 cpu are submitted to a ClusterQueue of N cpu held by `stopPolicy: Hold`, so they
all wait in its queue. Once the queue reports all N pending, the hold is lifted (`stopPolicy:
None`) and the time until visibility counts all N `Admitted` gives the hot queue's rate: one
entity admits them all. The whole engine's rate is `admission_throughput.admission_rate` in the
same process just before (M workloads into a fresh queue with room for all, from the first
submission until the last is admitted). The ratio is printed, with the longest gap between two
admissions while the queue drained, the ClusterQueue's longest workflow task and largest
continue-as-new input (from its histories), and the worker process's peak memory (its resident set,
with the N workloads pending and then admitted). With `--trace-memory`, Python's allocations are traced
from the first submission, and the largest holders by source line, when all N are pending, are
printed (tracing slows the run: use a smaller N).

    .venv/bin/python bench/hot_queue.py [--n 10000] [--engine-n 500] [--trace-memory] [--out PATH.json]

Writes `bench/results/hot_queue-<date>.json` and `.png` (the drain), or beside `--out`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admitflow import ids  # noqa: E402
from admitflow.api import parse_manifest  # noqa: E402
from admitflow.client import NotAnswering  # noqa: E402
from bench.admission_throughput import admission_rate  # noqa: E402
from bench.harness import bounded, engine, loaded, machine, peak_rss_mib, result_paths, revision, save_figure, write_json  # noqa: E402
from bench.queue_depth import queue_history_figures  # noqa: E402
from tests.builders import cluster_queue_manifest, flavor_manifest, local_queue_manifest, workload_manifest  # noqa: E402

CQ, LQ = "hot", "lq-hot"


async def pending(af) -> int:
    """The hot queue's pending count; 0 while its workflow is too busy to answer in time (10 s)."""
    try:
        return (await af.cluster_queue_report(CQ)).status.pending_workloads
    except NotAnswering:
        return 0


def top_holders(snapshot: tracemalloc.Snapshot, limit: int = 12) -> list[dict]:
    stats = snapshot.statistics("lineno")
    total = sum(s.size for s in stats)
    out = [{"total_mib": round(total / 2**20, 1)}]
    for s in stats[:limit]:
        frame = s.traceback[0]
        out.append({"where": f"{frame.filename.split('site-packages/')[-1].split('/work/main/')[-1]}:{frame.lineno}",
                    "mib": round(s.size / 2**20, 1), "blocks": s.count})
    return out


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10_000, help="workloads pending in the hot queue (default 10,000)")
    p.add_argument("--engine-n", type=int, default=500, help="workloads of the whole engine's rate (default 500)")
    p.add_argument("--trace-memory", action="store_true", help="trace Python's allocations and print their largest holders")
    p.add_argument("--out", type=Path, help="the JSON's path (the plot goes beside it); default bench/results/hot_queue-<date>.json")
    args = p.parse_args()
    n = args.n

    async with engine() as e:
        af, client = e.admitflow, e.client
        engine_rate = await admission_rate(af, args.engine_n, "engine")
        print(f"the whole engine: {engine_rate:.1f} workloads/s (submitted and admitted, {args.engine_n} workloads)", flush=True)

        def queue(stop: str) -> list:
            return loaded([flavor_manifest(), cluster_queue_manifest(CQ, quotas={"default": {"cpu": str(n)}}, stopPolicy=stop),
                           local_queue_manifest(LQ, CQ)])

        await af.apply(queue("Hold"))
        workloads = [parse_manifest(workload_manifest(f"h-{i}", cpu="1", queue=LQ))[0] for i in range(n)]
        if args.trace_memory:
            tracemalloc.start()
        start = time.monotonic()
        routes = await af.routes()
        await bounded(af.submit(w, cluster_queue=routes.get(f"default/{LQ}")) for w in workloads)
        submitted = time.monotonic() - start
        while await pending(af) < n:
            await asyncio.sleep(0.5)
        pending_after = time.monotonic() - start
        rss_pending = peak_rss_mib()
        holders = None
        if args.trace_memory:
            holders = top_holders(tracemalloc.take_snapshot())
            tracemalloc.stop()
        print(f"{n} submitted in {submitted:.1f} s, all pending after {pending_after:.1f} s; peak RSS {rss_pending} MiB", flush=True)

        await af.apply(queue("None"))
        released = time.monotonic()
        query = f"WorkflowType = 'WorkloadWorkflow' AND AdmitflowPhase = 'Admitted' AND AdmitflowClusterQueue = '{CQ}'"
        progress: list[tuple[float, int]] = [(0.0, 0)]
        while progress[-1][1] < n:
            await asyncio.sleep(0.5)
            progress.append((round(time.monotonic() - released, 2), (await client.count_workflows(query)).count))
        drain = progress[-1][0]
        hot_rate = n / drain
        # The longest stretch in which the count of admitted workloads did not move.
        gap, since = 0.0, 0.0
        for (t0, c0), (t1, c1) in zip(progress, progress[1:]):
            if c1 > c0:
                gap = max(gap, t1 - since)
                since = t1
        first = next(t for t, c in progress if c > 0)
        queue_figures = await queue_history_figures(client, ids.cluster_queue_id(CQ))

    ratio = hot_rate / engine_rate
    out = {
        "benchmark": "hot_queue",
        "command": " ".join(["bench/hot_queue.py", *sys.argv[1:]]),
        "n": n,
        "engine_n": args.engine_n,
        "engine_rate_per_s": round(engine_rate, 1),
        "submitted_s": round(submitted, 1),
        "all_pending_s": round(pending_after, 1),
        "first_admitted_after_release_s": first,
        "drain_s": round(drain, 1),
        "hot_queue_rate_per_s": round(hot_rate, 1),
        "ratio_to_engine": round(ratio, 2),
        "longest_admission_gap_s": round(gap, 1),
        "cluster_queue": queue_figures,
        "peak_rss_mib": {"all_pending": rss_pending, "end": peak_rss_mib()},
        "memory_holders_at_all_pending": holders,
        "progress": progress,
        "machine": machine(),
        "revision": revision(),
    }
    print(f"hot queue: {n} admitted in {drain:.1f} s after the hold was lifted (first after {first} s): "
          f"{hot_rate:.1f} admissions/s, {ratio:.2f} of the whole engine's {engine_rate:.1f}/s; "
          f"longest gap between admissions {gap:.1f} s; the ClusterQueue's longest workflow task {queue_figures['longest_task_s']} s "
          f"(its largest continue-as-new input {queue_figures['largest_can_payload_kib']} KiB); "
          f"peak RSS {rss_pending} MiB pending, {peak_rss_mib()} MiB at the end")
    if holders:
        print("largest Python allocations with all pending:", json.dumps(holders, indent=1))
    json_path, png_path = result_paths("hot_queue", args.out)
    write_json(json_path, out)
    plot(progress, n, png_path)
    print(f"wrote {json_path} and {png_path}")


def plot(progress: list[tuple[float, int]], n: int, path: Path) -> None:
    """Workloads admitted against seconds since the hold was lifted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot([t for t, _ in progress], [c for _, c in progress])
    ax.set(xlabel="seconds since the hold was lifted", ylabel="workloads Admitted (visibility)",
           title=f"One ClusterQueue draining {n:,} pending workloads")
    ax.grid(alpha=0.3)
    save_figure(fig, path)


if __name__ == "__main__":
    asyncio.run(main())
