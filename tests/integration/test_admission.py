"""Workloads admitted end to end on the real dev server: catalog, ClusterQueue and workload
workflows, the delivery activity and the client, exactly as `admitflow dev` runs them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType

from admitflow import ids
from admitflow.admission import workload as wl
from admitflow.admission.workload import WorkloadState
from admitflow.api import load_manifests, parse_manifest
from admitflow.api.loader import LoadedManifest
from tests.builders import (
    cluster_queue_manifest,
    flavor_manifest,
    local_queue_manifest,
    workload_manifest,
)
from tests.workflows.test_lifecycle import until_active

pytestmark = pytest.mark.integration

DATA = Path(__file__).parent.parent / "data"


def loaded(*docs: dict[str, Any]) -> list[LoadedManifest]:
    out = []
    for i, d in enumerate(docs, 1):
        obj, warnings = parse_manifest(d)
        out.append(LoadedManifest(source="test", index=i, obj=obj, warnings=warnings))
    return out


async def eventually(check: Callable[[], Awaitable[Any]], timeout: float = 20.0) -> Any:
    """Poll `check` until it returns a truthy value; fail with its last value."""
    deadline = asyncio.get_running_loop().time() + timeout
    last = None
    while asyncio.get_running_loop().time() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"condition not met within {timeout}s; last value: {last!r}")


async def phases(engine, *names: str) -> dict[str, str]:
    out = {}
    for n in names:
        report = await engine.admitflow.workload(f"default/{n}")
        out[n] = wl.phase(WorkloadState(workload=report))
    return out


async def test_the_two_highest_priorities_are_admitted_and_finishing_one_admits_the_third(engine):
    af = engine.admitflow
    outcomes = await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(), local_queue_manifest()))
    assert [o.action for o in outcomes] == ["created"] * 3
    # A 4-cpu workload holds all the quota, so the three below queue up together and their order
    # is decided by priority alone, not by who arrived first.
    await af.apply(loaded(workload_manifest("filler", cpu="4", priority=1000)))
    await eventually(lambda: _is(engine, "filler", "Admitted"))
    await af.apply(
        loaded(
            workload_manifest("low", cpu="2", priority=1),
            workload_manifest("high", cpu="2", priority=3),
            workload_manifest("mid", cpu="2", priority=2),
        )
    )
    await eventually(lambda: _pending_count(engine, 3))
    await af.finish("default/filler")

    want = {"high": "Admitted", "mid": "Admitted", "low": "Pending"}
    await eventually(lambda: _equals(phases(engine, "high", "mid", "low"), want))
    low = await af.workload("default/low")
    reserved = next(c for c in low.status.conditions if c.type == "QuotaReserved")
    assert (reserved.reason, reserved.message) == (
        "WaitingForQuota",
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 2 more needed",
    )

    (cq,) = await af.get("ClusterQueue", "cq")
    assert cq["status"]["flavorsReservation"] == [{"name": "default", "resources": [{"name": "cpu", "total": "4", "borrowed": "0"}]}]
    assert cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == "4"
    assert (cq["status"]["reservingWorkloads"], cq["status"]["pendingWorkloads"]) == (2, 1)

    await af.finish("default/high")
    await eventually(lambda: _equals(phases(engine, "mid", "low"), {"mid": "Admitted", "low": "Admitted"}))
    (cq,) = await af.get("ClusterQueue", "cq")
    assert cq["status"]["flavorsUsage"][0]["resources"][0]["total"] == "4"
    high = await af.workload("default/high")
    assert wl.phase(WorkloadState(workload=high)) == "Finished"
    events = [e.reason for e in (await af.workload("default/low")).events]
    assert events == ["QuotaReserved", "Admitted"]


async def test_a_pass_stopped_at_its_bound_goes_on_once_its_notices_are_sent(monkeypatch, engine):
    """A pass reserves scheduler.MAX_RESERVATIONS at most (3 here), so that one workflow task never
    reserves thousands; the queue runs the next pass once the outbox has sent the notices of the
    last, until every workload that fits is admitted. (monkeypatch comes first: the engine's audit
    replays the histories with the same bound.)"""
    from admitflow.admission import scheduler

    monkeypatch.setattr(scheduler, "MAX_RESERVATIONS", 3)
    schedule, passes = scheduler.schedule, []

    def counted(*args, **kwargs):
        results = schedule(*args, **kwargs)
        passes.append(sum(len(r.reserved) for r in results.values()))
        return results

    monkeypatch.setattr(scheduler, "schedule", counted)
    af = engine.admitflow
    await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(quotas={"default": {"cpu": "0"}}), local_queue_manifest()))
    names = [f"w{i}" for i in range(10)]
    await af.apply(loaded(*(workload_manifest(n, cpu="1") for n in names)))
    await eventually(lambda: _pending_count(engine, 10))
    await af.apply(loaded(cluster_queue_manifest(quotas={"default": {"cpu": "10"}})))
    await eventually(lambda: _equals(phases(engine, *names), dict.fromkeys(names, "Admitted")), timeout=60)
    assert max(passes) == 3 and sum(passes) == 10 and len([p for p in passes if p]) == 4, passes


async def test_a_notice_the_server_holds_costs_its_queue_seconds_not_its_task(monkeypatch, engine):
    """The queue sends a pass's few notices in the workflow task that decides them (local activity,
    workflows/outbox.py); a notice the server does not answer (seen for 6.6-7.8 s under load, when
    its workload's own task waited for the queue) must not hold that task: the attempt is given up
    after seconds and sent again after a durable timer, while the queue goes on taking messages.
    The first `quota_reserved` signal here is never answered; the workload is admitted once it is
    sent again, well before the attempt's former 30 s timeout. (A workload that fits when it
    enqueues is told in its enqueue's answer: this one waits for the quota of another.)"""
    from admitflow import contract
    from admitflow.activities import delivery

    send, held = delivery.send_signal, []

    async def holding_the_first_reservation(client, d, task_queue):
        if d.signal == contract.QUOTA_RESERVED and not held:
            held.append(d.workflow_id)
            await asyncio.sleep(120)
        return await send(client, d, task_queue)

    monkeypatch.setattr(delivery, "send_signal", holding_the_first_reservation)
    af = engine.admitflow
    await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(), local_queue_manifest()))
    await until_active(engine)  # else `first`, enqueued while the queue fetches its view, is reserved by signal
    await af.apply(loaded(workload_manifest("first", cpu="4")))
    await eventually(lambda: _is(engine, "first", "Admitted"))
    await af.apply(loaded(workload_manifest("held", cpu="1")))
    await eventually(lambda: _reason(engine, "held", "WaitingForQuota"))
    await af.finish("default/first")
    await eventually(lambda: _is(engine, "held", "Admitted"), timeout=25)
    assert held == [ids.workload_id("default/held")]


