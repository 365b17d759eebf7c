"""Runners on the dev server: the local runner (examples/runners/local.py), in its own process,
runs admitted workloads as subprocesses and reports their readiness and finish; killed mid-run, its
workload times out and is requeued, and a new runner runs it again."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.worker import Worker

from admitflow import contract, ids
from tests.builders import cluster_queue_manifest, configuration_manifest, flavor_manifest, local_queue_manifest, workload_manifest
from tests.integration.test_admission import eventually, loaded
from tests.support.runners import DrainedRunner, LosingRunner, local_runner, local_runner_module, start_returning
from tests.workflows.test_lifecycle import replay_all

ROOT = Path(__file__).resolve().parents[2]


def runner_process(engine, logs: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "examples/runners/local.py"), "--address", engine.address,
         "--namespace", engine.namespace, "--logs", str(logs)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def command_workload(name: str, command: str) -> dict[str, Any]:
    m = workload_manifest(name)
    m["metadata"]["annotations"] = {"admitflow.io/command": command}
    return m


def runner_queue(task_queue: str) -> list:
    """A ClusterQueue whose LocalQueue sends admitted workloads to the runner on `task_queue`."""
    return loaded(flavor_manifest(), cluster_queue_manifest(), local_queue_manifest(runner=task_queue))


async def setup(engine, **wait_for_pods_ready) -> None:
    """A ClusterQueue whose LocalQueue sends admitted workloads to the local runner."""
    lq = local_queue_manifest(runner="local")
    await engine.admitflow.apply(
        loaded(configuration_manifest(**wait_for_pods_ready), flavor_manifest(), cluster_queue_manifest(), lq)
    )


async def condition(engine, name: str, type_: str):
    report = await engine.admitflow.workload(f"default/{name}", missing_ok=True)
    return report.status.condition(type_) if report is not None else None


def processes_running(command: str) -> list[int]:
    """PIDs whose command line is exactly `command`'s (a `sh -c` child or the program itself)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            except OSError:
                continue
            if cmdline.endswith(command) and "local.py" not in cmdline:
                found.append(int(pid))
    return found


async def test_the_local_runner_runs_admitted_workloads_and_reports_ready_and_finish(engine, tmp_path):
    af = engine.admitflow
    await setup(engine)
    runner = runner_process(engine, tmp_path)
    try:
        await af.apply(loaded(
            command_workload("hello", 'echo "hello from $ADMITFLOW_WORKLOAD, admission $ADMITFLOW_ADMISSION"; sleep 1'),
            command_workload("broken", "exit 3"),
        ))
        for name, reason, message in (("hello", "Succeeded", "command succeeded"), ("broken", "Failed", "command exited with code 3")):
            finished = await eventually(lambda name=name: condition(engine, name, "Finished"), timeout=30)
            assert (finished.reason, finished.message) == (reason, message)
        report = await af.workload("default/hello")
        pods = report.status.condition("PodsReady")
        assert (pods.status, pods.reason) == ("True", "Started"), "reported ready when the command started"
        assert (tmp_path / "default_hello-1.log").read_text() == "hello from default/hello, admission 1\n"
        # Both gave their quota back.
        cq = await af.cluster_queue_report("cq")
        assert cq.status.reserving_workloads == 0
        await replay_all(engine, [ids.workload_id("default/hello"), ids.workload_id("default/broken")])
    finally:
        runner.terminate()
        runner.wait(10)


