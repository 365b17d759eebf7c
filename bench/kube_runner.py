"""The Kubernetes runner (activities/jobs/kube_runner.py) with N batch/v1 Jobs in flight, end to
end: the engine on a fresh dev server, the runner, and the fake API server (tests/k8s_fake.py) in
this process, whose stand-in Job controller makes each resumed Job's pod ready at once and
completes it `--run-seconds` later. All N Jobs are created at once (suspended, one pod of 1 CPU
each, a ClusterQueue with room for all); each goes from the runner's watch to its Workload, its
admission, its resume, its pods ready and its end.

Measured: the time from the first create to the last Workload Finished (and to the last admitted);
the requests each Job cost the API server (its reads, patches and Events; the shared list and
watch counted apart); the watch connections open at once (most); the runs (`start_workload`
activities) under way at once (most); this process's threads beyond those it had before (the
fake's and the engine's workflow threads left out); the CPU time of this process (engine, runner
and fake together) and of the dev server.

    .venv/bin/python bench/kube_runner.py [--n 500] [--run-seconds 5] [--out PATH]

Prints the figures; the JSON goes to bench/results/kube_runner-<n>-<date>.json, or to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml  # noqa: E402
from kubernetes.aio import client as kubernetes_client  # noqa: E402

from bench.harness import ROOT, cpu_seconds, engine, loaded, machine, result_paths, revision, write_json  # noqa: E402

from admitflow import contract  # noqa: E402
from admitflow.activities.jobs.kube_runner import KubeRunner  # noqa: E402
from admitflow.activities.jobs.kubernetes import KubernetesJobs  # noqa: E402
from tests.k8s_fake import FakeApiServer  # noqa: E402

PUBLISHED = ROOT / "tests" / "data" / "kueue-examples" / "published"
V1BETA2 = "kueue.x-k8s.io/v1beta2"
TASK_QUEUE = "kube"


def setup(n: int) -> list[dict[str, Any]]:
    return [
        {"apiVersion": V1BETA2, "kind": "ResourceFlavor", "metadata": {"name": "on-demand"}, "spec": {"nodeLabels": {"instance-type": "on-demand"}}},
        {"apiVersion": V1BETA2, "kind": "ClusterQueue", "metadata": {"name": "cluster-queue"}, "spec": {
            "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{"name": "on-demand", "resources": [
                {"name": "cpu", "nominalQuota": n}, {"name": "memory", "nominalQuota": f"{n}Gi"}]}]}]}},
        {"apiVersion": V1BETA2, "kind": "LocalQueue", "metadata": {"namespace": "default", "name": "user-queue"},
         "spec": {"clusterQueue": "cluster-queue"}},
    ]


def job() -> dict[str, Any]:
    doc = yaml.safe_load((PUBLISHED / "sample-job.yaml").read_text())
    doc["spec"].update(suspend=True, parallelism=1, completions=1)
    doc["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1", "memory": "200Mi"}}
    return doc


def own_threads() -> int:
    return sum(1 for t in threading.enumerate() if not t.name.startswith(("fake-apiserver", "temporal_workflow")))


def per_job(fake: FakeApiServer, names: set[str]) -> tuple[Counter, int]:
    """Requests per Job (but the bench's own creates), and the requests of no one Job (list, watch)."""
    counts: Counter = Counter(dict.fromkeys(names, 0))
    shared = 0
    for r in fake.calls():
        if r.method == "POST" and r.path.endswith("/jobs"):
            continue
        if r.path.endswith("/events"):
            name = (r.body or {}).get("regarding", {}).get("name")
        else:
            name = r.path.split("/jobs/")[1].split("/")[0] if "/jobs/" in r.path else None
        if name in counts:
            counts[name] += 1
        else:
            shared += 1
    return counts, shared


async def count(client, query: str) -> int:
    return (await client.count_workflows(query)).count


async def measure(n: int, run_seconds: float) -> dict[str, Any]:
    async with engine() as e:
        af = e.admitflow
        await af.apply(loaded(setup(n)))
        fake = FakeApiServer(job_run_seconds=run_seconds).start()
        jobs = KubernetesJobs(kubernetes_client.Configuration(host=fake.url))
        try:
            async with KubeRunner(af, jobs, TASK_QUEUE) as runner:
                threads = own_threads()
                cpu0 = cpu_seconds(e.server)
                started = time.monotonic()
                names = {fake.create_job(job())["metadata"]["name"] for _ in range(n)}
                created = time.monotonic() - started
                most_runs = most_threads = 0
                admitted_at = None
                workloads = f"WorkflowType = '{contract.WORKLOAD_WORKFLOW}'"
                while True:
                    most_runs = max(most_runs, len(runner.runs))
                    most_threads = max(most_threads, own_threads())
                    if admitted_at is None and len(fake.events("Started")) >= n:
                        admitted_at = time.monotonic() - started
                    if await count(e.client, f"{workloads} AND ExecutionStatus = 'Completed'") >= n:
                        break
                    await asyncio.sleep(0.5)
                took = time.monotonic() - started
                cpu1 = cpu_seconds(e.server)
                finished = await count(e.client, f"{workloads} AND AdmitflowPhase = 'Finished'")
            counts, shared = per_job(fake, names)
            return {
                "jobs": n,
                "run_seconds": run_seconds,
                "create_seconds": round(created, 2),
                "all_started_seconds": round(admitted_at, 2) if admitted_at is not None else None,
                "all_finished_seconds": round(took, 2),
                "finished": finished,
                "requests_per_job": {str(k): v for k, v in sorted(Counter(counts.values()).items())},
                "requests_per_job_max": max(counts.values()),
                "requests_shared": shared,
                "peak_watches": fake.peak_watches,
                "watch_requests": len(fake.watches()),
                "peak_runs": most_runs,
                "threads_before": threads,
                "threads_most": most_threads,
                "refused": len(fake.refused()),
                "cpu_seconds_this_process": round(cpu1[0] - cpu0[0], 1),
                "cpu_seconds_dev_server": round(cpu1[1] - cpu0[1], 1),
            }
        finally:
            fake.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=500)
    p.add_argument("--run-seconds", type=float, default=5.0)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    figures = asyncio.run(measure(args.n, args.run_seconds))
    for key, value in figures.items():
        print(f"{key}: {value}")
    path, _ = result_paths(f"kube_runner-{args.n}", args.out)
    write_json(path, {"figures": figures, "machine": machine(), "revision": revision()})
    print(f"written to {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


if __name__ == "__main__":
    main()
