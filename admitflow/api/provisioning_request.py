"""The cluster autoscaler's ProvisioningRequest (`autoscaling.x-k8s.io/v1`) and the core/v1
PodTemplates it points at: what the built-in ProvisioningRequest check creates, in the shape a
Kubernetes API server stores them.

Sources: `cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1/types.go` (reference
`provisioning-request-api.md` §1.2, §1.3); Kueue's names, labels and annotations from
`pkg/controller/admissionchecks/provisioning` (reference `kueue-behaviour.md` §2).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import Field

from . import field_error as fe
from .base import KueueModel
from .bounds import INT32_MAX
from .field_error import FieldError
from .meta import Condition, NamespacedObjectMeta
from .pod import PodTemplateSpec

API_VERSION = "autoscaling.x-k8s.io/v1"

# Condition types (types.go); only `status: "True"` counts, and reasons are never switched on.
ACCEPTED = "Accepted"
PROVISIONED = "Provisioned"
FAILED = "Failed"
BOOKING_EXPIRED = "BookingExpired"
CAPACITY_REVOKED = "CapacityRevoked"
CONDITION_TYPES = (ACCEPTED, PROVISIONED, FAILED, BOOKING_EXPIRED, CAPACITY_REVOKED)

# Kueue's label on everything it creates for a check.
MANAGED_LABEL = "kueue.x-k8s.io/managed"
# What admitted pods carry so that the autoscaler counts them against the request (v1 keys).
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_NAME_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"
# Workload annotations with this prefix override the config's parameters (prefix stripped).
PARAMETER_ANNOTATION_PREFIX = "provreq.kueue.x-k8s.io/"
# admitflow's own: the workload a request was made for, `namespace/name` (no owner object exists
# for it in a Kubernetes cluster, so this and the name are how requests are found again).
WORKLOAD_ANNOTATION = "admitflow.io/workload"


# The CRD's bounds on spec.parameters (maxProperties, and maxLength of each value; keys have none).
MAX_PARAMETERS = 100
MAX_PARAMETER_LENGTH = 255


def parameter_errors(parameters: Mapping[str, str], path: str, prefix: str = "", why: str = "") -> list[FieldError]:
    """What the CRD refuses in a request's parameters: more than 100, or a value over 255
    characters. `path` is where the parameters are; an entry is `path[<prefix><key>]`; `why`, when
    given, is added to each message in parentheses."""
    note = f" ({why})" if why else ""
    errors = []
    if len(parameters) > MAX_PARAMETERS:
        errors.append(FieldError(path, fe.too_many_body(len(parameters), MAX_PARAMETERS) + note))
    for key, value in parameters.items():
        if len(value) > MAX_PARAMETER_LENGTH:
            errors.append(FieldError(f"{path}[{prefix}{key}]", fe.too_long_body(MAX_PARAMETER_LENGTH) + note))
    return errors


def annotation_parameters(annotations: Mapping[str, str] | None) -> dict[str, str]:
    """The parameters a workload's `provreq.kueue.x-k8s.io/<key>` annotations give (prefix stripped)."""
    return {
        key[len(PARAMETER_ANNOTATION_PREFIX) :]: value
        for key, value in (annotations or {}).items()
        if key.startswith(PARAMETER_ANNOTATION_PREFIX) and len(key) > len(PARAMETER_ANNOTATION_PREFIX)
    }


class PodTemplateReference(KueueModel):
    name: str = Field(description="A PodTemplate in the request's namespace.")


class ProvisioningRequestPodSet(KueueModel):
    pod_template_ref: PodTemplateReference = Field(description="The pods' template. Required.")
    count: int = Field(ge=1, le=INT32_MAX, description="How many pods of that template; 1 to 2147483647 (int32).")


class ProvisioningRequestSpec(KueueModel):
    """Immutable once created: a changed request is deleted and created again."""

    provisioning_class_name: str = Field(description="The provisioning class, e.g. check-capacity.autoscaling.x-k8s.io.")
    parameters: dict[str, str] | None = Field(
        default=None, description="Class parameters: at most 100, values at most 255 characters (parameter_errors)."
    )
    pod_sets: list[ProvisioningRequestPodSet] = Field(min_length=1, max_length=32, description="1 to 32 pod sets.")


class ProvisioningRequestStatus(KueueModel):
    conditions: list[Condition] = Field(default_factory=list, description="Accepted, Provisioned, Failed, BookingExpired, CapacityRevoked.")
    provisioning_class_details: dict[str, str] | None = Field(
        default=None, description="Free-form output of the class; Kueue can copy values into node selectors."
    )


class ProvisioningRequest(KueueModel):
    """A ProvisioningRequest. Namespaced; `metadata.resourceVersion` changes on every write."""

    api_version: Literal["autoscaling.x-k8s.io/v1"] = API_VERSION
    kind: Literal["ProvisioningRequest"] = "ProvisioningRequest"
    metadata: NamespacedObjectMeta
    spec: ProvisioningRequestSpec
    status: ProvisioningRequestStatus = Field(default_factory=ProvisioningRequestStatus)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.status.conditions if c.type == type_), None)

    def is_true(self, type_: str) -> bool:
        c = self.condition(type_)
        return c is not None and c.status == "True"


class PodTemplate(KueueModel):
    """A core/v1 PodTemplate (`ppt-<request>-<podSet>`), which a request's pod set refers to."""

    api_version: Literal["v1"] = "v1"
    kind: Literal["PodTemplate"] = "PodTemplate"
    metadata: NamespacedObjectMeta
    template: PodTemplateSpec
