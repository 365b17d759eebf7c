"""Recovery from a killed engine worker: from `kill -9` to the next admission, against the gap
between admissions when nothing is killed, in the same run.

A steady flow of workloads through one ClusterQueue with one AdmissionCheck: the engine worker runs
in its own process (`admitflow worker`, as production runs it); the check's controller (it answers
`Ready` at once) and a runner run in the benchmark's process. The runner is told of each admission
by the engine (activity `start_workload`), records it at the time the server scheduled that
activity (the workflow task that admitted the workload), finishes the workload after `--runtime`
and submits a new one, so that `--backlog` workloads always wait behind the quota.

First `--baseline-s` seconds without a fault: the gaps between consecutive admissions. Then
`--kills` times: after a random pause (`--pause`, uniform), the engine worker gets SIGKILL and a new
one is started at once; the time from the kill to the next admission, and from the new worker's
start to it, are recorded, with what was in flight at the kill (the ClusterQueue's pending
activities, as the server saw them) and the workflow-task and activity timeouts the histories
recorded on the way back.

`--moment delivery` waits, after each pause, until the ClusterQueue's signal delivery
(`deliver_signals`) is running on the worker, freezing the worker (SIGSTOP) to look, and kills it
then: the case where the queue holds quota for workloads it has not told yet. `--signal TERM`
stops the worker as `docker stop` does instead, and starts the new one once it has gone.

    .venv/bin/python bench/recovery.py [--kills 12] [--baseline-s 30] [--moment random|delivery] [--out PATH]
    .venv/bin/python bench/recovery.py --kills 2 --baseline-s 5 --out /tmp/smoke.json   # smoke: about a minute
"""

from __future__ import annotations

import argparse
import asyncio
import random
import signal
import sys
import tempfile
import time
from datetime import UTC
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from temporalio.api.enums.v1 import EventType, PendingWorkflowTaskState, TaskQueueKind, TaskQueueType, TimeoutType  # noqa: E402
from temporalio.api.taskqueue.v1 import TaskQueue  # noqa: E402
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest  # noqa: E402
from temporalio.client import Client  # noqa: E402

from admitflow import ids  # noqa: E402
from admitflow.client import AdmitflowClient  # noqa: E402
from admitflow.codec import DATA_CONVERTER  # noqa: E402
from admitflow.devserver import DevServer  # noqa: E402
from bench.harness import machine, percentile, result_paths, revision, write_json  # noqa: E402
from tests.conftest import free_port  # noqa: E402
from tests.integration.test_faults import TASK_QUEUE, engine_worker  # noqa: E402
from tests.integration.test_worker_kill_recovery import (  # noqa: E402
    CHECK,
    QUEUE_ID,
    Flow,
    catalog,
    controller,
    kill_during_delivery,
    queue_activities,
    queue_admits_after,
)


async def in_flight(client: Client) -> dict[str, Any]:
    """What the ClusterQueue had running, as the server saw it: its activities and workflow task."""
    d = (await client.get_workflow_handle(QUEUE_ID).describe()).raw_description
    task = d.pending_workflow_task.state if d.HasField("pending_workflow_task") else 0
    return {
        "activities": [f"{kind} {state.removeprefix('PENDING_ACTIVITY_STATE_')}" for kind, state in await queue_activities(client)],
        "workflow_task": PendingWorkflowTaskState.Name(task).removeprefix("PENDING_WORKFLOW_TASK_STATE_"),
    }


async def polling_since(client: Client, pid: int, timeout: float = 60) -> float:
    """When the worker with this pid first polled the engine's workflow task queue (epoch s)."""
    identity = f"{pid}@"
    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=TASK_QUEUE, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = await client.workflow_service.describe_task_queue(request)
        if any(p.identity.startswith(identity) for p in response.pollers):
            return time.time()
        await asyncio.sleep(0.05)
    return float("nan")


async def timeouts_between(client: Client, workflow_id: str, start: float, end: float) -> list[str]:
    """Workflow-task and activity timeouts in a workflow's history between two times (epoch s)."""
    found = []
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        at = event.event_time.ToDatetime(tzinfo=UTC).timestamp()
        if not start <= at <= end:
            continue
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
            kind = event.workflow_task_timed_out_event_attributes.timeout_type
            found.append(f"workflow task {_timeout_name(kind)} after {at - start:.1f} s")
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
            failure = event.activity_task_timed_out_event_attributes.failure
            kind = failure.timeout_failure_info.timeout_type
            found.append(f"activity {_timeout_name(kind)} after {at - start:.1f} s")
    return found


