"""What each thing a workload does costs Temporal, against the bare workflow, in the same run.

The bare workflow runs one activity (bench/bare_workflow.py). Each variant is that workflow plus
one thing an admitflow workload does besides: two search-attribute upserts (its status), a durable
timer started and cancelled (the waitForPodsReady timeout), a local activity that does nothing, a
second activity and so a second workflow task, an update to one long-running workflow sent by
local activity (its enqueue, its release), a signal to that workflow sent by local activity, and a
signal received with the workflow task it takes (its queue's reservation notice). Each round runs
`--n` workflows of every variant, 50 at a time, and measures the rate and the CPU per workflow of
this process (worker and client) and of the dev server; rounds alternate the variants' order, so
that a machine that slows down or speeds up during the run weighs on all alike. Prints each
variant's means and what it adds to the bare workflow. Runs on the embedded dev server with a file
database, as `admitflow dev` runs it (`bench/harness.py`'s `engine`); the engine's worker idles.

    .venv/bin/python bench/protocol_costs.py [--n 300] [--rounds 4] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from statistics import mean

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from temporalio.worker import Worker  # noqa: E402

from bench import bare_workflow as bw  # noqa: E402
from bench.harness import CpuMeter, bounded, engine, revision  # noqa: E402

TASK_QUEUE = "protocol-costs"
VARIANTS = {
    "bare": bw.BareWorkflow,
    "two upserts": bw.UpsertsWorkflow,
    "a timer cancelled": bw.TimerWorkflow,
    "a local activity": bw.LocalActivityWorkflow,
    "a second activity and task": bw.SecondTaskWorkflow,
    "an update by local activity": bw.UpdateByLocalActivityWorkflow,
    "a signal by local activity": bw.SignalByLocalActivityWorkflow,
    "a signal received and its task": bw.SignalReceivedWorkflow,
}


async def one_round(e, r: int, n: int, order: list[str]) -> dict[str, dict]:
    out = {}
    for name in order:
        meter = CpuMeter(e.server).start()
        start = time.monotonic()
        await bounded(
            e.client.execute_workflow(VARIANTS[name].run, i, id=f"{name.replace(' ', '-')}-{r}-{i}", task_queue=TASK_QUEUE)
            for i in range(n)
        )
        wall = time.monotonic() - start
        meter.stop()
        out[name] = {"per_s": round(n / wall, 1), **meter.per(n)}
        print(f"round {r} {name}: {out[name]}", flush=True)
        await asyncio.sleep(1.0)  # the server's queues drain between variants
    return out


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=300, help="workflows of each variant per round")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    rounds: list[dict[str, dict]] = []
    async with engine() as e:
        workflows = [*VARIANTS.values(), bw.EntityWorkflow]
        activities = [bw.noop, bw.update_entity, bw.signal_entity, bw.signal_own_workflow]
        async with Worker(e.client, task_queue=TASK_QUEUE, workflows=workflows, activities=activities):
            await e.client.start_workflow(bw.EntityWorkflow.run, id=bw.ENTITY_ID, task_queue=TASK_QUEUE)
            names = list(VARIANTS)
            for r in range(args.rounds):
                rounds.append(await one_round(e, r, args.n, names if r % 2 == 0 else names[::-1]))
    base = {k: mean(rd["bare"][k] for rd in rounds) for k in ("per_s", "python_ms", "server_ms")}
    variants = {}
    for name in VARIANTS:
        m = {k: round(mean(rd[name][k] for rd in rounds), 1) for k in ("per_s", "python_ms", "server_ms")}
        m["adds_python_ms"] = round(m["python_ms"] - base["python_ms"], 1)
        m["adds_server_ms"] = round(m["server_ms"] - base["server_ms"], 1)
        m["server_ms_per_round"] = [rd[name]["server_ms"] for rd in rounds]
        variants[name] = m
        print(f"{name:32s} {m['per_s']:5.1f} wf/s  worker {m['python_ms']:5.1f} ms ({m['adds_python_ms']:+.1f})  "
              f"server {m['server_ms']:5.1f} ms ({m['adds_server_ms']:+.1f})", flush=True)
    out = {"benchmark": "protocol_costs", "command": " ".join(["bench/protocol_costs.py", *sys.argv[1:]]), "n": args.n,
           "rounds": args.rounds, "revision": revision(), "variants": variants}
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    asyncio.run(main())
