"""ClusterQueue (kueue.x-k8s.io/v1beta2): quota per flavor and resource, queueing and checks.

The resource groups, their quotas and the fair-sharing weight are shared with the Cohort kind
(`admitflow.api.cohort`), and so are the rules that check them (`resource_group_errors` and the
functions next to it), as Kueue's webhooks share validateResourceGroups.

Sources: apis/kueue/v1beta2/clusterqueue_types.go, fairsharing_types.go,
pkg/webhooks/clusterqueue_webhook.go and common.go.
"""

from __future__ import annotations

from typing import Annotated, Literal, NamedTuple

from pydantic import Field, StringConstraints

from admitflow import ids

from . import field_error as fe
from .base import KueueModel
from .bounds import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN
from .field_error import FieldError
from .meta import Condition, LabelSelector, ObjectMeta, Time
from .names import DNS1123_SUBDOMAIN_PATTERN, qualified_name_errors
from .quantity import Quantity, canonical_quantity, parse_quantity

API_VERSION = "kueue.x-k8s.io/v1beta2"

ResourceFlavorReference = Annotated[
    str, StringConstraints(max_length=253, pattern=DNS1123_SUBDOMAIN_PATTERN)
]
"""Name of a ResourceFlavor: a DNS subdomain of at most 253 characters."""

ClusterQueueReference = Annotated[
    str, StringConstraints(max_length=253, pattern=DNS1123_SUBDOMAIN_PATTERN)
]
"""Name of a ClusterQueue: a DNS subdomain of at most 253 characters."""

CohortReference = Annotated[str, StringConstraints(max_length=253, pattern=DNS1123_SUBDOMAIN_PATTERN)]
"""Name of a Cohort: a DNS subdomain of at most 253 characters."""

AdmissionCheckReference = Annotated[str, StringConstraints(min_length=1, max_length=316)]
"""Name of an AdmissionCheck: 1 to 316 characters."""

QueueingStrategy = Literal["StrictFIFO", "BestEffortFIFO"]
StopPolicy = Literal["None", "Hold", "HoldAndDrain"]
FlavorFungibilityPolicy = Literal["MayStopSearch", "TryNextFlavor"]

MAX_TOTAL_FLAVORS = 256
MAX_TOTAL_COVERED_RESOURCES = 256
MAX_FLAVOR_RESOURCE_COMBINATIONS = 512
NEGATIVE_MESSAGE = "must be greater than or equal to 0"


class ResourceQuota(KueueModel):
    """Quota of one resource in one flavor, of a ClusterQueue or a Cohort."""

    name: str = Field(description="Resource name; must equal the resource at the same position in coveredResources.")
    nominal_quota: Quantity = Field(
        description=(
            "Amount available to workloads of this ClusterQueue at a time (non-negative); for a Cohort, a "
            "pool shared by its subtree on top of its ClusterQueues' quotas. Kept as written; use "
            "quantity.resource_value for arithmetic. Required."
        )
    )
    borrowing_limit: Quantity | None = Field(
        default=None,
        description=(
            "Most this ClusterQueue (or the subtree of this Cohort) may borrow from its parent cohort for this "
            "flavor and resource; unset means no limit. Non-negative; only with a cohortName (ClusterQueue) "
            "or a parentName (Cohort)."
        ),
    )
    lending_limit: Quantity | None = Field(
        default=None,
        description=(
            "Most of its unused quota the rest of the cohort tree may borrow; unset means all of it. "
            "Non-negative; only with a cohortName (ClusterQueue, where it is at most nominalQuota) or a "
            "parentName (Cohort)."
        ),
    )


class FlavorQuotas(KueueModel):
    """The quotas one ResourceFlavor provides in a resource group."""

    name: ResourceFlavorReference = Field(
        description="Name of a ResourceFlavor; if none exists the ClusterQueue is inactive (FlavorNotFound)."
    )
    resources: list[ResourceQuota] = Field(
        min_length=1,
        max_length=64,
        description="Quota per resource, in the order of coveredResources; 1 to 64, names unique.",
    )


