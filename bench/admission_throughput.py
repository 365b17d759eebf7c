"""Admission throughput against bare Temporal, on the same dev server in the same run.

N workloads without admission checks go through one ClusterQueue with room for all of them; the
baseline is N bare workflows that each run one activity. Both rates are measured from the first
start until the last workload holds its reservation (or the last bare workflow completes), and the
ratio is printed: the machine is shared and noisy, so only the ratio is meaningful.

    .venv/bin/python bench/admission_throughput.py [--n 500] [--rounds 1] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admitflow.api import parse_manifest  # noqa: E402
from admitflow.client import AdmitflowClient  # noqa: E402
from bench.harness import bare_rate, bounded, engine, loaded  # noqa: E402, F401 (bounded: queue_depth imports it from here)
from tests.builders import (  # noqa: E402
    cluster_queue_manifest,
    flavor_manifest,
    local_queue_manifest,
    workload_manifest,
)


async def admission_rate(af: AdmitflowClient, n: int, tag: str) -> float:
    cq = f"cq-{tag}"
    docs = [flavor_manifest(), cluster_queue_manifest(cq, quotas={"default": {"cpu": str(n)}}), local_queue_manifest(f"lq-{tag}", cq)]
    await af.apply(loaded(docs))
    workloads = [parse_manifest(workload_manifest(f"w-{tag}-{i}", cpu="1", queue=f"lq-{tag}"))[0] for i in range(n)]
    start = time.monotonic()
    routes = await af.routes()  # what `admitflow apply` looks up once per invocation
    await bounded(af.submit(w, cluster_queue=routes.get(f"default/lq-{tag}")) for w in workloads)
    # The queue's own query first (served by the worker, no database scan), then visibility: it
    # counts the workloads whose own status says Admitted, which is what is measured.
    while (await af.cluster_queue_report(cq)).status.reserving_workloads < n:
        await asyncio.sleep(0.1)
    query = f"WorkflowType = 'WorkloadWorkflow' AND AdmitflowPhase = 'Admitted' AND AdmitflowClusterQueue = '{cq}'"
    while (await af.client.count_workflows(query)).count < n:
        await asyncio.sleep(0.1)
    rate = n / (time.monotonic() - start)
    # Not timed: finish them, so that every round starts from the same state.
    await bounded(af.finish(w.key) for w in workloads)
    running = f"WorkflowType = 'WorkloadWorkflow' AND ExecutionStatus = 'Running' AND AdmitflowClusterQueue = '{cq}'"
    while (await af.client.count_workflows(running)).count:
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.0)
    return rate


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=500)
    p.add_argument("--rounds", type=int, default=1, help="alternate baseline and admitflow this many times")
    p.add_argument("--json", type=Path, help="write the figures here")
    args = p.parse_args()

    results = []
    async with engine() as e:
        client, af = e.client, e.admitflow
        for r in range(args.rounds):
            # Alternate which goes first: the database grows as the run goes on.
            if r % 2 == 0:
                bare = await bare_rate(client, args.n, f"r{r}")
                ours = await admission_rate(af, args.n, f"r{r}")
            else:
                ours = await admission_rate(af, args.n, f"r{r}")
                bare = await bare_rate(client, args.n, f"r{r}")
            results.append({"bare_per_s": round(bare, 1), "admitflow_per_s": round(ours, 1), "ratio": round(ours / bare, 2)})
            print(f"round {r + 1}: bare {bare:.1f} wf/s, admitflow {ours:.1f} workloads/s, ratio {ours / bare:.2f}", flush=True)
    summary = {"n": args.n, "rounds": results, "median_ratio": round(statistics.median(x["ratio"] for x in results), 2)}
    print(json.dumps(summary))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
