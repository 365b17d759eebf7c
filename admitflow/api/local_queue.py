"""LocalQueue (kueue.x-k8s.io/v1beta2): the namespaced queue users submit workloads to.

Source: apis/kueue/v1beta2/localqueue_types.go.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from . import field_error as fe
from .base import KueueModel
from .bounds import INT32_MAX, INT64_MAX, INT64_MIN
from .cluster_queue import (
    AdmissionFairSharingStatus,
    ClusterQueueReference,
    FairSharing,
    ResourceFlavorReference,
    StopPolicy,
)
from .field_error import FieldError
from .meta import Condition, NamespacedObjectMeta
from .quantity import Quantity

API_VERSION = "kueue.x-k8s.io/v1beta2"


class LocalQueueSpec(KueueModel):
    """The desired state of a LocalQueue."""

    cluster_queue: ClusterQueueReference | None = Field(
        default=None,
        description="ClusterQueue backing this queue; immutable. A DNS subdomain (253). Unset: the queue is inactive.",
    )
    stop_policy: StopPolicy = Field(
        default="None",
        description=(
            "None (default): active. Hold: no new reservations, admitted workloads run on. HoldAndDrain: "
            "also evict admitted workloads."
        ),
    )
    fair_sharing: FairSharing | None = Field(
        default=None, description="Admission fair-sharing weight. Not used by admitflow."
    )


class LocalQueueResourceUsage(KueueModel):
    """Quota in use for one resource."""

    name: str = Field(description="Resource name.")
    total: Quantity = Field(default="0", description="Quota in use.")


class LocalQueueFlavorUsage(KueueModel):
    """Quota in use in one flavor by this queue's workloads."""

    name: ResourceFlavorReference = Field(description="Flavor name.")
    resources: list[LocalQueueResourceUsage] = Field(
        default_factory=list, max_length=16, description="Usage per resource; at most 16."
    )


class LocalQueueFairSharingStatus(KueueModel):
    """Current fair-sharing state of the queue."""

    weighted_share: int = Field(
        ge=INT64_MIN, le=INT64_MAX, description="Dominant share divided by the weight; an int64."
    )
    admission_fair_sharing_status: AdmissionFairSharingStatus | None = Field(
        default=None, description="Admission fair sharing state."
    )


class LocalQueueStatus(KueueModel):
    """The observed state of a LocalQueue, as Kueue reports it."""

    conditions: list[Condition] = Field(
        default_factory=list, max_length=16, description="Conditions (type `Active`); at most 16."
    )
    pending_workloads: int = Field(default=0, ge=0, le=INT32_MAX, description="Workloads not yet admitted.")
    reserving_workloads: int = Field(
        default=0, ge=0, le=INT32_MAX, description="Workloads holding a quota reservation."
    )
    admitted_workloads: int = Field(default=0, ge=0, le=INT32_MAX, description="Admitted workloads not yet finished.")
    flavors_reservation: list[LocalQueueFlavorUsage] = Field(
        default_factory=list, max_length=16, description="Quota reserved per flavor; at most 16."
    )
    flavors_usage: list[LocalQueueFlavorUsage] = Field(
        default_factory=list, max_length=16, description="Quota used per flavor by admitted workloads; at most 16."
    )
    fair_sharing: LocalQueueFairSharingStatus | None = Field(default=None, description="Fair-sharing state.")


class LocalQueue(KueueModel):
    """A LocalQueue. Namespaced (namespace defaults to `default`)."""

    api_version: Literal["kueue.x-k8s.io/v1beta2"] = Field(default=API_VERSION, description="API version.")
    kind: Literal["LocalQueue"] = Field(default="LocalQueue", description="Kind.")
    metadata: NamespacedObjectMeta = Field(description="Object metadata; workloads name it in `spec.queueName`.")
    spec: LocalQueueSpec = Field(default_factory=LocalQueueSpec, description="Desired state.")
    status: LocalQueueStatus = Field(default_factory=LocalQueueStatus, description="Observed state; ignored on input.")

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    def update_errors(self, old: LocalQueue, path: str = "") -> list[FieldError]:
        """Rules for replacing `old` with this object: `spec.clusterQueue` is immutable."""
        if self.spec.cluster_queue != old.spec.cluster_queue:
            return [fe.cel(fe.join_path(path, "spec.clusterQueue"), "string", "field is immutable")]
        return []


__all__ = [
    "LocalQueue",
    "LocalQueueFairSharingStatus",
    "LocalQueueFlavorUsage",
    "LocalQueueResourceUsage",
    "LocalQueueSpec",
    "LocalQueueStatus",
]