class ResourceGroup(KueueModel):
    """Resources that are always assigned the same flavor, and the flavors that provide them."""

    covered_resources: list[str] = Field(
        min_length=1,
        max_length=64,
        description=(
            "Resources this group covers (e.g. cpu, memory, vendor.com/gpu); 1 to 64, each resource in "
            "only one group, at most 256 across the ClusterQueue."
        ),
    )
    flavors: list[FlavorQuotas] = Field(
        min_length=1,
        max_length=64,
        description=(
            "Flavors in order of preference, each listing every covered resource in the same order; "
            "1 to 64, at most 256 across the ClusterQueue, names unique."
        ),
    )


class FlavorFungibility(KueueModel):
    """Whether a workload tries the next flavor before borrowing or preempting in the current one."""

    when_can_borrow: FlavorFungibilityPolicy = Field(
        default="MayStopSearch",
        description="MayStopSearch (default): take this flavor if it fits by borrowing; TryNextFlavor: try the next.",
    )
    when_can_preempt: FlavorFungibilityPolicy = Field(
        default="TryNextFlavor",
        description="TryNextFlavor (default): try the next flavor before preempting; MayStopSearch: preempt here.",
    )
    preference: Literal["BorrowingOverPreemption", "PreemptionOverBorrowing"] | None = Field(
        default=None,
        description=(
            "Tie-break when every flavor needs borrowing or preemption (BorrowingOverPreemption by "
            "default); only with both policies TryNextFlavor."
        ),
    )


class BorrowWithinCohort(KueueModel):
    """Preemption in other ClusterQueues of the cohort while borrowing (classic preemption only)."""

    policy: Literal["Never", "LowerPriority"] = Field(
        default="Never", description="Never (default) or LowerPriority."
    )
    max_priority_threshold: int | None = Field(
        default=None,
        ge=INT32_MIN,
        le=INT32_MAX,
        description="Only workloads with priority at most this may be preempted; an int32; unset means any.",
    )


class ClusterQueuePreemption(KueueModel):
    """Which admitted workloads a pending workload may preempt."""

    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = Field(
        default="Never",
        description=(
            "Preempt in other ClusterQueues of the cohort that use more than their nominal quota: "
            "Never (default), LowerPriority, Any."
        ),
    )
    borrow_within_cohort: BorrowWithinCohort = Field(
        default_factory=BorrowWithinCohort, description="Preemption in the cohort while borrowing; defaults to {}."
    )
    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = Field(
        default="Never",
        description=(
            "Preempt in this ClusterQueue when over nominal quota: Never (default), LowerPriority, "
            "LowerOrNewerEqualPriority."
        ),
    )


class AdmissionCheckStrategyRule(KueueModel):
    """One AdmissionCheck of the ClusterQueue and the flavors it applies to."""

    name: AdmissionCheckReference = Field(description="Name of an AdmissionCheck; 1 to 316 characters. Required.")
    on_flavors: list[ResourceFlavorReference] = Field(
        default_factory=list,
        max_length=64,
        description=(
            "Flavors (of this ClusterQueue's resourceGroups) whose workloads need the check; empty means "
            "every workload. At most 64, no duplicates."
        ),
    )


class AdmissionChecksStrategy(KueueModel):
    """The AdmissionChecks of a ClusterQueue."""

    admission_checks: list[AdmissionCheckStrategyRule] = Field(
        min_length=1, max_length=64, description="The checks; 1 to 64, names unique. Required."
    )


class FairSharing(KueueModel):
    """Fair-sharing weight of a ClusterQueue, Cohort or LocalQueue."""

    weight: Quantity = Field(
        default="1",
        description=(
            "Comparative advantage when competing for unused cohort resources, when the Configuration turns "
            "fair sharing on; 0 means never ahead; when not 0 it must exceed 1e-9. Defaults to 1."
        ),
    )


class AdmissionScope(KueueModel):
    """Admission fair sharing of a ClusterQueue."""

    admission_mode: Literal["UsageBasedAdmissionFairSharing", "NoAdmissionFairSharing"] = Field(
        description="UsageBasedAdmissionFairSharing or NoAdmissionFairSharing. Required. Not used by admitflow."
    )


