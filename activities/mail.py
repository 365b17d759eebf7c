"""What workloads tell their ClusterQueue, and what a ClusterQueue's home forwards to its cohort
tree, sent together: one update per receiver at a time.

A ClusterQueue is one workflow that every workload of the queue talks to: its entry (enqueue), and
later its release, `admitted` or new priority. Sent as signals, a steady stream of them keeps the
queue from continuing as new: the server refuses a continue-as-new while signals arrive during
that workflow task, and the queue then replays its whole run (seconds, at depth) before it can try
again, while more arrive (temporal#1289). Updates do not hold a run back: the ones that reach it
while it continues as new are given to the next run. A cohort tree is such a workflow too: every
home of its ClusterQueues forwards these messages to it (workflows/cohort.py). `by_update` says
which deliveries travel this way.

Every such message a worker's activities send to one receiver goes through that worker's one
`Mailer`: while an update to that receiver is on its way, the messages that come meanwhile wait
and leave together in the next (`contract.TAKE_MESSAGES`), so a worker has at most one update in
flight per receiver, well under the server's 10 per workflow, however many workloads speak at
once. Each sender waits until the receiver has taken its message (the update accepted, so it is
in the receiver's history), exactly as long as the receiver takes to run its next workflow task.

A sender is a local activity (a workload's, or a home's forwarding), which holds its workflow's
task, and its slot, while it waits. So the receivers run on a task queue of their own
(`ids.entity_task_queue`), whose slots no workload holds: a burst of workloads waiting for their
queue could otherwise hold every slot the queue needs to answer (measured: docs/performance.md).
A home waits for its tree in an entity slot, but the tree never waits for a home. Still, a sender
never waits long: an update not taken within `ACCEPT_WITHIN` (a queue run by an older worker on
the engine's task queue, or no worker at all) is sent again as signals (the receiver ignores what
it already has, so one arriving twice is harmless), as is a batch for a receiver whose worker does
not know the update yet (one older than this module, during an upgrade).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from temporalio.client import Client, WithStartWorkflowOperation, WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from admitflow import contract, ids
from admitflow.messages import ClusterQueueInput, Delivery, Message, Messages

log = logging.getLogger(__name__)

# How long a sender waits for its receiver to take an update before sending its messages as signals.
ACCEPT_WITHIN = 5.0
# Messages in one update, at most (a queue entry is about 1 KiB; the server refuses payloads over 2 MiB).
BATCH_LIMIT = 100


def by_update(d: Delivery) -> bool:
    """Whether `d` travels in its worker's `take_messages` update to its receiver rather than as a
    signal: what workloads tell their ClusterQueue, and what a home forwards to its cohort tree.
    Never a delivery that starts its receiver (signal-with-start)."""
    if d.start_cluster_queue or d.start_cohort or d.start_autoscaler or d.start_pods_ready_gate:
        return False
    if d.workflow_id.startswith(ids.CLUSTER_QUEUE_PREFIX):
        return d.signal in contract.MAILED_SIGNALS
    return d.workflow_id.startswith(ids.COHORT_PREFIX) and d.signal in contract.FORWARDED_SIGNALS


@dataclass(frozen=True)
class StartQueue:
    """Start the ClusterQueue's workflow with the messages if it does not run yet, on the entities'
    task queue of `task_queue` (`contract.start_task_queue`)."""

    name: str
    task_queue: str


# Sends one delivery as a signal, starting its workflow on the task queue given when it says so;
# False when no such workflow runs (activities/delivery.send_signal).
SignalSender = Callable[[Client, Delivery, str], Awaitable[bool]]


@dataclass
class _Letter:
    message: Message
    start: StartQueue | None
    taken: asyncio.Future[bool]


@dataclass
class _Box:
    letters: list[_Letter] = field(default_factory=list)
    sending: asyncio.Task[None] | None = None


class Mailer:
    def __init__(self, client: Client, signal: SignalSender, accept_within: float = ACCEPT_WITHIN) -> None:
        self.client = client
        self.signal = signal
        self.accept_within = accept_within
        self._boxes: dict[str, _Box] = {}

    async def send(self, workflow_id: str, message: Message, start: StartQueue | None = None) -> bool:
        """Once the receiver `workflow_id` has taken `message`: True; False when it does not
        run (and `start` is None). Raises what the server answered otherwise (the caller retries)."""
        box = self._boxes.setdefault(workflow_id, _Box())
        letter = _Letter(message, start, asyncio.get_running_loop().create_future())
        # Read even when its sender stopped waiting (its activity was cancelled): no "never retrieved" noise.
        letter.taken.add_done_callback(lambda f: f.cancelled() or f.exception())
        box.letters.append(letter)
        if box.sending is None:
            box.sending = asyncio.create_task(self._empty(workflow_id, box))
        return await asyncio.shield(letter.taken)

    async def _empty(self, workflow_id: str, box: _Box) -> None:
        batch: list[_Letter] = []
        try:
            while box.letters:
                batch, box.letters = box.letters[:BATCH_LIMIT], box.letters[BATCH_LIMIT:]
                try:
                    taken = await self._deliver(workflow_id, batch)
                except Exception as err:  # noqa: BLE001 - each sender's activity retries
                    for letter in batch:
                        letter.taken.set_exception(err)
                else:
                    for letter, t in zip(batch, taken, strict=True):
                        letter.taken.set_result(t)
                batch = []
        finally:
            for letter in batch:  # cancelled mid-delivery (the worker stops): its senders stop waiting
                letter.taken.cancel()
            box.sending = None
            if not box.letters and self._boxes.get(workflow_id) is box:
                del self._boxes[workflow_id]

    async def _deliver(self, workflow_id: str, batch: list[_Letter]) -> list[bool]:
        """Whether each letter's queue runs (it has taken the letter when it does)."""
        messages = Messages(messages=[letter.message for letter in batch])
        start = next((letter.start for letter in batch if letter.start is not None), None)
        try:
            if start is None:
                call = self.client.get_workflow_handle(workflow_id).execute_update(contract.TAKE_MESSAGES, messages)
            else:
                call = self.client.execute_update_with_start_workflow(
                    contract.TAKE_MESSAGES, messages, start_workflow_operation=_starting(workflow_id, start)
                )
            await asyncio.wait_for(call, self.accept_within)
            return [True] * len(batch)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND and start is None:
                return [False] * len(batch)
            raise
        except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):  # the SDK's name for wait_for's cancel
            if asyncio.current_task().cancelling():  # type: ignore[union-attr] - the worker stops: no signals
                raise
            log.warning("%s took no update within %.0f s: %d messages sent as signals", workflow_id, self.accept_within, len(batch))
        except WorkflowUpdateFailedError as err:
            if not _unknown_update(err):
                raise
            log.warning("%s does not know %s yet (an older worker runs it): %d messages sent as signals",
                        workflow_id, contract.TAKE_MESSAGES, len(batch))
        return [await self._signal(workflow_id, letter) for letter in batch]

    async def _signal(self, workflow_id: str, letter: _Letter) -> bool:
        m, start = letter.message, letter.start
        alone = Delivery(workflow_id=workflow_id, signal=m.signal, payload=m.payload, start_cluster_queue=start and start.name)
        return await self.signal(self.client, alone, start.task_queue if start else "")


def _starting(workflow_id: str, start: StartQueue) -> WithStartWorkflowOperation:
    return WithStartWorkflowOperation(
        contract.CLUSTER_QUEUE_WORKFLOW, ClusterQueueInput(name=start.name), id=workflow_id,
        task_queue=contract.start_task_queue(contract.CLUSTER_QUEUE_WORKFLOW, start.task_queue),
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING, static_summary=f"ClusterQueue {start.name}",
    )


def _unknown_update(err: WorkflowUpdateFailedError) -> bool:
    """The SDK's rejection of an update its workflow has no handler for."""
    return "expected but not found" in str(err.cause)