async def test_a_workload_its_runner_finished_ends_once_the_run_has_returned(engine, tmp_path):
    """The local runner reports `finish` about its admission, then returns from `start_workload`:
    that run ends by itself. The engine sends no `stop_workload` (it did, and cancelled the
    activity), and the workflow completes once the activity's completion is recorded, so that its
    arrival cannot get the completing task refused (UnhandledCommand, and a replay of the run)."""
    af = engine.admitflow
    await setup(engine)
    runner = runner_process(engine, tmp_path)
    try:
        await af.apply(loaded(*(command_workload(f"quick-{i}", "true") for i in range(4))))
        for i in range(4):
            await eventually(lambda i=i: condition(engine, f"quick-{i}", "Finished"), timeout=30)
        for i in range(4):
            handle = engine.client.get_workflow_handle(ids.workload_id(f"default/quick-{i}"))
            await handle.result()
            events = (await handle.fetch_history()).events
            kinds = [e.event_type for e in events]
            scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name for e in events
                         if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
            assert scheduled == ["start_workload"], f"quick-{i}: {scheduled}"
            assert EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED not in kinds
            assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in kinds
            assert kinds.index(EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED) < kinds.index(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED)
        await replay_all(engine, [ids.workload_id(f"default/quick-{i}") for i in range(4)])
    finally:
        runner.terminate()
        runner.wait(10)


async def test_a_runner_may_return_the_finish_from_start_workload(engine):
    """A runner that runs the workload inside `start_workload` returns its finish: the workload
    finishes in the workflow task that has the activity's completion (no `finish` signal, no task
    of its own for it, nothing stopped). A returned value that is no finish is refused and recorded,
    and the workload stays admitted until someone finishes it."""
    @activity.defn(name="stop_workload")
    async def stop_workload(request: Any) -> None:
        raise AssertionError("nothing is stopped")

    af = engine.admitflow
    await af.apply(runner_queue("returns"))
    names = ["runs", "fails", "junk"]
    async with Worker(engine.client, task_queue="returns", activities=[start_returning, stop_workload]):
        await af.apply(loaded(*(workload_manifest(n, cpu="1") for n in names)))
        for name, reason in [("runs", "Succeeded"), ("fails", "Failed")]:
            handle = engine.client.get_workflow_handle(ids.workload_id(f"default/{name}"))
            finished = await eventually(lambda name=name: condition(engine, name, "Finished"), timeout=30)
            assert (finished.status, finished.reason, finished.message) == ("True", reason, f"{name} ran")
            await asyncio.wait_for(handle.result(), 30)
            events = list((await handle.fetch_history()).events)
            kinds = [e.event_type for e in events]
            assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED not in kinds[kinds.index(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED):]
            assert EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED not in kinds
            assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in kinds
            after = kinds[kinds.index(EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED):]
            assert after.count(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED) == 1, "finished in the completion's task"
            assert [e.activity_task_scheduled_event_attributes.activity_type.name for e in events
                    if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED] == ["start_workload"]
        report = await eventually(lambda: _warned(af, "default/junk"), timeout=30)
        assert "finish" in report, report
        assert (await condition(engine, "junk", "Admitted")).status == "True"
        await af.finish("default/junk")
        await asyncio.wait_for(engine.client.get_workflow_handle(ids.workload_id("default/junk")).result(), 30)
    await replay_all(engine, [ids.workload_id(f"default/{n}") for n in names])


