"""Issue 19, fault 1: a query that reaches a killed worker never makes a workload diverge from its history.

The evidence's sequence, made deterministic: a workload in its backoff, the engine worker killed
with SIGKILL and started again at once, and a query sent right after, while the server still
routes the workload's tasks to the dead worker's sticky queue. The backoff's timer fires meanwhile;
after the sticky queue's timeout the server gives the query, with the history as it is by then, to
the new worker. Without the guard that worker ran the timer's end live on the clock of the
workflow task before the kill, enqueued the workload again (a local activity), and took the
ClusterQueue's reservation in a later activation than any replay does: the history no longer
replayed (`No command scheduled for event ActivityTaskScheduled`). The guard
(worker/stale_activations.py) refuses that activation, or, when the run's last workflow task made
no activation of its own in the replay (an activity cancelled with TRY_CANCEL, resolved at once),
the query the rebuilt run then answers: the query fails with a clear message, the client asks
again, and the run replays with its real workflow task.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.worker import Worker

from admitflow import contract, ids
from admitflow.api.cluster_queue import ClusterQueueStatus
from admitflow.client import AdmitflowClient
from admitflow.codec import DATA_CONVERTER
from admitflow.devserver import DevServer
from admitflow.admission.protocol import ClusterQueueReport, StatusQuery
from tests.conftest import free_port
from tests.histories import assert_replays
from tests.integration.test_admission_checks import say, setup, submit, until
from admitflow.worker.main import build_worker
from admitflow.worker.stale_activations import REFUSED, REFUSED_EVENTS, REFUSED_REPLAYED

pytestmark = pytest.mark.integration

ADMITFLOW = str(Path(sys.executable).parent / "admitflow")
TASK_QUEUE = "stale"


def start_worker(server: DevServer, log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [ADMITFLOW, "worker", "--address", server.address, "--task-queue", TASK_QUEUE, "--log-level", "WARNING"],
            stdout=out, stderr=subprocess.STDOUT,
        )


async def in_backoff_and_quiet(client: Client, key: str) -> bool:
    """Its backoff's timer runs and no workflow task is pending: a query now goes to the worker
    that has the run cached, by its sticky queue."""
    events = (await client.get_workflow_handle(ids.workload_id(key)).fetch_history()).events
    timer = any(e.event_type == EventType.EVENT_TYPE_TIMER_STARTED for e in events)
    completed = max(i for i, e in enumerate(events) if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
    pending = any(e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED for e in events[completed:])
    return timer and not pending


async def started(tmp_path: Path, db: Path | None) -> tuple[DevServer, subprocess.Popen]:
    """A dev server (on a database file when `db` is given) and an engine worker on it."""
    server = DevServer(port=free_port(), db=db, headless=True, log_file=tmp_path / "temporal.log")
    await server.start()
    return server, start_worker(server, tmp_path / "worker-0.log")


async def in_its_backoff(af: AdmitflowClient, client: Client):
    """A workload whose check said Retry (4 s), once its backoff's timer runs and its workflow is
    quiet; returns its report from before the Retry."""
    await setup(af, "a")
    await submit(af)
    first = await until(af, "QuotaReserved", timeout=60)
    await say(af, "job", "a", "Retry", requeue_after_seconds=4, attempt=first.check_attempts["a"])
    for _ in range(300):
        if await in_backoff_and_quiet(client, "default/job"):
            return first
        await asyncio.sleep(0.1)
    raise AssertionError("the backoff's timer never started, or its workflow task never ended")


async def test_a_query_during_a_worker_death_never_makes_a_workload_diverge(tmp_path):
    server, worker = await started(tmp_path, db=None)
    try:
        client = await Client.connect(server.address, data_converter=DATA_CONVERTER)
        af = AdmitflowClient(client, TASK_QUEUE)
        first = await in_its_backoff(af, client)

        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
        worker = start_worker(server, tmp_path / "worker-1.log")
        await asyncio.sleep(0.5)
        # The query waits on the dead worker's sticky queue while the backoff ends, then goes to
        # the new worker and, the timer having fired by then, runs into the stale activation: the
        # worker refuses it, and the client asks again.
        # (A client that waits longer than the sticky timeout for an answer; admitflow's default
        # gives up at the same 10 s and shows the workload from what Temporal knows.)
        patient = AdmitflowClient(client, TASK_QUEUE, query_timeout=timedelta(seconds=60))
        answered = await asyncio.wait_for(patient.workload("default/job"), 90)
        assert answered.metadata.name == "job"

        again = await until(af, "QuotaReserved", timeout=90)
        assert again.check_attempts["a"] > first.check_attempts["a"]
        await say(af, "job", "a", "Ready", attempt=again.check_attempts["a"])
        admitted = await until(af, "Admitted", timeout=30)
        assert [e.reason for e in admitted.events].count("Admitted") == 1
        audit = await assert_replays(client, keep=tmp_path)
        assert audit.types.get("WorkloadWorkflow") == 1
        log = (tmp_path / "worker-1.log").read_text()
        assert REFUSED in log or REFUSED_REPLAYED in log
    finally:
        worker.kill()
        worker.wait(10)
        server.stop()


async def test_queries_right_after_a_server_restart_never_make_a_workload_diverge(tmp_path):
    """The second road to the SDK's bug: the server restarted on its database while a workload's
    backoff timer runs, and a person's `get` asked right after, again and again while the timer
    fires and the workload enqueues again. Every query is answered (the client asks again a
    refused one), and every run of every workflow replays."""
    server, worker = await started(tmp_path, db=tmp_path / "temporal.db")
    try:
        client = await Client.connect(server.address, data_converter=DATA_CONVERTER)
        first = await in_its_backoff(AdmitflowClient(client, TASK_QUEUE), client)
        server.stop()
        await server.start()
        client = await Client.connect(server.address, data_converter=DATA_CONVERTER)
        patient = AdmitflowClient(client, TASK_QUEUE, query_timeout=timedelta(seconds=60))
        for _ in range(10):
            answered = await asyncio.wait_for(patient.workload("default/job"), 90)
            assert answered.metadata.name == "job"
            await asyncio.sleep(0.5)
        again = await until(AdmitflowClient(client, TASK_QUEUE), "QuotaReserved", timeout=90)
        assert again.check_attempts["a"] > first.check_attempts["a"]
        audit = await assert_replays(client, keep=tmp_path)
        assert audit.types.get("WorkloadWorkflow") == 1
    finally:
        worker.kill()
        worker.wait(10)
        server.stop()


# --- every read of admitflow's client asks a refused query again ----------------------------------

# How many of the next queries the stand-in refuses, and how many it was asked (it runs unsandboxed,
# in this process: a query changes no workflow state).
_QUERIES = {"refuse": 0, "asked": 0}
_FAILURE = {"message": REFUSED}


@workflow.defn(name="test-refusing-cluster-queue", sandboxed=False)
class _RefusingClusterQueue:
    """Stands in for a ClusterQueue's workflow whose worker refuses the first queries as the
    engine's guard does (the refusal reaches the client as that one message)."""

    @workflow.run
    async def run(self, name: str) -> None:
        self.name = name
        await workflow.wait_condition(lambda: False)

    @workflow.query(name=contract.CLUSTER_QUEUE_STATUS)
    def status(self, query: StatusQuery) -> ClusterQueueReport:
        _QUERIES["asked"] += 1
        if _QUERIES["refuse"] > 0:
            _QUERIES["refuse"] -= 1
            raise RuntimeError(_FAILURE["message"])
        return ClusterQueueReport(name=self.name, status=ClusterQueueStatus(pending_workloads=7))


