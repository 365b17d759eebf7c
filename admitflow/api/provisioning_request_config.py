"""ProvisioningRequestConfig (kueue.x-k8s.io/v1beta2): how the built-in ProvisioningRequest check
asks the cluster autoscaler for capacity.

Source: apis/kueue/v1beta2/provisioningrequestconfig_types.go.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from . import field_error as fe
from .admission_check import PendingTimeout
from .base import KueueModel
from .bounds import INT32_MAX, INT32_MIN
from .field_error import FieldError
from .meta import ObjectMeta
from .names import DNS1123_SUBDOMAIN_PATTERN

API_VERSION = "kueue.x-k8s.io/v1beta2"

NODE_SELECTOR_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)

Parameter = Annotated[str, StringConstraints(max_length=255)]
"""A ProvisioningRequest parameter value; at most 255 characters."""


class ProvisioningRequestRetryStrategy(KueueModel):
    """Retries of failed or expired ProvisioningRequests. Each field defaults on its own."""

    # Kueue types these *int32 with no Minimum marker: any int32 is accepted, nothing wider.
    backoff_limit_count: int = Field(
        default=3,
        ge=INT32_MIN,
        le=INT32_MAX,
        description="Retries before the check becomes Rejected; 0 disables retries; an int32. Defaults to 3.",
    )
    backoff_base_seconds: int = Field(
        default=60,
        ge=INT32_MIN,
        le=INT32_MAX,
        description=(
            "Base of the exponential backoff: attempt n waits about base*2^(n-1) seconds; an int32. Defaults to 60."
        ),
    )
    backoff_max_seconds: int = Field(
        default=1800,
        ge=INT32_MIN,
        le=INT32_MAX,
        description="Upper bound of one backoff, in seconds; an int32. Defaults to 1800.",
    )


class ProvisioningRequestPodSetUpdatesNodeSelector(KueueModel):
    """A node selector entry set on admitted pods from the ProvisioningRequest's class details."""

    key: str = Field(
        min_length=1,
        max_length=317,
        pattern=NODE_SELECTOR_KEY_PATTERN,
        description="Node selector key; a qualified name, 1 to 317 characters. Required.",
    )
    value_from_provisioning_class_detail: str = Field(
        min_length=1,
        max_length=32768,
        description="Key in ProvisioningRequest status.provisioningClassDetails whose value is used. Required.",
    )


class ProvisioningRequestPodSetUpdates(KueueModel):
    """Updates applied to admitted podSets so they land on the provisioned nodes."""

    node_selector: list[ProvisioningRequestPodSetUpdatesNodeSelector] | None = Field(
        default=None, max_length=8, description="Node selector entries; at most 8, keys unique."
    )


class ProvisioningRequestConfigSpec(KueueModel):
    """The desired state of a ProvisioningRequestConfig."""

    provisioning_class_name: str = Field(
        min_length=1,
        max_length=253,
        pattern=DNS1123_SUBDOMAIN_PATTERN,
        description=(
            "ProvisioningRequest class (e.g. check-capacity.autoscaling.x-k8s.io); a DNS subdomain of "
            "1 to 253 characters. Required."
        ),
    )
    parameters: dict[str, Parameter] | None = Field(
        default=None,
        max_length=100,
        description=(
            "Class parameters; workload annotations `provreq.kueue.x-k8s.io/<key>` override them. At most "
            "100 entries, values at most 255 characters."
        ),
    )
    managed_resources: list[str] | None = Field(
        default=None,
        max_length=100,
        description=(
            "Resources the autoscaler manages: only podSets requesting one of them are in the request, and "
            "none means the check is Ready at once. Empty means all. At most 100, no duplicates."
        ),
    )
    retry_strategy: ProvisioningRequestRetryStrategy = Field(
        default_factory=ProvisioningRequestRetryStrategy,
        description=(
            "Retries of failed requests; defaults to "
            "{backoffLimitCount: 3, backoffBaseSeconds: 60, backoffMaxSeconds: 1800}."
        ),
    )
    pod_set_updates: ProvisioningRequestPodSetUpdates | None = Field(
        default=None, description="podSetUpdates targeting the provisioned nodes."
    )
    pod_set_merge_policy: Literal["IdenticalPodTemplates", "IdenticalWorkloadSchedulingRequirements"] | None = Field(
        default=None,
        description=(
            "Merge podSets before they go to the autoscaler: IdenticalPodTemplates or "
            "IdenticalWorkloadSchedulingRequirements."
        ),
    )
    pending_timeout: PendingTimeout | None = Field(
        default=None,
        description=(
            "admitflow extension: how long the check may stay Pending (the request accepted, not provisioned) "
            "while quota is reserved, and what then; it overrides the AdmissionCheck's."
        ),
    )

    def validation_errors(self, path: str = "spec") -> list[FieldError]:
        errors = fe.list_set_duplicates(self.managed_resources or [], fe.join_path(path, "managedResources"))
        if self.pod_set_updates and self.pod_set_updates.node_selector:
            errors += fe.list_map_duplicates(
                [n.key for n in self.pod_set_updates.node_selector],
                fe.join_path(path, "podSetUpdates.nodeSelector"),
                key_name="key",
            )
        if self.pending_timeout is not None:
            errors += self.pending_timeout.validation_errors(fe.join_path(path, "pendingTimeout"))
        return errors


class ProvisioningRequestConfig(KueueModel):
    """A ProvisioningRequestConfig. Cluster-scoped; AdmissionCheck `spec.parameters` points at it."""

    api_version: Literal["kueue.x-k8s.io/v1beta2"] = Field(default=API_VERSION, description="API version.")
    kind: Literal["ProvisioningRequestConfig"] = Field(default="ProvisioningRequestConfig", description="Kind.")
    metadata: ObjectMeta = Field(description="Object metadata.")
    spec: ProvisioningRequestConfigSpec = Field(description="Desired state.")

    @property
    def key(self) -> str:
        return self.metadata.name

    def validation_errors(self, path: str = "") -> list[FieldError]:
        return self.spec.validation_errors(fe.join_path(path, "spec"))