async def finished_from_the_second_start(engine, name: str, message: str, calls: dict[str, int]) -> None:
    """Workload `name` finished with `message` from the second `start_workload` of its first
    admission, with `RunnerLost` and `RunnerRestarted` between, and its history replays. Waits while
    the caller's runner serves."""
    key = f"default/{name}"
    finished = await eventually(lambda: condition(engine, name, "Finished"), timeout=60)
    assert (finished.status, finished.message) == ("True", message)
    handle = engine.client.get_workflow_handle(ids.workload_id(key))
    await asyncio.wait_for(handle.result(), 30)
    report = await engine.admitflow.workload(key)
    assert [e.reason for e in report.events if e.reason.startswith("Runner")] == ["RunnerLost", "RunnerRestarted"]
    events = list((await handle.fetch_history()).events)
    scheduled = [e.activity_task_scheduled_event_attributes for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    # The first run may still go on where it was cut off: it is told to stop once the admission is over.
    assert [a.activity_type.name for a in scheduled] == ["start_workload", "start_workload", "stop_workload"]
    assert calls == {ids.workload_id(key): 2}
    await replay_all(engine, [ids.workload_id(key)])


async def test_a_run_lost_by_its_heartbeats_is_started_again_for_the_same_admission(engine):
    """A runner that took `start_workload` and went silent past the heartbeat timeout (as a runner
    that died, or a task lost with its poll in a server restart) is asked again for the same
    admission, and the workload finishes from that run. Before, it held its quota until a PodsReady
    timeout, and for good without WaitForPodsReady (as here)."""
    await engine.admitflow.apply(runner_queue("loses"))
    runner = LosingRunner()
    async with Worker(engine.client, task_queue="loses", activities=[runner.start_workload, runner.stop_workload]):
        await engine.admitflow.apply(loaded(workload_manifest("lost-once", cpu="1")))
        await finished_from_the_second_start(engine, "lost-once", "admission 1 ran on the second start", runner.calls)


async def test_a_run_its_runners_shutdown_ended_is_started_again_for_the_same_admission(engine):
    """A runner stopped while it ran the workload (drained, rolled to a new version: the SDK fails the
    run with `WorkerShutdown`) is asked again for the same admission once a runner serves its queue,
    and the workload finishes from that run. Before, it held its quota as a lost run did."""
    await engine.admitflow.apply(runner_queue("drains"))
    runner = DrainedRunner()
    async with runner.worker(engine.client):
        await engine.admitflow.apply(loaded(workload_manifest("drained-once", cpu="1")))
        await asyncio.wait_for(runner.running.wait(), 60)
    async with runner.worker(engine.client):  # the runner's next version
        await finished_from_the_second_start(engine, "drained-once", "admission 1 ran after its runner's shutdown", runner.calls)


async def _warned(af, key: str) -> str | None:
    report = await af.workload(key)
    return next((e.message for e in report.events if e.reason == "InvalidFinishRequest"), None)


async def test_a_killed_runner_makes_its_workload_time_out_and_requeue(engine, tmp_path):
    af = engine.admitflow
    await setup(engine, timeout="5m", recoveryTimeout="2s", requeuingStrategy={"backoffBaseSeconds": 1})
    command = "sleep 37.25"
    first = runner_process(engine, tmp_path)
    second = None
    try:
        await af.apply(loaded(command_workload("long", command)))
        await eventually(lambda: _is(condition(engine, "long", "PodsReady"), "True"), timeout=30)
        assert processes_running(command), "the command runs"

        first.send_signal(signal.SIGKILL)  # the runner dies mid-run, and its command with it
        first.wait(10)
        await eventually(lambda: asyncio.sleep(0, not processes_running(command)), timeout=5)
        # 10 s without a heartbeat: the pods count as failed, the 2 s recovery timeout evicts it.
        evicted = await eventually(lambda: _is(condition(engine, "long", "Evicted"), "True"), timeout=30)
        assert (evicted.reason, evicted.message) == ("PodsReadyTimeout", "Exceeded the PodsReady timeout default/long")
        report = await af.workload("default/long")
        assert [e.reason for e in report.events if e.type == "Warning"] == ["RunnerLost"]
        assert {(e.reason, e.underlying_cause) for e in report.status.scheduling_stats.evictions} == {
            ("PodsReadyTimeout", "WaitForRecovery")
        }

        # Requeued after its 1 s backoff and admitted again; a new runner runs it.
        second = runner_process(engine, tmp_path)
        await eventually(lambda: _admitted_again(engine), timeout=30)
        await eventually(lambda: _is(condition(engine, "long", "PodsReady"), "True"), timeout=30)
        assert (tmp_path / "default_long-2.log").exists(), "the second admission ran"
        assert len(processes_running(command)) >= 1
        await af.finish("default/long")
        # The engine cancels the run; the runner stops the command.
        await eventually(lambda: asyncio.sleep(0, not processes_running(command)), timeout=15)
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.terminate()
                p.wait(10)


async def _is(pending, status: str) -> Any:
    c = await pending
    return c if c is not None and c.status == status else None


async def _admitted_again(engine) -> bool:
    report = await engine.admitflow.workload("default/long")
    return report.status.condition("Admitted").status == "True" and report.status.requeue_state.count == 1


async def test_a_report_waits_out_a_server_restart(tmp_path):
    """The local runner's report (`set_pods_ready`, `finish`) is tried again while the server cannot
    be reached, as during a restart: the fault test saw a runner give up after the client's own
    retries (about 10 s), its run lost, and its workload never finished. Here the server is down
    for 15 s."""
    from temporalio.client import Client
    from temporalio.testing import ActivityEnvironment

    from admitflow.codec import DATA_CONVERTER
    from admitflow.devserver import DevServer
    from tests.conftest import free_port

    module = local_runner_module()

    server = DevServer(port=free_port(), db=tmp_path / "temporal.db", headless=True)
    await server.start()
    try:
        client = await Client.connect(server.address, data_converter=DATA_CONVERTER)
        # No worker: the server records the signal whoever runs the workflow.
        handle = await client.start_workflow("Anything", id="workload/default/w", task_queue="nobody")
        runner = module.LocalRunner(client, tmp_path / "runs")
        server.stop()
        report = asyncio.ensure_future(ActivityEnvironment().run(
            runner._report, handle, "set_pods_ready", module.PodsReadyReport(ready=True)
        ))
        await asyncio.sleep(15)
        assert not report.done(), report
        await server.start()
        await asyncio.wait_for(report, 120)
        history = await handle.fetch_history()
        signals = [e.workflow_execution_signaled_event_attributes.signal_name for e in history.events
                   if e.HasField("workflow_execution_signaled_event_attributes")]
        assert signals == ["set_pods_ready"]
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def restarted_while_running(tmp_path, command: str, lose_run: bool = True):
    """A dev server of its own, the engine and the local runner; a workload runs `command` and is
    ready; then the server is down for 15 s, longer than the runner's heartbeat timeout (10 s).
    Yields (client, AdmitflowClient) with the server back and both workers still running.

    Down longer than the heartbeat timeout is not enough for Temporal to lose track of the run: a
    heartbeat that reaches the restarted server before its timer queue fires the overdue timeout
    keeps the activity alive, and the run simply goes on (seen under load: no `RunnerLost`, no
    cancellation, `PodsReady` still `Started`). With `lose_run` the server is restarted again, up to
    three times in all, until the history says the run timed out."""
    from temporalio.client import Client

    from admitflow.client import AdmitflowClient
    from admitflow.codec import DATA_CONVERTER
    from admitflow.devserver import DevServer
    from admitflow.worker.main import build_worker
    from tests.conftest import free_port

    server = DevServer(port=free_port(), db=tmp_path / "temporal.db", headless=True)
    await server.start()
    try:
        client = await Client.connect(server.address, data_converter=DATA_CONVERTER)
        af = AdmitflowClient(client, "admitflow")
        lq = local_queue_manifest(runner="local")
        async with build_worker(client, "admitflow"), local_runner(client, tmp_path / "runs"):
            await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(), lq, command_workload("job", command)))

            async def ready():
                report = await af.workload("default/job")
                return report.status.has_condition("PodsReady")

            await eventually(ready, timeout=30)
            for _ in range(3 if lose_run else 1):
                server.stop()
                await asyncio.sleep(15)
                restarting = datetime.now(UTC)
                await server.start()
                if not lose_run or await eventually(lambda: run_lost(client, restarting), timeout=60) == "lost":
                    break
            else:
                raise AssertionError("Temporal kept track of the run through three restarts")
            yield client, af
    finally:
        server.stop()


