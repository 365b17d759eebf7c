"""What an admitted workload's pods start with (Kueue's podset.FromAssignment and Merge).

Per podSet, in the order of the quota assignment:

- the podSet label `kueue.x-k8s.io/podset: <podSet>`;
- the node labels of every flavor assigned to the podSet, as node selector, and the flavors'
  tolerations. Two flavors disagreeing on a node label is not a conflict: the first flavor in the
  assignment keeps its value, as Kueue's MergeKeepFirst does;
- then, from each admission check in the order given (Kueue's `status.admissionChecks`, sorted by
  name), the first podSetUpdate naming the podSet. Labels, annotations and node selector are unions
  in which the same key with another value is a conflict and the same value is not; tolerations are
  added once.

A conflict is permanent: the job cannot start, and Kueue finishes the workload with reason
`FailedToStart` and the conflict as message. A check's node selector that disagrees with a flavor's
node label is such a conflict too, blamed on the check.

Pure and deterministic: workflow code calls it.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from admitflow.api import Admission, AdmissionCheckState, ResourceFlavorSpec, Toleration
from admitflow.api.workload import PodSetAssignment, PodSetUpdate
from admitflow.wire import WireModel

POD_SET_LABEL = "kueue.x-k8s.io/podset"


class PodSetInfo(WireModel):
    """What the pods of one podSet are started with once admitted."""

    name: str = Field(description="The podSet.")
    count: int = Field(description="Pods admitted; the assignment's count, 1 when it has none.")
    labels: dict[str, str] = Field(default_factory=dict, description="The podSet label plus the checks' labels.")
    annotations: dict[str, str] = Field(default_factory=dict, description="The checks' annotations.")
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="The assigned flavors' node labels plus the checks' node selectors."
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, description="The assigned flavors' tolerations, then the checks', each once."
    )


class PodSetUpdateConflict(ValueError):
    """A check's podSetUpdate disagrees with what the pods already get. Permanent; the message is
    Kueue's, e.g. `in admission check "budget": invalid admission check PodSetUpdate: conflict for
    labels: conflict for key=team, value1=a, value2=b`."""


def merge(
    admission: Admission, flavors: dict[str, ResourceFlavorSpec], checks: Sequence[AdmissionCheckState]
) -> list[PodSetInfo]:
    """One PodSetInfo per podSet assignment, in assignment order: the assignment first, then each
    check's first update for that podSet. A flavor missing from `flavors` (deleted since) adds
    nothing. Raises PodSetUpdateConflict at the first check that disagrees."""
    return [_pod_set_info(assignment, flavors, checks) for assignment in admission.pod_set_assignments]


def _pod_set_info(
    assignment: PodSetAssignment, flavors: dict[str, ResourceFlavorSpec], checks: Sequence[AdmissionCheckState]
) -> PodSetInfo:
    info = PodSetInfo(
        name=assignment.name,
        count=assignment.count if assignment.count is not None else 1,
        labels={POD_SET_LABEL: assignment.name},
    )
    # A flavor serving several resources of the podSet counts once.
    for flavor in dict.fromkeys((assignment.flavors or {}).values()):
        spec = flavors.get(flavor)
        if spec is None:
            continue
        for key, value in (spec.node_labels or {}).items():
            info.node_selector.setdefault(key, value)
        add_tolerations(info.tolerations, spec.tolerations)
    for check in checks:
        update = next((u for u in check.pod_set_updates or () if u.name == assignment.name), None)
        if update is not None:
            _apply(info, update, check.name)
    return info


def _apply(info: PodSetInfo, update: PodSetUpdate, check: str) -> None:
    # Every field is checked before any is changed, in Kueue's order: annotations, labels, nodeSelector.
    pairs = (
        ("annotations", info.annotations, update.annotations or {}),
        ("labels", info.labels, update.labels or {}),
        ("nodeSelector", info.node_selector, update.node_selector or {}),
    )
    for field, have, extra in pairs:
        # Kueue reports whichever conflicting key its map iteration meets first; we take the
        # check's first, so the message is the same on every replay.
        found = first_conflict(field, have, extra)
        if found:
            raise PodSetUpdateConflict(f'in admission check "{check}": {found}')
    for _, have, extra in pairs:
        have.update(extra)
    add_tolerations(info.tolerations, update.tolerations)


def conflict(field: str, key: str, value1: str, value2: str) -> str:
    """Kueue's words for two values of one key (podset.BadPodSetsUpdateError, maps.HaveConflict)."""
    return f"invalid admission check PodSetUpdate: conflict for {field}: conflict for key={key}, value1={value1}, value2={value2}"


def first_conflict(field: str, have: dict[str, str], extra: dict[str, str]) -> str:
    """The conflict of the first key of `extra` that `have` holds with another value, or ""."""
    for key, value in extra.items():
        if key in have and have[key] != value:
            return conflict(field, key, have[key], value)
    return ""


def add_tolerations(into: list[Toleration], tolerations: Sequence[Toleration] | None) -> None:
    """Append each toleration `into` does not hold yet."""
    for toleration in tolerations or ():
        if toleration not in into:
            into.append(toleration)
