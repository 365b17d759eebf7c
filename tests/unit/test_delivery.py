"""The delivery activity (activities/delivery.py) heartbeats while it runs, so that a worker that
dies in the middle of one is noticed within the heartbeat timeout instead of the 2-minute
start-to-close (issue 19); a delivery scheduled without a heartbeat timeout sends none. Which
deliveries travel in an update rather than as a signal (activities/mail.py), how one receiver's
deliveries are cut into what leaves at once, which task queue a started workflow runs on, and which
batches an entity sends in the workflow task that decides them."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta

import pytest
from temporalio.testing import ActivityEnvironment

from admitflow import contract
from admitflow.activities.delivery import DeliveryActivities, _runs
from admitflow.activities.mail import by_update
from admitflow.admission.protocol import Delivery, DeliveryBatch
from admitflow.workflows.outbox import IN_TASK_LIMIT, in_task_signals


class SlowClient:
    """Accepts every signal after `delay` seconds."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.signalled: list[str] = []

    def get_workflow_handle(self, workflow_id: str) -> SlowClient._Handle:
        return SlowClient._Handle(self, workflow_id)

    @dataclasses.dataclass
    class _Handle:
        client: SlowClient
        workflow_id: str

        async def signal(self, signal: str, payload: object) -> None:
            await asyncio.sleep(self.client.delay)
            self.client.signalled.append(self.workflow_id)


def batch(n: int) -> DeliveryBatch:
    # One target, so that the signals go out one after another.
    return DeliveryBatch(deliveries=[Delivery(workflow_id="workload/default/w", signal="quota_reserved") for _ in range(n)])


async def run(heartbeat_timeout: timedelta | None, client: SlowClient, n: int) -> list[tuple]:
    beats: list[tuple] = []
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=heartbeat_timeout)
    env.on_heartbeat = lambda *details: beats.append(details)
    report = await env.run(DeliveryActivities(client).deliver_signals, batch(n))  # type: ignore[arg-type]
    assert report.missing == [] and len(client.signalled) == n
    return beats


async def test_a_delivery_longer_than_a_quarter_of_its_heartbeat_timeout_heartbeats_its_progress() -> None:
    beats = await run(timedelta(seconds=0.4), SlowClient(0.05), 12)  # 0.6 s; a beat every 0.1 s
    assert len(beats) >= 3
    sent = [int(details[0].split(" of ")[0]) for details in beats]
    assert sent == sorted(sent) and sent[-1] < 12
    assert all(details[0].endswith(" of 12 sent") for details in beats)


async def test_a_short_delivery_costs_no_heartbeat() -> None:
    assert await run(timedelta(seconds=10), SlowClient(0.0), 5) == []


async def test_a_delivery_scheduled_without_a_heartbeat_timeout_sends_none() -> None:
    assert await run(None, SlowClient(0.05), 6) == []


@pytest.mark.parametrize(
    ("delivery", "expected"),
    [
        (Delivery(workflow_id="clusterqueue/cq", signal=contract.ENQUEUE), True),
        (Delivery(workflow_id="clusterqueue/cq", signal=contract.RELEASE), True),
        (Delivery(workflow_id="clusterqueue/cq", signal=contract.ADMITTED), True),
        (Delivery(workflow_id="clusterqueue/cq", signal=contract.REPRIORITIZE), True),
        # What a cohort tree hands back to a home is rare: a signal.
        (Delivery(workflow_id="clusterqueue/cq", signal=contract.FORWARD), False),
        (Delivery(workflow_id="clusterqueue/cq", signal=contract.ENQUEUE, start_cluster_queue="cq"), False),
        (Delivery(workflow_id="cohort/team", signal=contract.FORWARD), True),
        (Delivery(workflow_id="cohort/team", signal=contract.ADOPT, start_cohort="team"), False),
        (Delivery(workflow_id="cohort/team", signal=contract.RECALL), False),
        (Delivery(workflow_id="cohort/team", signal=contract.ENQUEUE), False),
        (Delivery(workflow_id="workload/default/w", signal=contract.RELEASE), False),
        (Delivery(workflow_id="workload/default/w", signal=contract.FORWARD), False),
    ],
)
def test_what_travels_by_update(delivery: Delivery, expected: bool) -> None:
    assert by_update(delivery) is expected


def test_one_receivers_deliveries_leave_in_order_each_run_of_updates_together() -> None:
    adopt = Delivery(workflow_id="cohort/team", signal=contract.ADOPT, start_cohort="team")
    forwards = [Delivery(workflow_id="cohort/team", signal=contract.FORWARD, payload={"n": i}) for i in range(4)]
    recall = Delivery(workflow_id="cohort/team", signal=contract.RECALL)
    runs = _runs([adopt, *forwards[:3], recall, forwards[3]])
    assert runs == [[adopt], forwards[:3], [recall], [forwards[3]]]
    assert _runs([recall, recall]) == [[recall], [recall]]
    assert _runs([]) == []