async def run_lost(client, restarting: datetime) -> str | None:
    """What the restarted server made of the workload's running `start_workload`, once its history
    or its description says: "lost" (it timed out), "kept" (a heartbeat reached the server after
    the restart began, so its timeout was put off); None while neither."""
    handle = client.get_workflow_handle(ids.workload_id("default/job"))
    history = await handle.fetch_history()
    if any(e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT for e in history.events):
        return "lost"
    description = await handle.describe()
    for a in description.raw_description.pending_activities:
        if a.activity_type.name == contract.START_WORKLOAD and a.last_heartbeat_time.ToDatetime(tzinfo=UTC) >= restarting:
            return "kept"
    return None


async def recovered(af) -> bool:
    """The runner reported the pods of the run Temporal lost track of ready again."""
    found = (await af.workload("default/job")).status.condition("PodsReady")
    return found is not None and found.reason == "Recovered"


async def finished(af) -> bool:
    report = await af.workload("default/job", missing_ok=True)
    return report is None or report.status.has_condition("Finished")


async def test_a_finish_told_while_the_server_restarts_finishes_its_admission(tmp_path):
    """The command ends while the server is down for longer than the runner's heartbeat timeout:
    the engine hears `RunnerLost` when it is back (unless a heartbeat kept the run: either way), and
    the runner's finish, tried again through the restart and carrying its admission, still finishes
    the workload (the fault test saw it lost when the timeout cancelled the report)."""
    async with restarted_while_running(tmp_path, "sleep 4", lose_run=False) as (client, af):
        await eventually(lambda: finished(af), timeout=60)
        final = await client.get_workflow_handle(ids.workload_id("default/job")).result()
        conditions = {c["type"]: c for c in final["status"]["conditions"]}
        assert (conditions["Finished"]["reason"], conditions["Finished"]["message"]) == ("Succeeded", "command succeeded")


