"""Inputs and outputs of the workflows, and of the signals, updates, queries and activities that the
pure rules do not decide (those are in admitflow.admission.protocol): one model each, so fields can
be added later."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from admitflow.admission.catalog import CatalogObject, CatalogState, ObjectRef, Outcome
from admitflow.admission.cluster_queue import ClusterQueueState
from admitflow.admission.cohort_tree import Away, CohortTreeState
from admitflow.admission.pods_ready_gate import GateState
from admitflow.admission.protocol import Delivery
from admitflow.admission.workload import WorkloadState
from admitflow.api import Job, Workload
from admitflow.api.provisioning_request import PodTemplate, ProvisioningRequest
from admitflow.api.node_group import SimulatedNodeGroup
from admitflow.simulation.autoscaler import SET_BY_HAND, AutoscalerState
from admitflow.wire import WireModel

# --- delivery -----------------------------------------------------------------------------------








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
