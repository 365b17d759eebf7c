"""What workloads tell their ClusterQueue leaves a worker together, as updates (activities/mail.py):
many senders at once cost one update per queue at a time; a queue that does not run is reported;
a queue that takes no update in time, or runs on a worker that does not know the update, gets the
messages as signals; workloads waiting for their queue never hold the slot it needs to answer."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from admitflow import contract, ids
from admitflow.activities.delivery import send_signal
from admitflow.activities.mail import Mailer, StartQueue
from admitflow.client import AdmitflowClient
from admitflow.codec import DATA_CONVERTER
from admitflow.devserver import DevServer
from admitflow.worker.main import build_worker
from tests.builders import cluster_queue_manifest, flavor_manifest, local_queue_manifest, workload_manifest
from tests.conftest import free_port
from tests.integration.test_admission import eventually, loaded
from datetime import UTC, datetime

from admitflow.admission.cluster_queue import QueueEntry
from admitflow.admission.requests import PodSetRequest
from admitflow.messages import ClusterQueueInput, CohortInput
from admitflow.admission.protocol import Message
from admitflow.admission.protocol import ReleaseRequest

pytestmark = pytest.mark.integration


def enqueue(i: int) -> Message:
    entry = QueueEntry(
        key=f"default/w{i}", uid=f"u{i}", ticket=1, local_queue="lq", priority=0, timestamp=datetime(2026, 1, 1, tzinfo=UTC),
        pod_sets=[PodSetRequest(name="main", count=1, per_pod={"cpu": 1000})],
    )
    return Message(signal=contract.ENQUEUE, payload=entry.to_wire())


def new_queue(prefix: str) -> tuple[str, str]:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    return name, ids.cluster_queue_id(name)


async def messages_in_history(client: Client, workflow_id: str) -> tuple[list[int], list[str]]:
    """The size of every update the queue took, and the signals it got."""
    updates, signals = [], []
    async for e in client.get_workflow_handle(workflow_id).fetch_history_events():
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            (batch,) = await client.data_converter.decode(e.workflow_execution_update_accepted_event_attributes.accepted_request.input.args.payloads)
            updates.append(len(batch["messages"]))
        elif e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            signals.append(e.workflow_execution_signaled_event_attributes.signal_name)
    return updates, signals


async def test_messages_sent_at_once_to_one_queue_leave_together(engine) -> None:
    client, (name, queue) = engine.client, new_queue("mail")
    mailer = Mailer(client, send_signal)
    start = StartQueue(name=name, task_queue="admitflow")
    taken = await asyncio.gather(*(mailer.send(queue, enqueue(i), start) for i in range(40)))
    assert [t.ran for t in taken] == [True] * 40
    updates, signals = await messages_in_history(client, queue)
    assert sum(updates) == 40 and signals == []
    assert len(updates) <= 3, f"one update per queue at a time, the rest waiting together: {updates}"


async def test_a_tree_that_does_not_hold_the_queue_sends_the_message_home_and_the_worker_asks_the_home_again(engine) -> None:
    """A worker that believes a cohort tree holds a queue's state (the home named it once) sends the
    queue's messages there; a tree that does not hold it (the state went home since) sends each on
    to the home and says so in its receipt, and the worker's next message goes to the home."""
    client, (name, queue) = engine.client, new_queue("bounce")
    mailer = Mailer(client, send_signal)
    start = StartQueue(name=name, task_queue="admitflow")
    assert (await mailer.send(queue, enqueue(0), start)).ran
    root = f"elsewhere-{name}"
    await client.start_workflow(contract.COHORT_WORKFLOW, CohortInput(root=root), id=ids.cohort_id(root),
                                task_queue=ids.entity_task_queue("admitflow"))
    mailer._holders[queue] = ids.cohort_id(root)  # what a receipt from its home once said
    assert (await mailer.send(queue, enqueue(1))).ran
    assert (await mailer.send(queue, enqueue(2))).ran

    async def arrived() -> tuple[list[int], list[str]] | None:
        updates, signals = await messages_in_history(client, queue)
        return (updates, signals) if sum(updates) + signals.count(contract.FORWARD) == 3 else None

    updates, signals = await eventually(arrived)
    assert signals == [contract.FORWARD], "w1 came back from the tree"
    assert updates == [1, 1], "w0, then w2 straight to the home"


