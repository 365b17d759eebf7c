"""The ProvisioningRequest check end to end on the dev server, with the simulated autoscaler: every
case of KEP-1136's test plan, plus what Kueue's integration tests add (retries up to the limit,
booking expiry and revocation before and after admission, no podSets of interest). Conditions are
flipped by hand where Kueue's tests flip them, through the simulated autoscaler."""

from __future__ import annotations

from typing import Any

import pytest

from admitflow.admission import workload as wl
from admitflow.admission.workload import WorkloadState
from admitflow.api.provisioning_request import ProvisioningRequest
from admitflow.activities.provisioning.simulated import SimulatedBackend
from tests.builders import cluster_queue_manifest, local_queue_manifest
from tests.integration.test_admission import eventually, loaded
from tests.integration.test_admission_checks import check_manifest, checks_of, cond, until

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"
CLASS = "check-capacity.autoscaling.x-k8s.io"
PROV = "kueue.x-k8s.io/provisioning-request"


def config(**spec: Any) -> dict:
    body = {
        "provisioningClassName": CLASS,
        "parameters": {"noRetry": "true"},
        "retryStrategy": {"backoffLimitCount": 2, "backoffBaseSeconds": 1, "backoffMaxSeconds": 10},
        **spec,
    }
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ProvisioningRequestConfig", "metadata": {"name": "cfg"}, "spec": body}


def node_group(gpus: str = "8", **spec: Any) -> dict:
    return {
        "apiVersion": "admitflow.io/v1",
        "kind": "SimulatedNodeGroup",
        "metadata": {"name": "pool"},
        "spec": {"capacity": {GPU: gpus, "cpu": "64"}, "labels": {"accelerator": "a100"}, **spec},
    }


def gpu_workload(name: str = "job", gpus: str = "2", priority: int | None = None, cpu_only: bool = False) -> dict:
    resources = {"requests": {"cpu": "1"}} if cpu_only else {"requests": {"cpu": "1"}, "limits": {GPU: gpus}}
    spec: dict = {
        "queueName": "lq",
        "podSets": [{"name": "main", "count": 2, "template": {"spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]}}}],
    }
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def queue(checks: list[str], gpus: str = "16", **spec: Any) -> dict:
    return cluster_queue_manifest(quotas={"a100": {"cpu": "64", GPU: gpus}}, checks=[{"name": n} for n in checks] or None, **spec)


async def setup(af, *, cfg: dict | None = None, group: dict | None = None, approval: bool = False, gpus: str = "16", **cq: Any) -> None:
    """A ClusterQueue `cq` on flavor `a100` guarded by the ProvisioningRequest check `prov` (and a
    check `approval` answered by the test, with `approval`), and the node group `pool`."""
    docs = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "a100"}, "spec": {"nodeLabels": {"accelerator": "a100"}}},
        cfg or config(),
        check_manifest("prov", controllerName=PROV, parameters={"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": "cfg"}),
        group or node_group(),
    ]
    if approval:
        docs.append(check_manifest("approval"))
    await af.apply(loaded(*docs))
    if approval:
        await af.set_admission_check_active("approval")
    await af.apply(loaded(queue(["prov", "approval"] if approval else ["prov"], gpus=gpus, **cq), local_queue_manifest()))


async def submit(af, *docs: dict) -> None:
    await af.apply(loaded(*(docs or (gpu_workload(),))))


# --- the simulated autoscaler, as Kueue's tests drive the ProvisioningRequest API ---------------------


async def requests(engine) -> dict[str, ProvisioningRequest]:
    return {r.metadata.name: r for r in await SimulatedBackend(engine.client).list()}


async def request(engine, name: str) -> ProvisioningRequest | None:
    return (await requests(engine)).get(name)


async def set_condition(engine, name: str, type_: str, status: str = "True", message: str = "") -> None:
    await SimulatedBackend(engine.client).set_condition("default", name, type_, status=status, message=message)


