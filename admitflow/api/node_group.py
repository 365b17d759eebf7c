"""SimulatedNodeGroup (admitflow.io/v1): a node group of admitflow's simulated cluster autoscaler.

The `simulated` ProvisioningRequest backend answers requests from these groups: a request fits a
group when the group is available, its labels satisfy every PodTemplate's nodeSelector, and what the
request asks for fits in what the group does not yet hold (docs/simulated-autoscaler.md). A real
cluster has node groups in its cloud provider; this kind stands in for them, applied like any other
manifest and held by the catalog.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from . import field_error as fe
from .base import KueueModel
from .bounds import INT32_MAX
from .field_error import FieldError
from .meta import ObjectMeta, label_errors
from .names import qualified_name_errors
from .quantity import Quantity, canonical_quantity, parse_quantity

API_VERSION = "admitflow.io/v1"

NEGATIVE_MESSAGE = "must be greater than or equal to 0"


class SimulatedNodeGroupSpec(KueueModel):
    """What the group offers and how quickly."""

    capacity: dict[str, Quantity] = Field(
        min_length=1,
        description=(
            "Required. Resource name -> quantity the group can provide in total, e.g. "
            '`{cpu: "64", memory: 256Gi, nvidia.com/gpu: "8"}`. A request asking for a resource not '
            "listed here does not fit. Quantities must be >= 0."
        ),
    )
    labels: dict[str, str] | None = Field(
        default=None,
        description=(
            "Labels of the group's nodes. A request fits only if every PodTemplate's nodeSelector is "
            "a subset of them (affinity and tolerations are not looked at)."
        ),
    )
    provisioning_delay_seconds: int = Field(
        default=0,
        ge=0,
        le=INT32_MAX,
        description=(
            "How long a scale-up in this group takes: `Provisioned=True` comes this many seconds after "
            "the request fits. Default 0, 0 to 2147483647. Ignored for the class "
            "check-capacity.autoscaling.x-k8s.io, which only checks existing capacity and answers at once."
        ),
    )
    available_after_seconds: int = Field(
        default=0,
        ge=0,
        le=INT32_MAX,
        description=(
            "The group's capacity exists only this many seconds after the group was first applied "
            "(its creationTimestamp): a stockout that ends. Until then nothing fits in it. Default 0, 0 to 2147483647."
        ),
    )
    class_details: dict[str, str] | None = Field(
        default=None,
        description=(
            "Extra `status.provisioningClassDetails` entries reported when a request is provisioned "
            "in this group; `nodeGroup: <name>` is always added."
        ),
    )

    def validation_errors(self, path: str = "spec") -> list[FieldError]:
        errors: list[FieldError] = []
        for name, quantity in self.capacity.items():
            at = fe.join_path(path, f"capacity[{name}]")
            errors.extend(fe.invalid(fe.join_path(path, "capacity"), name, m) for m in qualified_name_errors(name))
            if parse_quantity(quantity) < 0:
                errors.append(fe.invalid(at, canonical_quantity(quantity), NEGATIVE_MESSAGE))
        errors.extend(label_errors(self.labels, fe.join_path(path, "labels")))
        return errors


class SimulatedNodeGroup(KueueModel):
    """A node group of the simulated cluster autoscaler. Cluster-scoped."""

    api_version: Literal["admitflow.io/v1"] = Field(default=API_VERSION, description="API version.")
    kind: Literal["SimulatedNodeGroup"] = Field(default="SimulatedNodeGroup", description="Kind.")
    metadata: ObjectMeta = Field(
        description="Object metadata; `name` is reported as the `nodeGroup` provisioningClassDetail."
    )
    spec: SimulatedNodeGroupSpec = Field(description="The group's capacity, labels and timing. Required.")

    @property
    def key(self) -> str:
        return self.metadata.name

    def validation_errors(self, path: str = "") -> list[FieldError]:
        return self.spec.validation_errors(fe.join_path(path, "spec"))