@pytest.mark.parametrize(
    ("workflow_type", "task_queue", "expected"),
    [
        (contract.CLUSTER_QUEUE_WORKFLOW, "admitflow", "admitflow-entities"),
        (contract.COHORT_WORKFLOW, "admitflow", "admitflow-entities"),
        (contract.CLUSTER_QUEUE_WORKFLOW, "admitflow-entities", "admitflow-entities"),
        # started from an activity of an entity: on the engine's own task queue
        (contract.PODS_READY_GATE_WORKFLOW, "admitflow-entities", "admitflow"),
        (contract.SIMULATED_AUTOSCALER_WORKFLOW, "admitflow", "admitflow"),
        (contract.CATALOG_WORKFLOW, "team-a", "team-a"),
        (contract.COHORT_WORKFLOW, "team-a", "team-a-entities"),
    ],
)
def test_the_task_queue_a_workflow_starts_on(workflow_type: str, task_queue: str, expected: str) -> None:
    assert contract.start_task_queue(workflow_type, task_queue) == expected


def _notice(i: int = 0, **start: object) -> Delivery:
    return Delivery(workflow_id=f"workload/default/w{i}", signal=contract.QUOTA_RESERVED, **start)


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        ([_notice()], True),
        ([_notice(i) for i in range(IN_TASK_LIMIT)], True),
        # more than one round of the activity's concurrent sends: by activity, the entity goes on meanwhile
        ([_notice(i) for i in range(IN_TASK_LIMIT + 1)], False),
        # anything that may wait for another workflow's task (an update, a start) or reach an entity
        ([_notice(), Delivery(workflow_id="clusterqueue/cq", signal=contract.FORWARD)], False),
        ([Delivery(workflow_id="cohort/team", signal=contract.FORWARD)], False),
        ([Delivery(workflow_id="cohort/team", signal=contract.ADOPT, start_cohort="team")], False),
        ([_notice(start_cluster_queue="cq")], False),
        ([_notice(start_autoscaler=True)], False),
        ([_notice(start_pods_ready_gate=True)], False),
        ([Delivery(workflow_id="admitflow/pods-ready-gate", signal=contract.GATE_USED)], False),
    ],
)
def test_which_batches_an_entity_sends_in_its_task(batch: list[Delivery], expected: bool) -> None:
    assert in_task_signals(batch) is expected


# --- what a given-up update's messages say when they are sent again as signals -------------------


def _entry_wire(ticket: int = 1) -> dict:
    from datetime import UTC, datetime

    from admitflow.admission.pending_queue import QueueEntry

    return QueueEntry(key="default/job", uid="u", ticket=ticket, local_queue="lq", timestamp=datetime(2026, 12, 1, tzinfo=UTC), pod_sets=[]).to_wire()


def _forwarded(signal: str, payload: dict) -> dict:
    from admitflow.admission.cohort_tree import Forwarded

    return Forwarded(cluster_queue="cq", signal=signal, payload=payload).to_wire()


@pytest.mark.parametrize(
    ("signal", "payload", "answer", "unread_at"),
    [
        (contract.ENQUEUE, _entry_wire(), True, ()),
        (contract.FORWARD, _forwarded(contract.ENQUEUE, _entry_wire()), True, ("payload",)),
        (contract.ENQUEUE, _entry_wire(), False, None),
        (contract.RELEASE, {"key": "default/job", "uid": "u", "ticket": 1}, False, None),
        (contract.FORWARD, _forwarded(contract.RELEASE, {"key": "default/job", "uid": "u", "ticket": 1}), True, None),
    ],
    ids=[
        "an-enqueue-that-asked-its-answer-says-it-went-unread", "so-does-one-forwarded-to-a-cohort-tree",
        "an-enqueue-that-asked-nothing-is-sent-as-it-is", "a-release-is-sent-as-it-is", "a-forwarded-release-is-sent-as-it-is",
    ],
)
def test_a_given_up_updates_enqueue_says_its_answer_went_unread(signal, payload, answer, unread_at):
    from admitflow.activities.mail import unanswered
    from admitflow.admission.protocol import Message

    m = Message(signal=signal, payload=payload, answer=answer)
    sent = unanswered(m)
    if unread_at is None:
        assert sent == m
        return
    entry = sent.payload
    for key in unread_at:
        entry = entry[key]
    assert entry["answerUnread"] is True
    assert {k: v for k, v in entry.items() if k != "answerUnread"} == _entry_wire()
