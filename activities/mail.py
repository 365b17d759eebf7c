"""What workloads tell their ClusterQueue, and what a ClusterQueue's home forwards to its cohort
tree, sent together: one update per receiver at a time.

A ClusterQueue is one workflow that every workload of the queue talks to: its entry (enqueue), and
later its release, `admitted` or new priority. Sent as signals, a steady stream of them keeps the
queue from continuing as new: the server refuses a continue-as-new while signals arrive during
that workflow task, and the queue then replays its whole run (seconds, at depth) before it can try
again, while more arrive (temporal#1289). Updates do not hold a run back: the ones that reach it
while it continues as new are given to the next run. A cohort tree is such a workflow too: every
home of its ClusterQueues forwards these messages to it (workflows/cohort_tree.py). `by_update` says
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
queue could otherwise hold every slot the queue needs to answer (measured: docs/performance-log.md).
A home waits for its tree in an entity slot, but the tree never waits for a home. Still, a sender
never waits long: an update not taken within `ACCEPT_WITHIN` (a queue run by an older worker on
the engine's task queue, or no worker at all) is sent again as signals (the receiver ignores what
it already has, so one arriving twice is harmless), as is a batch for a receiver whose worker does
not know the update yet (one older than this module, during an upgrade) or left it unread (the
server then rejects it: `contract.UNPROCESSED_UPDATE`).

A home whose cohort tree holds its state answers the update with that tree (`Receipt.holder`): the
worker's later messages to the queue go straight to the tree, as the `forward` messages the home
would have sent it, and skip the hop through the home (two workflow tasks' worth of the home's
history and a local activity per message). The tree applies what is for a queue it holds and sends
the rest to the queue's home, saying so (`Receipt.bounced`): the worker asks the home again next
time. Only a workload's own messages take the short way, and each waits until its receiver has
taken it, so a workload's messages still arrive in its order; the queue's tickets make one that
overtakes another across a handover harmless (a release remembered before its enqueue arrives).

An enqueue may ask for its answer (`Message.answer`): the queue that holds the state decides in the
same workflow task whether the entry fits, and puts the pending reason or the reservation it would
have signalled to the workload in the update's result instead (`Receipt.answers`), which the
enqueue returns to the workload: no `pending_status` or `quota_reserved` signal, and no workflow
task of the workload's for it (a reservation whose workload says nothing of it is told again by
signal 5 min later: workflows/queue_owner.py, `Retelling`). An enqueue whose update is given up
on and sent again as a signal says so (`QueueEntry.answer_unread`): the answer may have been
decided, and then read by nobody. The queue tells by signal what it decided, or decides, for that
ticket: a reservation reaches its workload within a delivery's time, whichever road the enqueue
took, and whichever came first of the given-up update and the signal.
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
from admitflow.admission.cohort_tree import Forwarded
from admitflow.admission.pending_queue import QueueEntry
from admitflow.client import unprocessed_update
from admitflow.messages import ClusterQueueInput
from admitflow.admission.protocol import Delivery, Message, Messages, Receipt

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


@dataclass(frozen=True)
class Taken:
    """What became of one message: whether its receiver runs (it took the message then), and what
    it answered (`Message.answer`)."""

    ran: bool
    answers: list[Message] = field(default_factory=list)


@dataclass
class _Letter:
    message: Message
    start: StartQueue | None
    taken: asyncio.Future[Taken]
    # Addressed to a ClusterQueue's home and sent to the tree holding its state: that home's ID.
    home: str | None = None


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
        # ClusterQueue home -> the cohort tree that holds its state, as the home last answered.
        self._holders: dict[str, str] = {}

    async def send(self, workflow_id: str, message: Message, start: StartQueue | None = None) -> Taken:
        """Once the receiver `workflow_id` (or the cohort tree holding its state) has taken
        `message`: whether it runs (False when it does not, and `start` is None), and what it
        answered. Raises what the server answered otherwise (the caller retries)."""
        holder = self._holders.get(workflow_id) if message.signal in contract.MAILED_SIGNALS else None
        if holder is not None:
            name = workflow_id.removeprefix(ids.CLUSTER_QUEUE_PREFIX)
            routed = Message(signal=contract.FORWARD, answer=message.answer,
                             payload=Forwarded(cluster_queue=name, signal=message.signal, payload=message.payload).to_wire())
            taken = await self._post(holder, _Letter(routed, None, self._future(), home=workflow_id))
            if taken is not None:
                return taken
            # The tree does not run any more: the home knows where the state is.
        return await self._post(workflow_id, _Letter(message, start, self._future()))

    def _future(self) -> asyncio.Future[Taken]:
        taken: asyncio.Future[Taken] = asyncio.get_running_loop().create_future()
        # Read even when its sender stopped waiting (its activity was cancelled): no "never retrieved" noise.
        taken.add_done_callback(lambda f: f.cancelled() or f.exception())
        return taken

    async def _post(self, workflow_id: str, letter: _Letter) -> Taken | None:
        """`letter`'s fate at `workflow_id`; None for a letter routed to a tree that does not run."""
        box = self._boxes.setdefault(workflow_id, _Box())
        box.letters.append(letter)
        if box.sending is None:
            box.sending = asyncio.create_task(self._empty(workflow_id, box))
        taken = await asyncio.shield(letter.taken)
        if letter.home is not None and not taken.ran:
            self._holders.pop(letter.home, None)
            return None
        return taken

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

    async def _deliver(self, workflow_id: str, batch: list[_Letter]) -> list[Taken]:
        """Whether each letter's receiver runs (it has taken the letter when it does), and its answers."""
        messages = Messages(messages=[letter.message for letter in batch])
        start = next((letter.start for letter in batch if letter.start is not None), None)
        try:
            if start is None:
                call = self.client.get_workflow_handle(workflow_id).execute_update(
                    contract.TAKE_MESSAGES, messages, result_type=Receipt
                )
            else:
                call = self.client.execute_update_with_start_workflow(
                    contract.TAKE_MESSAGES, messages, start_workflow_operation=_starting(workflow_id, start), result_type=Receipt
                )
            receipt = await asyncio.wait_for(call, self.accept_within)
            return self._read(workflow_id, batch, receipt)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND and start is None:
                return [Taken(ran=False)] * len(batch)
            raise
        except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):  # the SDK's name for wait_for's cancel
            if asyncio.current_task().cancelling():  # type: ignore[union-attr] - the worker stops: no signals
                raise
            log.warning("%s took no update within %.0f s: %d messages sent as signals", workflow_id, self.accept_within, len(batch))
        except WorkflowUpdateFailedError as err:
            if not _unknown_update(err):
                raise
            log.warning("%s took no %s (its worker does not know it, or left it unread): %d messages sent as signals",
                        workflow_id, contract.TAKE_MESSAGES, len(batch))
        return [Taken(ran=await self._signal(workflow_id, letter)) for letter in batch]

    def _read(self, workflow_id: str, batch: list[_Letter], receipt: Receipt | None) -> list[Taken]:
        """Each letter's answers; what the receipt says of where a queue's state is, remembered."""
        if receipt is None:  # a receiver older than the receipt
            return [Taken(ran=True)] * len(batch)
        if workflow_id.startswith(ids.CLUSTER_QUEUE_PREFIX):
            if receipt.holder:
                self._holders[workflow_id] = receipt.holder
            else:
                self._holders.pop(workflow_id, None)
        for i in receipt.bounced:
            if 0 <= i < len(batch) and batch[i].home is not None:
                self._holders.pop(batch[i].home, None)
        answers = receipt.answers + [[]] * (len(batch) - len(receipt.answers))
        return [Taken(ran=True, answers=a) for a in answers[: len(batch)]]

    async def _signal(self, workflow_id: str, letter: _Letter) -> bool:
        m, start = unanswered(letter.message), letter.start
        alone = Delivery(workflow_id=workflow_id, signal=m.signal, payload=m.payload, start_cluster_queue=start and start.name)
        return await self.signal(self.client, alone, start.task_queue if start else "")