async def gone(engine, name: str) -> None:
    async def deleted():
        return await request(engine, name) is None

    await eventually(deleted)


async def has(engine, name: str, type_: str, status: str = "True") -> ProvisioningRequest:
    async def found():
        r = await request(engine, name)
        return r if r is not None and r.condition(type_) is not None and r.condition(type_).status == status else None

    return await eventually(found)


async def check_state(af, state: str, message: str | None = None, name: str = "job", timeout: float = 20.0):
    async def reached():
        r = await af.workload(f"default/{name}")
        c = next((c for c in r.status.admission_checks or () if c.name == "prov"), None)
        return r if c is not None and c.state == state and (message is None or c.message == message) else None

    return await eventually(reached, timeout)


def events(report, reason: str) -> list[str]:
    return [e.message for e in report.events if e.reason == reason]


# --- provisioned, then the workload finishes, is preempted, is deleted ----------------------------------


async def test_provisioned_then_finished(engine):
    af = engine.admitflow
    await setup(af)
    await submit(af)
    r = await until(af, "Admitted")
    prov = next(c for c in r.status.admission_checks if c.name == "prov")
    assert (prov.state, prov.message) == ("Ready", "Capacity is found in the cluster")
    assert [u.to_wire() for u in prov.pod_set_updates] == [
        {"name": "main", "annotations": {"autoscaling.x-k8s.io/consume-provisioning-request": "job-prov-1", "autoscaling.x-k8s.io/provisioning-class-name": CLASS}}
    ]
    assert events(r, "ProvisioningRequestCreated") == ['Created ProvisioningRequest: "job-prov-1"']
    created = await request(engine, "job-prov-1")
    assert created.spec.provisioning_class_name == CLASS and created.spec.parameters == {"noRetry": "true"}
    assert [(ps.pod_template_ref.name, ps.count) for ps in created.spec.pod_sets] == [("ppt-job-prov-1-main", 2)]
    consumed = await has(engine, "job-prov-1", "BookingExpired")
    assert consumed.condition("BookingExpired").reason == "CapacityBookingConsumed", "admitted pods consume the booking"
    await af.finish("default/job")
    await gone(engine, "job-prov-1")


async def test_provisioned_then_preempted(engine):
    af = engine.admitflow
    await setup(af, gpus="4", preemption={"withinClusterQueue": "LowerPriority"})
    await submit(af, gpu_workload("low", priority=0))
    await until(af, "Admitted", "low")
    await submit(af, gpu_workload("high", priority=100))
    low = await until(af, "Pending", "low")
    assert cond(low, "Preempted")[0] == "True"
    assert checks_of(low) == [("prov", "Pending", None)], "a Ready check goes back to Pending, no retry counted"
    await gone(engine, "low-prov-1")
    await until(af, "Admitted", "high")
    assert await request(engine, "high-prov-1") is not None


async def test_provisioned_then_deleted(engine):
    af = engine.admitflow
    await setup(af)
    await submit(af)
    await until(af, "Admitted")
    await af.delete("Workload", "default/job")
    await gone(engine, "job-prov-1")


# --- failed ---------------------------------------------------------------------------------------------


async def test_failed_is_retried_with_backoff_until_the_limit(engine):
    af = engine.admitflow
    await setup(af, group=node_group(gpus="1"))  # 4 GPUs never fit: noRetry makes each attempt Failed
    await submit(af)
    r = await until(af, "Inactive", timeout=30)
    assert events(r, "ProvisioningRequestCreated") == [f'Created ProvisioningRequest: "job-prov-{n}"' for n in (1, 2, 3)]
    assert checks_of(r) == [("prov", "Pending", 2)], "the deactivation resets the Rejected check and keeps its retryCount"
    assert events(r, "AdmissionCheckUpdated")[-1] == (
        "Admission check prov updated state from Pending to Rejected with message: CA could not find requested capacity"
    )
    retries = [v for v in r.verdicts if v.state == "Retry" and v.outcome == "applied"]
    assert [v.check for v in retries] == ["prov", "prov"]
    evicted = events(r, "EvictedDueToAdmissionCheck")
    assert evicted == ['Evicted due to AdmissionCheck in Retry state: "prov" (Retrying after failure: CA could not find requested capacity)'] * 2
    assert cond(r, "Evicted")[1] == "DeactivatedDueToAdmissionCheck"
    assert events(r, "AdmissionCheckRejected") == ['Deactivated due to AdmissionCheck in Rejected state: "prov" (CA could not find requested capacity)']
    for n in (1, 2, 3):
        await gone(engine, f"job-prov-{n}")