class ConcurrentAdmissionConstraints(KueueModel):
    """Limits on migrating an admitted workload between flavors."""

    last_acceptable_flavor_name: ResourceFlavorReference | None = Field(
        default=None, description="Least preferred flavor a workload may migrate to."
    )


class ConcurrentAdmissionMigration(KueueModel):
    """How admitted workloads migrate to preferred flavors."""

    mode: Literal["TryPreferredFlavors", "RetainFirstAdmission"] = Field(
        description="TryPreferredFlavors or RetainFirstAdmission. Required."
    )
    constraints: ConcurrentAdmissionConstraints | None = Field(default=None, description="Migration limits.")


class ConcurrentAdmissionPolicy(KueueModel):
    """Kueue's ConcurrentAdmission (alpha): pursue several flavors at once. Not used by admitflow."""

    migration: ConcurrentAdmissionMigration = Field(description="Migration settings. Required.")


# --- rules of resource groups, shared by ClusterQueues and Cohorts --------------------------------


class QuotaRules(NamedTuple):
    """How Kueue's validateResourceGroups differs between a ClusterQueue and a Cohort."""

    parent_field: str
    """The word in "must be nil when <parent_field> is empty": `cohort` or `parent`."""
    lending_within_nominal: bool
    """Whether a lendingLimit may not exceed the nominalQuota (enforceNominalGreaterThanLending)."""


QUOTA_RULES_OF_CLUSTER_QUEUE = QuotaRules(parent_field="cohort", lending_within_nominal=True)
QUOTA_RULES_OF_COHORT = QuotaRules(parent_field="parent", lending_within_nominal=False)


def resource_group_schema_errors(resource_groups: list[ResourceGroup], path: str) -> list[FieldError]:
    """The `+listType=map` uniqueness of flavors and of their resources, as the apiserver's
    structural schema checks it."""
    errors = []
    for i, rg in enumerate(resource_groups):
        rg_path = f"{path}[{i}]"
        errors += fe.list_map_duplicates([f.name for f in rg.flavors], f"{rg_path}.flavors")
        for j, fq in enumerate(rg.flavors):
            errors += fe.list_map_duplicates([r.name for r in fq.resources], f"{rg_path}.flavors[{j}].resources")
    return errors


def resource_group_cel_errors(resource_groups: list[ResourceGroup], path: str) -> list[FieldError]:
    """The CEL rule of the ResourceGroup type."""
    return [
        fe.cel(f"{path}[{i}]", "object", "flavors must have the same number of resources as the coveredResources")
        for i, rg in enumerate(resource_groups)
        if any(len(f.resources) != len(rg.covered_resources) for f in rg.flavors)
    ]


def resource_group_errors(
    resource_groups: list[ResourceGroup], path: str, rules: QuotaRules, *, has_parent: bool
) -> list[FieldError]:
    """Kueue's validateResourceGroups: resource names, a resource or flavor in one group only, and
    every quota; `has_parent` is whether the ClusterQueue has a cohortName (the Cohort a parentName)."""
    errors: list[FieldError] = []
    seen_resources: set[str] = set()
    seen_flavors: set[str] = set()
    for i, rg in enumerate(resource_groups):
        rg_path = f"{path}[{i}]"
        for j, name in enumerate(rg.covered_resources):
            res_path = f"{rg_path}.coveredResources[{j}]"
            errors += [fe.invalid(res_path, name, m) for m in qualified_name_errors(name)]
            if name in seen_resources:
                errors.append(fe.duplicate(res_path, name))
            seen_resources.add(name)
        for j, fq in enumerate(rg.flavors):
            fq_path = f"{rg_path}.flavors[{j}]"
            errors += _flavor_quota_errors(fq, rg.covered_resources, rules, has_parent, fq_path)
            if fq.name in seen_flavors:
                errors.append(fe.duplicate(f"{fq_path}.name", fq.name))
            seen_flavors.add(fq.name)
    return errors


