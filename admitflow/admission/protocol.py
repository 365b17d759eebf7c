"""What a workload, its ClusterQueue, the blockAdmission gate and a runner say to each other: the
payloads of the signals and activities that the pure rules decide (the commands of
`admitflow.admission.lifecycle` carry them). One model each, so fields can be added later; a
receiver ignores what it does not know (`WireModel`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from admitflow.admission.pending_queue import QueueEntry
from admitflow.admission.pod_set_updates import PodSetInfo
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
