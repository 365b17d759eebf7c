"""Regressions of the workload lifecycle review on the real dev server, one test per finding:

F1 a Retry whose delay overflows a datetime; F2 a controller that answers garbage or fails; F3 check
attempts that count per reservation and never go back; F4 the longest Retry delay of one eviction;
F5 blockAdmission: a workload that loses readiness, and a release that crosses a reservation made
with the gate's grant; F6 deactivating a workload that holds no quota; F7 a ProvisioningRequest
attempt whose workflow ends without telling its workload."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio import activity
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, ResetReapplyType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from admitflow import ids
from admitflow.admission import provisioning
from admitflow.admission.pods_ready_gate import GateState
from admitflow.controller import Controller, ready
from tests.builders import cluster_queue_manifest, configuration_manifest, flavor_manifest, local_queue_manifest
from tests.integration import test_provisioning as prov
from tests.integration.test_admission import eventually, loaded
from tests.integration.test_admission_checks import check_manifest, checks_of, phase, report, say, setup, submit, until
from tests.integration.test_controllers import check as controller_check
from tests.integration.test_controllers import history_events, queue_with

pytestmark = pytest.mark.integration


def handle_of(engine, name: str) -> WorkflowHandle:
    return engine.client.get_workflow_handle(ids.workload_id(f"default/{name}"))


async def failed_tasks(engine, name: str) -> list[str]:
    """The failure message of every WorkflowTaskFailed event in the workload's history."""
    return [
        e.workflow_task_failed_event_attributes.failure.message
        for e in await history_events(engine, name)
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]


async def task_after_verdict_signal(engine, name: str) -> bool:
    """A workflow task ran (completed or failed) after the last `set_admission_check_state` signal."""
    events = await history_events(engine, name)
    signalled = max(
        i
        for i, e in enumerate(events)
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        and e.workflow_execution_signaled_event_attributes.signal_name == "set_admission_check_state"
    )
    done = (EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED)
    return any(e.event_type in done for e in events[signalled + 1 :])


async def new_verdict(af, name: str, after: int, check: str, state: str):
    """The first verdict record after the first `after` ones about `check` saying `state`."""

    async def found():
        r = await report(af, name)
        return next((v for v in r.verdicts[after:] if (v.check, v.state) == (check, state)), None)

    return await eventually(found, 15)


def reasons(r) -> list[str]:
    return [e.reason for e in r.events]


# --- F1: a verdict whose requeueAfterSeconds overflows ----------------------------------------------

POISON = {"name": "a", "state": "Retry", "requeueAfterSeconds": 1_000_000_000_000}


async def test_f1_a_signalled_retry_with_an_overflowing_delay_is_rejected_and_breaks_nothing(engine):
    af = engine.admitflow
    await setup(af, "a")
    await submit(af)
    await until(af, "QuotaReserved")
    before = len((await report(af)).verdicts)
    await handle_of(engine, "job").signal("set_admission_check_state", POISON)
    await eventually(lambda: task_after_verdict_signal(engine, "job"), 15)
    assert await failed_tasks(engine, "job") == [], "the verdict failed the workflow task"

    v = await new_verdict(af, "job", before, "a", "Retry")  # the query still answers
    assert v.outcome == "rejected" and "requeueAfterSeconds" in v.detail, v
    r = await report(af)
    assert await until(af, "QuotaReserved") and not [x for x in reasons(r) if x.startswith("EvictedDueTo")]
    assert checks_of(r) == [("a", "Pending", None)]
    await say(af, "job", "a", "Ready")
    await until(af, "Admitted")
    assert await failed_tasks(engine, "job") == []