async def test_a_command_that_outlives_a_server_restart_still_finishes_its_admission(tmp_path):
    """The command runs on through a restart longer than the runner's heartbeat timeout: Temporal
    loses track of the run, and the engine hears `RunnerLost`. The runner used to stop the command,
    and the workload waited for its recovery timeout (the chaos test saw it); now the command runs
    on, the runner reports its pods ready again once the engine has taken them for failed, then its
    finish, which ends the admission."""
    release = tmp_path / "release"
    command = f"until [ -e {release} ]; do sleep 0.2; done"  # runs until the test lets it end
    async with restarted_while_running(tmp_path, command) as (client, af):
        try:
            await eventually(lambda: recovered(af), timeout=60)
        finally:
            release.touch()
        await eventually(lambda: finished(af), timeout=60)
        handle = client.get_workflow_handle(ids.workload_id("default/job"))
        final = await handle.result()
        history = await handle.fetch_history()
    conditions = {c["type"]: c for c in final["status"]["conditions"]}
    assert (conditions["Finished"]["reason"], conditions["Finished"]["message"]) == ("Succeeded", "command succeeded")
    assert conditions["PodsReady"]["reason"] == "Recovered", conditions["PodsReady"]
    timed_out = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT]
    assert len(timed_out) == 1, "Temporal lost track of the run"


async def test_a_command_that_outlives_a_server_restart_stops_when_its_admission_ends(tmp_path, caplog):
    """The run Temporal lost track of goes on, but it is not forgotten: when its admission ends
    (here the workload is deactivated), the engine sends `stop_workload`, and the command stops.
    Before, a lost run got no stop: the command would have run on beside the next admission's."""
    # The SDK logs each cancellation it delivers, with its reason, at debug: kept for a failure's
    # report (this one showed a run the restart did not lose, which restarted_while_running now
    # restarts again).
    caplog.set_level(logging.DEBUG, logger="temporalio.worker._activity")
    async with restarted_while_running(tmp_path, "sleep 117") as (client, af):
        try:
            await eventually(lambda: recovered(af), timeout=60)
        except AssertionError as err:
            report = await af.workload("default/job")
            conditions = [(c.type, c.status, c.reason) for c in report.status.conditions]
            events = [(e.reason, e.message) for e in report.events]
            raise AssertionError(f"{err}; command running: {processes_running('sleep 117')}; {conditions}; {events}") from None
        assert processes_running("sleep 117"), "the command runs on"
        await af.deactivate("default/job")

        async def stopped():
            return not processes_running("sleep 117")

        await eventually(stopped, timeout=30)