def _flavor_quota_errors(
    fq: FlavorQuotas, covered: list[str], rules: QuotaRules, has_parent: bool, path: str
) -> list[FieldError]:
    errors = []
    no_parent = f"must be nil when {rules.parent_field} is empty"
    for k, rq in enumerate(fq.resources[: len(covered)]):
        rq_path = f"{path}.resources[{k}]"
        if rq.name != covered[k]:
            errors.append(fe.invalid(f"{rq_path}.name", rq.name, "must match the name in coveredResources"))
        nominal = parse_quantity(rq.nominal_quota)
        if nominal < 0:
            shown = canonical_quantity(rq.nominal_quota)
            errors.append(fe.invalid(f"{rq_path}.nominalQuota", shown, NEGATIVE_MESSAGE))
        if rq.borrowing_limit is not None:
            shown = canonical_quantity(rq.borrowing_limit)
            if not has_parent:
                errors.append(fe.invalid(f"{rq_path}.borrowingLimit", shown, no_parent))
            if parse_quantity(rq.borrowing_limit) < 0:
                errors.append(fe.invalid(f"{rq_path}.borrowingLimit", shown, NEGATIVE_MESSAGE))
        if rq.lending_limit is not None:
            shown = canonical_quantity(rq.lending_limit)
            lending = parse_quantity(rq.lending_limit)
            if lending < 0:
                errors.append(fe.invalid(f"{rq_path}.lendingLimit", shown, NEGATIVE_MESSAGE))
            if not has_parent:
                errors.append(fe.invalid(f"{rq_path}.lendingLimit", shown, no_parent))
            if rules.lending_within_nominal and lending > nominal:
                errors.append(
                    fe.invalid(f"{rq_path}.lendingLimit", shown, "must be less than or equal to the nominalQuota")
                )
    return errors


def fair_sharing_errors(fair_sharing: FairSharing | None, path: str) -> list[FieldError]:
    """Kueue's validateFairSharing: a weight of 0, or above 1e-9."""
    if fair_sharing is None:
        return []
    errors = []
    weight = parse_quantity(fair_sharing.weight)
    shown = canonical_quantity(fair_sharing.weight)
    if weight < 0:
        errors.append(fe.invalid(path, shown, NEGATIVE_MESSAGE))
    if 0 < weight <= parse_quantity("1n"):
        errors.append(fe.invalid(path, shown, "When not 0, weight must be > 10e-9"))
    return errors