async def test_f1_the_update_refuses_a_retry_with_an_overflowing_delay_and_changes_nothing(engine):
    af = engine.admitflow
    await setup(af, "a")
    await submit(af)
    before = await until(af, "QuotaReserved")
    try:
        result = await asyncio.wait_for(handle_of(engine, "job").execute_update("apply_admission_check_state", POISON), 10)
    except WorkflowUpdateFailedError as err:
        assert "requeueAfterSeconds" in str(err.cause), err.cause
    except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
        pytest.fail(f"the update was neither refused nor answered in 10 s; failed tasks: {await failed_tasks(engine, 'job')}")
    else:
        pytest.fail(f"the update was accepted: {result}")
    after = await report(af)
    assert after.verdicts == before.verdicts
    assert after.status.admission_checks == before.status.admission_checks
    assert after.status.conditions == before.status.conditions
    await say(af, "job", "a", "Ready")
    await until(af, "Admitted")
    assert await failed_tasks(engine, "job") == []


# --- F2: a controller that answers garbage or fails --------------------------------------------------


async def test_f2_a_broken_controller_is_asked_again_with_backoff_and_evicts_nothing(engine):
    """`garbage`'s controller answers a state that does not exist, `raises`'s raises a non-retryable
    error. Neither is evicted; each is asked again 5 s, then 10 s, 20 s... later: at most 3 times
    in 12 s, always about the same attempt."""
    af = engine.admitflow
    calls: dict[str, list[tuple[float, int]]] = defaultdict(list)

    @activity.defn(name="admission_check")
    async def broken(request: dict) -> dict:
        name = request["workload"]["metadata"]["name"]
        calls[name].append((time.monotonic(), request["attempt"]))
        if name == "garbage":
            return {"state": "Bogus"}
        raise ApplicationError("the quota office burned down", non_retryable=True)

    names = ("garbage", "raises")
    async with Worker(engine.client, task_queue="tests/broken", activities=[broken]):
        await queue_with(af, controller_check("gate", "tests/broken"), checks=["gate"])
        await af.set_admission_check_active("gate")
        for n in names:
            await submit(af, n)

        async def all_asked():
            return all(calls[n] for n in names)

        await eventually(all_asked, 20)
        window = 12.0
        await asyncio.sleep(max(calls[n][0][0] for n in names) + window - time.monotonic())
        for n in names:
            offsets = [round(t - calls[n][0][0], 1) for t, _ in calls[n] if t - calls[n][0][0] <= window]
            assert 2 <= len(offsets) <= 3, f"{n}: asked at {offsets} s in {window} s"
            assert offsets[1] >= 4, f"{n}: asked again {offsets[1]} s after the first answer, not about 5 s"
            assert {a for _, a in calls[n]} == {calls[n][0][1]}, f"{n}: attempts {[a for _, a in calls[n]]}"
            r = await report(af, n)
            assert [x for x in reasons(r) if x.startswith("EvictedDueTo")] == [], f"{n}: {reasons(r)}"
            assert await until(af, "QuotaReserved", n, timeout=1)
            assert not (r.status.scheduling_stats and r.status.scheduling_stats.evictions)
            assert ("Warning", "AdmissionCheckControllerFailed") in [(e.type, e.reason) for e in r.events], reasons(r)


# --- F3: attempts never go backwards -------------------------------------------------------------------


