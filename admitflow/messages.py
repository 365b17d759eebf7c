"""Inputs and outputs of the workflows, and of the signals, updates, queries and activities that the
pure rules do not decide (those are in admitflow.admission.protocol): one model each, so fields can
be added later."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from admitflow.admission.catalog import CatalogObject, CatalogState, ObjectRef, Outcome
from admitflow.admission.cluster_queue import ClusterQueueState, QueueEvent
from admitflow.admission.cohort_tree import Away, CohortTreeState
from admitflow.admission.pods_ready_gate import GateState
from admitflow.admission.protocol import PendingWorkload, ReservingWorkload
from admitflow.admission.workload import WorkloadState
from admitflow.api import ClusterQueueStatus, Job, LocalQueueStatus, Workload
from admitflow.api.provisioning_request import PodTemplate, ProvisioningRequest
from admitflow.api.node_group import SimulatedNodeGroup
from admitflow.simulation.autoscaler import SET_BY_HAND, AutoscalerState
from admitflow.wire import WireModel

# --- delivery -----------------------------------------------------------------------------------


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


# --- workflow inputs (each carries its state across continue-as-new) ----------------------------


class CatalogInput(WireModel):
    state: CatalogState | None = None
    undelivered: list[Delivery] = Field(default_factory=list, description="Signals the last run had yet to send.")


class ClusterQueueInput(WireModel):
    name: str
    state: ClusterQueueState | None = None
    undelivered: list[Delivery] = Field(default_factory=list, description="Signals the last run had yet to send.")
    away: Away | None = Field(default=None, description="Where the state is while its cohort tree holds it.")
    handovers: int = Field(default=0, description="How many times the state was handed to a tree.")


class CohortInput(WireModel):
    root: str = Field(description="The root Cohort of the tree this entity schedules.")
    state: CohortTreeState | None = None
    undelivered: list[Delivery] = Field(default_factory=list, description="Signals the last run had yet to send.")


class WorkloadInput(WireModel):
    workload: Workload
    state: WorkloadState | None = None


# --- catalog ------------------------------------------------------------------------------------


class ApplyRequest(WireModel):
    objects: list[CatalogObject]


class DeleteRequest(WireModel):
    objects: list[ObjectRef]


class ApplyResult(WireModel):
    outcomes: list[Outcome]


class ObjectQuery(WireModel):
    kind: str
    key: str | None = Field(default=None, description="None lists every object of the kind.")


class ObjectList(WireModel):
    items: list[CatalogObject] = Field(default_factory=list)


class AdmissionCheckActive(WireModel):
    """A check controller says whether its AdmissionCheck can be used (Kueue's `Active` condition)."""

    name: str
    active: bool = True
    reason: str = "Active"
    message: str = "The admission check is active"


class LocalQueueRef(WireModel):
    namespace: str
    name: str


class ClusterQueueRef(WireModel):
    name: str


class CohortRef(WireModel):
    name: str


class WatchRequest(WireModel):
    """A workload whose LocalQueue or ClusterQueue does not exist yet asks to be woken when it does."""

    local_queue: str = Field(description="namespace/name")
    workflow_id: str
    seen: str = Field(default="", description="The resolution message the workload is waiting on.")


# --- ClusterQueue ------------------------------------------------------------------------------





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


# --- workload ----------------------------------------------------------------------------------


class QueueAvailable(WireModel):
    """Sent by the catalog to a waiting workload: its LocalQueue now leads somewhere."""

    local_queue: str = ""


class DeleteWorkload(WireModel):
    reason: str = ""


# --- a batch/v1 Job kept by admitflow (workflows/job_store.py, admitflow.jobs.store) -------------------


class JobInput(WireModel):
    """A JobWorkflow: the Job as stored (carried across continue-as-new)."""

    job: Job


class JobPatch(WireModel):
    """A JSON merge patch of a stored Job (update `patch_job`), as a client sends one to the
    apiserver: with `metadata.resourceVersion` it applies only to that version (else 409 Conflict)."""

    patch: dict[str, Any] = Field(description="The merge patch (RFC 7386), in the Job's camelCase shape.")
    subresource: Literal["", "status"] = Field(default="", description='"status": the status subresource (only the status changes).')


class JobDeletion(WireModel):
    """Signal `delete_job`: the Job is deleted (its workflow returns it)."""

    reason: str = ""


# --- blockAdmission gate (admitflow.admission.pods_ready) ---------------------------------------


class GateInput(WireModel):
    state: GateState | None = None


# --- ProvisioningRequest check (activities/provisioning) ----------------------------------------


class CreateProvisioningRequest(WireModel):
    request: ProvisioningRequest
    pod_templates: list[PodTemplate]
    watcher: str = Field(description="Workflow ID a push backend signals status changes to.")


class CreatedProvisioningRequest(WireModel):
    request: ProvisioningRequest = Field(description="As stored, with its status.")
    push: bool = Field(description="The backend signals status changes; else the watcher polls.")


class ProvisioningRequestRef(WireModel):
    namespace: str
    name: str


class WatchProvisioningRequest(WireModel):
    namespace: str
    name: str
    resource_version: str = ""


class WatchedProvisioningRequest(WireModel):
    request: ProvisioningRequest | None = Field(default=None, description="None when it is gone.")


class ProvisioningCheckInput(WireModel):
    """A ProvisioningCheckWorkflow: one attempt of one check. `latest`, `push` and `scheduled` carry
    what a run learnt across continue-as-new."""

    parent: str = Field(description="The workload workflow it reports to.")
    check: str
    attempt: int
    request: ProvisioningRequest
    pod_templates: list[PodTemplate]
    latest: ProvisioningRequest | None = None
    push: bool = True
    scheduled: bool = False
    state: dict | None = Field(default=None, description="The attempt's state (provisioning_attempt.AttemptState), carried across continue-as-new.")



class ProvisioningNotice(WireModel):
    reason: str = ""


# --- the simulated cluster autoscaler (workflows/autoscaler.py) ----------------------------------


class AutoscalerInput(WireModel):
    state: AutoscalerState | None = None
    undelivered: list[Delivery] = Field(default_factory=list, description="Signals the last run had yet to send.")


class NodeGroupsUpdate(WireModel):
    """Every SimulatedNodeGroup in the catalog, from the catalog; an older revision is ignored."""

    revision: int
    node_groups: list[SimulatedNodeGroup] = Field(default_factory=list)


class ProvisioningRequestQuery(WireModel):
    namespace: str | None = Field(default=None, description="None lists every namespace.")


class ProvisioningRequestList(WireModel):
    items: list[ProvisioningRequest] = Field(default_factory=list)


class StoredProvisioningRequest(WireModel):
    request: ProvisioningRequest | None = Field(default=None, description="None when there is none.")


class ProvisioningRequestCondition(WireModel):
    """A condition of a simulated ProvisioningRequest set by hand (`admitflow provreq set-condition`)."""

    namespace: str
    name: str
    type: str = Field(description="Accepted, Provisioned, Failed, BookingExpired or CapacityRevoked.")
    status: str = Field(default="True", description="True, False or Unknown.")
    reason: str = Field(default=SET_BY_HAND, description="CamelCase.")
    message: str = ""
    details: dict[str, str] = Field(default_factory=dict, description="Merged into status.provisioningClassDetails.")
