"""How late a live, loaded engine worker takes its sticky workflow tasks, and whether any timeout
fired that only a dead worker should trip: the measurement behind the worker's sticky
schedule-to-start timeout and the delivery's heartbeat timeout (worker/main.py, workflows/outbox.py).

Runs `bench/kueue_baseline.py` (its arguments pass through: the heaviest load we have, 3,000
workloads on 6 ClusterQueues at Kueue's pace) and, before its dev server goes, reads every
workflow's history:

- per workflow task, from `WorkflowTaskScheduled` to `WorkflowTaskStarted`, apart for sticky and
  normal task queues (a sticky task that waits longer than the worker's
  `sticky_queue_schedule_to_start_timeout` is moved to the normal queue and replays from scratch);
- every `WorkflowTaskTimedOut` and `ActivityTaskTimedOut`, by kind (on a live worker, none);
- how long each `deliver_signals` attempt ran (its heartbeat timeout must stay well above).

    .venv/bin/python bench/sticky_waits.py [kueue_baseline arguments, e.g. --out PATH]

Writes bench/results/sticky_waits-<date>.json (kueue_baseline's own JSON goes where it says).
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from collections import Counter
from contextlib import asynccontextmanager
from datetime import UTC
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from temporalio.api.enums.v1 import EventType, TaskQueueKind, TimeoutType  # noqa: E402
from temporalio.client import Client  # noqa: E402

import bench.kueue_baseline as baseline  # noqa: E402
from admitflow import contract  # noqa: E402
from bench import harness  # noqa: E402
from bench.harness import bounded, machine, percentile, result_paths, revision, write_json  # noqa: E402


async def waits(client: Client) -> dict:
    sticky: list[float] = []
    normal: list[float] = []
    deliveries: list[float] = []
    timeouts: Counter[str] = Counter()

    def at(event) -> float:
        return event.event_time.ToDatetime(tzinfo=UTC).timestamp()

    async def one(workflow_id: str, run_id: str) -> None:
        scheduled: tuple[float, int] | None = None
        activities: dict[int, str] = {}
        started: dict[int, float] = {}
        async for e in client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history_events():
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
                scheduled = (at(e), e.workflow_task_scheduled_event_attributes.task_queue.kind)
            elif e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED and scheduled is not None:
                (sticky if scheduled[1] == TaskQueueKind.TASK_QUEUE_KIND_STICKY else normal).append(at(e) - scheduled[0])
                scheduled = None
            elif e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
                kind = TimeoutType.Name(e.workflow_task_timed_out_event_attributes.timeout_type)
                timeouts[f"workflow task {kind.removeprefix('TIMEOUT_TYPE_').lower()}"] += 1
                scheduled = None
            elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                activities[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
            elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                started[e.activity_task_started_event_attributes.scheduled_event_id] = at(e)
            elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                sid = e.activity_task_completed_event_attributes.scheduled_event_id
                if activities.get(sid) == contract.DELIVER_SIGNALS and sid in started:
                    deliveries.append(at(e) - started[sid])
            elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
                attrs = e.activity_task_timed_out_event_attributes
                kind = TimeoutType.Name(attrs.failure.timeout_failure_info.timeout_type)
                timeouts[f"{activities.get(attrs.scheduled_event_id, '?')} {kind.removeprefix('TIMEOUT_TYPE_').lower()}"] += 1

    runs = [(wf.id, wf.run_id) async for wf in client.list_workflows("")]
    await bounded((one(*r) for r in runs), 20)

    def ms(xs: list[float]) -> dict:
        return {"n": len(xs), **{f"p{q}_ms": round(percentile(xs, q) * 1000, 1) for q in (50, 99, 99.9)},
                "max_ms": round(max(xs) * 1000, 1) if xs else None}

    return {
        "runs": len(runs),
        "sticky_schedule_to_start": {**ms(sticky), **{f"over_{s}s": sum(w > s for w in sticky) for s in (3, 5, 8, 10)}},
        "normal_schedule_to_start": ms(normal),
        "deliver_signals_attempt": ms(deliveries),
        "timeouts": dict(timeouts),
    }


def main() -> None:
    measured: dict = {}
    real = harness.engine

    @asynccontextmanager
    async def engine(**options):
        async with real(**options) as e:
            yield e
            measured.update(await waits(e.client))
            print(f"sticky waits: {measured}", flush=True)

    baseline.engine = engine
    if importlib.util.find_spec("matplotlib") is None:  # the figures are in the JSONs and what it prints
        baseline.plot = lambda *args, **kwargs: None
    rev, before = revision(), machine()
    asyncio.run(baseline.main())
    path, _ = result_paths("sticky_waits", None)
    write_json(path, {"benchmark": "sticky_waits", "command": " ".join(["bench/sticky_waits.py", *sys.argv[1:]]),
                      "revision": rev, "machine_before": before, "machine_after": machine(), **measured})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