async def test_a_message_for_a_queue_that_does_not_run_is_reported_not_taken(engine) -> None:
    release = Message(signal=contract.RELEASE, payload=ReleaseRequest(key="default/w", uid="u", ticket=1).to_wire())
    assert (await Mailer(engine.client, send_signal).send(ids.cluster_queue_id("nowhere"), release)).ran is False


async def test_a_queue_that_takes_no_update_in_time_gets_signals(engine) -> None:
    """No worker polls its task queue: the update is not taken, the signals wait in its history."""
    client, (name, queue) = engine.client, new_queue("idle")
    start = StartQueue(name=name, task_queue=f"nobody-{uuid.uuid4().hex[:6]}")
    mailer = Mailer(client, send_signal, accept_within=1.0)
    assert [t.ran for t in await asyncio.gather(*(mailer.send(queue, enqueue(i), start) for i in range(3)))] == [True] * 3
    updates, signals = await messages_in_history(client, queue)
    assert updates == [] and signals == [contract.ENQUEUE] * 3


@workflow.defn(name=contract.CLUSTER_QUEUE_WORKFLOW)
class QueueBeforeMail:
    """A ClusterQueue as a worker older than the update runs it: signals only."""

    def __init__(self) -> None:
        self.enqueued = 0

    @workflow.signal(name=contract.ENQUEUE)
    def enqueue(self, entry: Any) -> None:
        self.enqueued += 1

    @workflow.query(name="enqueued")
    def count(self) -> int:
        return self.enqueued

    @workflow.run
    async def run(self, input: ClusterQueueInput) -> None:
        await workflow.wait_condition(lambda: False)


async def test_a_queue_on_a_worker_that_does_not_know_the_update_gets_signals(engine) -> None:
    client, (name, queue) = engine.client, new_queue("old")
    task_queue = f"old-{uuid.uuid4().hex[:6]}"
    # A ClusterQueue starts on the entities' task queue of the one it is given.
    async with Worker(client, task_queue=ids.entity_task_queue(task_queue), workflows=[QueueBeforeMail], workflow_runner=UnsandboxedWorkflowRunner()):
        mailer = Mailer(client, send_signal)
        start = StartQueue(name=name, task_queue=task_queue)
        assert [t.ran for t in await asyncio.gather(*(mailer.send(queue, enqueue(i), start) for i in range(5)))] == [True] * 5
        assert await client.get_workflow_handle(queue).query("enqueued") == 5
        await client.get_workflow_handle(queue).terminate("test over")


async def test_workloads_waiting_for_their_queue_never_hold_the_slot_it_needs() -> None:
    """A worker with two workflow task slots, and twelve workloads that enqueue at once: each
    workload's local activity holds its slot until the queue takes its message. The queue runs on
    the entities' task queue (ids.entity_task_queue), in slots of its own, so it takes every
    message by update. On one task queue two waiting workloads held both slots, the queue could
    not run its task, and their messages came as signals once their wait ran out."""
    server = DevServer(port=free_port(), db=None, headless=True)
    await server.start()
    try:
        client = await Client.connect(server.address, data_converter=DATA_CONVERTER)
        af = AdmitflowClient(client, "admitflow")
        async with build_worker(client, "admitflow", max_concurrent_workflow_tasks=2):
            n = 12
            await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(quotas={"default": {"cpu": str(n)}}), local_queue_manifest()))
            await af.apply(loaded(*(workload_manifest(f"w{i:02d}", cpu="1") for i in range(n))))

            async def all_admitted() -> bool:
                report = await af.cluster_queue_report("cq")
                return report is not None and report.status.admitted_workloads == n

            await eventually(all_admitted, timeout=60)
        queue = ids.cluster_queue_id("cq")
        assert (await client.get_workflow_handle(queue).describe()).task_queue == ids.entity_task_queue("admitflow")
        updates, signals = await messages_in_history(client, queue)
        assert contract.ENQUEUE not in signals, f"messages that came as signals: {signals}"
        assert sum(updates) == n, f"messages taken by update: {updates}"
    finally:
        server.stop()
