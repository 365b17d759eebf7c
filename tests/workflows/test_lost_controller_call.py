"""How long a workload holding quota can wait on a controller call nobody answers (the controller
took the task and died, or the task was lost in a server restart): the `admission_check` activity's
start-to-close timeout, after which the call is tried again. It was 5 minutes, and each fault test
that lost a call waited them out; now it is one (docs/contract.md). The time-skipping server holds
its clock while an activity runs, so the test reads the bound from the history the workload wrote."""

from __future__ import annotations

from datetime import timedelta

from temporalio.api.enums.v1 import EventType

from admitflow import contract, ids
from admitflow.controller import Controller, ready
from tests.builders import cluster_queue_manifest, flavor_manifest, local_queue_manifest, workload_manifest
from tests.workflows.test_backoff import check_manifest
from tests.workflows.test_lifecycle import loaded, replay_all, until_phase


async def test_a_controller_call_nobody_answers_is_asked_again_after_a_minute(skipping_env, skipping_engine):
    engine = skipping_engine
    af = engine.admitflow

    async def approve(request):
        return ready("approved")

    async with Controller("tests", check=approve).worker(skipping_env.client):
        await af.apply(loaded(check_manifest("budget")))
        await af.set_admission_check_active("budget")
        await af.apply(loaded(
            flavor_manifest(), cluster_queue_manifest(checks=[{"name": "budget"}]), local_queue_manifest(), workload_manifest("job"),
        ))
        await until_phase(engine, "job", "Admitted")
    history = await engine.client.get_workflow_handle(ids.workload_id("default/job")).fetch_history()
    [call] = [e.activity_task_scheduled_event_attributes for e in history.events
              if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
              and e.activity_task_scheduled_event_attributes.activity_type.name == contract.ADMISSION_CHECK]
    assert call.start_to_close_timeout.ToTimedelta() == timedelta(minutes=1)
    assert call.retry_policy.maximum_attempts == 0  # then asked again, for as long as it takes
    await replay_all(engine, [ids.workload_id("default/job")])
