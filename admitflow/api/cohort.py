"""Cohort (kueue.x-k8s.io/v1beta2): a node of a cohort tree, with quota its subtree shares.

ClusterQueues join a cohort with `spec.cohortName`; Cohorts join another with `spec.parentName`.
A name used that way but never created is an implicit Cohort (no quota, weight 1, no parent). A
Cohort's resource groups have the shape and the rules of a ClusterQueue's, except that its
borrowing and lending limits need a parent and its lendingLimit may exceed its nominalQuota.

The v1beta1 Cohort has the same fields (`parentName` since Kueue v0.13; `parent` was v1alpha1's).

Sources: apis/kueue/v1beta2/cohort_types.go, apis/kueue/v1beta1/cohort_types.go,
pkg/webhooks/cohort_webhook.go (validateCohort), pkg/webhooks/clusterqueue_webhook.go
(validateResourceGroups), pkg/cache/hierarchy/manager.go.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from . import field_error as fe
from .base import KueueModel
from .cluster_queue import (
    QUOTA_RULES_OF_COHORT,
    CohortReference,
    FairSharing,
    FairSharingStatus,
    ResourceGroup,
    fair_sharing_errors,
    resource_group_cel_errors,
    resource_group_errors,
    resource_group_schema_errors,
)
from .field_error import FieldError
from .meta import ObjectMeta

API_VERSION = "kueue.x-k8s.io/v1beta2"


class CohortSpec(KueueModel):
    """The desired state of a Cohort."""

    parent_name: CohortReference | None = Field(
        default=None,
        description=(
            "The parent Cohort; unset means this Cohort is the root of its tree. A parent that was never "
            "created exists implicitly (no quota, no limits, no parent of its own). A cycle of parents is "
            "refused. A DNS subdomain (253)."
        ),
    )
    resource_groups: list[ResourceGroup] = Field(
        default_factory=list,
        max_length=16,
        description=(
            "Quota this Cohort adds to its subtree, on top of its ClusterQueues' own, in groups of resources "
            "and the flavors providing them, as a ClusterQueue's; at most 16. borrowingLimit caps what the "
            "subtree borrows from the parent, lendingLimit what it lends to it; both need a parentName."
        ),
    )
    fair_sharing: FairSharing | None = Field(
        default=None,
        description="Fair-sharing weight of the Cohort against its siblings, when the Configuration turns fair sharing on.",
    )

    def validation_errors(self, path: str = "spec") -> list[FieldError]:
        groups_path = f"{path}.resourceGroups"
        # Schema and CEL rules of the CRD, then Kueue's validateCohort, in the apiserver's order.
        return (
            resource_group_schema_errors(self.resource_groups, groups_path)
            + resource_group_cel_errors(self.resource_groups, groups_path)
            + fair_sharing_errors(self.fair_sharing, f"{path}.fairSharing")
            + resource_group_errors(
                self.resource_groups, groups_path, QUOTA_RULES_OF_COHORT, has_parent=bool(self.parent_name)
            )
        )


class CohortStatus(KueueModel):
    """The observed state of a Cohort, as Kueue reports it."""

    fair_sharing: FairSharingStatus | None = Field(
        default=None, description="Fair-sharing state, when fair sharing is on."
    )


class Cohort(KueueModel):
    """A Cohort. Cluster-scoped."""

    api_version: Literal["kueue.x-k8s.io/v1beta2"] = Field(default=API_VERSION, description="API version.")
    kind: Literal["Cohort"] = Field(default="Cohort", description="Kind.")
    metadata: ObjectMeta = Field(description="Object metadata; ClusterQueues and Cohorts refer to `name`.")
    spec: CohortSpec = Field(default_factory=CohortSpec, description="Desired state.")
    status: CohortStatus = Field(default_factory=CohortStatus, description="Observed state; ignored on input.")

    @property
    def key(self) -> str:
        return self.metadata.name

    def validation_errors(self, path: str = "") -> list[FieldError]:
        return self.spec.validation_errors(fe.join_path(path, "spec"))
