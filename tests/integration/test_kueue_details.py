"""Kueue's details that the lifecycle review found missing (finding 8), on the dev server: the
maximum execution time, one timer per backoff, and an AdmissionCheck kept while a ClusterQueue uses
it. Each failed on the code before it."""

from __future__ import annotations

import pytest
from temporalio.api.enums.v1 import EventType

from tests.builders import cluster_queue_manifest, workload_manifest
from tests.integration.test_admission import eventually, loaded
from tests.integration.test_admission_checks import cond, say, setup, submit, until
from tests.integration.test_controllers import history_events

pytestmark = pytest.mark.integration


async def test_the_maximum_execution_time_deactivates_an_admitted_workload(engine):
    af = engine.admitflow
    await setup(af)
    m = workload_manifest("job", cpu="1")
    m["spec"]["maximumExecutionTimeSeconds"] = 2
    await af.apply(loaded(m))
    await until(af, "Admitted")
    r = await until(af, "Inactive", timeout=20)
    assert cond(r, "Evicted")[:2] == ("True", "DeactivatedDueToMaximumExecutionTimeExceeded")
    assert [e.message for e in r.events if e.reason == "MaximumExecutionTimeExceeded"] == [
        "The maximum execution time (2s) exceeded"
    ]
    assert (await af.cluster_queue_report("cq")).status.admitted_workloads == 0, "its quota is back"


async def test_a_backoff_is_one_timer_whatever_arrives_during_it(engine):
    af = engine.admitflow
    await setup(af, "a")
    await submit(af)
    await until(af, "QuotaReserved")
    await say(af, "job", "a", "Retry", requeueAfterSeconds=6)
    await until(af, "Backoff")
    await say(af, "job", "a", "Ready")  # kept while it waits: wakes the workflow, not its timer
    await until(af, "Admitted", timeout=30)
    summaries = [
        e.user_metadata.summary.data.decode() for e in await history_events(engine, "job")
        if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED
    ]
    assert [s for s in summaries if "backoff" in s] == ['"backoff 6s after Retry from a"'], f"one wait, one timer: {summaries}"


async def test_an_admission_check_a_cluster_queue_uses_is_kept_until_none_does(engine):
    af = engine.admitflow
    await setup(af, "a")
    outcome = await af.delete("AdmissionCheck", "a")
    assert outcome.action == "terminating", outcome
    assert 'still used by ClusterQueue "cq"' in outcome.message
    assert [o.key for o in await af.catalog_objects("AdmissionCheck")] == ["a"], "kept, still in force"
    await af.apply(loaded(cluster_queue_manifest(checks=None)))  # the queue no longer uses it

    async def gone():
        return [o.key for o in await af.catalog_objects("AdmissionCheck")] == []

    await eventually(gone)
