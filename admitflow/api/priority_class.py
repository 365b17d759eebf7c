"""PriorityClass (scheduling.k8s.io/v1): a pod priority by name. Cluster-scoped.

Kueue gives a Job's Workload the value of the PriorityClass its pods name (`priorityClassName`),
or of the one marked `globalDefault`, when the Job names no WorkloadPriorityClass
(admitflow.jobs.framework.extract_priority). Every cluster has the two system classes; any other
name starting with `system-` is refused, and a user's class is worth at most 1000000000.

Sources: k8s.io/api/scheduling/v1/types.go; kubernetes pkg/apis/scheduling/validation/validation.go
(ValidatePriorityClass), pkg/apis/scheduling/types.go (the system classes), pkg/apis/scheduling/v1
(IsKnownSystemPriorityClass, SetDefaults_PriorityClass).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from . import field_error as fe
from .base import KueueModel
from .bounds import INT32_MAX, INT32_MIN
from .field_error import FieldError
from .meta import ObjectMeta

API_VERSION = "scheduling.k8s.io/v1"
GROUP = "scheduling.k8s.io"
KIND = "PriorityClass"
RESOURCE = "priorityclasses.scheduling.k8s.io"

HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000
SYSTEM_PREFIX = "system-"
# The classes every apiserver creates: name -> value (neither is the global default).
SYSTEM_PRIORITY_CLASSES = {"system-node-critical": 2_000_001_000, "system-cluster-critical": 2_000_000_000}


class PriorityClass(KueueModel):
    """A PriorityClass; its fields are at the top level, not under `spec`."""

    api_version: Literal["scheduling.k8s.io/v1"] = Field(default=API_VERSION, description="API version.")
    kind: Literal["PriorityClass"] = Field(default=KIND, description="Kind.")
    metadata: ObjectMeta = Field(description="Object metadata; `name` is what pods' priorityClassName names.")
    value: int = Field(
        ge=INT32_MIN,
        le=INT32_MAX,
        description="The priority of pods naming this class; higher goes first. An int32, at most 1000000000 "
        "outside the system classes. Required.",
    )
    global_default: bool = Field(
        default=False,
        description="This class's value is the priority of pods (and Kueue's Job Workloads) naming none. "
        "Kueue takes the lowest value when several classes say so.",
    )
    description: str | None = Field(default=None, description="When this class should be used, for people.")
    preemption_policy: Literal["Never", "PreemptLowerPriority"] = Field(
        default="PreemptLowerPriority",
        description="Whether pods of this class may preempt lower-priority pods: PreemptLowerPriority (the default) or Never.",
    )

    @property
    def key(self) -> str:
        return self.metadata.name

    def validation_errors(self, path: str = "") -> list[FieldError]:
        name = self.metadata.name
        if name.startswith(SYSTEM_PREFIX):
            refusal = _system_class_refusal(name, self.value, self.global_default)
            if refusal:
                return [
                    fe.forbidden(
                        fe.join_path(path, "metadata.name"),
                        f"priority class names with '{SYSTEM_PREFIX}' prefix are reserved for system use only. error: {refusal}",
                    )
                ]
        elif self.value > HIGHEST_USER_DEFINABLE_PRIORITY:
            return [
                fe.forbidden(
                    fe.join_path(path, "value"),
                    f"maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}",
                )
            ]
        return []


def _system_class_refusal(name: str, value: int, global_default: bool) -> str:
    """IsKnownSystemPriorityClass's error, or "" for one of the system classes as they are."""
    if name not in SYSTEM_PRIORITY_CLASSES:
        return f"{name} is not a known system priority class"
    if value != SYSTEM_PRIORITY_CLASSES[name]:
        return f"value of {name} PriorityClass must be {SYSTEM_PRIORITY_CLASSES[name]}"
    if global_default:
        return f"globalDefault of {name} PriorityClass must be false"
    return ""


def system_priority_classes() -> dict[str, PriorityClass]:
    """The two classes every apiserver has, by name."""
    return {
        name: PriorityClass(metadata=ObjectMeta(name=name), value=value) for name, value in SYSTEM_PRIORITY_CLASSES.items()
    }
