"""What a workload, its ClusterQueue, the blockAdmission gate and a runner say to each other, and
what a scheduling entity takes and sends: the payloads of the signals, updates and activities that
the pure rules decide (the commands of `admitflow.admission.lifecycle` and the deliveries of
`admitflow.admission.queue_owner` carry them). One model each, so fields can be added later; a
receiver ignores what it does not know (`WireModel`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from admitflow.admission.cluster_queue import QueueEvent
from admitflow.admission.pending_queue import QueueEntry
from admitflow.admission.pod_set_updates import PodSetInfo
from admitflow.api import ClusterQueueStatus, LocalQueueStatus
from admitflow.api.provisioning_request import ProvisioningRequest
from admitflow.wire import WireModel


class EnqueueRequest(WireModel):
    namespace: str
    local_queue: str
    workflow_id: str
    entry: QueueEntry
    fresh: bool = Field(default=False, description="Ask the catalog; do not reuse a cached lookup.")
    answer: bool = Field(
        default=False,
        description="Ask the queue for its answer (`Message.answer`): the enqueue returns the entry's first pending "
        "reason, or its reservation, in `QueueResolution.notices`, which the workload then steps as the signal it replaces.",
    )

class ReleaseRequest(WireModel):
    """A workload gives back its place or its quota (finished, deleted, evicted)."""

    key: str
    uid: str
    ticket: int

class Admitted(ReleaseRequest):
    """A workload passed its admission checks: its reservation counts as admitted."""

class Reprioritize(ReleaseRequest):
    """A workload's priority changed: its queue entry, or its reservation, takes the new one."""

    priority: int

class PendingWorkload(WireModel):
    """One row of the pending-workloads view, shaped like Kueue's visibility API."""

    name: str
    namespace: str
    local_queue_name: str
    priority: int
    position_in_cluster_queue: int
    position_in_local_queue: int
    queued_since: datetime

class ReservingWorkload(WireModel):
    name: str
    namespace: str
    local_queue_name: str
    priority: int
    admitted: bool
    reserved_since: datetime
    flavors: dict[str, dict[str, str]] = Field(description="podSet -> resource -> flavor")
    usage: dict[str, str] = Field(description="resource -> total quantity")

class FinishRequest(WireModel):
    succeeded: bool = True
    message: str = ""
    admission: int | None = Field(
        default=None, ge=1, le=2147483647,
        description="The admission it is about (a runner's `start_workload` carries it): a report about another "
        "admission is ignored, so a runner cut off from Temporal cannot speak for a later one. Left out, it is "
        "taken as about the current one.",
    )

class StartWorkload(WireModel):
    """Input of activity `start_workload`, run on the runner's task queue once the workload is
    admitted. The runner reports `set_pods_ready` and `finish` to `workflow_id`. If it keeps the
    activity running (heartbeating) while the workload runs, the engine notices when it dies."""

    workflow_id: str = Field(description="Where the runner reports: signal `set_pods_ready` and `finish` here.")
    admission: int = Field(description="Which admission of the workload this is; `stop_workload` names the same.")
    workload: dict[str, Any] = Field(description="The Workload in Kueue's shape, with its status.")
    pod_sets_info: list[PodSetInfo] = Field(
        default_factory=list, description="Per podSet, what its pods start with: flavors' and checks' podSetUpdates merged."
    )

class StopWorkload(WireModel):
    """Input of activity `stop_workload`: the admission is over (evicted, finished, deleted)."""

    workflow_id: str
    admission: int
    reason: str = ""
    message: str = ""

class GateRequest(WireModel):
    cluster_queue: str

class GateUse(WireModel):
    cluster_queue: str
    key: str
    uid: str
    ticket: int

class GateSettled(WireModel):
    key: str
    uid: str
    ticket: int

class ProvisioningUpdate(WireModel):
    """From a ProvisioningCheckWorkflow to its workload: the request as it is now (None once gone),
    or why it could not be created."""

    check: str
    attempt: int
    request: ProvisioningRequest | None = None
    error: str = ""


# --- to and from a scheduling entity (a ClusterQueue, a cohort tree), and what it sends -------------


