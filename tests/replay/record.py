"""Record the histories that tests/replay replays: `python -m tests.replay.record NAME [main|edges|cohorts|forwarding|runner-returns|runner-lost|runner-drained]`.

`edges` records what the main job does not reach (`record_edges`); `main`, the default:

Runs the main job's scenario on a fresh in-memory dev server with the current code: the examples
applied and admitted through the budget controller, then a late consumption update that puts team-b
over budget (its admitted workloads get `Retry` and wait in their backoff), and one workload
finished. `team-a/pretrain` goes through the ProvisioningRequest check (examples/provisioning.yaml):
two failed attempts with their backoffs before the third is provisioned. The local runner runs what
is admitted (examples/runners/local.py): train-small's command ends and finishes it, the Retry stops
notebook's, and train-large is finished by hand while its command runs. Every workflow's history
is written to `tests/replay/histories/NAME/`. Record a new set
when a release changes what the workflows write; keep the old sets, they are what running
workflows replay.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

from admitflow import controller as sdk
from admitflow.api.loader import load_manifests
from admitflow.client import AdmitflowClient
from admitflow.codec import DATA_CONVERTER
from admitflow.devserver import DevServer
from admitflow.messages import FinishRequest, StartWorkload, StopWorkload
from tests.builders import cluster_queue_manifest, flavor_manifest, local_queue_manifest, workload_manifest
from tests.conftest import free_port
from tests.workflows.test_lifecycle import loaded
from admitflow.worker.main import build_worker

ROOT = Path(__file__).resolve().parents[2]


async def until(af: AdmitflowClient, keys: list[str], *phases: str) -> None:
    from admitflow.admission import workload as wl

    for _ in range(600):
        reports = [await af.workload(k) for k in keys]
        if all(wl.phase(wl.WorkloadState(workload=r)) in phases for r in reports):
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"{keys} never reached {' or '.join(phases)}")


def local_runner(client: Client, logs: Path):
    """The local runner of the main job (examples/runners/local.py), in this process."""
    spec = importlib.util.spec_from_file_location("admitflow_local_runner", ROOT / "examples" / "runners" / "local.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # for its dataclasses
    spec.loader.exec_module(module)
    return module.LocalRunner(client, logs).worker()


async def record(out: Path) -> list[str]:
    consumption = Path(tempfile.mkdtemp()) / "consumption.json"
    consumption.write_text(json.dumps({"team-a": 120, "team-b": 12.5}))
    manifests = load_manifests([str(ROOT / "examples")])
    for m in manifests:
        if m.obj.kind == "AdmissionCheckParameters":
            m.obj.spec["consumption"] = str(consumption)
    async with DevServer(port=free_port(), db=None, headless=True) as server:
        client = await Client.connect(server.address, data_converter=DATA_CONVERTER)
        af = AdmitflowClient(client)
        [budget] = sdk.load(str(ROOT / "examples" / "controllers" / "budget.py"))
        async with build_worker(client, af.task_queue), local_runner(client, Path(tempfile.mkdtemp())):
            running = asyncio.ensure_future(budget.run(client))
            await af.apply(manifests)
            keys = [m.obj.key for m in manifests if m.obj.kind == "Workload"]
            await until(af, keys, "Admitted", "Finished")
            consumption.write_text(json.dumps({"team-a": 120, "team-b": 60}))
            await until(af, ["team-b/notebook"], "Backoff")
            await af.finish("team-a/train-large")
            await until(af, ["team-a/train-small", "team-a/train-large"], "Finished")
            running.cancel()
            return await save(client, out)


async def save(client: Client, out: Path) -> list[str]:
    """Every run of every workflow, as `<id with / as __>.json`; the runs of a workflow that
    continued as new are numbered `@1`, `@2`, ... from the first."""
    runs: dict[str, list[str]] = {}
    async for wf in client.list_workflows():
        runs.setdefault(wf.id, []).append(wf.run_id)
    out.mkdir(parents=True, exist_ok=True)
    for wid, run_ids in runs.items():
        for n, run_id in enumerate(reversed(run_ids), 1):  # visibility lists the newest first
            history = await client.get_workflow_handle(wid, run_id=run_id).fetch_history()
            suffix = f"@{n}" if len(run_ids) > 1 else ""
            (out / (wid.replace("/", "__") + suffix + ".json")).write_text(history.to_json())
    return sorted(runs)


async def record_edges(out: Path) -> list[str]:
    """What the main job does not reach: continue-as-new (the server suggests it every 60 events),
    preemption, blockAdmission's gate, PodsReady timeouts with their backoff and limit."""
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "waitForPodsReady": {"timeout": "3s", "blockAdmission": True,
                             "requeuingStrategy": {"backoffBaseSeconds": 1, "backoffLimitCount": 1}},
    }
    queue = {**cluster_queue_manifest(quotas={"default": {"cpu": "4"}})}
    queue["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}
    async with DevServer(port=free_port(), db=None, headless=True,
                         dynamic_config={"limit.historyCount.suggestContinueAsNew": "60"}) as server:
        client = await Client.connect(server.address, data_converter=DATA_CONVERTER)
        af = AdmitflowClient(client)
        async with build_worker(client, af.task_queue):
            await af.apply(loaded(config, flavor_manifest(), queue, local_queue_manifest()))
            # Never ready: times out, backs off 1 s, is admitted again, and the second timeout
            # deactivates it (backoffLimitCount 1).
            await af.apply(loaded(workload_manifest("stuck", cpu="1")))
            await until(af, ["default/stuck"], "Inactive")
            # Admitted and ready; then a higher priority preempts it.
            await af.apply(loaded(workload_manifest("low", cpu="4", priority=1)))
            await until(af, ["default/low"], "Admitted")
            await af.pods_ready("default/low")
            await af.apply(loaded(workload_manifest("high", cpu="4", priority=100)))
            await until(af, ["default/high"], "Admitted")
            await af.pods_ready("default/high")
            # Enough traffic for the ClusterQueue, the gate and the workloads to continue as new.
            names = [f"w{i:02d}" for i in range(12)]
            await af.apply(loaded(*(workload_manifest(n, cpu="4") for n in names)))
            await af.finish("default/high")
            left = {f"default/{n}" for n in ["low", *names]}
            while left:  # one at a time fits; each is ready, then finishes, before its 3 s are up
                key = await admitted_one(af, left)
                await af.pods_ready(key)
                await af.finish(key)
                left.remove(key)
            return await save(client, out)


async def admitted_one(af: AdmitflowClient, keys: set[str]) -> str:
    from admitflow.admission import workload as wl

    for _ in range(600):
        for key in sorted(keys):
            if wl.phase(wl.WorkloadState(workload=await af.workload(key))) == "Admitted":
                return key
        await asyncio.sleep(0.05)
    raise TimeoutError(f"none of {sorted(keys)} was admitted")


@contextlib.asynccontextmanager
async def team_cohort():
    """A fresh in-memory dev server and the engine worker; ClusterQueues cq-a and cq-b (4 cpu each,
    LocalQueues lq-a and lq-b) name cohort `team`; a1 (3 cpu, in cq-a) and b1 (1 cpu, in cq-b) are
    admitted. Yields (client, AdmitflowClient)."""
    queues = []
    for name in ("cq-a", "cq-b"):
        queue = cluster_queue_manifest(name, quotas={"default": {"cpu": "4"}})
        queue["spec"]["cohortName"] = "team"
        queues.append(queue)
    async with DevServer(port=free_port(), db=None, headless=True) as server:
        client = await Client.connect(server.address, data_converter=DATA_CONVERTER)
        af = AdmitflowClient(client)
        async with build_worker(client, af.task_queue):
            await af.apply(loaded(
                flavor_manifest(), *queues,
                local_queue_manifest("lq-a", "cq-a"), local_queue_manifest("lq-b", "cq-b"),
            ))
            await af.apply(loaded(workload_manifest("a1", cpu="3", queue="lq-a"), workload_manifest("b1", cpu="1", queue="lq-b")))
            await until(af, ["default/a1", "default/b1"], "Admitted")
            yield client, af


async def record_cohorts(out: Path) -> list[str]:
    """ClusterQueues that name a cohort, recorded before cohorts were built (the code then ignored
    cohortName): what a ClusterQueue workflow already running at the upgrade has in its history.
    cq-a holds a1 and cannot fit a2 on its own; cq-b holds b1, which finishes."""
    async with team_cohort() as (client, af):
        await af.apply(loaded(workload_manifest("a2", cpu="3", queue="lq-a")))
        await until(af, ["default/a2"], "Pending")
        await af.finish("default/b1")
        await until(af, ["default/b1"], "Finished")
        return await save(client, out)


async def record_forwarding(out: Path) -> list[str]:
    """Two ClusterQueues in cohort `team`, each home forwarding its queue's messages to the tree:
    a2 borrows, a3 waits until a1 finishes, b1 finishes."""
    async with team_cohort() as (client, af):
        await af.apply(loaded(workload_manifest("a2", cpu="3", queue="lq-a")))
        await until(af, ["default/a2"], "Admitted")
        await af.apply(loaded(workload_manifest("a3", cpu="3", queue="lq-a")))
        await until(af, ["default/a3"], "Pending")
        await af.finish("default/b1")
        await af.finish("default/a1")
        await until(af, ["default/a1", "default/b1"], "Finished")
        await until(af, ["default/a3"], "Admitted")
        return await save(client, out)


@activity.defn(name="start_workload")
async def start_returning(request: StartWorkload) -> object:
    """A runner's `start_workload` that returns the finish (docs/runners.md): workload `fails` fails,
    `junk` returns a value that is no finish, any other succeeds; the message names it."""
    name = request.workload["metadata"]["name"]
    return 42 if name == "junk" else FinishRequest(succeeded=name != "fails", message=f"{name} ran")


async def record_runner_returns(out: Path) -> list[str]:
    """A runner whose `start_workload` returns the finish (`start_returning`): `runs` succeeds,
    `fails` fails, `junk` returns a value that is no finish (refused, recorded) and is finished by
    hand."""
    lq = local_queue_manifest(runner="returns")
    async with DevServer(port=free_port(), db=None, headless=True) as server:
        client = await Client.connect(server.address, data_converter=DATA_CONVERTER)
        af = AdmitflowClient(client)
        async with build_worker(client, af.task_queue), Worker(client, task_queue="returns", activities=[start_returning]):
            await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(), lq))
            await af.apply(loaded(*(workload_manifest(n, cpu="1") for n in ("runs", "fails", "junk"))))
            await until(af, ["default/runs", "default/fails"], "Finished")
            await until(af, ["default/junk"], "Admitted")
            await af.finish("default/junk")
            await until(af, ["default/junk"], "Finished")
            return await save(client, out)


