"""A workload's creationTimestamp is when the server accepted its start, as Kubernetes' API server
stamps an object when it stores it, not when a worker first ran the workflow: under load that came
seconds later under load, and queue order and the queued wait time go by it."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from admitflow import ids
from admitflow.admission.workload import WorkloadReport
from tests.builders import cluster_queue_manifest, flavor_manifest, local_queue_manifest, workload_manifest
from tests.integration.test_finish_races import engine  # noqa: F401 - the fixture: a namespace with no worker
from tests.workflows.test_lifecycle import loaded, replay_all, until_phase
from admitflow.worker.main import build_worker


async def test_creation_is_the_starts_acceptance_not_the_first_task(engine):  # noqa: F811
    af = engine.admitflow
    async with build_worker(engine.client, "admitflow"):
        await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(), local_queue_manifest()))
    # No worker: the server accepts the start now; the first workflow task runs 3 s later.
    (submitted,) = loaded(workload_manifest("a", cpu="1"))
    await af.submit(submitted.obj)
    handle = engine.client.get_workflow_handle(ids.workload_id("default/a"), result_type=WorkloadReport)
    accepted = (await handle.describe()).start_time
    await asyncio.sleep(3)
    async with build_worker(engine.client, "admitflow"):
        await until_phase(engine, "a", "Admitted", tries=400)  # 5 s was not always enough after a worker change
        report = await af.workload("default/a")
    assert report.metadata.creation_timestamp == accepted.replace(microsecond=0)
    first_task = min(c.last_transition_time for c in report.status.conditions)
    assert first_task - report.metadata.creation_timestamp >= timedelta(seconds=2), "the conditions are the first task's"
    await replay_all(engine, [ids.workload_id("default/a")])