class Delivery(WireModel):
    """One signal to send. With `start_cluster_queue` (or `start_cohort`, `start_autoscaler`,
    `start_pods_ready_gate`), the target ClusterQueue workflow (or cohort tree, simulated
    autoscaler, blockAdmission gate) is started with this signal if it does not run yet
    (signal-with-start)."""

    workflow_id: str
    signal: str
    payload: dict[str, Any] = Field(default_factory=dict)
    start_cluster_queue: str | None = None
    start_cohort: str | None = Field(default=None, description="The root Cohort of the tree entity to start.")
    cluster_queue: str | None = Field(
        default=None, description="From a cohort tree, a notice's ClusterQueue: where to forget a workload that is gone."
    )
    start_autoscaler: bool = False
    start_pods_ready_gate: bool = False


class Message(WireModel):
    """One message for a ClusterQueue or cohort tree, under the name of the signal that carries it alone."""

    signal: str
    payload: dict[str, Any] = Field(default_factory=dict)
    answer: bool = Field(
        default=False,
        description="The sender of an enqueue takes, in the update's result, the pending reason or the reservation the "
        "queue's next pass decides for the entry: the queue sends it no `pending_status` or `quota_reserved` signal for "
        "it then (a reservation the workload says nothing of is told again by signal after scheduler.RETELL_AFTER).",
    )


class Messages(WireModel):
    """Messages to one ClusterQueue (from its workloads) or cohort tree (from its queues' homes),
    taken together by one update (TAKE_MESSAGES)."""

    messages: list[Message] = Field(min_length=1)


class Receipt(WireModel):
    """A `take_messages` update's result (None from a receiver older than it)."""

    holder: str | None = Field(
        default=None,
        description="From a ClusterQueue's home while its cohort tree holds its state: that tree's workflow ID, "
        "which takes the queue's messages itself, as `forward`.",
    )
    answers: list[list[Message]] = Field(
        default_factory=list,
        description="Per message, in order: what the receiver decided for it and sends no other way (the "
        "`pending_status` of an enqueue that asked for its answer).",
    )
    bounced: list[int] = Field(
        default_factory=list, description="From a cohort tree: the messages for a queue it does not hold, sent on to that queue's home."
    )


class DeliveryBatch(WireModel):
    deliveries: list[Delivery]


class DeliveryReport(WireModel):
    missing: list[Delivery] = Field(default_factory=list, description="Deliveries that found no running workflow.")


class ForceRelease(WireModel):
    """An operator gives back what a workload holds in the ClusterQueue (its quota or its place)
    without its workflow, whose task fails (`admitflow release workload`); answered with
    `admission.cluster_queue.ForceReleaseOutcome`."""

    key: str = Field(min_length=3, max_length=255, pattern=r"^[^/]+/[^/]+$", description="The workload, namespace/name.")
    message: str = Field(default="", max_length=1024, description="Why, kept in the ClusterQueue's event.")
    cluster_queue: str | None = Field(default=None, description="To a cohort tree: the ClusterQueue holding it.")


class StatusQuery(WireModel):
    """Which pending workloads the status query lists, as Kueue's visibility API pages them."""

    limit: int = Field(default=1000, ge=0, description="At most this many pending workloads.")
    offset: int = Field(default=0, ge=0, description="Skip this many, from the head of the queue.")
    workload: str | None = Field(default=None, description="Only this workload (namespace/name), wherever it is.")
    cluster_queue: str | None = Field(default=None, description="To a cohort tree: which of its ClusterQueues.")


class ClusterQueueReport(WireModel):
    name: str
    status: ClusterQueueStatus
    pending: list[PendingWorkload] = Field(default_factory=list)
    reserving: list[ReservingWorkload] = Field(default_factory=list)
    local_queues: dict[str, LocalQueueStatus] = Field(default_factory=dict)
    events: list[QueueEvent] = Field(default_factory=list, description="The ClusterQueue's last events, oldest first.")
    moved_to: str = Field(default="", description="Its cohort tree's workflow ID, which holds its state: ask there.")
