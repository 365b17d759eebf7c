"""The workflows on the time-skipping test server: admission, finish, deletion, waiting for a queue,
and every history they wrote replayed against the current code (determinism)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import WorkflowHistory

from admitflow import ids
from admitflow.admission import workload as wl
from admitflow.admission.workload import WorkloadReport, WorkloadState
from admitflow.api import parse_manifest
from admitflow.api.loader import LoadedManifest
from tests.builders import (
    cluster_queue_manifest,
    flavor_manifest,
    local_queue_manifest,
    workload_manifest,
)
from admitflow.worker.main import replayer


def loaded(*docs: dict[str, Any]) -> list[LoadedManifest]:
    return [LoadedManifest(source="test", index=i, obj=parse_manifest(d)[0], warnings=[]) for i, d in enumerate(docs, 1)]


async def phase_of(engine, name: str) -> str:
    report = await engine.admitflow.workload(f"default/{name}")
    return wl.phase(WorkloadState(workload=report))


async def until_phase(engine, name: str, phase: str, tries: int = 100) -> None:
    for _ in range(tries):
        if await phase_of(engine, name) == phase:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} never reached {phase}; it is {await phase_of(engine, name)}")


async def until_active(engine, cluster_queue: str = "cq", tries: int = 200) -> None:
    """Until the ClusterQueue runs with its view (its `Active` condition True, a state that lasts).
    A queue still fetching its first view takes an enqueue without answering it, so its reservation
    goes by signal (workflows/cluster_queue.py): a test about answers, or about which notice is the
    first signal, applies its workloads after this."""
    for _ in range(tries):
        report = await engine.admitflow.cluster_queue_report(cluster_queue)
        if report is not None and any(c.type == "Active" and c.status == "True" for c in report.status.conditions):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"ClusterQueue {cluster_queue} never became Active")


async def until_reason(engine, name: str, reason: str, tries: int = 100) -> None:
    for _ in range(tries):
        report = await engine.admitflow.workload(f"default/{name}")
        if report.status.condition("QuotaReserved").reason == reason:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} never waited with reason {reason}")


async def replay_all(engine, workflow_ids: list[str]) -> None:
    """Replay each history against the current code; a nondeterminism error fails the test."""
    r = replayer()
    for wid in workflow_ids:
        history = await engine.client.get_workflow_handle(wid).fetch_history()
        await r.replay_workflow(WorkflowHistory.from_json(wid, history.to_json()))


async def test_finish_returns_the_final_workload_and_frees_the_quota(skipping_engine):
    engine = skipping_engine
    af = engine.admitflow
    await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(), local_queue_manifest()))
    await af.apply(loaded(workload_manifest("a", cpu="3")))
    await until_phase(engine, "a", "Admitted")
    await af.apply(loaded(workload_manifest("b", cpu="3")))
    await until_reason(engine, "b", "WaitingForQuota")

    await af.finish("default/a", message="all pods succeeded")
    final = await engine.client.get_workflow_handle(ids.workload_id("default/a"), result_type=WorkloadReport).result()
    finished = next(c for c in final.status.conditions if c.type == "Finished")
    assert (finished.status, finished.reason, finished.message) == ("True", "Succeeded", "all pods succeeded")
    assert final.status.admission.cluster_queue == "cq", "the last admission stays on record"
    await until_phase(engine, "b", "Admitted")

    await replay_all(
        engine,
        [ids.CATALOG_ID, ids.cluster_queue_id("cq"), ids.workload_id("default/a"), ids.workload_id("default/b")],
    )


async def test_a_deleted_workload_ends_as_deleted_and_is_gone_for_the_client(skipping_engine):
    engine = skipping_engine
    af = engine.admitflow
    await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(), local_queue_manifest(), workload_manifest("a")))
    await until_phase(engine, "a", "Admitted")
    await af.delete("Workload", "default/a")
    final = await engine.client.get_workflow_handle(ids.workload_id("default/a"), result_type=WorkloadReport).result()
    assert final.deleted is True
    assert await af.workload("default/a", missing_ok=True) is None
    report = await af.cluster_queue_report("cq")
    for _ in range(100):
        if report.status.reserving_workloads == 0:
            break
        await asyncio.sleep(0.05)
        report = await af.cluster_queue_report("cq")
    assert report.status.reserving_workloads == 0
    await replay_all(engine, [ids.CATALOG_ID, ids.cluster_queue_id("cq"), ids.workload_id("default/a")])


async def test_a_workload_submitted_before_its_queues_is_admitted_when_they_appear(skipping_engine):
    engine = skipping_engine
    af = engine.admitflow
    await af.apply(loaded(workload_manifest("early")))
    for _ in range(100):
        report = await af.workload("default/early")
        if report.status.condition("QuotaReserved").reason == "Misconfigured":
            break
        await asyncio.sleep(0.05)
    assert report.status.condition("QuotaReserved").message == "LocalQueue lq is terminating or missing"
    await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(), local_queue_manifest()))
    await until_phase(engine, "early", "Admitted")
    await replay_all(engine, [ids.CATALOG_ID, ids.cluster_queue_id("cq"), ids.workload_id("default/early")])


async def test_applying_a_changed_spec_to_a_running_workload_is_refused(skipping_engine):
    from admitflow.client import AdmitflowError

    af = skipping_engine.admitflow
    await af.apply(loaded(workload_manifest("a", cpu="1")))
    with pytest.raises(AdmitflowError, match=r"^test: document 1 \(Workload a\): spec: Forbidden"):
        await af.apply(loaded(workload_manifest("a", cpu="2")))
    assert [o.action for o in await af.apply(loaded(workload_manifest("a", cpu="1")))] == ["unchanged"]
