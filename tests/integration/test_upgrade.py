"""A real upgrade: two builds of the engine worker, the second's workload code nondeterministic for
the first's histories, and workloads mid-lifecycle when the second becomes current.

On a dev server of its own whose drainage status is refreshed every 5 s (Temporal's default is 3 min:
`matching.wv.VersionDrainageStatusRefreshInterval` and `...VisibilityGracePeriod`) and whose
pollers are forgotten 10 s after they stop (`matching.PollerHistoryTTL`, 5 min by default). Build 1
is current while three workloads go through one ClusterQueue guarded by a check whose controller,
like the runner, serves its own task queue (unversioned workers, as third parties run them):

- `running` is admitted and its runner keeps it running;
- `backoff` was told Retry by its check and waits out its backoff;
- `waiting` does not fit beside `running` and waits in the queue.

Then build 2 (whose WorkloadWorkflow starts a timer before it starts a runner: a command build 1's
histories do not have) is started and made current with `versioning.set_current`, which wakes every
run pinned to build 1. The catalog, the ClusterQueue and the waiting workloads continue as new onto
build 2; `running` stays on build 1 until its run ends. Then every workload finishes, the queue held
`running`'s reservation throughout, no workflow task failed, every run replays on the code of the
build that wrote it, and build 1 is drained once `running` has finished.

No `from __future__ import annotations`: the SDK compares build 2's `run` with the `@workflow.init`
it inherits by their annotations, which must be the same objects.
"""

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
import pytest_asyncio
from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Worker

from admitflow import contract, ids, versioning
from admitflow.admission import lifecycle as lc
from admitflow.admission.protocol import FinishRequest, StartWorkload, StopWorkload
from admitflow.admission.workload import WorkloadReport
from admitflow.client import AdmitflowClient
from admitflow.codec import DATA_CONVERTER
from admitflow.devserver import DevServer
from admitflow.messages import WorkloadInput
from admitflow.worker.main import WORKFLOWS, build_worker, replayer
from admitflow.workflows.lifecycle import WorkloadWorkflow
from tests.cli_process import run_admitflow
from tests.builders import cluster_queue_manifest, flavor_manifest, local_queue_manifest, workload_manifest
from tests.conftest import free_port
from tests.histories import audit, build_of
from tests.support.waits import until_phase
from tests.workflows.test_lifecycle import loaded

pytestmark = pytest.mark.integration

DRAINAGE = {
    "matching.wv.VersionDrainageStatusRefreshInterval": "\"5s\"",
    "matching.wv.VersionDrainageStatusVisibilityGracePeriod": "\"5s\"",
    "matching.PollerHistoryTTL": "\"10s\"",
}
CHECK, RUNNER = "upgrade-check", "upgrade-runner"
V1, V2 = versioning.deployment_version("admitflow", "1"), versioning.deployment_version("admitflow", "2")


@workflow.defn(name=contract.WORKLOAD_WORKFLOW)
class WorkloadWorkflowBuild2(WorkloadWorkflow):
    """Build 2: a moment's timer before each runner start, which build 1's histories never had."""

    @workflow.run
    async def run(self, input: WorkloadInput) -> WorkloadReport:
        return await super().run(input)

    async def _execute(self, c: lc.Command) -> list[lc.Event]:
        if isinstance(c, lc.StartRunner):
            await workflow.sleep(timedelta(milliseconds=10), summary="build 2 waits a moment")
        return await super()._execute(c)


BUILD_2 = [WorkloadWorkflowBuild2 if w is WorkloadWorkflow else w for w in WORKFLOWS]


class Controller:
    """The check's controller: Retry (20 s) for `backoff`'s first attempt, Ready for every other."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []

    @activity.defn(name=contract.ADMISSION_CHECK)
    async def admission_check(self, request: dict[str, Any]) -> dict[str, Any]:
        name = request["workload"]["metadata"]["name"]
        self.asked.append((name, request["attempt"]))
        if name == "backoff" and request["attempt"] == 1:
            return {"state": "Retry", "requeueAfterSeconds": 20, "message": "not yet"}
        return {"state": "Ready"}


class Runner:
    """The runner: `running` runs until `release` is set (heartbeating); every other returns its finish."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.running = asyncio.Event()
        self.release = asyncio.Event()

    @activity.defn(name=contract.START_WORKLOAD)
    async def start_workload(self, request: StartWorkload) -> FinishRequest:
        name = request.workload["metadata"]["name"]
        self.started.append(name)
        if name == "running":
            self.running.set()
            while not self.release.is_set():
                activity.heartbeat()
                await asyncio.sleep(1)
        return FinishRequest(succeeded=True, message=f"{name} ran")

    @activity.defn(name=contract.STOP_WORKLOAD)
    async def stop_workload(self, request: StopWorkload) -> None:
        pass


@pytest_asyncio.fixture
async def client() -> AsyncIterator[Client]:
    async with DevServer(port=free_port(), db=None, headless=True, dynamic_config=DRAINAGE) as server:
        yield await Client.connect(server.address, data_converter=DATA_CONVERTER)


def check_manifest() -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": CHECK},
        "spec": {"controllerName": CHECK},
    }


async def version_of(client: Client, workflow_id: str) -> str:
    """The build the workflow's current run is pinned to (its last completed workflow task's)."""
    info = (await client.get_workflow_handle(workflow_id).describe()).raw_description.workflow_execution_info
    return info.versioning_info.deployment_version.build_id


async def eventually(check, timeout: float = 60.0, what: str = ""):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        found = await check()
        if found:
            return found
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {timeout:.0f}s: {what}")
        await asyncio.sleep(0.5)