def unanswered(m: Message) -> Message:
    """`m` as it is sent again by signal after the update that carried it was given up on: an
    enqueue that asked for its answer (itself, or forwarded to a cohort tree) says that the answer
    went unread (`QueueEntry.answer_unread`), so that the queue tells by signal what it decides for
    that ticket. Any other message as it is."""
    if not m.answer:
        return m
    if m.signal == contract.ENQUEUE:
        return m.model_copy(update={"payload": _unread(m.payload)})
    if m.signal == contract.FORWARD and m.payload.get("signal") == contract.ENQUEUE:
        forwarded = Forwarded.model_validate(m.payload)
        return m.model_copy(update={"payload": forwarded.model_copy(update={"payload": _unread(forwarded.payload)}).to_wire()})
    return m


def _unread(entry: dict) -> dict:
    return QueueEntry.model_validate(entry).model_copy(update={"answer_unread": True}).to_wire()


def _starting(workflow_id: str, start: StartQueue) -> WithStartWorkflowOperation:
    return WithStartWorkflowOperation(
        contract.CLUSTER_QUEUE_WORKFLOW, ClusterQueueInput(name=start.name), id=workflow_id,
        task_queue=contract.start_task_queue(contract.CLUSTER_QUEUE_WORKFLOW, start.task_queue),
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING, static_summary=f"ClusterQueue {start.name}",
    )


def _unknown_update(err: WorkflowUpdateFailedError) -> bool:
    """The SDK's rejection of an update its workflow has no handler for, or the server's of one whose
    workflow task was completed without it (a worker too old for updates, or one that ended the task
    unread): either way nothing was taken."""
    return unprocessed_update(err) or "expected but not found" in str(err.cause)