async def test_f3_each_reservation_asks_a_new_attempt_and_old_or_unknown_attempts_are_refused(engine):
    af = engine.admitflow
    asked: list[int] = []
    controller = Controller("tests/attempts")

    @controller.check
    async def _(request):
        asked.append(request.attempt)
        return ready("fine")

    async def asked_times(n: int) -> bool:
        return len(asked) >= n

    async def a_ready() -> bool:
        return [c[:2] for c in checks_of(await report(af))][:1] == [("a", "Ready")]

    async with controller.worker(engine.client):
        await af.apply(loaded(controller_check("a", "tests/attempts"), check_manifest("b")))
        for n in ("a", "b"):
            await af.set_admission_check_active(n)
        await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(checks=[{"name": "a"}, {"name": "b"}]), local_queue_manifest()))
        await submit(af)
        await eventually(a_ready)
        assert asked == [1]

        # b's Retry evicts; after its 3 s backoff the new reservation asks a about attempt 2.
        await say(af, "job", "b", "Retry", requeueAfterSeconds=3)
        await eventually(lambda: asked_times(2), 30)
        assert asked == [1, 2], "the second reservation asks a new attempt"
        await eventually(a_ready)
        await say(af, "job", "b", "Ready")
        r = await until(af, "Admitted")
        assert checks_of(r) == [("a", "Ready", None), ("b", "Ready", 1)]

        # A deactivation is not b's own Retry: b keeps its retryCount.
        await af.deactivate("default/job")
        r = await until(af, "Inactive")
        assert checks_of(r) == [("a", "Pending", None), ("b", "Pending", 1)]
        await af.activate("default/job")
        await eventually(lambda: asked_times(3), 30)
        assert asked == [1, 2, 3]
        await eventually(a_ready)

    handle = handle_of(engine, "job")
    before = len((await report(af)).verdicts)
    await handle.signal("set_admission_check_state", {"name": "a", "state": "Rejected", "attempt": 1})
    late = await new_verdict(af, "job", before, "a", "Rejected")
    assert late.outcome == "ignored", late
    assert await until(af, "QuotaReserved")

    before = len((await report(af)).verdicts)
    await handle.signal("set_admission_check_state", {"name": "a", "state": "Rejected", "attempt": 99})
    unknown = await new_verdict(af, "job", before, "a", "Rejected")
    assert unknown.outcome == "rejected" and "attempt" in unknown.detail and "99" in unknown.detail, unknown
    r = await until(af, "QuotaReserved")
    assert checks_of(r)[0][:2] == ("a", "Ready")
    raw: dict[str, Any] = await handle.query("workload")
    assert (raw.get("checkAttempts") or {}).get("a") == 3, raw.get("checkAttempts")


# --- F4: the longest delay of one eviction wins ---------------------------------------------------------


async def test_f4_the_longest_retry_delay_wins_whichever_verdict_comes_first(engine):
    """Two workloads at once, one per order: `a-first` hears a's Retry (1 s) then b's (12 s),
    `b-first` the reverse. Both wait out b's 12 s. (A Retry without a delay requeues at once, and a
    workload that fits is reserved again in that same workflow task, from its enqueue's answer: a
    Retry after it is about the new reservation. So a's delay is short, not none: b's Retry, sent
    right after a's, is in the history before a's backoff can end.)"""
    af = engine.admitflow
    await setup(af, "a", "b")
    orders = {"a-first": ("a", "b"), "b-first": ("b", "a")}
    for name in orders:
        await submit(af, name, cpu="1")
    for name in orders:
        await until(af, "QuotaReserved", name)
    outcomes = await asyncio.gather(*(_longest_delay_wins(engine, n, o) for n, o in orders.items()), return_exceptions=True)
    failures = {n: f"{type(o).__name__}: {o}" for n, o in zip(orders, outcomes) if isinstance(o, BaseException)}
    assert not failures, failures


async def _longest_delay_wins(engine, name: str, order: tuple[str, str]) -> None:
    af = engine.admitflow
    payloads = {"a": {"name": "a", "state": "Retry", "requeueAfterSeconds": 1}, "b": {"name": "b", "state": "Retry", "requeueAfterSeconds": 12}}
    handle = handle_of(engine, name)
    before = len((await report(af, name)).verdicts)
    sent = datetime.now(UTC)
    for check in order:
        await handle.signal("set_admission_check_state", payloads[check])
    b_verdict = await new_verdict(af, name, before, "b", "Retry")
    await new_verdict(af, name, before, "a", "Retry")
    r = await report(af, name)
    assert b_verdict.outcome == "applied", f"b's verdict was {b_verdict.outcome}: {b_verdict.detail}"
    b = next(c for c in r.status.admission_checks if c.name == "b")
    rs = r.status.requeue_state
    assert rs is not None and rs.requeue_at is not None, f"no backoff: requeueState {rs}, events {reasons(r)}"
    assert rs.requeue_at >= b.last_transition_time + timedelta(seconds=11), (rs.requeue_at, b.last_transition_time)

    r = await until(af, "QuotaReserved", name, timeout=45)
    reserved = r.status.condition("QuotaReserved").last_transition_time
    assert reserved >= sent + timedelta(seconds=9), f"reserved again {(reserved - sent).total_seconds()} s after the verdicts"
    assert reasons(r).count("EvictedDueToAdmissionCheck") == 1, reasons(r)
    assert reasons(r).count("QuotaReserved") == 2, reasons(r)


