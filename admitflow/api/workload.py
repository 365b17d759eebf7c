"""Workload (kueue.x-k8s.io/v1beta2): the unit of admission, a set of podSets asking for quota.

Sources: apis/kueue/v1beta2/workload_types.go and pkg/webhooks/workload_webhook.go.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from admitflow import ids

from . import field_error as fe
from .admission_check import CheckState
from .base import KueueModel
from .bounds import INT32_MAX, INT32_MIN
from .cluster_queue import ClusterQueueReference, ResourceFlavorReference
from .field_error import FieldError
from .meta import Condition, NamespacedObjectMeta, Time, annotation_errors, label_errors
from .names import DNS1123_LABEL_PATTERN, DNS1123_SUBDOMAIN_PATTERN
from .pod_template_validation import pod_template_errors
from .pod import PodTemplateSpec, Toleration, toleration_key_errors, toleration_rule_errors
from .provisioning_request import PARAMETER_ANNOTATION_PREFIX, annotation_parameters, parameter_errors
from .quantity import Quantity, canonical_quantity, resource_value

API_VERSION = "kueue.x-k8s.io/v1beta2"

PodSetReference = Annotated[str, StringConstraints(max_length=63, pattern=DNS1123_LABEL_PATTERN)]
"""Name of a podSet: a DNS label of at most 63 characters."""

LocalQueueName = Annotated[str, StringConstraints(max_length=253, pattern=DNS1123_SUBDOMAIN_PATTERN)]
"""Name of a LocalQueue: a DNS subdomain of at most 253 characters."""

RESERVED_RESOURCE = "pods"
# On a Workload or its LocalQueue (the Workload's wins): the task queue of the runner that starts
# the workload once it is admitted (docs/runners.md).
RUNNER_ANNOTATION = "admitflow.io/runner"


class PriorityClassRef(KueueModel):
    """Reference to the priority class the workload's priority comes from."""

    group: Literal["kueue.x-k8s.io", "scheduling.k8s.io"] = Field(
        description="kueue.x-k8s.io for a WorkloadPriorityClass, scheduling.k8s.io for a pod PriorityClass. Required."
    )
    kind: Literal["WorkloadPriorityClass", "PriorityClass"] = Field(
        description="WorkloadPriorityClass (group kueue.x-k8s.io) or PriorityClass (group scheduling.k8s.io). Required."
    )
    name: str = Field(
        min_length=1,
        max_length=253,
        pattern=DNS1123_SUBDOMAIN_PATTERN,
        description="Name of the priority class; a DNS subdomain of 1 to 253 characters. Required.",
    )

    def validation_errors(self, path: str = "") -> list[FieldError]:
        errors = []
        if self.group == "scheduling.k8s.io" and self.kind != "PriorityClass":
            errors.append(fe.cel(path, "object", "only the PriorityClass kind is allowed for the scheduling.k8s.io group"))
        if self.group == "kueue.x-k8s.io" and self.kind != "WorkloadPriorityClass":
            errors.append(
                fe.cel(path, "object", "only the WorkloadPriorityClass kind is allowed for the kueue.x-k8s.io group")
            )
        return errors


class PodSetTopologyRequest(KueueModel):
    """Topology-aware scheduling request of a podSet. Not used by admitflow."""

    required: str | None = Field(default=None, max_length=63, description="Required topology level; at most 63 characters.")
    preferred: str | None = Field(default=None, max_length=63, description="Preferred topology level; at most 63 characters.")
    unconstrained: bool | None = Field(default=None, description="Place anywhere in the available capacity.")
    pod_index_label: str | None = Field(
        default=None, max_length=317, description="Label indexing the pods; at most 317 characters."
    )
    sub_group_index_label: str | None = Field(
        default=None, max_length=317, description="Label indexing replicated jobs; at most 317 characters."
    )
    sub_group_count: int | None = Field(
        default=None, ge=INT32_MIN, le=INT32_MAX, description="Number of replicated jobs in the podSet; an int32."
    )
    pod_set_group_name: str | None = Field(
        default=None, max_length=256, description="PodSets with the same group name get the same flavor; at most 256."
    )
    pod_set_slice_required_topology: str | None = Field(
        default=None, max_length=63, description="Topology level required per slice; at most 63 characters."
    )
    pod_set_slice_size: int | None = Field(
        default=None, ge=INT32_MIN, le=INT32_MAX, description="Pods per slice; an int32."
    )


