"""Two-stage admission on the real dev server: KEP-993's and KEP-3258's test plans, one transition
per test, each asserting the conditions, check states, retryCount, requeueAt and events."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType

from admitflow import contract, ids
from admitflow import search_attributes as sa
from admitflow.admission import workload as wl
from admitflow.admission.checks import Verdict
from admitflow.admission.workload import WorkloadState
from admitflow.client import AdmitflowError
from admitflow.admission import lifecycle as lc
from tests.builders import cluster_queue_manifest, flavor_manifest, local_queue_manifest, workload_manifest
from tests.integration.test_admission import eventually, loaded

pytestmark = pytest.mark.integration


def check_manifest(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "AdmissionCheck",
        "metadata": {"name": name},
        "spec": {"controllerName": "tests", **spec},
    }


async def setup(af, *names: str, cpu: str = "4") -> None:
    await af.apply(loaded(*(check_manifest(n) for n in names)))
    for n in names:
        await af.set_admission_check_active(n)
    await af.apply(
        loaded(
            flavor_manifest(),
            cluster_queue_manifest(quotas={"default": {"cpu": cpu}}, checks=[{"name": n} for n in names] or None),
            local_queue_manifest(),
        )
    )


async def report(af, name: str = "job"):
    return await af.workload(f"default/{name}")


async def phase(af, name: str = "job") -> str:
    return wl.phase(WorkloadState(workload=await report(af, name)))


async def until(af, want: str, name: str = "job", timeout: float = 20.0):
    async def reached():
        return await phase(af, name) == want

    await eventually(reached, timeout)
    return await report(af, name)


def cond(r, type_: str) -> tuple[str, str, str] | None:
    c = r.status.condition(type_)
    return (c.status, c.reason, c.message) if c else None


def checks_of(r) -> list[tuple[str, str, int | None]]:
    return [(c.name, c.state, c.retry_count) for c in r.status.admission_checks or ()]


async def submit(af, name: str = "job", cpu: str = "2") -> None:
    await af.apply(loaded(workload_manifest(name, cpu=cpu)))


async def say(af, name: str, check: str, state: str, **more):
    return await af.verdict(f"default/{name}", Verdict(name=check, state=state, **more))


async def usage(af) -> int:
    cq = await af.cluster_queue_report("cq")
    return cq.status.admitted_workloads


@pytest.mark.parametrize("names", [[], ["a"], ["a", "b"]], ids=["no-checks", "one-check", "two-checks"])
async def test_admitted_once_every_check_is_ready(engine, names):
    af = engine.admitflow
    await setup(af, *names)
    await submit(af)
    r = await until(af, "QuotaReserved" if names else "Admitted")
    for i, n in enumerate(names):
        assert cond(r, "Admitted") == ("False", "UnsatisfiedAdmissionChecks", "The workload has not all checks ready")
        status = await say(af, "job", n, "Ready")
        assert [c.state for c in status.admission_checks][: i + 1] == ["Ready"] * (i + 1)
    r = await until(af, "Admitted")
    assert cond(r, "Admitted") == ("True", "Admitted", "The workload is admitted")
    assert checks_of(r) == [(n, "Ready", None) for n in names]
    assert [e.reason for e in r.events if e.reason in ("QuotaReserved", "Admitted")] == ["QuotaReserved", "Admitted"]
    assert [e.reason for e in r.events].count("AdmissionCheckUpdated") == len(names)
    await eventually(lambda: _admitted_count(af, 1))


async def admitted_by_its_check(af) -> None:
    """`job` holds quota in a queue with check `a`, whose `Ready` (by update) admits it."""
    await setup(af, "a")
    await submit(af)
    await until(af, "QuotaReserved")
    status = await say(af, "job", "a", "Ready")
    assert status.condition("Admitted").status == "True"


def summarised(event, summary: str) -> bool:
    """Whether a history event carries that summary (timers, local activities' markers)."""
    return event.user_metadata.summary.data == json.dumps(summary).encode()


async def queue_notices(engine, queue) -> list[str]:
    """The `admitted` and `release` notices a ClusterQueue took, in order: signals, and the messages
    of its `take_messages` updates."""
    received: list[str] = []
    async for e in queue.fetch_history_events():
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            received.append(e.workflow_execution_signaled_event_attributes.signal_name)
        elif e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            request = e.workflow_execution_update_accepted_event_attributes.accepted_request
            if request.input.name == contract.TAKE_MESSAGES:
                (batch,) = await engine.client.data_converter.decode(request.input.args.payloads)
                received += [m["signal"] for m in batch["messages"]]
    return [s for s in received if s in ("admitted", "release")]


async def notices_once_released(engine, queue) -> list[str]:
    """`queue_notices` once a `release` is among them, else nothing."""
    got = await queue_notices(engine, queue)
    return got if "release" in got else []


async def _admitted_count(af, n: int) -> bool:
    return await usage(af) == n


async def test_retry_with_one_check_backs_off_then_admits(engine):
    af = engine.admitflow
    await setup(af, "a")
    await submit(af)
    await until(af, "QuotaReserved")
    await say(af, "job", "a", "Retry", requeueAfterSeconds=5, message="not yet")
    r = await report(af)
    assert wl.phase(WorkloadState(workload=r)) == "Backoff"
    assert cond(r, "Evicted") == ("True", "AdmissionCheck", 'Evicted due to AdmissionCheck in Retry state: "a" (not yet)')
    assert cond(r, "Requeued")[:2] == ("False", "AdmissionCheck")
    retry_at = r.status.admission_checks[0].last_transition_time
    assert r.status.requeue_state.requeue_at == retry_at + timedelta(seconds=5)
    assert checks_of(r) == [("a", "Pending", 1)]
    assert r.status.admission_checks[0].message == "Reset to Pending after eviction. Previously: Retry"
    assert "EvictedDueToAdmissionCheck" in [e.reason for e in r.events]
    r = await until(af, "QuotaReserved")
    assert cond(r, "Requeued") == ("True", "BackoffFinished", "The workload backoff was finished")
    assert r.status.requeue_state is None
    await say(af, "job", "a", "Ready", attempt=2)
    r = await until(af, "Admitted")
    assert cond(r, "Evicted") == ("False", "QuotaReserved", 'Previously: Evicted due to AdmissionCheck in Retry state: "a" (not yet)')
    assert r.status.scheduling_stats.evictions[0].count == 1


async def test_retry_with_two_checks_waits_for_the_latest_end(engine):
    af = engine.admitflow
    await setup(af, "a", "b")
    await submit(af)
    await until(af, "QuotaReserved")
    # b says Retry first with the longer delay; a later, with a shorter one: each counts from its own transition.
    await say(af, "job", "b", "Retry", requeueAfterSeconds=5)
    r = await report(af)
    assert checks_of(r) == [("a", "Pending", None), ("b", "Pending", 1)], "b's Retry evicted at once"
    b = r.status.admission_checks[1]
    assert r.status.requeue_state.requeue_at == b.last_transition_time + timedelta(seconds=5)
    await until(af, "QuotaReserved", timeout=15)
    await say(af, "job", "a", "Retry", requeueAfterSeconds=1)
    # That eviction ended attempt 2 of b too: b approves attempt 3 ahead of the next reservation.
    await say(af, "job", "b", "Ready", attempt=3)
    r = await report(af)
    assert checks_of(r)[0] == ("a", "Pending", 1)
    await until(af, "QuotaReserved", timeout=10)
    await say(af, "job", "a", "Ready")
    await say(af, "job", "b", "Ready")
    await until(af, "Admitted")


async def test_max_delay_of_two_retry_checks_at_one_eviction(engine):
    af = engine.admitflow
    await setup(af, "a", "b")
    await submit(af)
    await until(af, "QuotaReserved")
    # Both in Retry at the moment of eviction: the update applies a's verdict first, b's arrives
    # during the backoff and may only push the requeue later. The delays leave a loaded machine
    # seconds to read the backoff before it ends.
    await say(af, "job", "a", "Retry", requeueAfterSeconds=5)
    first = (await report(af)).status.requeue_state.requeue_at
    await say(af, "job", "b", "Retry", requeueAfterSeconds=8)
    r = await report(af)
    assert r.status.requeue_state.requeue_at > first
    assert [v.detail.startswith("applied to the backoff: requeue pushed") for v in r.verdicts] == [False, True]
    await say(af, "job", "b", "Retry", requeueAfterSeconds=0)
    assert (await report(af)).status.requeue_state.requeue_at == r.status.requeue_state.requeue_at, "never earlier"
    await until(af, "QuotaReserved", timeout=20)
    await say(af, "job", "a", "Ready")
    await say(af, "job", "b", "Ready")
    await until(af, "Admitted")


@pytest.mark.parametrize("names", [["a"], ["a", "b"]], ids=["one-check", "two-checks"])
async def test_rejected_deactivates_and_activate_requeues(engine, names):
    af = engine.admitflow
    await setup(af, *names)
    await submit(af)
    await until(af, "QuotaReserved")
    if len(names) == 2:
        await say(af, "job", "a", "Ready")
    await say(af, "job", names[-1], "Rejected", message="over budget")
    r = await until(af, "Inactive")
    message = f'AdmissionCheck in Rejected state: "{names[-1]}" (over budget)'
    assert cond(r, "Evicted") == ("True", "DeactivatedDueToAdmissionCheck", f"The workload is deactivated due to {message}")
    assert cond(r, "QuotaReserved") == ("False", "Deactivated", "The workload is deactivated")
    assert r.spec.active is False and r.status.requeue_state is None
    assert ("Warning", "AdmissionCheckRejected", f"Deactivated due to {message}") in [(e.type, e.reason, e.message) for e in r.events]
    await eventually(lambda: _admitted_count(af, 0))
    await af.activate("default/job")
    r = await until(af, "QuotaReserved")
    assert cond(r, "Requeued") == ("True", "Reactivated", "The workload was reactivated")
    for n in names:
        await say(af, "job", n, "Ready")
    await until(af, "Admitted")


async def test_deactivate_by_hand_gives_the_quota_back(engine):
    af = engine.admitflow
    await setup(af)
    await submit(af, cpu="4")
    await until(af, "Admitted")
    await submit(af, "next", cpu="4")
    await af.deactivate("default/job")
    r = await until(af, "Inactive")
    assert cond(r, "Evicted")[:2] == ("True", "Deactivated")
    await until(af, "Admitted", name="next")


@pytest.mark.parametrize(("state", "want"), [("Retry", "Backoff"), ("Rejected", "Inactive")])
async def test_ready_then_changing_its_mind_after_admission(engine, state, want):
    af = engine.admitflow
    await setup(af, "a")
    await submit(af)
    await until(af, "QuotaReserved")
    await say(af, "job", "a", "Ready")
    await until(af, "Admitted")
    await eventually(lambda: _admitted_count(af, 1))
    await say(af, "job", "a", state, requeueAfterSeconds=60 if state == "Retry" else None)
    r = await until(af, want)
    assert cond(r, "Evicted")[:2] == ("True", "AdmissionCheck" if state == "Retry" else "DeactivatedDueToAdmissionCheck")
    assert cond(r, "Admitted")[:2] == ("False", "NoReservation")
    await eventually(lambda: _admitted_count(af, 0))


async def test_a_check_list_change_reaches_a_workload_holding_quota(engine):
    af = engine.admitflow
    await setup(af, "a", "b")
    await submit(af)
    await until(af, "QuotaReserved")
    await say(af, "job", "a", "Ready")
    # b is removed from the queue: the workload no longer waits for it.
    await af.apply(loaded(cluster_queue_manifest(checks=[{"name": "a"}])))
    r = await until(af, "Admitted")
    assert checks_of(r) == [("a", "Ready", None)]
    # b comes back: added as Pending, and the admitted workload keeps its admission.
    await af.apply(loaded(cluster_queue_manifest(checks=[{"name": "a"}, {"name": "b"}])))

    async def b_added():
        return checks_of(await report(af)) == [("a", "Ready", None), ("b", "Pending", None)]

    await eventually(b_added)
    assert await phase(af) == "Admitted"


async def test_a_late_retry_pushes_the_requeue_and_the_workload_is_admitted_in_the_end(engine):
    af = engine.admitflow
    await setup(af, "a")
    await submit(af)
    await until(af, "QuotaReserved")
    await af.verdict("default/job", Verdict(name="a", state="Retry", requeue_after_seconds=1))
    # A second Retry for the same attempt, after the eviction (KEP-3258's race).
    # 8 s, not less: a loaded machine must still find the workload in its backoff when it looks.
    late = await af.verdict("default/job", Verdict(name="a", state="Retry", requeue_after_seconds=8))
    assert [c.state for c in late.admission_checks] == ["Pending"], "never stuck in Retry"
    r = await report(af)
    assert r.status.requeue_state.requeue_at >= r.status.admission_checks[0].last_transition_time + timedelta(seconds=8)
    await until(af, "QuotaReserved", timeout=20)
    await say(af, "job", "a", "Ready")
    await until(af, "Admitted")


async def test_a_verdict_for_an_old_attempt_is_ignored(engine):
    af = engine.admitflow
    await setup(af, "a")
    await submit(af)
    await until(af, "QuotaReserved")
    await say(af, "job", "a", "Retry", attempt=1)
    await until(af, "QuotaReserved")
    with pytest.raises(AdmitflowError, match='verdict for attempt 1 of check "a", which is at attempt 2: ignored'):
        await say(af, "job", "a", "Rejected", attempt=1)
    # The same stale verdict as a signal is recorded and changes nothing.
    await engine.client.get_workflow_handle(ids.workload_id("default/job")).signal(
        "set_admission_check_state", {"name": "a", "state": "Rejected", "attempt": 1}
    )

    async def recorded():
        return (await report(af)).verdicts[-1].outcome == "ignored"

    await eventually(recorded)
    assert await phase(af) == "QuotaReserved"


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        ({"name": "nope", "state": "Ready"}, 'workload default/job has no admission check "nope" (it has: a)'),
        ({"name": "a", "state": "Maybe"}, 'unknown state "Maybe" for check "a": must be one of Pending, Ready, Retry, Rejected'),
        ({"name": "a", "state": "Ready", "podSetUpdates": [{"name": "x"}]}, 'podSetUpdates: unknown podSet "x" (the workload has: main)'),
    ],
    # Out-of-range numbers are refused by the Verdict model before anything is sent: test_bad_input.
    ids=["unknown-check", "unknown-state", "unknown-pod-set"],
)
async def test_a_bad_verdict_is_refused_by_the_update_and_recorded_from_a_signal(engine, payload, error):
    af = engine.admitflow
    await setup(af, "a")
    await submit(af)
    await until(af, "QuotaReserved")
    handle = engine.client.get_workflow_handle(ids.workload_id("default/job"))
    with pytest.raises(AdmitflowError, match="^" + re.escape(error) + "$"):
        await af.verdict("default/job", Verdict.model_validate(payload))
    await handle.signal("set_admission_check_state", payload)

    async def recorded():
        r = await report(af)
        return r.verdicts and (r.verdicts[-1].outcome, r.verdicts[-1].detail) == ("rejected", error)

    await eventually(recorded)
    await say(af, "job", "a", "Ready")
    await until(af, "Admitted")


