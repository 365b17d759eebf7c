"""The core/v1 types Kueue's admission reads: tolerations, taints, node affinity, pod templates.

Only what admission uses is modelled; pod templates, pod specs, containers and affinity accept any
other field unchanged (`extra="allow"`), so every valid Pod spec passes through and comes back out
as it was written.
"""

from __future__ import annotations

from collections import defaultdict

from pydantic import ConfigDict, Field

from . import field_error as fe
from .base import KueueModel
from .bounds import INT64_MAX, INT64_MIN
from .field_error import FieldError
from .meta import Time
from .names import label_value_errors, qualified_name_errors
from .quantity import Quantity

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


class Toleration(KueueModel):
    """A core/v1 Toleration: lets pods use nodes (or ResourceFlavors) with a matching taint."""

    key: str | None = Field(
        default=None, description="Taint key to match; empty matches every key (operator must then be Exists)."
    )
    operator: str | None = Field(
        default=None, description="Equal (the default when empty) or Exists (matches any value)."
    )
    value: str | None = Field(default=None, description="Taint value to match with Equal; empty with Exists.")
    effect: str | None = Field(
        default=None, description="Taint effect to match: NoSchedule, PreferNoSchedule or NoExecute; empty matches all."
    )
    toleration_seconds: int | None = Field(
        default=None,
        ge=INT64_MIN,
        le=INT64_MAX,
        description="For NoExecute only: how long a pod stays bound after the taint appears; an int64.",
    )


class Taint(KueueModel):
    """A core/v1 Taint on nodes (or declared by a ResourceFlavor in `nodeTaints`)."""

    key: str = Field(description="Taint key; a qualified name. Required.")
    value: str | None = Field(default=None, description="Taint value; a label value (at most 63 characters).")
    effect: str = Field(description="NoSchedule, PreferNoSchedule or NoExecute. Required.")
    time_added: Time | None = Field(default=None, description="When a NoExecute taint was added.")

    def go_repr(self) -> str:
        # How the webhook prints a Taint value in a Duplicate error (Go's %#v of v1.Taint).
        time_added = "<nil>" if self.time_added is None else f'"{self.time_added.isoformat()}"'
        return (
            f'v1.Taint{{Key:"{self.key}", Value:"{self.value or ""}", '
            f'Effect:"{self.effect}", TimeAdded:{time_added}}}'
        )


def toleration_rule_errors(tolerations: list[Toleration] | None, path: str) -> list[FieldError]:
    """The CEL rules Kueue puts on toleration lists (ResourceFlavor, podSetUpdates), in order."""
    items = tolerations or []
    rules = [
        (
            lambda t: t.key is not None or t.operator == "Exists",
            "operator must be Exists when 'key' is empty, which means 'match all values and all keys'",
        ),
        (
            lambda t: t.toleration_seconds is None or t.effect == "NoExecute",
            "effect must be 'NoExecute' when 'tolerationSeconds' is set",
        ),
        (
            lambda t: t.operator is None or t.operator in ("Equal", "Exists"),
            "supported toleration values: 'Equal'(default), 'Exists'",
        ),
        (
            lambda t: not (t.operator == "Exists" and t.value is not None),
            "a value must be empty when 'operator' is 'Exists'",
        ),
        (
            lambda t: t.effect is None or t.effect in TAINT_EFFECTS,
            "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'",
        ),
    ]
    return [fe.cel(path, "array", message) for check, message in rules if not all(check(t) for t in items)]


def toleration_key_errors(tolerations: list[Toleration] | None, path: str) -> list[FieldError]:
    """Kueue's webhook validateTolerations: a non-empty key must be a qualified name."""
    errors = []
    for i, toleration in enumerate(tolerations or []):
        if toleration.key:
            key_path = f"{path}[{i}].key"
            errors.extend(fe.invalid(key_path, toleration.key, m) for m in qualified_name_errors(toleration.key))
    return errors


def taint_errors(taints: list[Taint] | None, path: str) -> list[FieldError]:
    """Kueue's webhook validateNodeTaints: key, value, and uniqueness by (key, effect)."""
    errors: list[FieldError] = []
    seen: dict[str, set[str]] = defaultdict(set)
    for i, taint in enumerate(taints or []):
        item = f"{path}[{i}]"
        errors.extend(fe.invalid(f"{item}.key", taint.key, m) for m in qualified_name_errors(taint.key))
        value_errors = label_value_errors(taint.value or "")
        if value_errors:
            errors.append(fe.invalid(f"{item}.value", taint.value or "", ";".join(value_errors)))
        if taint.key in seen[taint.effect]:
            errors.append(
                FieldError(item, f"Duplicate value: {taint.go_repr()}: taints must be unique by key and effect pair")
            )
            continue
        seen[taint.effect].add(taint.key)
    return errors


