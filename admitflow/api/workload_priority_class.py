"""WorkloadPriorityClass (kueue.x-k8s.io/v1beta2 and v1beta1): a named priority for workloads,
independent of the pods' PriorityClass. Cluster-scoped.

A Workload names one in `spec.priorityClassRef` (`{group: kueue.x-k8s.io, kind:
WorkloadPriorityClass, name}`; v1beta1: `priorityClassSource: kueue.x-k8s.io/workloadpriorityclass`
and `priorityClassName`). The class's `value` becomes the workload's `spec.priority` when it is
submitted without one (admitflow.admission.priority); changing the value later does not change the
priority of workloads already submitted, as the field's documentation in Kueue says.

The v1beta1 kind has the same fields; only `apiVersion` differs (admitflow.api.conversion).

Sources: apis/kueue/v1beta2/workloadpriorityclass_types.go, apis/kueue/v1beta1/workloadpriorityclass_types.go,
config/components/crd/bases/kueue.x-k8s.io_workloadpriorityclasses.yaml.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import KueueModel
from .bounds import INT32_MAX, INT32_MIN
from .meta import ObjectMeta

API_VERSION = "kueue.x-k8s.io/v1beta2"
GROUP = "kueue.x-k8s.io"
RESOURCE = "workloadpriorityclasses.kueue.x-k8s.io"


class WorkloadPriorityClass(KueueModel):
    """A WorkloadPriorityClass. Cluster-scoped; its fields are at the top level, not under `spec`."""

    api_version: Literal["kueue.x-k8s.io/v1beta2"] = Field(default=API_VERSION, description="API version.")
    kind: Literal["WorkloadPriorityClass"] = Field(default="WorkloadPriorityClass", description="Kind.")
    metadata: ObjectMeta = Field(description="Object metadata; `name` is what workloads refer to.")
    value: int = Field(
        ge=INT32_MIN,
        le=INT32_MAX,
        description=(
            "The priority a workload naming this class gets when it is submitted without `spec.priority`; "
            "higher goes first. Changing it does not change workloads already submitted. An int32. Required."
        ),
    )
    description: str | None = Field(
        default=None,
        max_length=2048,
        description="When this class should be used, for people; at most 2048 characters.",
    )

    @property
    def key(self) -> str:
        return self.metadata.name