# --- F5: blockAdmission: a workload that loses readiness; a release that crosses a gated reservation ---


async def apply_with_block_admission(af) -> None:
    await af.apply(
        loaded(
            configuration_manifest(timeout="10m", recoveryTimeout="10m", blockAdmission=True),
            flavor_manifest(), cluster_queue_manifest(), local_queue_manifest(),
        )
    )


async def test_f5_block_admission_holds_new_workloads_while_an_admitted_one_recovers(engine):
    af = engine.admitflow
    await apply_with_block_admission(af)
    await submit(af, "w1", cpu="1")
    await until(af, "Admitted", "w1")

    async def pods(status: str, reason: str) -> bool:
        c = (await report(af, "w1")).status.condition("PodsReady")
        return c is not None and (c.status, c.reason) == (status, reason)

    await af.pods_ready("default/w1", ready=True)
    await eventually(lambda: pods("True", "Started"))
    await af.pods_ready("default/w1", ready=False)
    await eventually(lambda: pods("False", "WaitForRecovery"))

    await eventually(lambda: gate_counts(engine, "w1"))  # w1 told the gate it is not ready again

    await submit(af, "w2", cpu="1")

    async def held() -> bool:
        return (await report(af, "w2")).status.condition("QuotaReserved").reason == "WaitingForPodsReady"

    await eventually(held)
    assert "QuotaReserved" not in reasons(await report(af, "w2")), "w2 reserved while w1 waits for recovery"

    await af.pods_ready("default/w1", ready=True)
    await until(af, "Admitted", "w2")


async def test_f5_a_release_that_crosses_a_reservation_with_the_gates_grant_settles_the_gate(monkeypatch, engine):
    """The queue reserves `crossed` with the blockAdmission gate's grant (the gate counts it not
    ready), and `crossed` is deactivated before that reservation reaches it: it releases the place it
    knows of, which frees the reserved quota, and drops the reservation when it comes. Nobody told
    the gate, so it counted `crossed` for good and no other workload was ever admitted. The queue
    now settles the gate when a release frees a reservation made with its grant."""
    from admitflow import contract
    from admitflow.activities import delivery

    send, let_through = delivery.send_signal, asyncio.Event()
    crossed = ids.workload_id("default/crossed")

    async def holding_crossed_reservation(client, d, task_queue):
        if d.signal == contract.QUOTA_RESERVED and d.workflow_id == crossed:
            await let_through.wait()
        return await send(client, d, task_queue)

    monkeypatch.setattr(delivery, "send_signal", holding_crossed_reservation)
    af = engine.admitflow
    await apply_with_block_admission(af)
    await submit(af, "crossed", cpu="1")

    await eventually(lambda: gate_counts(engine, "crossed"), timeout=30)
    assert await phase(af, "crossed") == "Pending", "its reservation is held on its way"
    await af.deactivate("default/crossed")
    await until(af, "Inactive", "crossed")
    let_through.set()
    await submit(af, "next", cpu="1")
    await until(af, "Admitted", "next", timeout=30)
    assert await phase(af, "crossed") == "Inactive"
    assert not await gate_counts(engine, "crossed")


async def test_f5_a_run_that_takes_the_place_of_a_gated_reservation_settles_the_gate(engine):
    """`w1` is admitted with the gate's grant and not ready when its workflow is terminated (an
    operator's doing: nothing gives its quota back), and `w1` is applied again. The new run's enqueue
    takes the place of the old run's reservation, quota included; the gate counted the old run not
    ready for good, and the new run waited for a grant that never came. The queue now settles the
    gate for a reservation made with its grant that an enqueue replaces."""
    af = engine.admitflow
    await apply_with_block_admission(af)
    await submit(af, "w1", cpu="1")
    first = (await until(af, "Admitted", "w1")).metadata.uid
    await eventually(lambda: gate_counts(engine, "w1"))
    await handle_of(engine, "w1").terminate(reason="lost")
    await submit(af, "w1", cpu="1")

    async def admitted_again() -> bool:
        r = await report(af, "w1")
        return r.metadata.uid != first and await phase(af, "w1") == "Admitted"

    await eventually(admitted_again, timeout=30)


