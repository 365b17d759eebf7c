"""A workload told to finish and to leave (preempted) in the same workflow task finishes and is not
evicted: no Preempted or Evicted events after Finished, one release to its ClusterQueue."""

from __future__ import annotations

import asyncio
import json

import pytest_asyncio
from temporalio.client import Client

from admitflow import ids
from admitflow.admission.cluster_queue import Notice
from admitflow.admission.workload import WorkloadReport
from admitflow.client import AdmitflowClient
from admitflow.codec import DATA_CONVERTER
from admitflow.admission.protocol import FinishRequest
from tests.builders import cluster_queue_manifest, flavor_manifest, local_queue_manifest, workload_manifest
from tests.workflows.test_lifecycle import loaded, replay_all, until_phase
from admitflow.worker.main import build_worker


class Engine:
    def __init__(self, client) -> None:
        self.client = client
        self.admitflow = AdmitflowClient(client, "admitflow")


def preempted(report: WorkloadReport) -> Notice:
    """What the ClusterQueue sends a workload it preempts; its first (and only) ticket is 1."""
    return Notice(
        key=f"default/{report.metadata.name}", uid=report.metadata.uid, ticket=1, kind="evicted",
        reason="Preempted", message="Preempted to accommodate a workload with higher priority",
        preemption_reason="InClusterQueue",
    )


@pytest_asyncio.fixture
async def engine(dev_server) -> Engine:
    """A namespace of the dev server's pool (it counts tests that take `engine`) with no worker in
    it: the test starts and stops its own."""
    namespace = next(dev_server.pool)
    return Engine(await Client.connect(dev_server.address, namespace=namespace, data_converter=DATA_CONVERTER))


async def test_finish_and_preemption_in_one_task_finish_without_eviction(engine):
    af = engine.admitflow
    async with build_worker(engine.client, "admitflow"):
        await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(), local_queue_manifest()))
        await af.apply(loaded(workload_manifest("a", cpu="1"), workload_manifest("b", cpu="1")))
        await until_phase(engine, "a", "Admitted")
        await until_phase(engine, "b", "Admitted")
        a, b = await af.workload("default/a"), await af.workload("default/b")
    # No worker: both messages wait in a's history and reach it in one workflow task.
    handle = engine.client.get_workflow_handle(ids.workload_id("default/a"), result_type=WorkloadReport)
    await handle.signal("finish", FinishRequest(succeeded=True, message="done"))
    await handle.signal("evicted", preempted(a))
    await engine.client.get_workflow_handle(ids.workload_id("default/b")).signal("evicted", preempted(b))
    async with build_worker(engine.client, "admitflow"):
        final = await handle.result()
        for _ in range(200):  # b, not finished, takes the same notice: evicted, then admitted again
            b_events = [e.reason for e in (await af.workload("default/b")).events]
            if "Preempted" in b_events and b_events[-1] == "Admitted":
                break
            await asyncio.sleep(0.05)
        a_history = await handle.fetch_history()
    reasons = [e.reason for e in final.events]
    assert reasons[-1] == "Finished", reasons
    assert "Preempted" not in reasons and "EvictedDueToPreempted" not in reasons, reasons
    assert final.status.condition("Evicted") is None or final.status.condition("Evicted").status != "True"
    assert b_events.count("Preempted") == 1, "the same notice evicts a workload that has not finished"
    # A notice to the queue is a local activity (its marker's summary names it); older runs signalled.
    releases = [
        e for e in a_history.events
        if (e.HasField("signal_external_workflow_execution_initiated_event_attributes")
            and e.signal_external_workflow_execution_initiated_event_attributes.signal_name == "release")
        or (e.HasField("marker_recorded_event_attributes")
            and e.user_metadata.summary.data == json.dumps("release to ClusterQueue cq").encode())
    ]
    assert len(releases) == 1, "one release: the finish's"
    await replay_all(engine, [ids.workload_id("default/a"), ids.workload_id("default/b"), ids.cluster_queue_id("cq")])
