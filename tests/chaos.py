"""Chaos through the public contract: `python -m tests.chaos` (`make soak` runs the long shape).

A dev server on a database file and the engine worker (`admitflow worker`) in its own process; one
ClusterQueue with two AdmissionChecks. `auto` is answered by a controller (the Python SDK) that says
Ready, Retry (after 1-3 s), Rejected or fails (an error) at random. `manual` is answered by hand with
`temporal workflow signal`: the current attempt's verdict, sometimes twice (duplicates), an old or a
future attempt (stale), a payload that is no verdict or not even decodable (malformed: bad JSON
shapes, and payloads claiming `binary/zlib`, `binary/encrypted` or an unknown encoding), and verdicts
for workloads already finished (late). Admitted workloads run on the local runner (`sleep 0.2`) and
finish; one whose `start_workload` task a server kill lost is started again at its heartbeat
timeout, and WaitForPodsReady evicts and requeues one that still does not run after a minute. Meanwhile the engine worker is killed with SIGKILL
and started again, and the Temporal server is killed with SIGKILL once and started again on its
database.

Checked all along (every observation of the ClusterQueue): its usage is the sum of its reservations
and never above its quota. At the end: every workload is Finished or Inactive (Rejected), none was
admitted twice without losing its admission in between, the queue holds nothing, and every run of
every workflow replays (tests/histories.py) with no workflow task failed that a kill does not explain
(so none the stale-activation guard refused: they are counted), no reservation waited LAG_LIMIT or
more between the queue's decision and its workload's hearing of it (read from both histories), and
nothing but this run's observers sent a query: the server's own count of QueryWorkflow requests
(its frontend's `service_requests`, summed over its restart) is at most what the observers' client
sent, give or take those that failed as unavailable: one in flight when the server is killed may
have been counted by it before it died, or not (the count is read just before the kill).
The observers (the queue's invariants, which workloads ended, the final reports) are a person's
looks, on a client of their own; the controller, the runner and the engine worker read memos.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client
from temporalio.service import RetryConfig, RPCError, RPCStatusCode

from bench.query_count import requests_by_operation

from admitflow import contract, ids
from admitflow.admission import workload as wl
from admitflow.admission.workload import WorkloadState
from admitflow.api import resource_value
from admitflow.client import AdmitflowClient, UnansweredWorkload
from admitflow.codec import DATA_CONVERTER
from admitflow.controller import Controller, ready, rejected, retry
from admitflow.devserver import DevServer
from tests.builders import cluster_queue_manifest, flavor_manifest, local_queue_manifest, workload_manifest
from tests.conftest import free_port
from tests.histories import Audit, audit

BIN = Path(sys.executable).parent
TASK_QUEUE = "chaos"
QUOTA_CPU = 6
TERMINAL = ("Finished", "Inactive")
# A reservation's workload hears of it within this (issue 51: a reservation answered into an update
# nobody read any more was heard of only at the queue's retelling, 5 minutes later).
LAG_LIMIT = timedelta(seconds=15)


def readmissions(events) -> list:
    """When a workload was admitted while its last admission had not ended: the times of its
    `Admitted` events that follow another with no eviction (of any cause, deactivation included:
    `EvictedDueTo<reason>`) or finish between them."""
    out, admitted = [], False
    for e in events:
        if e.reason == "Admitted":
            if admitted:
                out.append(e.time)
            admitted = True
        elif e.reason == "Finished" or e.reason.startswith("EvictedDueTo"):
            admitted = False
    return out


@dataclass
class Plan:
    workloads: int = 40
    worker_kills: int = 4
    server_kills: int = 1
    seed: int = 20261124
    deadline: float = 420.0  # seconds for every workload to end


@dataclass
class Report:
    plan: Plan
    faults: Counter = field(default_factory=Counter)
    answers: Counter = field(default_factory=Counter)  # the controller's
    signals: Counter = field(default_factory=Counter)  # sent with `temporal workflow signal`, by kind
    invariant_checks: int = 0
    violations: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    leaked: dict[str, str] = field(default_factory=dict)
    double_admitted: list[str] = field(default_factory=list)
    phases: Counter = field(default_factory=Counter)
    history: Audit | None = None
    seconds: float = 0.0
    # QueryWorkflow requests: by the server's own count, and those this run's observers sent.
    queries: int = 0
    observers_queries: int = 0
    observers_unavailable: int = 0  # failed as unavailable: the server may have counted them before it died

    @property
    def lagged(self) -> list[str]:
        worst = self.history.longest_unheard() if self.history is not None else None
        if worst is None or worst.seconds < LAG_LIMIT.total_seconds():
            return []
        return [f"{worst.key} ticket {worst.ticket} held its reservation {worst.seconds:.1f} s before it heard of it"]

    @property
    def queried_by_machines(self) -> int:
        return max(0, self.queries - self.observers_queries - self.observers_unavailable)

    @property
    def ok(self) -> bool:
        return not (self.violations or self.stuck or self.leaked or self.double_admitted or self.lagged) and (
            self.queried_by_machines <= 0 and self.history is not None and not self.history.problems
        )

    def lines(self) -> list[str]:
        h = self.history
        return [
            f"workloads: {self.plan.workloads} ({', '.join(f'{n} {p}' for p, n in sorted(self.phases.items()))}) in {self.seconds:.0f} s",
            f"faults: {self.faults['worker'] } worker kills (SIGKILL), {self.faults['server']} server kills (SIGKILL)",
            f"controller answers: {dict(sorted(self.answers.items()))}",
            f"signals sent by hand: {dict(sorted(self.signals.items()))}",
            f"invariant checks: {self.invariant_checks}, violations: {len(self.violations)}",
            f"stuck: {len(self.stuck)}, leaked: {len(self.leaked)}, double-admitted: {len(self.double_admitted)}",
            f"histories: {h.summary() if h else 'not audited'}",
            f"queries: {self.queries} QueryWorkflow requests by the server's count, {self.observers_queries} of them "
            f"by this run's observers (and {self.observers_unavailable} failed as unavailable), "
            f"{self.queried_by_machines} by the engine, its controller and its runner",
        ]

    def problems(self) -> str:
        out = self.violations[:10] + self.stuck[:10] + [f"leaked {k}: {v}" for k, v in self.leaked.items()]
        out += self.double_admitted[:10] + self.lagged + (self.history.problems[:20] if self.history else [])
        if self.queried_by_machines > 0:
            out.append(f"{self.queried_by_machines} queries sent by something else than this run's observers")
        return "\n".join(out)


def manifests(n: int) -> list:
    from tests.integration.test_admission import loaded

    lq = local_queue_manifest(runner="local")
    docs = [
        flavor_manifest(),
        cluster_queue_manifest(quotas={"default": {"cpu": str(QUOTA_CPU)}}, checks=[{"name": "auto"}, {"name": "manual"}]),
        lq,
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": "auto"},
         "spec": {"controllerName": "tests.chaos"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": "manual"},
         "spec": {"controllerName": "tests.chaos-by-hand"}},
        # A server killed just as it hands a `start_workload` to the runner can lose that task: the
        # engine records RunnerLost at the heartbeat timeout and starts it again; should that be
        # lost too, WaitForPodsReady evicts and requeues the workload. Kueue's 30m would outlast
        # any deadline here; a minute lets that recovery finish inside it.
        {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
         "waitForPodsReady": {"timeout": "60s", "requeuingStrategy": {"backoffBaseSeconds": 5}}},
    ]
    for i in range(n):
        w = workload_manifest(f"w{i:03d}", cpu="1")
        w["metadata"]["annotations"] = {"admitflow.io/command": "sleep 0.2"}
        docs.append(w)
    return loaded(*docs)


class Chaos:
    def __init__(self, plan: Plan, workdir: Path) -> None:
        self.plan = plan
        self.workdir = workdir
        self.rng = random.Random(plan.seed)
        self.report = Report(plan)
        self.server = DevServer(port=free_port(), db=workdir / "temporal.db", headless=True, metrics_port=free_port())
        self.served_queries = 0  # the server's count before its last restart
        self.worker: subprocess.Popen | None = None
        self.keys = [f"default/w{i:03d}" for i in range(plan.workloads)]
        self.done: set[str] = set()

    # --- the engine worker and the server ---------------------------------------------------

    def start_worker(self) -> None:
        log = self.workdir / f"worker-{self.report.faults['worker']}.log"
        with open(log, "ab") as out:
            self.worker = subprocess.Popen(
                [str(BIN / "admitflow"), "worker", "--address", self.server.address, "--task-queue", TASK_QUEUE,
                 "--log-level", "WARNING"],
                stdout=out, stderr=subprocess.STDOUT,
            )

    def kill_worker(self) -> None:
        if self.worker is not None:
            self.worker.send_signal(signal.SIGKILL)
            self.worker.wait(10)
            self.report.faults["worker"] += 1

    def server_queries(self) -> int:
        """QueryWorkflow requests the server served, over its restarts."""
        url = f"http://127.0.0.1:{self.server.metrics_port}/metrics"
        return self.served_queries + int(requests_by_operation(url).get("QueryWorkflow", 0))

    async def kill_server(self) -> None:
        self.served_queries = await asyncio.to_thread(self.server_queries)
        process = self.server._process
        assert process is not None
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        self.server._process = None
        self.report.faults["server"] += 1
        await asyncio.sleep(1.0)
        await self.server.start()

    # --- the controller of `auto` -----------------------------------------------------------

    async def answer(self, request):
        roll = self.rng.random()
        if roll < 0.6:
            kind, verdict = "ready", ready("fine")
        elif roll < 0.82:
            kind, verdict = "retry", retry("not now", after=self.rng.uniform(1, 3))
        elif roll < 0.9:
            kind, verdict = "rejected", rejected("no")
        else:
            self.report.answers["error"] += 1
            raise RuntimeError("the controller's backend is down")
        self.report.answers[kind] += 1
        return verdict

    # --- `manual`, by hand ------------------------------------------------------------------

    async def signal(self, key: str, kind: str, payload: str, *meta: str) -> None:
        cmd = [str(BIN / "temporal"), "workflow", "signal", "--address", self.server.address,
               "--workflow-id", ids.workload_id(key), "--name", contract.SET_ADMISSION_CHECK_STATE, "--input", payload]
        for m in meta:
            cmd += ["--input-meta", m]
        proc = await asyncio.create_subprocess_exec(*cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await proc.wait()
        self.report.signals[kind if proc.returncode == 0 else f"{kind} (refused by the server)"] += 1

    async def by_hand(self, af: AdmitflowClient) -> None:
        while True:
            try:
                waiting = await af.workloads(pending_check="manual")
            except Exception:  # the server is down: nothing to answer now
                waiting = []
            for r in waiting:
                attempt = (r.check_attempts or {}).get("manual")
                if wl.phase(WorkloadState(workload=r)) != "QuotaReserved" or attempt is None:
                    continue
                await self.one_verdict(r.key, attempt)
            if self.done and self.rng.random() < 0.2:
                await self.signal(self.rng.choice(sorted(self.done)), "late", _verdict("Ready", 1))
            await asyncio.sleep(0.5)

    async def one_verdict(self, key: str, attempt: int) -> None:
        roll = self.rng.random()
        if roll < 0.15:
            await self.signal(key, "stale", _verdict("Ready", attempt - 1 if attempt > 1 else attempt + 7))
        elif roll < 0.25:
            garbage = self.rng.choice([
                ('"Ready"',), ("[1, 2]",), ('{"name": "manual", "state": "Sure"}',),
                ('{"name": "manual", "state": "Retry", "requeueAfterSeconds": 99999999999}',),
                ('{"name": "nobody", "state": "Ready"}',), ("null",),
                # payloads that claim an encoding they do not have, or one nobody reads
                ('{"name": "manual", "state": "Ready"}', "encoding=binary/zlib"),
                ('{"name": "manual", "state": "Ready"}', "encoding=binary/encrypted"),
                ('{"name": "manual", "state": "Ready"}', "encoding=text/whatever"),
            ])
            await self.signal(key, "malformed", *garbage)
        elif roll < 0.3:
            await self.signal(key, "retry", _verdict("Retry", attempt, requeueAfterSeconds=1))
        else:
            await self.signal(key, "ready", _verdict("Ready", attempt))
            if roll > 0.85:
                await self.signal(key, "duplicate", _verdict("Ready", attempt))

    # --- observation --------------------------------------------------------------------------

    async def observe(self, af: AdmitflowClient) -> None:
        while True:
            try:
                report = await asyncio.wait_for(af.cluster_queue_report("cq"), 5)
            except Exception:  # the worker or the server is down
                report = None
            if report is not None:
                self.report.violations += usage_problems(report, {"cpu": QUOTA_CPU * 1000})
                self.report.invariant_checks += 1
            await asyncio.sleep(0.5)

    async def ended(self, af: AdmitflowClient) -> set[str]:
        for key in sorted(set(self.keys) - self.done):
            try:
                r = await asyncio.wait_for(af.workload(key), 5)
            except Exception:
                continue
            if wl.phase(WorkloadState(workload=r)) in TERMINAL:
                self.done.add(key)
        return self.done

    # --- the run ------------------------------------------------------------------------------

    async def faults(self) -> None:
        """Kills spread over the run: the k-th when k/(kills+1) of the workloads have ended."""
        plan = self.plan
        order = ["worker"] * plan.worker_kills + ["server"] * plan.server_kills
        self.rng.shuffle(order)
        for i, what in enumerate(order, 1):
            while len(self.done) < plan.workloads * i / (len(order) + 1):
                await asyncio.sleep(0.5)
            await asyncio.sleep(self.rng.uniform(0.0, 2.0))
            if what == "worker":
                self.kill_worker()
                await asyncio.sleep(self.rng.uniform(0.0, 1.0))
                self.start_worker()
            else:
                await self.kill_server()

    async def run(self) -> Report:
        from tests.support.runners import local_runner

        started = time.monotonic()
        await self.server.start()
        client = await Client.connect(self.server.address, data_converter=DATA_CONVERTER)
        # The observers' own client: every query of this run is theirs, and counted, one request each
        # (no retries: a retry would reach the server once more than it is counted here).
        looking = await Client.connect(self.server.address, data_converter=DATA_CONVERTER, retry_config=RetryConfig(max_retries=0))
        self.count_queries(looking)
        af = AdmitflowClient(looking, TASK_QUEUE)
        controller = Controller("tests.chaos", check=self.answer)
        self.start_worker()
        tasks: list[asyncio.Future] = []
        try:
            async with controller.worker(client), local_runner(client, self.workdir / "runs"):
                await af.apply(manifests(self.plan.workloads))
                for check in ("auto", "manual"):
                    await af.set_admission_check_active(check)
                tasks = [asyncio.ensure_future(c) for c in (self.observe(af), self.by_hand(af), self.faults())]
                faults = tasks[-1]
                loop = asyncio.get_running_loop()
                deadline = loop.time() + self.plan.deadline
                # Every planned fault happens, even when the workloads end before the last one's turn
                # (it then hits a quiet engine, which must survive it as well).
                while (len(await self.ended(af)) < len(self.keys) or not faults.done()) and loop.time() < deadline:
                    for t in tasks:
                        if t.done() and t.exception() is not None:
                            raise t.exception()
                    await asyncio.sleep(1)
                for t in tasks:
                    t.cancel()
            await self.conclude(looking, af)
            self.report.queries = await asyncio.to_thread(self.server_queries)
        finally:
            for t in tasks:
                t.cancel()
            if self.worker is not None:
                self.worker.kill()
                self.worker.wait(10)
            self.report.seconds = time.monotonic() - started
            self.server.stop()
        return self.report

    def count_queries(self, client: Client) -> None:
        service = client.service_client
        original = service._rpc_call

        async def rpc_call(rpc, req, resp_type, **kwargs):
            if rpc != "query_workflow":
                return await original(rpc, req, resp_type, **kwargs)
            try:
                answer = await original(rpc, req, resp_type, **kwargs)
            except RPCError as err:
                if err.status == RPCStatusCode.UNAVAILABLE:  # no server, or one killed after counting it
                    self.report.observers_unavailable += 1
                else:
                    self.report.observers_queries += 1
                raise
            except asyncio.CancelledError:  # given up on (a 5 s wait): the server may have it all the same
                self.report.observers_queries += 1
                raise
            self.report.observers_queries += 1
            return answer

        service._rpc_call = rpc_call  # type: ignore[method-assign]

    async def conclude(self, client: Client, af: AdmitflowClient) -> None:
        rep = self.report
        # The last fault may have killed the worker a moment ago: a query then waits out the dead
        # worker's sticky queue (10 s) and the run's replay, longer than the CLI's default wait.
        patient = AdmitflowClient(client, TASK_QUEUE, query_timeout=timedelta(seconds=60))
        for key in self.keys:
            r = await patient.workload(key)
            if isinstance(r, UnansweredWorkload):
                rep.stuck.append(f"{key}: does not answer: {r.workflow.summary()}")
                continue
            phase = wl.phase(WorkloadState(workload=r))
            rep.phases[phase] += 1
            if phase not in TERMINAL:
                checks = ",".join(f"{c.name}={c.state}" for c in r.status.admission_checks or ())
                rep.stuck.append(f"{key}: {phase} {checks} last={r.events[-1].reason if r.events else '-'}")
            rep.double_admitted += [f"{key}: admitted again at {t} without losing its admission" for t in readmissions(r.events)]
        if not rep.stuck:
            report = await patient.cluster_queue_report("cq")
            if report.reserving:
                rep.leaked = {r.namespace + "/" + r.name: json.dumps(r.usage) for r in report.reserving}
        rep.history = await audit(client, reservations=True)


def usage_problems(report, quota: dict[str, int]) -> list[str]:
    """What is wrong with a ClusterQueue's report: its usage is not the sum of its reservations, or
    more than `quota` (resource -> milli-units or units, as admitflow.api.resource_value counts)."""
    total: dict[str, int] = {}
    for r in report.reserving:
        for res, q in r.usage.items():
            total[res] = total.get(res, 0) + resource_value(res, q)
    reported = {
        res.name: resource_value(res.name, str(res.total))
        for fl in report.status.flavors_reservation or () for res in fl.resources
    }
    problems = []
    if {k: v for k, v in reported.items() if v} != {k: v for k, v in total.items() if v}:
        problems.append(f"usage {reported} != reservations {total}")
    problems += [f"{total[r]} of {r} reserved, over the quota of {q}" for r, q in quota.items() if total.get(r, 0) > q]
    return problems


def _verdict(state: str, attempt: int, **extra) -> str:
    return json.dumps({"name": "manual", "state": state, "attempt": attempt, "message": "by hand", **extra})


async def chaos(plan: Plan, workdir: Path | None = None) -> Report:
    if workdir is None:
        workdir = Path(tempfile.mkdtemp(prefix="admitflow-chaos-"))
    return await Chaos(plan, workdir).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=300)
    parser.add_argument("--worker-kills", type=int, default=12)
    parser.add_argument("--server-kills", type=int, default=1)
    parser.add_argument("--seed", type=int, default=Plan.seed)
    parser.add_argument("--deadline", type=float, default=1800.0, help="seconds for every workload to end")
    parser.add_argument("--workdir", type=Path, help="keep the server's database and the logs here")
    args = parser.parse_args(argv)
    # The controller's failed answers are part of the plan: no traceback for each of them.
    logging.getLogger("temporalio.activity").setLevel(logging.ERROR)
    plan = Plan(args.workloads, args.worker_kills, args.server_kills, args.seed, args.deadline)
    report = asyncio.run(chaos(plan, args.workdir))
    print("\n".join(report.lines()))
    if not report.ok:
        print(report.problems())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