@pytest.mark.parametrize("reapply", ["signals", "nothing"])
async def test_f5_a_gated_workload_reset_to_its_first_workflow_task_is_admitted_again_and_replays(engine, reapply):
    """`w1`, admitted with the blockAdmission gate's grant and not ready, is reset in Temporal to its
    first workflow task (the Temporal UI's and CLI's "first workflow task" reset), with the signals
    after it given again (Temporal's default) or not. Two faults: the new run drew its uid from the
    workflow's randomness, which the reset changes live but not when the history is replayed, so the
    run's history no longer replayed (a nondeterminism error, and a wedge at the next replay); and
    without the signals, the new run enqueued the ticket the queue had reserved and heard nothing
    back, while the gate counted it not ready, so no other workload was ever admitted. The client now
    gives the uid at submission, and the queue answers such an enqueue with its reservation. The
    engine fixture replays every run afterwards."""
    af = engine.admitflow
    await apply_with_block_admission(af)
    await submit(af, "w1", cpu="1")
    await until(af, "Admitted", "w1")
    await eventually(lambda: gate_counts(engine, "w1"))
    handle = handle_of(engine, "w1")
    first = next(e.event_id for e in (await handle.fetch_history()).events
                 if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
    old = (await handle.describe()).run_id
    await engine.client.workflow_service.reset_workflow_execution(ResetWorkflowExecutionRequest(
        namespace=engine.client.namespace,
        workflow_execution=WorkflowExecution(workflow_id=handle.id, run_id=old),
        reason="test: reset to the first workflow task", workflow_task_finish_event_id=first, request_id=str(uuid.uuid4()),
        reset_reapply_type=ResetReapplyType.RESET_REAPPLY_TYPE_SIGNAL if reapply == "signals" else ResetReapplyType.RESET_REAPPLY_TYPE_NONE,
    ))

    async def admitted_in_the_new_run() -> bool:
        new = await engine.client.get_workflow_handle(handle.id).describe()
        return new.run_id != old and await phase(af, "w1") == "Admitted"

    await eventually(admitted_in_the_new_run, timeout=30)
    await af.pods_ready("default/w1", ready=True)
    await submit(af, "w2", cpu="1")
    await until(af, "Admitted", "w2", timeout=30)
    assert not await gate_counts(engine, "w1")


async def gate_counts(engine, name: str) -> bool:
    """The blockAdmission gate counts workload `name` as reserved with its grant and not ready."""
    try:
        gate = await engine.client.get_workflow_handle(ids.PODS_READY_GATE_ID).query("status", result_type=GateState)
    except RPCError:  # the gate starts with the first grant asked of it
        return False
    return f"default/{name}" in gate.not_ready


# --- F6: deactivating a workload that holds no quota -----------------------------------------------------


async def test_f6_deactivating_a_waiting_workload_resets_a_check_that_said_ready(engine):
    af = engine.admitflow
    await setup(af, "a")
    await submit(af, "filler", cpu="4")
    await until(af, "QuotaReserved", "filler")
    await submit(af, "job", cpu="2")

    async def waits_with_its_check():
        r = await report(af)
        return r.status.condition("QuotaReserved").reason == "WaitingForQuota" and checks_of(r) == [("a", "Pending", None)]

    await eventually(waits_with_its_check)
    status = await say(af, "job", "a", "Ready", message="approved early")
    assert [(c.name, c.state) for c in status.admission_checks] == [("a", "Ready")], "kept before reservation"
    await af.deactivate("default/job")
    r = await until(af, "Inactive")
    (a,) = r.status.admission_checks
    assert (a.state, a.message) == ("Pending", "Reset to Pending after eviction. Previously: Ready")


async def test_f6_a_workload_deactivated_in_its_backoff_keeps_its_eviction_time_as_its_queue_order(engine):
    """StrictFIFO, 4 cpu: `w` (2 cpu) and `blocker` (2) hold quota, `other` (4) waits at the head.
    `w` is evicted by a Retry (30 s), deactivated and activated: it queues by its eviction time,
    behind `other`, and `other` has the quota `blocker` gives back."""
    af = engine.admitflow
    await af.apply(loaded(check_manifest("a")))
    await af.set_admission_check_active("a")
    await af.apply(
        loaded(flavor_manifest(), cluster_queue_manifest(strategy="StrictFIFO", checks=[{"name": "a"}]), local_queue_manifest())
    )
    await submit(af, "w", cpu="2")
    await until(af, "QuotaReserved", "w")
    await submit(af, "blocker", cpu="2")
    await until(af, "QuotaReserved", "blocker")
    await asyncio.sleep(1.1)  # creation times are kept to the second: other's is later than w's
    await submit(af, "other", cpu="4")

    async def queued(name: str) -> bool:
        return name in [p.name for p in await af.pending_workloads("cq")]

    await eventually(lambda: queued("other"))
    await asyncio.sleep(1.1)  # and w's eviction later than other's creation
    await say(af, "w", "a", "Retry", requeueAfterSeconds=30)
    r = await until(af, "Backoff", "w")
    evicted = r.status.condition("Evicted")
    assert (evicted.status, evicted.reason) == ("True", "AdmissionCheck")
    evicted_at = evicted.last_transition_time

    await af.deactivate("default/w")
    r = await until(af, "Inactive", "w")
    assert r.status.requeue_state is None or r.status.requeue_state.requeue_at is None, r.status.requeue_state
    assert r.status.condition("Evicted").status == "True"

    await af.activate("default/w")

    async def placed():
        r = await report(af, "w")
        return reasons(r).count("QuotaReserved") > 1 or await queued("w")

    await eventually(placed)
    r = await report(af, "w")
    assert reasons(r).count("QuotaReserved") == 1, "w jumped ahead of other on activation"
    pending = {p.name: p for p in await af.pending_workloads("cq")}
    assert [n for n in sorted(pending, key=lambda n: pending[n].position_in_cluster_queue)] == ["other", "w"]
    assert pending["w"].queued_since == evicted_at

    await af.finish("default/blocker")
    await until(af, "QuotaReserved", "other")
    assert await until(af, "Pending", "w", timeout=1)


# --- F7: a ProvisioningRequest attempt that ends unannounced ---------------------------------------------


async def test_f7_a_terminated_provisioning_attempt_is_replaced_and_the_check_goes_on(engine):
    af = engine.admitflow
    await prov.setup(af, cfg=prov.config(parameters={}), group=prov.node_group(gpus="1"))  # waits: Provisioned=False
    await prov.submit(af)
    await prov.has(engine, "job-prov-1", "Provisioned", "False")
    await prov.check_state(af, "Pending", "Capacity is not found, CA will try to find it later.")
    first = engine.client.get_workflow_handle(provisioning.workflow_id("default", "job", "prov", 1))
    gone = (await first.describe()).run_id
    await first.terminate(reason="lost")

    async def replaced():
        for n in (1, 2, 3):
            try:
                d = await engine.client.get_workflow_handle(provisioning.workflow_id("default", "job", "prov", n)).describe()
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    continue
                raise
            if d.status == WorkflowExecutionStatus.RUNNING and d.run_id != gone:
                return n
        return None

    try:
        await eventually(replaced, 20)
    except AssertionError:
        r = await report(af)
        stuck = [(c.name, c.state, c.message) for c in r.status.admission_checks]
        pytest.fail(f"no ProvisioningCheckWorkflow runs for check prov 20 s after attempt 1 was terminated; checks: {stuck}")
    await af.apply(loaded(prov.node_group(gpus="16")))  # capacity for it now
    r = await until(af, "Admitted", timeout=30)
    assert next(c for c in r.status.admission_checks if c.name == "prov").state == "Ready"