class PodSet(KueueModel):
    """A group of identical pods."""

    name: PodSetReference = Field(default="main", description="PodSet name; a DNS label (63). Defaults to `main`.")
    template: PodTemplateSpec = Field(
        description=(
            "Pod template. Requests (or limits, when requests are missing) decide the quota; nodeSelector "
            "and required node affinity on ResourceFlavor nodeLabels decide the flavors. Required."
        )
    )
    count: int = Field(
        default=1, ge=0, le=INT32_MAX, description="Number of pods; 0 to 2147483647 (int32), defaults to 1."
    )
    min_count: int | None = Field(
        default=None,
        ge=1,
        le=INT32_MAX,
        description="Fewest pods acceptable for partial admission (>= 1, <= count); at most one podSet may set it.",
    )
    topology_request: PodSetTopologyRequest | None = Field(
        default=None, description="Topology request (TAS). Not used by admitflow."
    )


class WorkloadSpec(KueueModel):
    """The desired state of a Workload."""

    pod_sets: list[PodSet] = Field(
        min_length=1, max_length=8, description="The workload's podSets; 1 to 8, names unique; immutable."
    )
    queue_name: LocalQueueName | None = Field(
        default=None,
        description="LocalQueue (in the workload's namespace) to queue in; immutable while quota is reserved.",
    )
    priority_class_ref: PriorityClassRef | None = Field(
        default=None,
        description=(
            "Priority class the priority comes from. A WorkloadPriorityClass must exist when the workload is "
            "submitted without `priority`; a pod PriorityClass needs `priority`."
        ),
    )
    priority: int | None = Field(
        default=None,
        ge=INT32_MIN,
        le=INT32_MAX,
        description=(
            "Priority; higher goes first; an int32. Required with a pod PriorityClass; with a "
            "WorkloadPriorityClass it defaults, at submission, to the class's value (later changes of the "
            "class leave it as it is)."
        ),
    )
    active: bool = Field(
        default=True, description="False keeps the workload from admission and evicts it if admitted. Defaults to true."
    )
    maximum_execution_time_seconds: int | None = Field(
        default=None,
        ge=1,
        le=INT32_MAX,
        description="Seconds the workload may stay admitted before it is deactivated; 1 to 2147483647 (int32).",
    )


class PodSetAssignment(KueueModel):
    """The admission result of one podSet."""

    name: PodSetReference = Field(default="main", description="PodSet name; matches spec.podSets[].name.")
    flavors: dict[str, ResourceFlavorReference] | None = Field(
        default=None, description="Flavor assigned per resource."
    )
    resource_usage: dict[str, Quantity] | None = Field(
        default=None, description="Total resources of all pods of the podSet, per resource."
    )
    count: int | None = Field(
        default=None, ge=0, le=INT32_MAX, description="Pods counted at admission; 0 to 2147483647 (int32)."
    )
    topology_assignment: dict[str, Any] | None = Field(
        default=None, description="Topology assignment (TAS), passed through unchanged. Not used by admitflow."
    )
    delayed_topology_request: Literal["Pending", "Ready"] | None = Field(
        default=None, description="State of a delayed topology assignment. Not used by admitflow."
    )


class Admission(KueueModel):
    """Where and how a workload holds quota."""

    cluster_queue: ClusterQueueReference = Field(description="ClusterQueue where the quota is reserved.")
    pod_set_assignments: list[PodSetAssignment] = Field(
        default_factory=list, max_length=8, description="One assignment per podSet; at most 8."
    )


class RequeueState(KueueModel):
    """Backoff state of an evicted workload."""

    count: int | None = Field(
        default=None, ge=0, le=INT32_MAX, description="Times the workload was requeued; 0 to 2147483647 (int32)."
    )
    requeue_at: Time | None = Field(default=None, description="When the workload goes back to its queue.")
    first_evicted_at: Time | None = Field(
        default=None,
        description="The first PodsReady-timeout eviction since its pods were last ready, kept with backoffLimitTimeout.",
    )