def _timeout_name(kind: int) -> str:
    return TimeoutType.Name(kind).removeprefix("TIMEOUT_TYPE_").lower()


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50_s": round(percentile(values, 50), 2),
        "max_s": round(max(values), 2) if values else float("nan"),
        "min_s": round(min(values), 2) if values else float("nan"),
    }


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kills", type=int, default=12)
    p.add_argument("--baseline-s", type=float, default=30, help="seconds of the run without a fault")
    p.add_argument("--pause", type=float, nargs=2, default=(3.0, 8.0), metavar=("MIN", "MAX"),
                   help="seconds of steady flow after a recovery before the next kill (uniform)")
    p.add_argument("--moment", choices=("random", "delivery"), default="random",
                   help="kill at the end of the pause, or once the queue's delivery runs after it")
    p.add_argument("--signal", choices=("KILL", "TERM"), default="KILL",
                   help="KILL: the worker dies at once (kill -9); TERM: it stops as `docker stop` asks it to "
                        "(finishes its activities, tells the server it is going); the new one starts when it has gone")
    p.add_argument("--quota", type=int, default=8, help="cpu of the ClusterQueue (workloads hold 1 each)")
    p.add_argument("--backlog", type=int, default=16, help="workloads waiting behind the quota")
    p.add_argument("--runtime", type=float, default=0.5, help="seconds an admitted workload runs")
    p.add_argument("--seed", type=int, default=20261124)
    p.add_argument("--out", type=Path, help="JSON path; default bench/results/recovery-<date>.json")
    args = p.parse_args()
    json_path, _ = result_paths("recovery", args.out)
    rng = random.Random(args.seed)

    rev, before = revision(), machine()
    logs = Path(tempfile.mkdtemp(prefix="admitflow-recovery-"))
    server = DevServer(port=free_port(), db=logs / "temporal.db", headless=True)
    await server.start()
    worker = engine_worker(server)
    kills: list[dict[str, Any]] = []
    try:
        client = await Client.connect(server.address, data_converter=DATA_CONVERTER)
        af = AdmitflowClient(client, TASK_QUEUE)
        flow = Flow(af, args.runtime)
        async with controller().worker(client), flow.worker(client):
            await af.apply(catalog(args.quota))
            await af.set_admission_check_active(CHECK)
            await flow.submit(args.quota + args.backlog)
            # Warm up: every workflow type has run and the flow is steady.
            admitted = 0.0
            for _ in range(3 * args.quota):
                admitted = await flow.next_admission_after(admitted, 120)
            base_start = time.time()
            await asyncio.sleep(args.baseline_s)
            base_end = time.time()
            inside = sorted(a for a in flow.admissions if base_start <= a <= base_end)
            gaps = [b - a for a, b in zip(inside, inside[1:])]
            print(f"baseline: {len(inside)} admissions in {args.baseline_s:.0f} s, gap p50 "
                  f"{percentile(gaps, 50):.2f} s, max {max(gaps):.2f} s", flush=True)

            for i in range(args.kills):
                await asyncio.sleep(rng.uniform(*args.pause))
                if args.moment == "delivery" and args.signal == "KILL":
                    killed = await kill_during_delivery(client, worker, time.monotonic() + 120)
                else:
                    worker.send_signal(getattr(signal, f"SIG{args.signal}"))
                    killed = time.time()
                    await asyncio.get_running_loop().run_in_executor(None, worker.wait, 30)
                running = await in_flight(client)  # the new worker cannot have polled yet
                worker = engine_worker(server)
                started = time.time()
                polling = await polling_since(client, worker.pid)
                admitted = await flow.next_admission_after(killed, 600)
                resumed, key = await queue_admits_after(client, flow, killed, 600)
                seen = await timeouts_between(client, QUEUE_ID, killed, resumed)
                seen += await timeouts_between(client, ids.workload_id(key), killed, resumed)
                kills.append({
                    "kill_to_admission_s": round(admitted - killed, 2),
                    "start_to_admission_s": round(admitted - started, 2),
                    "kill_to_queue_admission_s": round(resumed - killed, 2),
                    "start_to_queue_admission_s": round(resumed - started, 2),
                    "start_to_polling_s": round(polling - started, 2),
                    "queue_at_kill": running,
                    "next_admitted": flow.admissions[admitted],
                    "first_told_after_the_kill": key,
                    "timeouts_on_the_way": seen,
                })
                print(f"kill {i + 1}/{args.kills}: next admission {admitted - killed:.2f} s after the kill "
                      f"({admitted - started:.2f} s after the new worker's start, which polled after "
                      f"{polling - started:.2f} s); the queue admits again {resumed - killed:.2f} s after the kill; "
                      f"queue at the kill: {running}; {'; '.join(seen) or 'no timeout'}", flush=True)
            flow.stop()
    finally:
        worker.kill()
        worker.wait(10)
        server.stop()
        for db in logs.glob("temporal.db*"):
            db.unlink()

    figures = {
        "kill_to_admission": [k["kill_to_admission_s"] for k in kills],
        "start_to_admission": [k["start_to_admission_s"] for k in kills],
        "kill_to_queue_admission": [k["kill_to_queue_admission_s"] for k in kills],
        "start_to_queue_admission": [k["start_to_queue_admission_s"] for k in kills],
        "start_to_polling": [k["start_to_polling_s"] for k in kills],
    }
    out = {
        "benchmark": "recovery",
        "command": " ".join(["bench/recovery.py", *sys.argv[1:]]),
        "args": {k: v for k, v in vars(args).items() if k != "out"},
        "revision": rev,
        "machine_before": before,
        "machine_after": machine(),
        "baseline_gap": _stats(gaps),
        **{name: _stats(values) for name, values in figures.items()},
        "ratios": {
            f"{name}/baseline_gap": {
                "p50": round(percentile(figures[name], 50) / percentile(gaps, 50), 1),
                "max": round(max(figures[name]) / max(gaps), 1),
            }
            for name in ("kill_to_admission", "kill_to_queue_admission")
        },
        "kills": kills,
        "worker_logs": str(logs),
    }
    print()
    print(f"{'':26} {'p50 s':>8} {'max s':>8} {'n':>4}")
    for name in ("baseline_gap", *figures):
        f = out[name]
        print(f"{name:26} {f['p50_s']:8.2f} {f['max_s']:8.2f} {f['n']:4d}")
    for name, r in out["ratios"].items():
        print(f"ratio {name}: p50 {r['p50']}, max {r['max']}")
    write_json(json_path, out)
    print(f"wrote {json_path}")


if __name__ == "__main__":
    asyncio.run(main())
