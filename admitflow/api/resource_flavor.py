"""ResourceFlavor (kueue.x-k8s.io/v1beta2): a kind of nodes, named by its node labels and taints.

Source: apis/kueue/v1beta2/resourceflavor_types.go and pkg/webhooks/resourceflavor_webhook.go.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from . import field_error as fe
from .base import KueueModel
from .field_error import FieldError
from .meta import ObjectMeta, label_errors
from .names import DNS1123_SUBDOMAIN_PATTERN
from .pod import TAINT_EFFECTS, Taint, Toleration, taint_errors, toleration_key_errors, toleration_rule_errors
from .quantity import Quantity

API_VERSION = "kueue.x-k8s.io/v1beta2"


class ResourceFlavorSpec(KueueModel):
    """How the nodes of this flavor are labelled and tainted."""

    node_labels: dict[str, str] | None = Field(
        default=None,
        max_length=8,
        description=(
            "Labels of the nodes of this flavor. A podSet only gets flavors whose nodeLabels agree "
            "with its nodeSelector and required node affinity; at most 8 entries."
        ),
    )
    node_taints: list[Taint] | None = Field(
        default=None,
        max_length=8,
        description=(
            "Taints of the nodes of this flavor: a podSet needs matching tolerations to get the "
            "flavor (NoSchedule and NoExecute count, PreferNoSchedule is ignored); at most 8."
        ),
    )
    tolerations: list[Toleration] | None = Field(
        default=None,
        max_length=8,
        description=(
            "Tolerations added to pods admitted with this flavor; nodeTaints they tolerate are not "
            "required from the podSet; at most 8."
        ),
    )
    topology_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=DNS1123_SUBDOMAIN_PATTERN,
        description="Topology (TAS) of this flavor; requires at least one nodeLabel. Not used by admitflow.",
    )
    resource_weights: dict[str, Quantity] | None = Field(
        default=None,
        max_length=16,
        description="Fair-sharing weight per resource (default 1, must be > 0); at most 16. Not used by admitflow.",
    )

    def validation_errors(self, path: str = "spec") -> list[FieldError]:
        errors: list[FieldError] = []
        # CEL rules of the CRD first, then the webhook, as the apiserver runs them.
        if not all(t.effect in TAINT_EFFECTS for t in self.node_taints or []):
            errors.append(
                fe.cel(
                    fe.join_path(path, "nodeTaints"),
                    "array",
                    "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'",
                )
            )
        errors.extend(toleration_rule_errors(self.tolerations, fe.join_path(path, "tolerations")))
        if self.topology_name is not None and not self.node_labels:
            errors.append(fe.cel(path, "object", "at least one nodeLabel is required when topology is set"))
        errors.extend(label_errors(self.node_labels, fe.join_path(path, "nodeLabels")))
        errors.extend(taint_errors(self.node_taints, fe.join_path(path, "nodeTaints")))
        errors.extend(toleration_key_errors(self.tolerations, fe.join_path(path, "tolerations")))
        return errors


class ResourceFlavor(KueueModel):
    """A ResourceFlavor. Cluster-scoped."""

    api_version: Literal["kueue.x-k8s.io/v1beta2"] = Field(default=API_VERSION, description="API version.")
    kind: Literal["ResourceFlavor"] = Field(default="ResourceFlavor", description="Kind.")
    metadata: ObjectMeta = Field(description="Object metadata; `name` is what ClusterQueues refer to.")
    spec: ResourceFlavorSpec = Field(default_factory=ResourceFlavorSpec, description="The flavor's nodes.")

    @property
    def key(self) -> str:
        return self.metadata.name

    def validation_errors(self, path: str = "") -> list[FieldError]:
        return self.spec.validation_errors(fe.join_path(path, "spec"))

    def update_errors(self, old: ResourceFlavor, path: str = "") -> list[FieldError]:
        """Rules for replacing `old` with this object: a TAS flavor's spec is immutable."""
        if old.spec.topology_name is not None and self.spec != old.spec:
            message = "resourceFlavorSpec are immutable when topologyName is set"
            return [fe.cel(fe.join_path(path, "spec"), "object", message)]
        return []