async def test_a_retry_waits_its_backoff(engine):
    af = engine.admitflow
    await setup(af, cfg=config(retryStrategy={"backoffLimitCount": 3, "backoffBaseSeconds": 30}), group=node_group(gpus="1"))
    await submit(af)
    r = await until(af, "Backoff")
    assert checks_of(r) == [("prov", "Pending", 1)]
    (c,) = r.status.admission_checks
    assert c.requeue_after_seconds == 30
    assert (r.status.requeue_state.requeue_at - cond_time(r, "Evicted")).total_seconds() == pytest.approx(30, abs=1)


def cond_time(r, type_: str):
    return r.status.condition(type_).last_transition_time


# --- booking expired, capacity revoked ------------------------------------------------------------------


async def test_booking_expired_before_admission_retries(engine):
    af = engine.admitflow
    await setup(af, approval=True)
    await submit(af)
    await check_state(af, "Ready")
    await set_condition(engine, "job-prov-1", "BookingExpired", message="Capacity reservation time is expired")

    async def provisioned_again():
        r = await af.workload("default/job")
        return r if ("prov", "Ready", 1) in checks_of(r) else None

    r = await eventually(provisioned_again)  # the second attempt, after the backoff
    assert events(r, "ProvisioningRequestCreated") == ['Created ProvisioningRequest: "job-prov-1"', 'Created ProvisioningRequest: "job-prov-2"']
    assert checks_of(r)[1] == ("prov", "Ready", 1)
    assert any(v.check == "prov" and v.state == "Retry" and v.outcome == "applied" for v in r.verdicts)
    await gone(engine, "job-prov-1")


async def test_booking_expired_after_admission_is_ignored_but_revocation_deactivates(engine):
    af = engine.admitflow
    await setup(af)
    await submit(af)
    await until(af, "Admitted")
    await set_condition(engine, "job-prov-1", "BookingExpired", message="expired")
    await set_condition(engine, "job-prov-1", "CapacityRevoked", message="the node pool was reclaimed")
    r = await until(af, "Inactive")
    assert events(r, "EvictedDueToAdmissionCheck") == [], "the expired booking changed nothing"
    assert checks_of(r) == [("prov", "Pending", None)]
    assert cond(r, "Evicted")[1] == "DeactivatedDueToAdmissionCheck"
    assert events(r, "AdmissionCheckRejected") == ['Deactivated due to AdmissionCheck in Rejected state: "prov" (the node pool was reclaimed)']
    await gone(engine, "job-prov-1")


async def test_capacity_revoked_before_admission_deactivates(engine):
    af = engine.admitflow
    await setup(af, approval=True)
    await submit(af)
    await check_state(af, "Ready")
    await set_condition(engine, "job-prov-1", "CapacityRevoked", message="revoked")
    r = await until(af, "Inactive")
    assert cond(r, "Admitted")[0] == "False"
    await gone(engine, "job-prov-1")


# --- the workload, the queue, the config change ------------------------------------------------------


async def test_deactivated_workload_loses_its_request(engine):
    af = engine.admitflow
    await setup(af)
    await submit(af)
    await until(af, "Admitted")
    await af.deactivate("default/job")
    await until(af, "Inactive")
    await gone(engine, "job-prov-1")