async def test_a_workload_waits_for_its_local_queue_and_is_admitted_once_it_exists(engine):
    af = engine.admitflow
    await af.apply(loaded(workload_manifest("early", cpu="1")))
    report = await eventually(lambda: _reason(engine, "early", "Misconfigured"))
    assert report == "LocalQueue lq is terminating or missing"
    await af.apply(loaded(local_queue_manifest()))
    assert await eventually(lambda: _reason(engine, "early", "Misconfigured", message_of="ClusterQueue")) == (
        "ClusterQueue cq is terminating or missing"
    )
    await af.apply(loaded(flavor_manifest(), cluster_queue_manifest()))
    await eventually(lambda: _is(engine, "early", "Admitted"))


async def test_a_cluster_queue_started_with_its_view_does_not_fetch_it(engine):
    """The catalog starts a ClusterQueue with its view (`set_view`, signal-with-start): the queue
    takes that view, with no activity to fetch it again."""
    af = engine.admitflow
    await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(), local_queue_manifest()))
    await until_active(engine)
    events = [e async for e in engine.client.get_workflow_handle(ids.cluster_queue_id("cq")).fetch_history_events()]
    signals = [e.workflow_execution_signaled_event_attributes.signal_name for e in events
               if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]
    assert signals[:1] == ["set_view"]
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED not in [e.event_type for e in events]


async def test_kueue_example_manifests_apply_unmodified_in_both_versions(engine):
    af = engine.admitflow
    for version in ("v1beta1", "v1beta2"):
        manifests = load_manifests([str(DATA / "kueue-examples" / version)])
        outcomes = await af.apply(manifests)
        assert outcomes, version
        assert {o.action for o in outcomes} <= {"created", "configured", "unchanged"}
    cqs = await af.get("ClusterQueue")
    assert cqs and all(c["apiVersion"] == "kueue.x-k8s.io/v1beta2" for c in cqs)


