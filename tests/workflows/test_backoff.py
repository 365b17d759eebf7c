"""Hours of check backoff on the time-skipping server, in seconds of wall time, and the histories
they wrote replayed against the current code."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest_asyncio

from admitflow import ids
from admitflow.admission.checks import Verdict
from admitflow.admission.workload import WorkloadReport
from admitflow.controller import Controller, pending
from tests.builders import cluster_queue_manifest, flavor_manifest, local_queue_manifest, workload_manifest
from tests.workflows.test_lifecycle import loaded, replay_all, until_phase


def check_manifest(name: str, **spec) -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": name},
            "spec": {"controllerName": "tests", **spec}}


async def setup(engine, answered: bool = True, **check_spec) -> None:
    """A ClusterQueue with check `budget`, whose controller says it will send its verdicts later;
    back once the workload has its answer (`answered=False`: once it holds quota, for a test that
    runs no controller). A verdict sent while the controller's activity is still
    completing races it: the workload may cancel an activity that has just completed, which the
    time-skipping server refuses (`ACTIVITY_UNKNOWN`, logged once when a verdict went unanswered)."""
    af = engine.admitflow
    await af.apply(loaded(check_manifest("budget", **check_spec)))
    await af.set_admission_check_active("budget")
    await af.apply(
        loaded(flavor_manifest(), cluster_queue_manifest(checks=[{"name": "budget"}]), local_queue_manifest(), workload_manifest("job"))
    )
    await until_phase(engine, "job", "QuotaReserved")
    if not answered:
        return
    for _ in range(100):
        check = (await af.workload("default/job")).status.admission_checks[0]
        if check.message == "deciding":
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the controller's answer never reached the workload: {check}")


@pytest_asyncio.fixture(autouse=True)
async def controller(skipping_env):
    """The controller of `budget` answers that it will decide later; the tests send the verdicts.
    (An activity nobody picks up would also hold the time-skipping server's clock.)"""

    async def later(request):
        return pending("deciding")

    async with Controller("tests", check=later).worker(skipping_env.client):
        yield


async def test_a_two_hour_retry_delay_is_waited_out_durably(skipping_env, skipping_engine):
    engine = skipping_engine
    af = engine.admitflow
    started = time.monotonic()
    await setup(engine)
    await af.verdict("default/job", Verdict(name="budget", state="Retry", requeue_after_seconds=7200))
    report = await af.workload("default/job")
    check = report.status.admission_checks[0]
    assert report.status.requeue_state.requeue_at == check.last_transition_time + timedelta(hours=2)
    await skipping_env.sleep(timedelta(hours=1))
    await until_phase(engine, "job", "Backoff")
    await skipping_env.sleep(timedelta(hours=1, seconds=5))
    await until_phase(engine, "job", "QuotaReserved")
    await af.verdict("default/job", Verdict(name="budget", state="Ready", attempt=2))
    await until_phase(engine, "job", "Admitted")
    assert time.monotonic() - started < 60
    await replay_all(engine, [ids.workload_id("default/job"), ids.cluster_queue_id("cq")])


async def test_the_checks_retry_strategy_backs_off_exponentially_then_rejects(skipping_env, skipping_engine):
    engine = skipping_engine
    af = engine.admitflow
    await setup(engine, retryStrategy={"baseDelaySeconds": 3600, "factor": 2, "jitter": 0, "maxDelaySeconds": 86400,
                                       "backoffLimitCount": 2})
    for n, hours in ((1, 1), (2, 2)):
        status = await af.verdict("default/job", Verdict(name="budget", state="Retry", message="over budget"))
        check = status.admission_checks[0]
        assert (check.retry_count, check.requeue_after_seconds) == (n, hours * 3600)
        assert status.requeue_state.requeue_at == check.last_transition_time + timedelta(hours=hours)
        await skipping_env.sleep(timedelta(hours=hours, seconds=5))
        await until_phase(engine, "job", "QuotaReserved")
    await af.verdict("default/job", Verdict(name="budget", state="Retry", message="over budget"))
    await until_phase(engine, "job", "Inactive")
    report = await af.workload("default/job")
    evicted = report.status.condition("Evicted")
    assert (evicted.reason, evicted.message) == (
        "DeactivatedDueToAdmissionCheck",
        'The workload is deactivated due to AdmissionCheck in Rejected state: "budget" (retry limit of 2 reached: over budget)',
    )
    await replay_all(engine, [ids.workload_id("default/job")])


async def summary_of(payload) -> str:
    from admitflow.codec import DATA_CONVERTER

    [summary] = await DATA_CONVERTER.decode([payload], [str])
    return summary


async def test_the_history_tells_the_story_in_summaries(skipping_env, skipping_engine):
    """An admitted-after-one-retry workload: its workflow, activities and timers carry summaries
    that read in the Temporal UI."""
    from temporalio.api.enums.v1 import EventType

    engine = skipping_engine
    af = engine.admitflow
    await setup(engine)
    await af.verdict("default/job", Verdict(name="budget", state="Retry", requeue_after_seconds=120))
    await skipping_env.sleep(timedelta(seconds=125))
    await until_phase(engine, "job", "QuotaReserved")
    await af.verdict("default/job", Verdict(name="budget", state="Ready", attempt=2))
    await until_phase(engine, "job", "Admitted")

    history = await engine.client.get_workflow_handle(ids.workload_id("default/job")).fetch_history()
    summaries: dict[str, list[str]] = {"workflow": [], "activity": [], "timer": []}
    for event in history.events:
        if not event.user_metadata.HasField("summary"):
            continue
        kind = {
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED: "workflow",
            EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: "activity",
            EventType.EVENT_TYPE_TIMER_STARTED: "timer",
        }.get(event.event_type)
        if kind:
            summaries[kind].append(await summary_of(event.user_metadata.summary))
    assert summaries["workflow"] == ["default/job → cq, priority 0"]
    assert [s for s in summaries["activity"] if s.startswith("check ")] == ["check budget (attempt 1)", "check budget (attempt 2)"]
    assert "backoff 2m0s after Retry from budget" in summaries["timer"]
    assert "PodsReady timeout 30m" in summaries["timer"], "admitted: the default WaitForPodsReady timer runs"
    describe = await engine.client.get_workflow_handle(ids.workload_id("default/job")).describe()
    assert await describe.static_summary() == "default/job → cq, priority 0"
    details = await describe.static_details()
    assert "its ClusterQueue's AdmissionChecks: `budget`" in details and "| main | 1 | cpu: 1 |" in details


async def test_a_check_pending_for_a_day_is_retried_when_its_pending_timeout_runs_out(skipping_env, skipping_engine):
    """kueue#3245's "accepted but not provisioned for more than a day", with a 24h pendingTimeout:
    the timer is durable, and the Retry takes the check's retry strategy."""
    engine = skipping_engine
    af = engine.admitflow
    await setup(engine, pendingTimeout={"duration": "24h"}, retryStrategy={"strategy": "Static", "baseDelaySeconds": 3600, "maxDelaySeconds": 3600})
    await skipping_env.sleep(timedelta(hours=23))
    await until_phase(engine, "job", "QuotaReserved")
    await skipping_env.sleep(timedelta(hours=1, seconds=5))
    await until_phase(engine, "job", "Backoff")
    report = await af.workload("default/job")
    check = report.status.admission_checks[0]
    assert (check.retry_count, check.requeue_after_seconds) == (1, 3600)
    (event,) = [e for e in report.events if e.reason == "AdmissionCheckPendingTimeout"]
    assert event.message == "Admission check budget: Pending for longer than its pendingTimeout (24h): treated as Retry; last message: deciding"
    await replay_all(engine, [ids.workload_id("default/job"), ids.cluster_queue_id("cq")])


async def test_a_check_retried_for_three_hours_is_rejected_by_its_time_limit(skipping_env, skipping_engine):
    """An AdmissionCheck's retryStrategy.backoffLimitTimeout over hours: hourly Retries until one
    three hours after the first, which is Rejected."""
    engine = skipping_engine
    af = engine.admitflow
    await setup(engine, retryStrategy={"strategy": "Static", "baseDelaySeconds": 3600, "maxDelaySeconds": 3600,
                                       "backoffLimitTimeout": "3h"})
    for n in (1, 2, 3):
        status = await af.verdict("default/job", Verdict(name="budget", state="Retry", message="over budget"))
        assert status.admission_checks[0].retry_count == n
        await skipping_env.sleep(timedelta(hours=1, seconds=5))
        await until_phase(engine, "job", "QuotaReserved")
    await af.verdict("default/job", Verdict(name="budget", state="Retry", message="over budget"))
    await until_phase(engine, "job", "Inactive")
    evicted = (await af.workload("default/job")).status.condition("Evicted")
    assert evicted.message.endswith('"budget" (retry time limit of 3h0m0s reached: over budget)'), evicted.message
    await replay_all(engine, [ids.workload_id("default/job"), ids.cluster_queue_id("cq")])


async def test_a_rejected_workload_is_deleted_a_day_later_by_its_retention_policy(skipping_env, skipping_engine):
    engine = skipping_engine
    af = engine.admitflow
    await af.apply(loaded({"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
                           "objectRetentionPolicies": {"workloads": {"afterDeactivatedByKueue": "24h"}}}))
    await setup(engine)
    await af.verdict("default/job", Verdict(name="budget", state="Rejected", message="no"))
    await until_phase(engine, "job", "Inactive")
    await skipping_env.sleep(timedelta(hours=23))
    assert await af.workload("default/job", missing_ok=True) is not None, "kept until its retention runs out"
    await skipping_env.sleep(timedelta(hours=1, seconds=5))
    handle = engine.client.get_workflow_handle(ids.workload_id("default/job"), result_type=WorkloadReport)
    final = await handle.result()
    assert final.deleted is True
    assert [e.message for e in final.events if e.reason == "DeletedByRetentionPolicy"] == [
        "Deleted 24h after it was deactivated (objectRetentionPolicies.workloads.afterDeactivatedByKueue)"
    ]
    await replay_all(engine, [ids.workload_id("default/job")])