class ClusterQueueSpec(KueueModel):
    """The desired state of a ClusterQueue."""

    resource_groups: list[ResourceGroup] = Field(
        default_factory=list,
        max_length=16,
        description="Groups of resources and the flavors providing them; at most 16 (256 flavors in total).",
    )
    cohort_name: CohortReference | None = Field(
        default=None,
        description=(
            "Cohort whose tree of ClusterQueues lends and borrows unused quota; unset means no borrowing. "
            "A Cohort that was never created exists implicitly, with no quota of its own. A DNS subdomain (253)."
        ),
    )
    queueing_strategy: QueueingStrategy = Field(
        default="BestEffortFIFO",
        description=(
            "StrictFIFO: the oldest workload of the highest priority blocks the ones behind it; "
            "BestEffortFIFO (default): workloads that do not fit let later ones through."
        ),
    )
    namespace_selector: LabelSelector | None = Field(
        default=None,
        description="Namespaces that may submit workloads; unset means none, `{}` means all.",
    )
    flavor_fungibility: FlavorFungibility = Field(
        default_factory=FlavorFungibility,
        description="Whether to try the next flavor before borrowing or preempting; defaults to {}.",
    )
    preemption: ClusterQueuePreemption = Field(
        default_factory=ClusterQueuePreemption, description="Preemption policies; defaults to {} (never)."
    )
    admission_checks_strategy: AdmissionChecksStrategy | None = Field(
        default=None,
        description="AdmissionChecks workloads of this ClusterQueue must pass, optionally per flavor.",
    )
    stop_policy: StopPolicy = Field(
        default="None",
        description=(
            "None (default): active. Hold: no new reservations, admitted workloads run on. HoldAndDrain: "
            "also evict admitted workloads."
        ),
    )
    fair_sharing: FairSharing | None = Field(
        default=None, description="Fair-sharing weight, used when the Configuration turns fair sharing on."
    )
    admission_scope: AdmissionScope | None = Field(
        default=None, description="Admission fair sharing. Not used by admitflow."
    )
    concurrent_admission_policy: ConcurrentAdmissionPolicy | None = Field(
        default=None, description="Concurrent admission (alpha). Not used by admitflow."
    )

    def flavor_names(self) -> list[str]:
        """All flavors of all resource groups, in order."""
        return [f.name for rg in self.resource_groups for f in rg.flavors]

    def validation_errors(self, path: str = "spec") -> list[FieldError]:
        return self._schema_errors(path) + self._cel_errors(path) + self._webhook_errors(path)

    def _schema_errors(self, path: str) -> list[FieldError]:
        errors = resource_group_schema_errors(self.resource_groups, f"{path}.resourceGroups")
        if self.admission_checks_strategy:
            checks_path = f"{path}.admissionChecksStrategy.admissionChecks"
            rules = self.admission_checks_strategy.admission_checks
            errors += fe.list_map_duplicates([r.name for r in rules], checks_path)
            for i, rule in enumerate(rules):
                errors += fe.list_set_duplicates(rule.on_flavors, f"{checks_path}[{i}].onFlavors")
        return errors

    def _cel_errors(self, path: str) -> list[FieldError]:
        errors = resource_group_cel_errors(self.resource_groups, f"{path}.resourceGroups")
        if not self.cohort_name and any(
            r.borrowing_limit is not None for rg in self.resource_groups for f in rg.flavors for r in f.resources
        ):
            errors.append(fe.cel(path, "object", "borrowingLimit must be nil when cohort is empty"))
        ff = self.flavor_fungibility
        if ff.preference is not None and not (ff.when_can_borrow == ff.when_can_preempt == "TryNextFlavor"):
            errors.append(
                fe.cel(
                    f"{path}.flavorFungibility",
                    "object",
                    "preference can only be set when both whenCanBorrow and whenCanPreempt are TryNextFlavor",
                )
            )
        p = self.preemption
        if p.reclaim_within_cohort == "Never" and p.borrow_within_cohort.policy != "Never":
            errors.append(
                fe.cel(f"{path}.preemption", "object", "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never")
            )
        return errors

    def _webhook_errors(self, path: str) -> list[FieldError]:
        errors = resource_group_errors(
            self.resource_groups, f"{path}.resourceGroups", QUOTA_RULES_OF_CLUSTER_QUEUE, has_parent=bool(self.cohort_name)
        )
        if self.namespace_selector is not None:
            errors += self.namespace_selector.validation_errors(f"{path}.namespaceSelector")
        errors += fair_sharing_errors(self.fair_sharing, f"{path}.fairSharing")
        total_flavors = sum(len(rg.flavors) for rg in self.resource_groups)
        if total_flavors > MAX_TOTAL_FLAVORS:
            errors.append(
                fe.invalid(
                    f"{path}.resourceGroups",
                    total_flavors,
                    f"total number of flavors across all resourceGroups must be ≤ {MAX_TOTAL_FLAVORS}, got {total_flavors}",
                )
            )
        total_covered = sum(len(rg.covered_resources) for rg in self.resource_groups)
        if total_covered > MAX_TOTAL_COVERED_RESOURCES:
            errors.append(
                fe.invalid(
                    f"{path}.resourceGroups",
                    total_covered,
                    "total number of covered resources across all resourceGroups must be "
                    f"≤ {MAX_TOTAL_COVERED_RESOURCES}, got {total_covered}",
                )
            )
        for i, rg in enumerate(self.resource_groups):
            combos = sum(len(f.resources) for f in rg.flavors)
            if combos > MAX_FLAVOR_RESOURCE_COMBINATIONS:
                errors.append(
                    fe.invalid(
                        f"{path}.resourceGroups[{i}]",
                        combos,
                        "number of flavor-resource combinations in a resourceGroup must be "
                        f"≤ {MAX_FLAVOR_RESOURCE_COMBINATIONS}, got {combos}",
                    )
                )
        errors += self._on_flavor_errors(path)
        return errors

    def _on_flavor_errors(self, path: str) -> list[FieldError]:
        if self.admission_checks_strategy is None:
            return []
        flavors = list(dict.fromkeys(self.flavor_names()))
        errors = []
        for i, rule in enumerate(self.admission_checks_strategy.admission_checks):
            for j, flavor in enumerate(rule.on_flavors):
                if flavor not in flavors:
                    errors.append(
                        fe.not_supported(
                            f"{path}.admissionChecksStrategy.admissionChecks[{i}].onFlavors[{j}]", flavor, flavors
                        )
                    )
        return errors