async def test_a_verdict_from_the_plain_temporal_cli_admits(engine):
    af = engine.admitflow
    await setup(af, "a")
    await submit(af)
    await until(af, "QuotaReserved")
    temporal = str(Path(sys.executable).parent / "temporal")
    proc = await asyncio.to_thread(
        subprocess.run,
        [
            temporal, "workflow", "signal", "--address", engine.address, "--namespace", engine.namespace,
            "--workflow-id", "workload/default/job", "--name", "set_admission_check_state",
            "--input", json.dumps({"name": "a", "state": "Ready", "message": "approved by hand"}),
        ],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    r = await until(af, "Admitted")
    assert r.status.admission_checks[0].message == "approved by hand"


async def test_pod_set_updates_are_merged_and_a_conflict_fails_the_start(engine):
    af = engine.admitflow
    await setup(af, "a", "b")
    await af.apply(loaded(flavor_manifest(nodeLabels={"pool": "cpu"})))
    await submit(af)
    await until(af, "QuotaReserved")
    await say(af, "job", "a", "Ready", podSetUpdates=[{"name": "main", "labels": {"team": "x"}, "nodeSelector": {"zone": "z1"}}])
    await say(af, "job", "b", "Ready", podSetUpdates=[{"name": "main", "annotations": {"note": "ok"}}])
    r = await until(af, "Admitted")
    info = r.pod_sets_info[0]
    assert (info.name, info.node_selector, info.labels, info.annotations) == (
        "main", {"pool": "cpu", "zone": "z1"}, {"kueue.x-k8s.io/podset": "main", "team": "x"}, {"note": "ok"}
    )
    await submit(af, "clash")
    await until(af, "QuotaReserved", name="clash")
    await say(af, "clash", "a", "Ready", podSetUpdates=[{"name": "main", "labels": {"team": "x"}}])
    await say(af, "clash", "b", "Ready", podSetUpdates=[{"name": "main", "labels": {"team": "y"}}])
    r = await until(af, "Finished", name="clash")
    assert cond(r, "Finished") == (
        "True", "FailedToStart",
        'in admission check "b": invalid admission check PodSetUpdate: conflict for labels: conflict for key=team, value1=x, value2=y',
    )
    await eventually(lambda: _admitted_count(af, 1))


async def test_the_task_that_applies_the_last_ready_admits_and_publishes_it(engine):
    """One workflow task from the verdict to `Admitted`, in the search attributes and in the
    update's answer: the notice to the ClusterQueue neither costs a task of its own nor keeps that
    one open until it is delivered."""
    af = engine.admitflow
    await admitted_by_its_check(af)
    history = await engine.client.get_workflow_handle(ids.workload_id("default/job")).fetch_history()
    events = list(history.events)
    accepted = next(i for i, e in enumerate(events) if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED)
    published = next(
        i for i, e in enumerate(events)
        if i > accepted and e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
        and json.loads(e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields[sa.PHASE.name].data or b'""') == "Admitted"
    )
    # A task's commands follow its WorkflowTaskCompleted event: the upsert is a command of the task
    # that accepted the update when no other task completed in between.
    between = [EventType.Name(e.event_type) for e in events[accepted:published + 1]]
    assert "EVENT_TYPE_WORKFLOW_TASK_COMPLETED" not in between, between
    answered = next(i for i, e in enumerate(events) if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED)
    assert answered > published
    assert not [e for e in events[published:answered] if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED]
    # The same task neither tells the queue `admitted` nor waits for a local activity: it starts the
    # timer after which the notice goes, so that no workflow task for its delivery follows it at once.
    markers = [e.marker_recorded_event_attributes.marker_name for e in events[accepted:answered]
               if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED]
    assert "core_local_activity" not in markers, markers
    kinds = [e.event_type for e in events[accepted:answered]]
    assert EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED not in kinds
    [moment] = [e for e in events[accepted:answered] if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED
                and summarised(e, "admitted to ClusterQueue cq")]
    assert moment.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta() == lc.ADMITTED_DELAY

    async def told() -> list[str]:
        """What the workload signalled after the verdict: once the timer fired (no message comes here
        to send it sooner)."""
        later = list((await engine.client.get_workflow_handle(ids.workload_id("default/job")).fetch_history()).events)[accepted:]
        return [e.signal_external_workflow_execution_initiated_event_attributes.signal_name for e in later
                if e.event_type == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED]

    assert await eventually(told) == ["admitted"]
    await eventually(lambda: _admitted_count(af, 1))
    # Finished, it tells the queue `release` after `admitted`: the queue takes them in order.
    await af.finish("default/job")
    queue = engine.client.get_workflow_handle(ids.cluster_queue_id("cq"))
    assert await eventually(lambda: notices_once_released(engine, queue)) == ["admitted", "release"]


async def test_a_release_while_admitted_waits_for_its_moment_goes_alone(engine, monkeypatch):
    """A finish that comes while the `admitted` notice waits for its moment releases the reservation
    that notice is about: the queue needs only the `release`, so `admitted` is never sent and its
    timer is cancelled. The moment is an hour here, so its timer could not have sent it."""
    monkeypatch.setattr(lc, "ADMITTED_DELAY", timedelta(hours=1))
    af = engine.admitflow
    await admitted_by_its_check(af)
    await af.finish("default/job")
    handle = engine.client.get_workflow_handle(ids.workload_id("default/job"))
    await handle.result()
    events = list((await handle.fetch_history()).events)
    kinds = [e.event_type for e in events]
    [moment] = [i for i, e in enumerate(events) if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED
                and summarised(e, "admitted to ClusterQueue cq")]
    assert events[moment].timer_started_event_attributes.start_to_fire_timeout.ToTimedelta() == timedelta(hours=1)
    timer_id = events[moment].timer_started_event_attributes.timer_id
    [cancelled] = [i for i, e in enumerate(events) if e.event_type == EventType.EVENT_TYPE_TIMER_CANCELED
                   and e.timer_canceled_event_attributes.timer_id == timer_id]
    [release] = [i for i, e in enumerate(events) if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
                 and summarised(e, "release to ClusterQueue cq")]
    assert moment < cancelled < release
    assert EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED not in kinds
    queue = engine.client.get_workflow_handle(ids.cluster_queue_id("cq"))
    assert await eventually(lambda: notices_once_released(engine, queue)) == ["release"]
    await eventually(lambda: _admitted_count(af, 0))
