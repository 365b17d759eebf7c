"""Signals a hot workflow sends, batched through one activity at a time (or one local activity, for
a few signals that wait for nobody: a ClusterQueue forwarding to its cohort tree, a queue telling a
few workloads).

A ClusterQueue that signalled every workload itself would pay two history events and a serialized
write per signal (prototypes measured 0.28-0.34 of bare throughput that way, 0.75-1.0 with an
activity per pass). One delivery activity in flight also keeps a workload's messages in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from admitflow import contract, ids
    from admitflow.admission.protocol import Delivery, DeliveryBatch, DeliveryReport

# Keeps one activity's input well under Temporal's 512 KiB payload warning.
MAX_BATCH = 200

_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))
# A delivery heartbeats (activities/delivery.py): a worker killed in the middle of one costs this
# long, and the retry's first second, before another worker sends the batch again (it was the
# 2-minute start-to-close, which now only bounds a delivery whose worker lives but hangs). Not
# shorter: for 10 s after a kill the server still routes the receivers' workflow tasks to the dead
# worker's sticky queue, where they wait 10 s more (worker/main.py), so a batch sent again sooner
# arrives later; docs/operations.md ("When a worker dies") has the measurements.
HEARTBEAT_TIMEOUT = timedelta(seconds=10)

# A batch this small goes in the deciding workflow task when it only signals workloads (`in_task_signals`):
# one round of the delivery activity's concurrent sends (activities/delivery.py).
IN_TASK_LIMIT = 16
# How long one attempt at such a batch may hold the task that sends it. A signal takes milliseconds;
# under load the server has held one to a workload for 6.6-7.8 s while that workload's own task
# waited for this entity to take its message (docs/performance-log.md, 2026-11-28), and the entity's
# task, open for the attempt, took no message meanwhile. Every retry waits on a durable timer
# (IN_TASK_RETRY_THRESHOLD is under the first interval), so the task ends and the entity takes its
# messages; a signal sent twice is harmless (receivers ignore what they already have).
IN_TASK_ATTEMPT = timedelta(seconds=2)
IN_TASK_RETRY_THRESHOLD = timedelta(milliseconds=500)


def in_task_signals(batch: list[Delivery]) -> bool:
    """Whether a batch is few plain signals to workloads: sending them waits for no workflow's task
    (no update, no start), so the task that decides them can send them by local activity and no
    activity task or second workflow task is needed."""
    return len(batch) <= IN_TASK_LIMIT and all(
        d.workflow_id.startswith(ids.WORKLOAD_PREFIX)
        and not (d.start_cluster_queue or d.start_cohort or d.start_autoscaler or d.start_pods_ready_gate)
        for d in batch
    )


class Outbox:
    def __init__(self, carried: list[Delivery] | None = None) -> None:
        self._queue: list[Delivery] = list(carried or [])
        self._task: asyncio.Task[DeliveryReport] | None = None

    def add(self, delivery: Delivery) -> None:
        self._queue.append(delivery)

    def needs_attention(self, holding: bool = False) -> bool:
        """A finished delivery to collect, or (unless holding) a batch to start."""
        if self._task is not None:
            return self._task.done()
        return bool(self._queue) and not holding

    @property
    def in_flight(self) -> bool:
        return self._task is not None

    @property
    def undelivered_or_in_flight(self) -> bool:
        return bool(self._queue) or self._task is not None

    def undelivered(self) -> list[Delivery]:
        """What a workflow continuing as new carries to its next run."""
        return list(self._queue)

    def step(
        self, holding: bool = False, in_task: Callable[[list[Delivery]], bool] = lambda batch: False
    ) -> DeliveryReport | None:
        """Collect a finished delivery, then start the next batch unless holding (a workflow about
        to continue as new holds, so that nothing is in flight when it does); never waits. When
        `in_task(batch)` says so, the batch goes by local activity: the workflow task that starts it
        stays open until it is delivered or its attempt fails (IN_TASK_ATTEMPT at most; retries wait
        on timers), and no activity task or second workflow task is needed."""
        report = None
        if self._task is not None and self._task.done():
            report = self._task.result()
            self._task = None
        if self._task is None and self._queue and not holding:
            batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
            deliveries = DeliveryBatch(deliveries=batch)
            if in_task(batch):
                self._task = workflow.start_local_activity(
                    contract.DELIVER_SIGNALS, deliveries, result_type=DeliveryReport,
                    retry_policy=_RETRY, summary=_summary(batch), **_in_task_limits(batch),
                )
            else:
                self._task = asyncio.ensure_future(
                    workflow.execute_activity(
                        contract.DELIVER_SIGNALS,
                        deliveries,
                        result_type=DeliveryReport,
                        start_to_close_timeout=timedelta(minutes=2),
                        heartbeat_timeout=HEARTBEAT_TIMEOUT,
                        retry_policy=_RETRY,
                        summary=_summary(batch),
                    )
                )
        return report


def _in_task_limits(batch: list[Delivery]) -> dict[str, timedelta | None]:
    """A batch of signals to workloads holds its task for one short attempt; a home's forwards to its
    cohort tree keep the limits their histories have (30 s attempts, the SDK's minute of local retries)."""
    if in_task_signals(batch):
        return {"start_to_close_timeout": IN_TASK_ATTEMPT, "local_retry_threshold": IN_TASK_RETRY_THRESHOLD}
    return {"start_to_close_timeout": timedelta(seconds=30), "local_retry_threshold": None}


def _summary(batch: list[Delivery]) -> str:
    signals = sorted({d.signal for d in batch})
    return f"deliver {len(batch)} signal{'s' if len(batch) != 1 else ''}: {', '.join(signals)}"