class LosingRunner:
    """A runner that takes each workload's first `start_workload` and goes silent past the heartbeat
    timeout (as a runner that died, or a task lost with its poll), then returns the finish from the
    next."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    @activity.defn(name="start_workload")
    async def start_workload(self, request: StartWorkload) -> object:
        self.calls[request.workflow_id] = self.calls.get(request.workflow_id, 0) + 1
        if self.calls[request.workflow_id] == 1:
            await asyncio.sleep(12)  # no heartbeat: the engine's 10 s heartbeat timeout fires first
            return None
        return FinishRequest(succeeded=True, message=f"admission {request.admission} ran on the second start")

    @activity.defn(name="stop_workload")
    async def stop_workload(self, request: StopWorkload) -> None:
        pass  # nothing of it runs here


async def record_runner_lost(out: Path) -> list[str]:
    """A workload whose runner loses its first `start_workload` (`LosingRunner`): started again for
    the same admission, it finishes from the second (`workflow.patched("restart-lost-runner")`).
    Code from before that patch records `RunnerLost` and starts nothing: the workload is finished by
    hand 15 s later."""
    lq = local_queue_manifest(runner="loses")
    runner = LosingRunner()
    async with DevServer(port=free_port(), db=None, headless=True) as server:
        client = await Client.connect(server.address, data_converter=DATA_CONVERTER)
        af = AdmitflowClient(client)
        async with build_worker(client, af.task_queue), Worker(client, task_queue="loses", activities=[runner.start_workload, runner.stop_workload]):
            await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(), lq))
            await af.apply(loaded(workload_manifest("lost-once", cpu="1")))
            try:
                await asyncio.wait_for(until(af, ["default/lost-once"], "Finished"), 30)
            except TimeoutError:
                report = await af.workload("default/lost-once")
                assert any(e.reason == "RunnerLost" for e in report.events), report.events
                await af.finish("default/lost-once")
                await until(af, ["default/lost-once"], "Finished")
            return await save(client, out)


class DrainedRunner:
    """A runner whose worker shuts down while it runs each workload's first `start_workload` (the SDK
    fails that run with `WorkerShutdown`, as when a runner is stopped or rolled to a new version),
    then returns the finish from the next, on a worker started after it."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.running = asyncio.Event()

    def worker(self, client: Client) -> Worker:
        return Worker(client, task_queue="drains", activities=[self.start_workload, self.stop_workload],
                      graceful_shutdown_timeout=timedelta(0))

    @activity.defn(name="start_workload")
    async def start_workload(self, request: StartWorkload) -> object:
        self.calls[request.workflow_id] = self.calls.get(request.workflow_id, 0) + 1
        if self.calls[request.workflow_id] == 1:
            self.running.set()
            while True:  # until the worker's shutdown cancels it
                activity.heartbeat()
                await asyncio.sleep(1)
        return FinishRequest(succeeded=True, message=f"admission {request.admission} ran after its runner's shutdown")

    @activity.defn(name="stop_workload")
    async def stop_workload(self, request: StopWorkload) -> None:
        pass  # nothing of it runs here