class NodeSelectorRequirement(KueueModel):
    """One term of a node selector: `key operator values`."""

    key: str = Field(description="Node label key (or field name for matchFields).")
    operator: str = Field(description="In, NotIn, Exists, DoesNotExist, Gt or Lt.")
    values: list[str] | None = Field(
        default=None,
        description="Values for In/NotIn; one integer for Gt/Lt; empty for Exists/DoesNotExist.",
    )


class NodeSelectorTerm(KueueModel):
    """Requirements that must all hold (terms of a NodeSelector are ORed)."""

    match_expressions: list[NodeSelectorRequirement] | None = Field(
        default=None, description="Requirements on node labels."
    )
    match_fields: list[NodeSelectorRequirement] | None = Field(
        default=None, description="Requirements on node fields (metadata.name)."
    )


class NodeSelector(KueueModel):
    """Node selector terms; a node matches if it matches any term."""

    node_selector_terms: list[NodeSelectorTerm] = Field(description="The ORed terms. Required.")


class NodeAffinity(KueueModel):
    """Node affinity; admission only reads the required part. Other fields pass through."""

    model_config = ConfigDict(extra="allow")

    required_during_scheduling_ignored_during_execution: NodeSelector | None = Field(
        default=None,
        description=(
            "Hard node constraints. Terms whose keys are nodeLabels of a ResourceFlavor filter which "
            "flavors a podSet may get."
        ),
    )


class Affinity(KueueModel):
    """Pod affinity rules; only nodeAffinity is modelled, the rest passes through."""

    model_config = ConfigDict(extra="allow")

    node_affinity: NodeAffinity | None = Field(default=None, description="Node affinity.")


class ResourceClaim(KueueModel):
    """A reference from a container to one of the pod's resource claims."""

    name: str = Field(description="Name of a pod resource claim.")
    request: str | None = Field(default=None, description="Request within that claim.")


class ResourceRequirements(KueueModel):
    """Compute resources of a container: `requests` and `limits`, resource name -> quantity."""

    limits: dict[str, Quantity] | None = Field(
        default=None, description="Maximum amounts; also the request when a request is not given."
    )
    requests: dict[str, Quantity] | None = Field(
        default=None, description="Amounts admission reserves quota for (per pod)."
    )
    claims: list[ResourceClaim] | None = Field(default=None, description="Dynamic resource claims used.")


class Container(KueueModel):
    """A container; admission reads its name and resources, everything else passes through."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(description="Container name, unique in the pod. Required.")
    resources: ResourceRequirements | None = Field(default=None, description="Requests and limits.")


class PodSpec(KueueModel):
    """A pod spec; admission reads what decides quota and flavors, everything else passes through."""

    model_config = ConfigDict(extra="allow")

    containers: list[Container] = Field(description="The pod's containers. Required.")
    init_containers: list[Container] | None = Field(
        default=None, description="Init containers; the pod needs the largest of their requests."
    )
    overhead: dict[str, Quantity] | None = Field(
        default=None, description="Per-pod overhead (RuntimeClass), added to the requests."
    )
    node_selector: dict[str, str] | None = Field(
        default=None, description="Node labels the pod requires; filters ResourceFlavors by their nodeLabels."
    )
    affinity: Affinity | None = Field(default=None, description="Affinity rules.")
    tolerations: list[Toleration] | None = Field(
        default=None, description="Tolerations; needed for flavors whose nodeTaints they tolerate."
    )


class PodTemplateMetadata(KueueModel):
    """Metadata of a pod template; Kueue uses labels and annotations."""

    model_config = ConfigDict(extra="allow")

    labels: dict[str, str] | None = Field(default=None, description="Pod labels.")
    annotations: dict[str, str] | None = Field(default=None, description="Pod annotations.")


class PodTemplateSpec(KueueModel):
    """A core/v1 PodTemplateSpec."""

    model_config = ConfigDict(extra="allow")

    metadata: PodTemplateMetadata | None = Field(default=None, description="Pod labels and annotations.")
    spec: PodSpec = Field(description="The pod spec. Required.")