class PodSetUpdate(KueueModel):
    """Additions an AdmissionCheck asks for on one podSet's pods."""

    name: PodSetReference = Field(description="PodSet to update. Required.")
    labels: dict[str, str] | None = Field(default=None, description="Labels to add.")
    annotations: dict[str, str] | None = Field(default=None, description="Annotations to add.")
    node_selector: dict[str, str] | None = Field(default=None, description="Node selector entries to add.")
    tolerations: list[Toleration] | None = Field(default=None, max_length=8, description="Tolerations to add; at most 8.")


class AdmissionCheckState(KueueModel):
    """The state of one AdmissionCheck for this workload."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=316)] = Field(
        description="AdmissionCheck name; 1 to 316 characters. Required."
    )
    state: CheckState = Field(description="Pending, Ready, Retry or Rejected. Required.")
    last_transition_time: Time = Field(description="When the state last changed. Required.")
    message: str = Field(default="", max_length=32768, description="Details from the controller; at most 32768 characters.")
    requeue_after_seconds: int | None = Field(
        default=None,
        ge=0,
        le=INT32_MAX,
        description="With Retry: requeue no earlier than lastTransitionTime plus this; 0 to 2147483647 (int32).",
    )
    retry_count: int | None = Field(
        default=None, ge=0, le=INT32_MAX, description="Retries of this check so far; 0 to 2147483647 (int32)."
    )
    pod_set_updates: list[PodSetUpdate] | None = Field(
        default=None, max_length=8, description="PodSet updates to apply when admitted; at most 8."
    )


class ReclaimablePod(KueueModel):
    """Pods of a podSet whose quota is no longer needed."""

    name: PodSetReference = Field(description="PodSet name. Required.")
    count: int = Field(ge=0, le=INT32_MAX, description="Number of pods; 0 to 2147483647 (int32). Required.")


class PodSetRequest(KueueModel):
    """Resources a pending podSet asked for when last considered."""

    name: PodSetReference = Field(description="PodSet name. Required.")
    resources: dict[str, Quantity] | None = Field(default=None, description="Total resources of the podSet.")


class WorkloadSchedulingStatsEviction(KueueModel):
    """Eviction count for one reason."""

    reason: str = Field(max_length=316, description="Eviction reason (e.g. AdmissionCheck); at most 316 characters.")
    underlying_cause: str = Field(max_length=316, description="Finer cause; may be empty; at most 316 characters.")
    count: int = Field(ge=0, le=INT32_MAX, description="Number of evictions; 0 to 2147483647 (int32).")


class SchedulingStats(KueueModel):
    """Scheduling statistics."""

    evictions: list[WorkloadSchedulingStatsEviction] | None = Field(
        default=None, max_length=256, description="Evictions by reason and cause; at most 256."
    )


class UnhealthyNode(KueueModel):
    """A failed node running a pod of this workload (TAS)."""

    name: str = Field(max_length=63, description="Node name; at most 63 characters.")


class WorkloadStatus(KueueModel):
    """The observed state of a Workload, in Kueue's shape. Optional lists stay unset rather than
    empty, so the wire form omits them as Kueue's `omitempty` does."""

    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=16,
        description="Conditions (QuotaReserved, Admitted, Evicted, Requeued, PodsReady, Finished, ...); at most 16.",
    )
    admission: Admission | None = Field(default=None, description="The quota reservation; unset when none.")
    requeue_state: RequeueState | None = Field(default=None, description="Backoff state after an eviction.")
    reclaimable_pods: list[ReclaimablePod] | None = Field(
        default=None, max_length=8, description="Pods whose quota can be released; at most 8."
    )
    admission_checks: list[AdmissionCheckState] | None = Field(
        default=None, max_length=8, description="State of each required AdmissionCheck, sorted by name; at most 8."
    )
    resource_requests: list[PodSetRequest] | None = Field(
        default=None, max_length=8, description="Requests of a pending workload per podSet; at most 8."
    )
    accumulated_past_execution_time_seconds: int | None = Field(
        default=None, ge=INT32_MIN, le=INT32_MAX, description="Seconds spent admitted in earlier admissions; an int32."
    )
    scheduling_stats: SchedulingStats | None = Field(default=None, description="Scheduling statistics.")
    nominated_cluster_names: list[Annotated[str, StringConstraints(max_length=256)]] | None = Field(
        default=None, max_length=10, description="MultiKueue clusters nominated; at most 10. Not used by admitflow."
    )
    cluster_name: str | None = Field(
        default=None, max_length=256, description="MultiKueue cluster of the workload. Not used by admitflow."
    )
    unhealthy_nodes: list[UnhealthyNode] | None = Field(
        default=None, max_length=8, description="Failed nodes (TAS); at most 8. Not used by admitflow."
    )

    def condition(self, type_: str) -> Condition | None:
        """The condition of the given type, if present."""
        return next((c for c in self.conditions if c.type == type_), None)

    def has_condition(self, type_: str) -> bool:
        """True when the condition is present with status True."""
        found = self.condition(type_)
        return found is not None and found.status == "True"


