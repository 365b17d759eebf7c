"""Signal delivery for workflows that must not pay for each signal they send (see workflows/outbox)."""

from __future__ import annotations

import asyncio
from collections import defaultdict

from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from admitflow import contract
from admitflow.activities.heartbeat import heartbeating
from admitflow.activities.mail import Mailer, by_update
from admitflow.admission.pods_ready_gate import GATE_SUMMARY
from admitflow.messages import AutoscalerInput, ClusterQueueInput, CohortInput, GateInput
from admitflow.admission.protocol import Delivery, DeliveryBatch, DeliveryReport, Message
from admitflow.simulation.autoscaler import WORKFLOW_SUMMARY

# Signals to different workflows go out together; a workflow's own signals keep their order.
CONCURRENCY = 16


class DeliveryActivities:
    def __init__(self, client: Client, mailer: Mailer | None = None) -> None:
        self.client = client
        self.mailer = mailer or Mailer(client, send_signal)

    @activity.defn(name=contract.DELIVER_SIGNALS)
    async def deliver_signals(self, batch: DeliveryBatch) -> DeliveryReport:
        by_target: dict[str, list[Delivery]] = defaultdict(list)
        for d in batch.deliveries:
            by_target[d.workflow_id].append(d)
        gate = asyncio.Semaphore(CONCURRENCY)
        missing: list[Delivery] = []
        sent = 0

        async def send_all(deliveries: list[Delivery]) -> None:
            nonlocal sent
            async with gate:
                for run in _runs(deliveries):
                    # In order: a run of messages that travel by update leaves in one (or a few).
                    # Every send is awaited to its end, so none fails unread; the first error is raised.
                    found = await asyncio.gather(*(self._send(d) for d in run), return_exceptions=True)
                    failed = next((f for f in found if isinstance(f, BaseException)), None)
                    if failed is not None:
                        raise failed
                    missing.extend(d for d, f in zip(run, found, strict=True) if not f)
                    sent += len(run)

        # A worker that dies mid-delivery is noticed after the heartbeat timeout that
        # workflows/outbox.py sets, not the 2-minute start-to-close, and another sends the batch again.
        async with heartbeating(lambda: f"{sent} of {len(batch.deliveries)} sent"):
            await asyncio.gather(*(send_all(ds) for ds in by_target.values()))
        return DeliveryReport(missing=missing)

    async def _send(self, d: Delivery) -> bool:
        """Send one signal; False when no workflow with that ID is running (it finished or was
        deleted). Every other error is raised so the activity retries the batch: receivers ignore
        what they already have, so a resent signal is harmless. What a workload tells its
        ClusterQueue, or a home forwards to its cohort tree, goes with the other messages to that
        receiver, in one update (activities/mail.py)."""
        if by_update(d):
            return (await self.mailer.send(d.workflow_id, Message(signal=d.signal, payload=d.payload))).ran
        return await send_signal(self.client, d, activity.info().task_queue)


async def send_signal(client: Client, d: Delivery, task_queue: str) -> bool:
    """Send `d` as one signal (signal-with-start when it says so, on the task queue that workflow
    starts on: `contract.start_task_queue` of the engine's `task_queue`); False when no workflow
    with that ID runs."""
    started = _started_with(d)
    if started is not None:
        workflow_type, arg, summary = started
        await client.start_workflow(
            workflow_type, arg, id=d.workflow_id, task_queue=contract.start_task_queue(workflow_type, task_queue),
            start_signal=d.signal, start_signal_args=[d.payload], static_summary=summary,
        )
        return True
    try:
        await client.get_workflow_handle(d.workflow_id).signal(d.signal, d.payload)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return True


def _runs(deliveries: list[Delivery]) -> list[list[Delivery]]:
    """One receiver's deliveries, in order, cut into what is sent at once: each run of messages
    that travel by update together, every other delivery alone."""
    runs: list[list[Delivery]] = []
    for d in deliveries:
        if by_update(d) and runs and by_update(runs[-1][0]):
            runs[-1].append(d)
        else:
            runs.append([d])
    return runs


def _started_with(d: Delivery) -> tuple[str, object, str] | None:
    """The workflow a delivery starts if it does not run yet: its type, input and summary."""
    if d.start_cluster_queue is not None:
        return contract.CLUSTER_QUEUE_WORKFLOW, ClusterQueueInput(name=d.start_cluster_queue), f"ClusterQueue {d.start_cluster_queue}"
    if d.start_cohort is not None:
        return contract.COHORT_WORKFLOW, CohortInput(root=d.start_cohort), f"Cohort tree {d.start_cohort}"
    if d.start_autoscaler:
        return contract.SIMULATED_AUTOSCALER_WORKFLOW, AutoscalerInput(), WORKFLOW_SUMMARY
    if d.start_pods_ready_gate:
        return contract.PODS_READY_GATE_WORKFLOW, GateInput(), GATE_SUMMARY
    return None