class ResourceUsage(KueueModel):
    """Quota in use for one resource of one flavor."""

    name: str = Field(description="Resource name.")
    total: Quantity = Field(default="0", description="Quota in use, including what is borrowed.")
    borrowed: Quantity = Field(default="0", description="Part of `total` above the nominal quota.")


class FlavorUsage(KueueModel):
    """Quota in use in one flavor."""

    name: ResourceFlavorReference = Field(description="Flavor name.")
    resources: list[ResourceUsage] = Field(
        default_factory=list, max_length=64, description="Usage per resource; at most 64."
    )


class AdmissionFairSharingStatus(KueueModel):
    """Decayed resource consumption used by admission fair sharing."""

    consumed_resources: dict[str, Quantity] = Field(description="Aggregated usage over time.")
    last_update: Time = Field(description="When the values were last updated.")


class FairSharingStatus(KueueModel):
    """Current fair-sharing state."""

    weighted_share: int = Field(
        ge=INT64_MIN, le=INT64_MAX, description="Dominant share of borrowed resources divided by the weight; an int64."
    )
    admission_fair_sharing_status: AdmissionFairSharingStatus | None = Field(
        default=None, description="Admission fair sharing state."
    )


class ClusterQueueStatus(KueueModel):
    """The observed state of a ClusterQueue, as Kueue reports it."""

    conditions: list[Condition] = Field(
        default_factory=list, max_length=16, description="Conditions (type `Active`); at most 16."
    )
    flavors_reservation: list[FlavorUsage] = Field(
        default_factory=list,
        max_length=64,
        description="Quota reserved per flavor by workloads holding a reservation here; at most 64.",
    )
    flavors_usage: list[FlavorUsage] = Field(
        default_factory=list,
        max_length=64,
        description="Quota used per flavor by admitted workloads; at most 64.",
    )
    pending_workloads: int = Field(default=0, ge=0, le=INT32_MAX, description="Workloads waiting for a reservation.")
    reserving_workloads: int = Field(
        default=0, ge=0, le=INT32_MAX, description="Workloads holding a quota reservation."
    )
    admitted_workloads: int = Field(default=0, ge=0, le=INT32_MAX, description="Admitted workloads not yet finished.")
    fair_sharing: FairSharingStatus | None = Field(default=None, description="Fair-sharing state.")


class ClusterQueue(KueueModel):
    """A ClusterQueue. Cluster-scoped."""

    api_version: Literal["kueue.x-k8s.io/v1beta2"] = Field(default=API_VERSION, description="API version.")
    kind: Literal["ClusterQueue"] = Field(default="ClusterQueue", description="Kind.")
    metadata: ObjectMeta = Field(description="Object metadata; LocalQueues refer to `name`.")
    spec: ClusterQueueSpec = Field(default_factory=ClusterQueueSpec, description="Desired state.")
    status: ClusterQueueStatus = Field(
        default_factory=ClusterQueueStatus, description="Observed state; ignored on input."
    )

    @property
    def key(self) -> str:
        return self.metadata.name

    def validation_errors(self, path: str = "") -> list[FieldError]:
        too_long = ids.id_length_error("ClusterQueue", ids.cluster_queue_id(self.key), "clusterqueue/<name>")
        return ([fe.invalid(fe.join_path(path, "metadata.name"), self.key, too_long)] if too_long else []) + (
            self.spec.validation_errors(fe.join_path(path, "spec"))
        )