async def drain_and_serve(af: AdmitflowClient, runner: DrainedRunner, key: str, finished_within: float) -> None:
    """The workload `key` admitted to the runner; its worker shut down while the first run is in it,
    then a new one serving until `key` finished. Code from before `restart-drained-runner` records
    `RunnerLost` and starts nothing: the workload is finished by hand after `finished_within`."""
    async with runner.worker(af.client):
        await af.apply(loaded(workload_manifest(key.split("/")[1], cpu="1")))
        await asyncio.wait_for(runner.running.wait(), 60)
    async with runner.worker(af.client):
        try:
            await asyncio.wait_for(until(af, [key], "Finished"), finished_within)
        except TimeoutError:
            report = await af.workload(key)
            assert any(e.reason == "RunnerLost" for e in report.events), report.events
            await af.finish(key)
            await until(af, [key], "Finished")


async def record_runner_drained(out: Path) -> list[str]:
    """A workload whose runner shuts down while it runs (`DrainedRunner`): started again for the same
    admission, it finishes from the second run (`workflow.patched("restart-drained-runner")`)."""
    lq = local_queue_manifest(runner="drains")
    async with DevServer(port=free_port(), db=None, headless=True) as server:
        client = await Client.connect(server.address, data_converter=DATA_CONVERTER)
        af = AdmitflowClient(client)
        async with build_worker(client, af.task_queue):
            await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(), lq))
            await drain_and_serve(af, DrainedRunner(), "default/drained-once", 15)
            return await save(client, out)


SCENARIOS = {"main": record, "edges": record_edges, "cohorts": record_cohorts, "forwarding": record_forwarding,
             "runner-returns": record_runner_returns, "runner-lost": record_runner_lost, "runner-drained": record_runner_drained}


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] not in SCENARIOS):
        sys.exit(f"usage: python -m tests.replay.record NAME [{'|'.join(SCENARIOS)}]")
    scenario = SCENARIOS[sys.argv[2] if len(sys.argv) == 3 else "main"]
    print("\n".join(asyncio.run(scenario(Path(__file__).parent / "histories" / sys.argv[1]))))
