"""The ClusterQueue as a scheduler, on the real dev server: preemption under each policy, StrictFIFO
and BestEffortFIFO, stop and resume, and duplicate messages that change nothing."""

from __future__ import annotations

import asyncio

import pytest

from admitflow import ids
from admitflow.admission.pending_queue import QueueEntry
from admitflow.admission.requests import PodSetRequest
from admitflow.admission.protocol import ReleaseRequest
from tests.builders import cluster_queue_manifest, flavor_manifest, local_queue_manifest, workload_manifest
from tests.integration.test_admission import _is, _pending_count, _reason, eventually, loaded

pytestmark = pytest.mark.integration


def condition(report, type_: str):
    return next((c for c in report.status.conditions if c.type == type_), None)


async def setup_queue(af, **cq_spec) -> None:
    await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(**cq_spec), local_queue_manifest()))


@pytest.mark.parametrize(
    ("policy", "victim_priority", "victim_newer", "preempts"),
    [
        pytest.param("Never", 1, False, False, id="Never"),
        pytest.param("LowerPriority", 1, False, True, id="LowerPriority-preempts-lower"),
        pytest.param("LowerPriority", 5, True, False, id="LowerPriority-spares-equal"),
        pytest.param("LowerOrNewerEqualPriority", 5, True, True, id="LowerOrNewerEqualPriority-preempts-newer-equal"),
    ],
)
async def test_preemption_by_priority(engine, policy, victim_priority, victim_newer, preempts):
    af = engine.admitflow
    await setup_queue(af, preemption={"withinClusterQueue": policy})
    if victim_newer:
        # The preemptor exists first (creation times have second precision), waiting for its own
        # LocalQueue; the victim, created later, takes the quota meanwhile.
        await af.apply(loaded(workload_manifest("preemptor", cpu="4", priority=5, queue="late")))
        await eventually(lambda: _reason(engine, "preemptor", "Misconfigured"))
        await asyncio.sleep(1.1)
    await af.apply(loaded(workload_manifest("victim", cpu="4", priority=victim_priority)))
    await eventually(lambda: _is(engine, "victim", "Admitted"))
    if victim_newer:
        await af.apply(loaded(local_queue_manifest("late")))
    else:
        await af.apply(loaded(workload_manifest("preemptor", cpu="4", priority=5)))

    if not preempts:
        await eventually(lambda: _reason(engine, "preemptor", "WaitingForQuota"))
        await asyncio.sleep(1.0)
        assert await _is(engine, "victim", "Admitted")
        return

    await eventually(lambda: _is(engine, "preemptor", "Admitted"))
    preemptor = await af.workload("default/preemptor")
    victim = await af.workload("default/victim")
    message = (
        f"Preempted to accommodate a workload (UID: {preemptor.metadata.uid}, JobUID: UNKNOWN) due to "
        "prioritization in the ClusterQueue; preemptor path: /cq; preemptee path: /cq"
    )
    evicted, preempted = condition(victim, "Evicted"), condition(victim, "Preempted")
    assert (evicted.status, evicted.reason, evicted.message) == ("True", "Preempted", message)
    assert (preempted.status, preempted.reason, preempted.message) == ("True", "InClusterQueue", message)
    assert [e.reason for e in victim.events][-2:] == ["Preempted", "EvictedDueToPreempted"]
    await eventually(lambda: _reason(engine, "victim", "WaitingForQuota"))

    await af.finish("default/preemptor")
    await eventually(lambda: _is(engine, "victim", "Admitted"))
    evicted = condition(await af.workload("default/victim"), "Evicted")
    assert (evicted.status, evicted.reason, evicted.message) == ("False", "QuotaReserved", f"Previously: {message}")


@pytest.mark.parametrize(("strategy", "small_admitted"), [("StrictFIFO", False), ("BestEffortFIFO", True)])
async def test_strict_fifo_blocks_and_best_effort_fifo_skips(engine, strategy, small_admitted):
    af = engine.admitflow
    await setup_queue(af, strategy=strategy)
    await af.apply(loaded(workload_manifest("filler", cpu="3")))
    await eventually(lambda: _is(engine, "filler", "Admitted"))
    # big queues first, so small cannot slip in before it reaches the queue.
    await af.apply(loaded(workload_manifest("big", cpu="2", priority=9)))
    await eventually(lambda: _reason(engine, "big", "WaitingForQuota"))
    await af.apply(loaded(workload_manifest("small", cpu="1", priority=1)))
    if small_admitted:
        await eventually(lambda: _is(engine, "small", "Admitted"))
    else:
        await asyncio.sleep(1.0)
        assert await _is(engine, "small", "Pending"), "the head that does not fit blocks what follows"
        await af.finish("default/filler")
        await eventually(lambda: _is(engine, "big", "Admitted"))
        await eventually(lambda: _is(engine, "small", "Admitted"))


async def test_stop_hold_and_drain_and_resume(engine):
    af = engine.admitflow
    await setup_queue(af, stopPolicy="Hold")
    await af.apply(loaded(workload_manifest("a", cpu="1")))
    assert await eventually(lambda: _reason(engine, "a", "Suspended")) == "ClusterQueue cq is stopped"
    (cq,) = await af.get("ClusterQueue", "cq")
    active = next(c for c in cq["status"]["conditions"] if c["type"] == "Active")
    assert (active["status"], active["reason"]) == ("False", "Stopped")

    await setup_queue(af)
    await eventually(lambda: _is(engine, "a", "Admitted"))

    await setup_queue(af, stopPolicy="HoldAndDrain")
    await eventually(lambda: _reason(engine, "a", "Suspended"))
    evicted = condition(await af.workload("default/a"), "Evicted")
    assert (evicted.status, evicted.reason, evicted.message) == ("True", "ClusterQueueStopped", "The ClusterQueue is stopped")

    await setup_queue(af)
    await eventually(lambda: _is(engine, "a", "Admitted"))


async def test_duplicate_enqueue_and_release_change_nothing(engine):
    af = engine.admitflow
    await setup_queue(af)
    await af.apply(loaded(workload_manifest("first", cpu="4")))
    await eventually(lambda: _is(engine, "first", "Admitted"))
    await af.apply(loaded(workload_manifest("second", cpu="4")))
    await eventually(lambda: _pending_count(engine, 1))
    first = await af.workload("default/first")

    await af.finish("default/first")
    await eventually(lambda: _is(engine, "second", "Admitted"))
    # What a retried activity or a replayed local activity could send again, late.
    queue = engine.client.get_workflow_handle(ids.cluster_queue_id("cq"))
    uid = first.metadata.uid
    await queue.signal("release", ReleaseRequest(key="default/first", uid=uid, ticket=1))
    await queue.signal(
        "enqueue",
        QueueEntry(
            key="default/first", uid=uid, ticket=1, local_queue="lq", timestamp=first.metadata.creation_timestamp,
            pod_sets=[PodSetRequest(name="main", count=1, per_pod={"cpu": 4000})],
        ),
    )
    await asyncio.sleep(1.0)
    report = await af.cluster_queue_report("cq")
    assert (report.status.reserving_workloads, report.status.pending_workloads) == (1, 0)
    assert [r.name for r in report.reserving] == ["second"]
    assert await _is(engine, "second", "Admitted")