async def test_a_refused_apply_changes_nothing(engine):
    af = engine.admitflow
    await af.apply(loaded(local_queue_manifest(cluster_queue="cq")))
    from admitflow.client import AdmitflowError

    with pytest.raises(AdmitflowError) as err:
        await af.apply(loaded(flavor_manifest("new"), local_queue_manifest(cluster_queue="other")))
    assert str(err.value) == (
        'test: document 2 (LocalQueue lq): LocalQueue "default/lq" is invalid: '
        'spec.clusterQueue: Invalid value: "other": field is immutable'
    )
    assert await af.catalog_objects("ResourceFlavor") == []


async def test_deleting_an_admitted_workload_gives_back_its_quota(engine):
    af = engine.admitflow
    await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(), local_queue_manifest()))
    await af.apply(loaded(workload_manifest("big", cpu="4")))
    await eventually(lambda: _is(engine, "big", "Admitted"))
    await af.apply(loaded(workload_manifest("next", cpu="4")))
    await eventually(lambda: _reason(engine, "next", "WaitingForQuota"))
    await af.delete("Workload", "default/big")
    await eventually(lambda: _is(engine, "next", "Admitted"))
    assert await af.workload("default/big", missing_ok=True) is None


async def test_a_workload_run_records_no_marker_and_upserts_only_what_changed(engine):
    """A run records no marker (a `workflow.patched` would: versions live in the worker's deployment,
    not in the history) and upserts only the phase it reaches (Admitted, then Finished), never one
    with nothing new."""
    af = engine.admitflow
    await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(), local_queue_manifest()))
    await af.apply(loaded(workload_manifest("one", cpu="1")))
    await eventually(lambda: _is(engine, "one", "Admitted"))
    await af.finish("default/one")
    handle = engine.client.get_workflow_handle(ids.workload_id("default/one"))
    await handle.result()
    events = (await handle.fetch_history()).events
    markers = [e.marker_recorded_event_attributes.marker_name for e in events if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED]
    assert "core_patch" not in markers
    upserts = [sorted(e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields) for e in events
               if e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES]
    assert upserts == [["AdmitflowPhase", "AdmitflowUpdated"], ["AdmitflowPhase", "AdmitflowUpdated"]]


async def test_a_workload_that_waits_learns_why_from_its_enqueue(engine):
    """The ClusterQueue decides in the workflow task that takes the enqueue that the workload does
    not fit, and answers the enqueue with the reason (activities/mail.py, `Message.answer`): the
    workload knows why it waits without a `pending_status` signal, or a workflow task for it."""
    af = engine.admitflow
    await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(quotas={"default": {"cpu": "1"}}), local_queue_manifest()))
    await af.apply(loaded(workload_manifest("first", cpu="1")))
    await eventually(lambda: _is(engine, "first", "Admitted"))
    await af.apply(loaded(workload_manifest("second", cpu="1")))
    message = await eventually(lambda: _reason(engine, "second", "WaitingForQuota"))
    assert "insufficient unused quota for cpu in flavor default, 1 more needed" in message
    events = (await engine.client.get_workflow_handle(ids.workload_id("default/second")).fetch_history()).events
    signals = [e.workflow_execution_signaled_event_attributes.signal_name for e in events
               if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]
    assert signals == [], f"signals: {signals}"
    await af.finish("default/first")
    await eventually(lambda: _is(engine, "second", "Admitted"))


# --- helpers ------------------------------------------------------------------------------------


async def _is(engine, name: str, phase: str) -> bool:
    return (await phases(engine, name))[name] == phase


async def _equals(got: Awaitable[dict[str, str]], want: dict[str, str]) -> bool:
    return (await got) == want


async def _pending_count(engine, n: int) -> bool:
    report = await engine.admitflow.cluster_queue_report("cq")
    return report is not None and report.status.pending_workloads == n


async def _reason(engine, name: str, reason: str, message_of: str = "") -> str | None:
    report = await engine.admitflow.workload(f"default/{name}")
    c = next(c for c in report.status.conditions if c.type == "QuotaReserved")
    if c.reason == reason and message_of in c.message:
        return c.message
    return None


async def test_a_malformed_signal_changes_nothing_and_breaks_nothing(engine):
    af = engine.admitflow
    await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(), local_queue_manifest(), workload_manifest("w")))
    await eventually(lambda: _is(engine, "w", "Admitted"))
    handle = engine.client.get_workflow_handle("workload/default/w")
    await handle.signal("finish", {"succeeded": "maybe", "message": 42})
    await handle.signal("finish", ["not", "an", "object"])
    await asyncio.sleep(0.5)
    assert await _is(engine, "w", "Admitted"), "the bad signals were dropped"
    await af.finish("default/w", message="done")
    await eventually(lambda: _is(engine, "w", "Finished"))