class Workload(KueueModel):
    """A Workload. Namespaced (namespace defaults to `default`)."""

    api_version: Literal["kueue.x-k8s.io/v1beta2"] = Field(default=API_VERSION, description="API version.")
    kind: Literal["Workload"] = Field(default="Workload", description="Kind.")
    metadata: NamespacedObjectMeta = Field(description="Object metadata.")
    spec: WorkloadSpec = Field(description="Desired state.")
    status: WorkloadStatus = Field(default_factory=WorkloadStatus, description="Observed state.")

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    def validation_errors(self, path: str = "") -> list[FieldError]:
        spec_path = fe.join_path(path, "spec")
        status_path = fe.join_path(path, "status")
        too_long = ids.id_length_error("workload", ids.workload_id(self.key), "workload/<namespace>/<name>")
        return (
            ([fe.invalid(fe.join_path(path, "metadata.name"), self.metadata.name, too_long)] if too_long else [])
            + self._schema_errors(spec_path, status_path)
            + [
                e
                for i, ps in enumerate(self.spec.pod_sets)
                for e in pod_template_errors(ps.template.to_wire(), f"{spec_path}.podSets[{i}].template")
            ]
            + self._cel_errors(spec_path, status_path)
            + self._webhook_errors(spec_path, status_path)
            + parameter_errors(
                annotation_parameters(self.metadata.annotations),
                fe.join_path(path, "metadata.annotations"),
                prefix=PARAMETER_ANNOTATION_PREFIX,
                why=f"{PARAMETER_ANNOTATION_PREFIX} annotations become the ProvisioningRequest's spec.parameters",
            )
        )

    def _schema_errors(self, spec_path: str, status_path: str) -> list[FieldError]:
        status = self.status
        errors = fe.list_map_duplicates([p.name for p in self.spec.pod_sets], f"{spec_path}.podSets")
        errors += fe.list_map_duplicates([c.type for c in status.conditions], f"{status_path}.conditions", "type")
        if status.admission is not None:
            errors += fe.list_map_duplicates(
                [a.name for a in status.admission.pod_set_assignments], f"{status_path}.admission.podSetAssignments"
            )
        errors += fe.list_map_duplicates([r.name for r in status.reclaimable_pods or ()], f"{status_path}.reclaimablePods")
        errors += fe.list_map_duplicates([a.name for a in status.admission_checks or ()], f"{status_path}.admissionChecks")
        errors += fe.list_map_duplicates([r.name for r in status.resource_requests or ()], f"{status_path}.resourceRequests")
        errors += fe.list_map_duplicates([n.name for n in status.unhealthy_nodes or ()], f"{status_path}.unhealthyNodes")
        return errors

    def _cel_errors(self, spec_path: str, status_path: str) -> list[FieldError]:
        spec, status = self.spec, self.status
        errors = []
        if spec.priority_class_ref is not None:
            # Kueue's job controller fills `priority` from a WorkloadPriorityClass; admitflow does it at
            # submission (admitflow.admission.priority). A pod PriorityClass it cannot look up.
            if spec.priority is None and spec.priority_class_ref.kind != "WorkloadPriorityClass":
                errors.append(fe.cel(spec_path, "object", "priority should not be nil when priorityClassRef is set"))
            errors += spec.priority_class_ref.validation_errors(f"{spec_path}.priorityClassRef")
        for i, ps in enumerate(spec.pod_sets):
            if ps.min_count is not None and ps.min_count > ps.count:
                errors.append(
                    fe.cel(f"{spec_path}.podSets[{i}]", "object", "minCount should be positive and less or equal to count")
                )
        if (
            status.has_condition("QuotaReserved")
            and status.admission is not None
            and len(spec.pod_sets) != len(status.admission.pod_set_assignments)
        ):
            errors.append(
                fe.cel(
                    f"{status_path}.admission.podSetAssignments",
                    "object",
                    "podSetAssignments must have the same number of podSets as the spec",
                )
            )
        if status.cluster_name is not None and status.nominated_cluster_names:
            errors.append(fe.cel(status_path, "object", "clusterName and nominatedClusterNames are mutually exclusive"))
        for i, check in enumerate(status.admission_checks or ()):
            for j, update in enumerate(check.pod_set_updates or []):
                errors += toleration_rule_errors(
                    update.tolerations, f"{status_path}.admissionChecks[{i}].podSetUpdates[{j}].tolerations"
                )
        return errors

    def _webhook_errors(self, spec_path: str, status_path: str) -> list[FieldError]:
        spec, status = self.spec, self.status
        errors = []
        for i, ps in enumerate(spec.pod_sets):
            pod_spec = ps.template.spec
            for field_name, containers in (("initContainers", pod_spec.init_containers), ("containers", pod_spec.containers)):
                for c, container in enumerate(containers or []):
                    requests = (container.resources.requests if container.resources else None) or {}
                    if RESERVED_RESOURCE in requests:
                        errors.append(
                            fe.invalid(
                                f"{spec_path}.podSets[{i}].template.spec.{field_name}[{c}]"
                                f".resources.requests[{RESERVED_RESOURCE}]",
                                RESERVED_RESOURCE,
                                "the key is reserved for internal kueue use",
                            )
                        )
        with_min_count = sum(1 for ps in spec.pod_sets if ps.min_count is not None)
        if with_min_count > 1:
            errors.append(fe.invalid(f"{spec_path}.podSets", with_min_count, "at most one podSet can use minCount"))
        pod_sets = {ps.name: ps for ps in spec.pod_sets}
        if status.has_condition("QuotaReserved") and status.admission is not None:
            assignments_path = f"{status_path}.admission.podSetAssignments"
            for i, assignment in enumerate(status.admission.pod_set_assignments):
                if assignment.name not in pod_sets:
                    errors.append(fe.not_found(f"{assignments_path}[{i}].name", assignment.name))
                count = assignment.count or 0
                for resource, quantity in (assignment.resource_usage or {}).items() if count > 0 else ():
                    if resource_value(resource, quantity) % count != 0:
                        errors.append(
                            fe.invalid(
                                f"{assignments_path}[{i}].resourceUsage[{resource}]",
                                canonical_quantity(quantity),
                                f"is not a multiple of {count}",
                            )
                        )
        for reclaimable in status.reclaimable_pods or ():
            item = f"{status_path}.reclaimablePods[{reclaimable.name}]"
            if reclaimable.name not in pod_sets:
                errors.append(fe.not_supported(f"{item}.name", reclaimable.name, list(pod_sets)))
            elif reclaimable.count > pod_sets[reclaimable.name].count:
                errors.append(
                    fe.invalid(
                        f"{item}.count", reclaimable.count, f"should be less or equal to {pod_sets[reclaimable.name].count}"
                    )
                )
        for i, check in enumerate(status.admission_checks or ()):
            for j, update in enumerate(check.pod_set_updates or []):
                item = f"{status_path}.admissionChecks[{i}].podSetUpdates[{j}]"
                if update.name not in pod_sets:
                    errors.append(fe.not_supported(f"{item}.name", update.name, sorted(pod_sets)))
                errors += pod_set_update_errors(update, item)
        return errors


def pod_set_update_errors(update: PodSetUpdate, path: str) -> list[FieldError]:
    """Kueue's webhook checks of one podSetUpdate's toleration keys, annotations, nodeSelector and
    labels (its podSet name and the tolerations' CEL rules are checked beside it)."""
    return (
        toleration_key_errors(update.tolerations, f"{path}.tolerations")
        + annotation_errors(update.annotations, f"{path}.annotations")
        + label_errors(update.node_selector, f"{path}.nodeSelector")
        + label_errors(update.labels, f"{path}.labels")
    )
