"""A reservation made in the pass that takes its enqueue is told in the enqueue's answer: the
workload is admitted in the workflow task that enqueued it, with no `quota_reserved` signal and no
task of its own for it. If the workload says nothing of it for `RETELL_AFTER`, its queue tells it
again by signal, so that an answer lost with a failed workflow task cannot keep the quota held. On
the time-skipping test server: `RETELL_AFTER` passes at once."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from temporalio.api.enums.v1 import EventType

from admitflow import contract, ids
from admitflow.admission.cluster_queue import QueueEntry
from admitflow.admission.requests import PodSetRequest
from admitflow.admission.scheduler import RETELL_AFTER
from admitflow.admission.protocol import Message, Messages, Receipt
from tests.builders import cluster_queue_manifest, flavor_manifest, local_queue_manifest, workload_manifest
from tests.workflows.test_lifecycle import loaded, replay_all, until_active, until_phase, until_reason


async def signals_to(engine, workflow_id: str) -> list[str]:
    names = []
    async for e in engine.client.get_workflow_handle(workflow_id).fetch_history_events():
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            names.append(e.workflow_execution_signaled_event_attributes.signal_name)
    return names


async def until_signalled(engine, workflow_id: str, name: str) -> list[str]:
    """The signals the workflow got, once `name` is among them (an event in its history: it lasts)."""
    for _ in range(200):
        if name in (names := await signals_to(engine, workflow_id)):
            return names
        await asyncio.sleep(0.05)
    raise AssertionError(f"{workflow_id} never got {name}; it got {await signals_to(engine, workflow_id)}")


async def test_a_workload_with_room_is_admitted_in_the_task_that_enqueues_it_and_told_again_once(skipping_engine, skipping_env):
    engine = skipping_engine
    await engine.admitflow.apply(loaded(flavor_manifest(), cluster_queue_manifest(), local_queue_manifest()))
    await until_active(engine)
    await engine.admitflow.apply(loaded(workload_manifest("a", cpu="3")))
    await until_phase(engine, "a", "Admitted")
    a = ids.workload_id("default/a")
    assert await signals_to(engine, a) == [], "the reservation came in the enqueue's answer"

    # It holds the quota and has said nothing of it: the queue tells it again, once, and it stays as it is.
    await skipping_env.sleep(RETELL_AFTER.total_seconds() * 3)
    assert await until_signalled(engine, a, contract.QUOTA_RESERVED) == [contract.QUOTA_RESERVED]
    await until_phase(engine, "a", "Admitted")
    report = await engine.admitflow.workload("default/a")
    assert report.status.admission is not None and report.status.admission.cluster_queue == "cq"
    await replay_all(engine, [ids.cluster_queue_id("cq"), a])


async def test_a_reservation_whose_answer_was_lost_is_told_again_and_given_back(skipping_engine, skipping_env):
    """The enqueue of an attempt of a workflow task that then failed: the queue reserved the ticket
    and answered it, and the attempt that counted (with a deactivation) never enqueued. The queue's
    notice, told again, reaches the workload, which gives the ticket back, and the next workload
    gets the quota."""
    engine = skipping_engine
    await engine.admitflow.apply(loaded(flavor_manifest(), cluster_queue_manifest(), local_queue_manifest()))
    await until_active(engine)
    inactive = workload_manifest("a", cpu="3")
    inactive["spec"]["active"] = False
    await engine.admitflow.apply(loaded(inactive))
    await until_phase(engine, "a", "Inactive")
    uid = (await engine.admitflow.workload("default/a")).metadata.uid
    lost = QueueEntry(
        key="default/a", uid=uid, ticket=1, local_queue="lq", priority=0, timestamp=datetime(2026, 1, 1, tzinfo=UTC),
        pod_sets=[PodSetRequest(name="main", count=1, per_pod={"cpu": 3000})],
    )
    receipt = await engine.client.get_workflow_handle(ids.cluster_queue_id("cq")).execute_update(
        contract.TAKE_MESSAGES, Messages(messages=[Message(signal=contract.ENQUEUE, payload=lost.to_wire(), answer=True)]),
        result_type=Receipt,
    )
    assert [m.signal for m in receipt.answers[0]] == [contract.QUOTA_RESERVED], "reserved, and told only in the answer"
    await engine.admitflow.apply(loaded(workload_manifest("b", cpu="3")))
    await until_reason(engine, "b", "WaitingForQuota")

    await skipping_env.sleep(RETELL_AFTER.total_seconds() * 3)
    await until_phase(engine, "b", "Admitted")
    await until_signalled(engine, ids.workload_id("default/a"), contract.QUOTA_RESERVED)
    await until_phase(engine, "a", "Inactive")
    await replay_all(engine, [ids.cluster_queue_id("cq"), ids.workload_id("default/a"), ids.workload_id("default/b")])
