"""Verdict latency: from a check's verdict signal to `Admitted` being observable, against bare
Temporal round trips on the same dev server in the same run.

One ClusterQueue with one AdmissionCheck whose controller (admitflow.controller, in this process)
answers `pending()`; the benchmark sends the verdicts itself. One sample at a time, in rotation:

- admitflow, signal: a workload holds quota and its check is `Pending` (the controller's answer is
  recorded, nothing is in flight, and the workflow has been idle for `--settle-ms`); `Ready` is
  sent as the signal `set_admission_check_state`, as `Controller.send` does; then the `workload`
  query is asked until it shows `Admitted=True`. A query that reaches a workflow with a workflow
  task in flight is held by the server until that task completes, so the first query normally
  answers with the verdict applied: no polling interval. How many queries each sample took is
  recorded.
- admitflow, update: the same verdict through the update `apply_admission_check_state` (what
  `admitflow verdict` sends); it returns the workload's status once the verdict is handled.
- bare, completion: a workflow waiting for a signal gets it and completes; signal, then the
  client's wait for the result (a long poll).
- bare, query: a workflow waiting for a signal gets it and keeps running; signal, then a query
  shows it was handled (the same observation as the admitflow signal sample).

Afterwards the histories of the timed samples say where the time went (server event times; the
client runs on the same machine): until the server recorded the message, until a worker started
the workflow task that handled it, the tasks themselves, and until the client saw the outcome.

    .venv/bin/python bench/verdict_latency.py [--n 200] [--settle-ms 500] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from temporalio.api.enums.v1 import EventType  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from admitflow import ids  # noqa: E402
from admitflow.admission.checks import Verdict  # noqa: E402
from admitflow.admission.workload import WorkloadReport  # noqa: E402
from admitflow.api import parse_manifest  # noqa: E402
from admitflow.controller import CheckRequest, Controller, pending, ready  # noqa: E402
from bench.bare_workflow import BareHoldWorkflow, BareSignalWorkflow  # noqa: E402
from bench.harness import Engine, bounded, engine, loaded, machine, result_paths, revision, save_figure, summary_ms, write_json  # noqa: E402
from tests.builders import cluster_queue_manifest, flavor_manifest, local_queue_manifest, workload_manifest  # noqa: E402

CHECK = "latency"
CONTROLLER = "bench.admitflow.io/latency"
BARE_QUEUE = "bare-signal"
KINDS = ("admitflow_signal", "admitflow_update", "bare_completion", "bare_query")


class Bench:
    def __init__(self, e: Engine, settle: float) -> None:
        self.e = e
        self.settle = settle
        self.asked: dict[str, CheckRequest] = {}
        self.waiters: dict[str, asyncio.Event] = {}
        self.controller = Controller(CONTROLLER)
        self.controller.check(self._answer)
        self.queries: dict[str, list[int]] = {"admitflow_signal": [], "admitflow_update": []}
        self.timed: list[tuple[str, str, float, float]] = []  # (kind, workflow id, start, end), wall clock

    async def _answer(self, request: CheckRequest) -> Verdict:
        self.asked[request.key] = request
        if (ev := self.waiters.get(request.key)) is not None:
            ev.set()
        return pending("the benchmark sends the verdict")

    async def setup(self, n: int) -> None:
        check = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": CHECK},
                 "spec": {"controllerName": CONTROLLER}}
        docs = [check, flavor_manifest(),
                cluster_queue_manifest(quotas={"default": {"cpu": str(2 * n + 10)}}, checks=[{"name": CHECK}]),
                local_queue_manifest()]
        await self.e.admitflow.apply(loaded(docs))

    async def wait_active(self) -> None:
        """The controller marks its AdmissionCheck Active (until then the queue admits nothing)."""
        while True:
            [ac] = await self.e.admitflow.catalog_objects("AdmissionCheck", CHECK)
            if any(c.type == "Active" and c.status == "True" for c in ac.status.conditions):
                return
            await asyncio.sleep(0.1)

    async def _query(self, handle) -> WorkloadReport:
        return await handle.query("workload", result_type=WorkloadReport)

    async def admitflow_sample(self, i: int, via: str) -> float:
        name = f"{via}-{i}"
        key = f"default/{name}"
        self.waiters[key] = asyncio.Event()
        await self.e.admitflow.submit(parse_manifest(workload_manifest(name, cpu="1"))[0], cluster_queue="cq")
        await asyncio.wait_for(self.waiters[key].wait(), 60)
        handle = self.e.client.get_workflow_handle(ids.workload_id(key))
        # Quota held, check Pending, and the controller's Pending answer recorded: nothing in flight.
        while True:
            r = await self._query(handle)
            states = {c.name: c.state for c in r.status.admission_checks or ()}
            answered = any(v.check == CHECK and v.state == "Pending" for v in r.verdicts)
            if r.status.has_condition("QuotaReserved") and states.get(CHECK) == "Pending" and answered:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(self.settle)
        request = self.asked.pop(key)
        queries = 0
        wall, start = time.time(), time.perf_counter()
        if via == "signal":
            await self.controller.send(request, ready())
            admitted = False
        else:
            status = await self.e.admitflow.verdict(key, Verdict(name=CHECK, state="Ready", attempt=request.attempt))
            admitted = status.has_condition("Admitted")
        while not admitted:
            queries += 1
            admitted = (await self._query(handle)).status.has_condition("Admitted")
        elapsed = time.perf_counter() - start
        self.timed.append((f"admitflow_{via}", ids.workload_id(key), wall, wall + elapsed))
        self.queries[f"admitflow_{via}"].append(queries)
        del self.waiters[key]
        await self.e.admitflow.finish(key)  # not timed: keeps the number of running workflows small
        return elapsed

    async def bare_completion_sample(self, i: int) -> float:
        handle = await self.e.client.start_workflow(BareSignalWorkflow.run, id=f"bare-completion-{i}", task_queue=BARE_QUEUE)
        await handle.query(BareSignalWorkflow.waiting)  # held until its first workflow task has run
        await asyncio.sleep(self.settle)
        wall, start = time.time(), time.perf_counter()
        await handle.signal(BareSignalWorkflow.signal_go)
        await handle.result()
        elapsed = time.perf_counter() - start
        self.timed.append(("bare_completion", handle.id, wall, wall + elapsed))
        return elapsed

    async def bare_query_sample(self, i: int) -> float:
        handle = await self.e.client.start_workflow(BareHoldWorkflow.run, id=f"bare-query-{i}", task_queue=BARE_QUEUE)
        await handle.query(BareHoldWorkflow.waiting)
        await asyncio.sleep(self.settle)
        wall, start = time.time(), time.perf_counter()
        await handle.signal(BareHoldWorkflow.signal_go)
        while await handle.query(BareHoldWorkflow.waiting):
            pass
        elapsed = time.perf_counter() - start
        self.timed.append(("bare_query", handle.id, wall, wall + elapsed))
        await handle.signal(BareHoldWorkflow.signal_stop)
        return elapsed

    async def sample(self, kind: str, i: int) -> float:
        if kind == "admitflow_signal":
            return await self.admitflow_sample(i, "signal")
        if kind == "admitflow_update":
            return await self.admitflow_sample(i, "update")
        if kind == "bare_completion":
            return await self.bare_completion_sample(i)
        return await self.bare_query_sample(i)


SIGNALS = {"admitflow_signal": "set_admission_check_state", "bare_completion": "go", "bare_query": "go"}
E = EventType


async def breakdown(e: Engine, timed: list[tuple[str, str, float, float]]) -> dict[str, dict[str, float]]:
    """Where each timed sample's time went, from the server's event times (same machine, same clock):
    from the call until the server recorded the signal (or accepted the update), until a worker
    started the workflow task that handled it, that task's own time, how many workflow tasks it
    took, and from the last of them until the client saw the result."""

    async def one(kind: str, workflow_id: str, start: float, end: float) -> tuple[str, dict[str, float]] | None:
        events = list((await e.client.get_workflow_handle(workflow_id).fetch_history()).events)
        at = {ev.event_id: ev.event_time.ToDatetime().timestamp() for ev in events}
        if kind == "admitflow_update":
            accepted = next((ev for ev in events if ev.event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED), None)
            done = next((ev for ev in events if ev.event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED), None)
            if accepted is None or done is None:
                return None
            tasks = [ev for ev in events if ev.event_type == E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
                     and accepted.event_id - 1 <= ev.event_id <= done.event_id]
            first_started = max(ev.event_id for ev in events if ev.event_type == E.EVENT_TYPE_WORKFLOW_TASK_STARTED
                                and ev.event_id < accepted.event_id)
            return kind, {"to_task_start_ms": (at[first_started] - start) * 1000,
                          "tasks": len(tasks), "tasks_ms": (at[done.event_id] - at[first_started]) * 1000,
                          "after_ms": (end - at[done.event_id]) * 1000}
        signaled = next((ev for ev in events if ev.event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
                         and ev.workflow_execution_signaled_event_attributes.signal_name == SIGNALS[kind]
                         and at[ev.event_id] >= start - 0.01), None)
        if signaled is None:
            return None
        started = next(ev for ev in events if ev.event_id > signaled.event_id and ev.event_type == E.EVENT_TYPE_WORKFLOW_TASK_STARTED)
        # The workflow tasks completed after the signal and before the client saw the outcome: a
        # query is held while a task is in flight, so it may wait for more than the one that
        # handled the signal.
        seen = [ev for ev in events if ev.event_id > signaled.event_id and ev.event_type == E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
                and at[ev.event_id] <= end + 0.001]
        last = seen[-1] if seen else started
        return kind, {"to_signaled_ms": (at[signaled.event_id] - start) * 1000,
                      "to_task_start_ms": (at[started.event_id] - at[signaled.event_id]) * 1000,
                      "tasks": len(seen), "tasks_ms": (at[last.event_id] - at[started.event_id]) * 1000,
                      "after_ms": (end - at[last.event_id]) * 1000}

    found = [x for x in await bounded((one(*t) for t in timed), 10) if x is not None]
    out: dict[str, dict[str, float]] = {}
    for kind in KINDS:
        rows = [r for k, r in found if k == kind]
        if rows:
            out[kind] = {"n": len(rows), **{f: round(statistics.fmean(r[f] for r in rows), 1) for f in rows[0]}}
    return out


def plot(samples: dict[str, list[float]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401

    labels = {
        "admitflow_signal": "admitflow: verdict signal → Admitted (query)",
        "admitflow_update": "admitflow: verdict update → Admitted (its result)",
        "bare_completion": "bare: signal → workflow completed (result)",
        "bare_query": "bare: signal → handled (query)",
    }
    fig, ax = plt.subplots(figsize=(9, 5))
    for kind in KINDS:
        xs = sorted(s * 1000 for s in samples[kind])
        ys = [(k + 1) / len(xs) for k in range(len(xs))]
        ax.step(xs, ys, where="post", label=f"{labels[kind]} (n={len(xs)})")
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("latency (ms, log scale)")
    ax.set_ylabel("fraction of samples at or below")
    ax.axhline(0.5, color="grey", lw=0.5, ls=":")
    ax.axhline(0.99, color="grey", lw=0.5, ls=":")
    ax.grid(True, which="both", lw=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(title, fontsize=10)
    save_figure(fig, path)


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=200, help="samples of each kind")
    p.add_argument("--settle-ms", type=float, default=500,
                   help="idle time of the workflow before each timed message (under ~150 ms, the dev server "
                        "dispatches the next workflow task about 25 ms later, bare or not)")
    p.add_argument("--out", type=Path, help="JSON path (the PNG goes beside it); default bench/results/verdict_latency-<date>.json")
    args = p.parse_args()
    json_path, png_path = result_paths("verdict_latency", args.out)

    samples: dict[str, list[float]] = {k: [] for k in KINDS}
    rev, before = revision(), machine()  # the code this process imported, and the machine's load
    async with engine() as e:
        bench = Bench(e, args.settle_ms / 1000)
        await bench.setup(args.n)
        serving = asyncio.ensure_future(bench.controller.run(e.client))
        try:
            await asyncio.wait_for(bench.wait_active(), 30)
            async with Worker(e.client, task_queue=BARE_QUEUE, workflows=[BareSignalWorkflow, BareHoldWorkflow]):
                # One warm-up of each kind (imports, caches), not counted.
                for kind in KINDS:
                    await bench.sample(kind, -1)
                bench.timed.clear()
                started = time.monotonic()
                for i in range(args.n):
                    # Rotate the order, so that no kind always follows the same one.
                    for j in range(len(KINDS)):
                        kind = KINDS[(i + j) % len(KINDS)]
                        samples[kind].append(await bench.sample(kind, i))
                    if (i + 1) % 50 == 0:
                        print(f"{i + 1} of {args.n} rounds ({time.monotonic() - started:.0f} s)", flush=True)
            spent = await breakdown(e, bench.timed)
        finally:
            serving.cancel()
            try:
                await serving
            except asyncio.CancelledError:
                pass

    figures = {k: summary_ms(v) for k, v in samples.items()}
    ratios = {
        f"{ours}/{bare}": {stat: round(figures[ours][stat] / figures[bare][stat], 2) for stat in ("p50_ms", "p99_ms", "mean_ms")}
        for ours in ("admitflow_signal", "admitflow_update")
        for bare in ("bare_completion", "bare_query")
    }
    queries = {k: {"max": max(v), "samples_needing_more_than_one": sum(q > 1 for q in v)} for k, v in bench.queries.items()}
    out = {
        "benchmark": "verdict_latency",
        "command": " ".join(["bench/verdict_latency.py", *sys.argv[1:]]),
        "n": args.n,
        "settle_ms": args.settle_ms,
        "revision": rev,
        "machine_before": before,
        "machine_after": machine(),
        "latency": figures,
        "ratios": ratios,
        "queries_after_the_verdict": queries,
        "where_the_time_goes_ms": spent,
        "samples_ms": {k: [round(s * 1000, 2) for s in v] for k, v in samples.items()},
    }
    print()
    print(f"{'':24} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
    for k in KINDS:
        f = figures[k]
        print(f"{k:24} {f['p50_ms']:8.1f} {f['p99_ms']:8.1f} {f['mean_ms']:8.1f}")
    print()
    for name, r in ratios.items():
        print(f"ratio {name:40} p50 {r['p50_ms']:.2f}  p99 {r['p99_ms']:.2f}  mean {r['mean_ms']:.2f}")
    print(f"queries after the verdict: {queries}")
    print("where the time goes (means, ms, from the histories' event times):")
    for kind, parts in spent.items():
        print(f"  {kind:24} " + ", ".join(f"{k} {v}" for k, v in parts.items()))
    write_json(json_path, out)
    plot(samples, png_path, f"Verdict → Admitted vs bare signal round trips, n={args.n} each, dev server, 2 cores")
    print(f"wrote {json_path} and {png_path}")


if __name__ == "__main__":
    asyncio.run(main())