async def test_queue_no_longer_requires_the_check(engine):
    af = engine.admitflow
    await setup(af, cfg=config(parameters={}), group=node_group(gpus="1"))  # waits: Provisioned=False
    await submit(af)
    await has(engine, "job-prov-1", "Provisioned", "False")
    r = await check_state(af, "Pending", "Capacity is not found, CA will try to find it later.")
    assert wl.phase(WorkloadState(workload=r)) == "QuotaReserved"
    await af.apply(loaded(queue([])))
    r = await until(af, "Admitted")
    assert r.status.admission_checks is None
    await gone(engine, "job-prov-1")


async def test_config_change_makes_the_request_again(engine):
    af = engine.admitflow
    await setup(af, cfg=config(parameters={"tier": "a"}), group=node_group(gpus="1"))
    await submit(af)
    await has(engine, "job-prov-1", "Provisioned", "False")
    # The workload has heard of the first request (else the change stops it before its report
    # arrives, and only the second is told: CI saw that once).
    await check_state(af, "Pending", "Capacity is not found, CA will try to find it later.")
    await af.apply(loaded(config(parameters={"tier": "b"})))

    async def remade():
        r = await request(engine, "job-prov-1")
        return r if r is not None and r.spec.parameters == {"tier": "b"} else None

    await eventually(remade)

    async def told_twice():
        r = await af.workload("default/job")
        return r if len(events(r, "ProvisioningRequestCreated")) == 2 else None

    r = await eventually(told_twice)
    assert events(r, "ProvisioningRequestCreated") == ['Created ProvisioningRequest: "job-prov-1"'] * 2
    assert wl.phase(WorkloadState(workload=r)) == "QuotaReserved"
    assert r.provisioning_requests[0].parameters == {"tier": "b"}


async def test_config_removed_makes_the_check_inactive(engine):
    af = engine.admitflow
    await setup(af, cfg=config(parameters={}), group=node_group(gpus="1"))
    await submit(af)
    await has(engine, "job-prov-1", "Provisioned", "False")
    await af.delete("ProvisioningRequestConfig", "cfg")
    await check_state(af, "Pending", "the check is not active")
    await gone(engine, "job-prov-1")
    (ac,) = await af.catalog_objects("AdmissionCheck", "prov")
    active = next(c for c in ac.status.conditions if c.type == "Active")
    assert (active.status, active.reason) == ("False", "BadParametersRef")


async def test_no_podsets_of_interest_admits_without_a_request(engine):
    af = engine.admitflow
    await setup(af, cfg=config(managedResources=[GPU]))
    await submit(af, gpu_workload(cpu_only=True))
    r = await until(af, "Admitted")
    assert checks_of(r) == [("prov", "Ready", None)]
    assert r.status.admission_checks[0].message == "the provisioning request is not needed"
    assert events(r, "ProvisioningRequestCreated") == []
    assert await requests(engine) == {}


async def test_a_refused_start_begins_the_attempt_seconds_after_the_run_holding_its_id_ends(engine):
    """Another run holds the attempt's workflow ID when the workload starts it (here a stand-in that
    no worker runs; in life, the attempt's previous run, still closing after it reported its request
    deleted, which then answers nothing): the start is refused, and the attempt begins within seconds
    of that run ending, not at the next 5-minute probe (the engine fixture replays the history after)."""
    from temporalio.api.enums.v1 import EventType

    from admitflow import ids

    af = engine.admitflow
    stand_in = await engine.client.start_workflow("StandIn", id="provisioning/default/job/prov/1", task_queue="nobody")
    await setup(af, cfg=config(parameters={}), group=node_group(gpus="1"))
    await submit(af)

    async def refused():
        history = await engine.client.get_workflow_handle(ids.workload_id("default/job")).fetch_history()
        return any(e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_FAILED for e in history.events)

    await eventually(refused)
    assert await request(engine, "job-prov-1") is None
    await stand_in.terminate("the run holding the ID ends")
    await has(engine, "job-prov-1", "Provisioned", "False")  # within 20 s
