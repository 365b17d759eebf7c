"""Issue 19, fault 1: a query that reaches a killed worker never makes a workload diverge from its history.

The evidence's sequence, made deterministic: a workload in its backoff, the engine worker killed
with SIGKILL and started again at once, and a query sent right after, while the server still
routes the workload's tasks to the dead worker's sticky queue. The backoff's timer fires meanwhile;
after the sticky queue's timeout the server gives the query, with the history as it is by then, to
the new worker. Before the fix that worker ran the timer's end live on the clock of the workflow
task before the kill, enqueued the workload again (a local activity), and took the ClusterQueue's
reservation in a later activation than any replay does: the history no longer replayed
(`No command scheduled for event ActivityTaskScheduled`). Now the worker refuses that activation
(worker/stale_activations.py): the query fails with a clear message, the client asks again, and
the run replays with its real workflow task.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from admitflow import ids
from admitflow.client import AdmitflowClient
from admitflow.codec import DATA_CONVERTER
from admitflow.devserver import DevServer
from tests.conftest import free_port
from tests.histories import assert_replays
from tests.integration.test_admission_checks import say, setup, submit, until
from admitflow.worker.stale_activations import REFUSED

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


async def test_a_query_during_a_worker_death_never_makes_a_workload_diverge(tmp_path):
    server = DevServer(port=free_port(), db=None, headless=True, log_file=tmp_path / "temporal.log")
    await server.start()
    worker = start_worker(server, tmp_path / "worker-0.log")
    try:
        client = await Client.connect(server.address, data_converter=DATA_CONVERTER)
        af = AdmitflowClient(client, TASK_QUEUE)
        await setup(af, "a")
        await submit(af)
        first = await until(af, "QuotaReserved", timeout=60)
        await say(af, "job", "a", "Retry", requeue_after_seconds=4, attempt=first.check_attempts["a"])
        for _ in range(300):
            if await in_backoff_and_quiet(client, "default/job"):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the backoff's timer never started, or its workflow task never ended")

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
        assert REFUSED in (tmp_path / "worker-1.log").read_text()

        again = await until(af, "QuotaReserved", timeout=90)
        assert again.check_attempts["a"] > first.check_attempts["a"]
        await say(af, "job", "a", "Ready", attempt=again.check_attempts["a"])
        admitted = await until(af, "Admitted", timeout=30)
        assert [e.reason for e in admitted.events].count("Admitted") == 1
        audit = await assert_replays(client, keep=tmp_path)
        assert audit.types.get("WorkloadWorkflow") == 1
    finally:
        worker.kill()
        worker.wait(10)
        server.stop()
