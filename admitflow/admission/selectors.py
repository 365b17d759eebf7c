"""Label selectors, node affinity and taints, as Kubernetes evaluates them.

Flavor matching (does a pod set fit on a ResourceFlavor's nodes?) and a ClusterQueue's
`namespaceSelector` are both label questions. The types here are compact so they can live in a
ClusterQueue's pending entries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import ConfigDict

from admitflow.wire import WireModel

# A namespace here has no object of its own, so the only label it carries is the one Kubernetes
# puts on every namespace.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


class Requirement(WireModel):
    """One `matchExpressions` entry (label selector or node selector requirement)."""

    model_config = ConfigDict(frozen=True)

    key: str
    operator: str
    values: tuple[str, ...] = ()


class Toleration(WireModel):
    model_config = ConfigDict(frozen=True)

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


class Taint(WireModel):
    model_config = ConfigDict(frozen=True)

    key: str
    value: str = ""
    effect: str

    def __str__(self) -> str:
        # corev1.Taint.ToString()
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


def requirement_matches(req: Requirement, labels: Mapping[str, str]) -> bool:
    value = labels.get(req.key)
    match req.operator:
        case "In":
            return value is not None and value in req.values
        case "NotIn":
            return value is None or value not in req.values
        case "Exists":
            return value is not None
        case "DoesNotExist":
            return value is None
        case "Gt" | "Lt":
            try:
                have, want = int(value or ""), int(req.values[0])
            except (ValueError, IndexError):
                return False
            return have > want if req.operator == "Gt" else have < want
    return False


def selector_matches(
    match_labels: Mapping[str, str] | None,
    match_expressions: Sequence[Requirement] | None,
    labels: Mapping[str, str],
) -> bool:
    """A LabelSelector: every matchLabels pair and every expression must hold; empty matches all."""
    if any(labels.get(k) != v for k, v in (match_labels or {}).items()):
        return False
    return all(requirement_matches(r, labels) for r in match_expressions or ())


def namespace_labels(namespace: str) -> dict[str, str]:
    return {NAMESPACE_NAME_LABEL: namespace}


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """corev1.Toleration.ToleratesTaint."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    if not toleration.key:  # an empty key is only allowed with Exists
        return False
    return toleration.value == taint.value


def first_untolerated_taint(taints: Sequence[Taint], tolerations: Sequence[Toleration]) -> Taint | None:
    """Only NoSchedule and NoExecute taints keep pods off nodes, as in Kueue's flavor assigner."""
    for taint in taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def node_affinity_matches(
    node_selector: Mapping[str, str],
    affinity_terms: Sequence[Sequence[Requirement]] | None,
    node_labels: Mapping[str, str],
) -> bool:
    """Would a node with `node_labels` satisfy the pod's nodeSelector and required node affinity?

    Like Kueue's `flavorSelector`, only keys the flavor itself labels are considered: a pod asking
    for a zone is not kept off a flavor that says nothing about zones. Terms are ORed, expressions
    within a term ANDed; a term left empty by that filtering matches every flavor.
    """
    keys = node_labels.keys()
    for k, v in node_selector.items():
        if k in keys and node_labels[k] != v:
            return False
    if not affinity_terms:
        return True
    filtered = [[r for r in term if r.key in keys] for term in affinity_terms]
    if any(not term for term in filtered):
        return True
    return any(all(requirement_matches(r, node_labels) for r in term) for term in filtered)