async def _asked_of_the_stand_in(dev_server: DevServer, refuse: int, message: str):
    """`cluster_queue_report` of a queue whose worker refuses the first `refuse` queries with
    `message`; returns its answer (or raises its error) and how often it was asked."""
    client = await Client.connect(dev_server.address, data_converter=DATA_CONVERTER)
    name = f"refusing-{uuid.uuid4().hex[:8]}"
    queue = f"refusing-{name}"
    async with Worker(client, task_queue=queue, workflows=[_RefusingClusterQueue]):
        handle = await client.start_workflow(_RefusingClusterQueue.run, name, id=ids.cluster_queue_id(name), task_queue=queue)
        try:
            _QUERIES.update(refuse=refuse, asked=0)
            _FAILURE["message"] = message
            try:
                return await AdmitflowClient(client, queue).cluster_queue_report(name), _QUERIES["asked"]
            except WorkflowQueryFailedError as err:
                return err, _QUERIES["asked"]
        finally:
            await handle.terminate()


@pytest.mark.parametrize("message", [REFUSED, REFUSED_EVENTS], ids=["stale-clock", "events-without-a-task"])
async def test_a_read_refused_by_the_engines_worker_is_asked_again(dev_server, message):
    """After a server restart the guard refuses queries that come with events of no workflow task
    yet (worker/stale_activations.py): every read of admitflow's client (here a ClusterQueue's
    status, as `admitflow get clusterqueue` asks it) asks again a second later, as it did for a
    workload's report only."""
    report, asked = await _asked_of_the_stand_in(dev_server, refuse=2, message=message)
    assert isinstance(report, ClusterQueueReport) and report.status.pending_workloads == 7
    assert asked == 3


async def test_any_other_query_failure_is_not_asked_again(dev_server):
    error, asked = await _asked_of_the_stand_in(dev_server, refuse=1, message="the handler failed")
    assert isinstance(error, WorkflowQueryFailedError) and str(error) == "the handler failed"
    assert asked == 1


# --- a worker whose clock is off ---------------------------------------------------------------


@pytest.mark.parametrize("ahead", [30.0], ids=["30s-ahead"])
async def test_a_worker_whose_clock_runs_ahead_completes_every_workflow_task(engine, monkeypatch, ahead):
    """A worker that takes over runs another worker cached replays each one's next workflow task
    before it runs it live. With its clock 30 s ahead of the server's, each such task looked older
    than any a worker can be given, and was refused (a `WorkflowTaskFailed` in the history, then
    the next attempt refused again): the workload was never admitted. The guard reads no wall
    clock: it is admitted, and no task of any workflow failed (the engine fixture fails the test on
    one)."""
    af = AdmitflowClient(engine.client, "clock-ahead")
    async with build_worker(engine.client, "clock-ahead"):
        await setup(af, "a")
        await submit(af)
        reserved = await until(af, "QuotaReserved", timeout=60)
    # That worker has stopped (it told the server so): the next tasks of every run go to this one,
    # which has none of them cached.
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + ahead)
    async with build_worker(engine.client, "clock-ahead"):
        await say(af, "job", "a", "Ready", attempt=reserved.check_attempts["a"])
        admitted = await until(af, "Admitted", timeout=60)
    assert [e.reason for e in admitted.events].count("Admitted") == 1