async def test_a_new_build_takes_over_while_workloads_wait_back_off_and_run(client: Client):
    af = AdmitflowClient(client, "admitflow")
    controller, runner = Controller(), Runner()
    side = [
        Worker(client, task_queue=CHECK, activities=[controller.admission_check]),
        Worker(client, task_queue=RUNNER, activities=[runner.start_workload, runner.stop_workload]),
    ]
    cq = cluster_queue_manifest(quotas={"default": {"cpu": "2"}}, checks=[{"name": CHECK}])
    async with side[0], side[1], build_worker(client, "admitflow", deployment=V1):
        await versioning.set_current(client, V1)
        await af.apply(loaded(flavor_manifest(), check_manifest(), cq, local_queue_manifest(runner=RUNNER)))
        await af.set_admission_check_active(CHECK)  # as its controller marks it
        await af.apply(loaded(workload_manifest("running", cpu="1")))
        await asyncio.wait_for(runner.running.wait(), 60)
        await af.apply(loaded(workload_manifest("backoff", cpu="1"), workload_manifest("waiting", cpu="2")))
        await until_phase(af, ["default/backoff"], "Backoff")
        await until_phase(af, ["default/waiting"], "Pending")

        async with build_worker(client, "admitflow", deployment=V2, workflows=BUILD_2):
            switched = asyncio.get_running_loop().time()
            woken = await versioning.set_current(client, V2)
            assert woken >= 4, "the catalog, the ClusterQueue and the three workloads are pinned to build 1"

            # The entities and the workloads that wait move to build 2 at their next continue-as-new;
            # the one a runner runs cannot (its run is tied to the workflow run) and stays.
            for moved in (ids.CATALOG_ID, ids.cluster_queue_id("cq"), ids.workload_id("default/waiting")):
                await eventually(lambda m=moved: _on(client, m, "2"), what=f"{moved} on build 2")
            assert await version_of(client, ids.workload_id("default/running")) == "1"
            status = await af.cluster_queue_report("cq")
            assert "running" in [r.name for r in status.reserving], "the queue moved with its reservation"

            runner.release.set()
            await until_phase(af, ["default/running", "default/backoff", "default/waiting"], "Finished", timeout=90)
            for key in ("default/backoff", "default/waiting"):
                report = await af.workload(key)
                assert report.status.condition("Finished").reason == "Succeeded", key
            assert sorted(runner.started) == ["backoff", "running", "waiting"]
            assert ("backoff", 2) in controller.asked, "the controller answered build 2's second attempt"

            # Build 1 keeps running until nothing is pinned to it: here, until `running` finished.
            drained = await eventually(lambda: _drained(client, V1), timeout=60, what="build 1 drained")
            assert drained
            stayed = asyncio.get_running_loop().time() - switched
            assert stayed < 90, f"build 1 was needed {stayed:.0f}s after the switch"

    # No task failed, and every run replays on the code of the build that wrote it.
    result = await audit(client, builds={"1": replayer(), "2": replayer(BUILD_2)})
    assert not result.problems, result.summary() + "\n" + "\n".join(result.problems[:20])
    builds = {}
    async for wf in client.list_workflows():
        history = await client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
        builds.setdefault(build_of(history), []).append(wf.id)
    assert set(builds) == {"1", "2"}, builds
    # Build 2's runs of a workload that build 1 started do what build 1's code would not: replayed
    # on build 1's code, they diverge (so the pinning, not luck, kept the builds apart).
    moved = [wf async for wf in client.list_workflows(f"WorkflowId = '{ids.workload_id('default/waiting')}'")]
    on_2 = [wf for wf in moved if build_of(await client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()) == "2"]
    assert on_2
    history = await client.get_workflow_handle(on_2[0].id, run_id=on_2[0].run_id).fetch_history()
    assert any(e.event_type == EventType.EVENT_TYPE_TIMER_STARTED
               and e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta() == timedelta(milliseconds=10)
               for e in history.events)
    replayed = await replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is not None, "build 1's code replays a history build 2 wrote"


async def _on(client: Client, workflow_id: str, build: str) -> bool:
    return await version_of(client, workflow_id) == build


async def _drained(client: Client, version) -> bool:
    found = await versioning.describe(client, version.deployment_name)
    return found is not None and any(v.build_id == version.build_id and v.status == "drained" for v in found.versions)


async def test_the_deployment_command_shows_the_builds_and_makes_one_current(client: Client):
    """`admitflow deployment describe` and `set-current`, as an operator runs them: a build whose
    workers poll becomes current, and the other shows draining, with the runs pinned to each."""
    where = ("--address", client.service_client.config.target_host)
    async with build_worker(client, "admitflow", deployment=V1), build_worker(client, "admitflow", deployment=V2):
        await versioning.set_current(client, V1)
        r = await run_admitflow("deployment", "set-current", "2", *where)
        assert (r.returncode, r.stdout.strip()) == (
            0, "build 2 of deployment admitflow is current; 0 run(s) pinned to other builds told to move at their next continue-as-new",
        ), r.stderr
        r = await run_admitflow("deployment", "describe", *where)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0] == "Deployment admitflow: current build 2"
        rows = {line.split()[0]: line.split()[1:] for line in lines[2:]}
        assert rows["2"] == ["current", "0"] and rows["1"][0] in ("draining", "drained"), r.stdout
    r = await run_admitflow("deployment", "set-current", "no:such", *where)
    assert (r.returncode, r.stderr.strip()) == (
        2, 'error: build id "no:such": letters, digits, "_", "-", "." and "+" only, at most 255 characters',
    )
