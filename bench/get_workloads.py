"""`admitflow get workloads` at depth: the list as it was read before (visibility to find the
workloads, then a describe and a `workload` query for each) against the list read from visibility
alone (admitflow/visibility.py), in the same run, on the same workloads.

N inactive workloads (`spec.active: false`: each workflow runs one task and waits, so the engine
is idle while the lists are read) in namespaces team-0 ... team-9, with a label `team`. Then, on a
client of its own whose RPCs are counted by name:

- before: `AdmitflowClient.workloads()`, what `get workloads` called for every output;
- after: `AdmitflowClient.workload_rows()`, what the table, `-o wide` and `-o name` call now;
- after, one namespace: the same with `namespace="team-3"` (kubectl's -n), a visibility filter.

Prints wall time, RPCs by method and the ratio; the JSON goes to bench/results/.

    .venv/bin/python bench/get_workloads.py [--n 10000] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from temporalio.client import Client  # noqa: E402

from admitflow.api import Workload  # noqa: E402
from admitflow.client import AdmitflowClient  # noqa: E402
from admitflow.codec import DATA_CONVERTER  # noqa: E402
from bench.harness import bounded, engine, loaded, machine, result_paths, revision, write_json  # noqa: E402
from tests.builders import cluster_queue_manifest, flavor_manifest, local_queue_manifest, workload_manifest  # noqa: E402

NAMESPACES = 10


def counted(client: Client) -> Counter:
    """Count this client's RPCs by method (ListWorkflowExecutions, QueryWorkflow, ...)."""
    calls: Counter = Counter()
    service = client.service_client
    original = service._rpc_call

    async def rpc_call(rpc, req, resp_type, **kwargs):
        calls[rpc] += 1
        return await original(rpc, req, resp_type, **kwargs)

    service._rpc_call = rpc_call  # type: ignore[method-assign]
    return calls


async def timed(calls: Counter, read) -> dict:
    calls.clear()
    start = time.monotonic()
    found = await read()
    return {"seconds": round(time.monotonic() - start, 2), "workloads": len(found), "rpcs": sum(calls.values()), "by_method": dict(calls)}


async def main(n: int, out: Path | None) -> None:
    async with engine() as e:
        queues = [local_queue_manifest(name="lq", namespace=f"team-{i}", cluster_queue="cq") for i in range(NAMESPACES)]
        await e.admitflow.apply(loaded([flavor_manifest(), cluster_queue_manifest(), *queues]))
        start = time.monotonic()

        async def submit(i: int) -> None:
            doc = workload_manifest(f"job-{i}", namespace=f"team-{i % NAMESPACES}")
            doc["metadata"]["labels"] = {"team": f"t{i % NAMESPACES}"}
            doc["spec"]["active"] = False
            await e.admitflow.submit(Workload.model_validate(doc), cluster_queue="cq")

        await bounded((submit(i) for i in range(n)), limit=50)
        submitted = time.monotonic() - start
        while (await e.client.count_workflows("WorkflowType = 'WorkloadWorkflow' AND AdmitflowPhase = 'Inactive'")).count < n:
            await asyncio.sleep(1)
        print(f"{n} workloads submitted in {submitted:.0f} s", flush=True)

        reader = await Client.connect(e.server.address, data_converter=DATA_CONVERTER)
        calls = counted(reader)
        af = AdmitflowClient(reader, "admitflow")
        before = await timed(calls, af.workloads)
        after = await timed(calls, af.workload_rows)
        one_namespace = await timed(calls, lambda: af.workload_rows(namespace="team-3"))

    result = {
        "n": n,
        "before": before,
        "after": after,
        "after_one_namespace": one_namespace,
        "wall_ratio_before_over_after": round(before["seconds"] / after["seconds"], 1),
        "rpc_ratio_before_over_after": round(before["rpcs"] / after["rpcs"], 1),
        "machine": machine(),
        "revision": revision(),
    }
    for name in ("before", "after", "after_one_namespace"):
        r = result[name]
        print(f"{name:20} {r['workloads']:6} workloads  {r['seconds']:8.2f} s  {r['rpcs']:6} RPCs  {r['by_method']}")
    print(f"before / after: {result['wall_ratio_before_over_after']}x the time, {result['rpc_ratio_before_over_after']}x the RPCs")
    path, _ = result_paths("get-workloads", out)
    write_json(path, result)
    print(f"written {path}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=10000)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    asyncio.run(main(args.n, args.out))
