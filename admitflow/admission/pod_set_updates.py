"""What an admitted workload's pods start with (Kueue's podset.Merge, reference §1.9).

Per podSet: the podSet label, the node labels and tolerations of the flavors it was assigned, then
the first podSetUpdate for that podSet from each admission check, in the order given (by check
name). Labels, annotations and node selector are unions where the same key with another value is a
conflict; tolerations are added once. A conflict is permanent: the workload fails to start.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from admitflow.api import Admission, AdmissionCheckState, ResourceFlavorSpec
from admitflow.api.pod import Toleration
from admitflow.wire import WireModel

POD_SET_LABEL = "kueue.x-k8s.io/podset"


class PodSetInfo(WireModel):
    """What the pods of one podSet are started with once admitted."""

    name: str
    count: int
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)


class PodSetUpdateConflict(ValueError):
    """Kueue's permanent start error; the message is Kueue's."""


def merge(
    admission: Admission, flavors: dict[str, ResourceFlavorSpec], checks: Sequence[AdmissionCheckState]
) -> list[PodSetInfo]:
    out = []
    for psa in admission.pod_set_assignments:
        info = PodSetInfo(name=psa.name, count=psa.count if psa.count is not None else 1, labels={POD_SET_LABEL: psa.name})
        for flavor in dict.fromkeys((psa.flavors or {}).values()):
            spec = flavors.get(flavor)
            if spec is None:
                continue  # deleted since: it contributes nothing
            info.node_selector.update(spec.node_labels or {})
            _add_tolerations(info, spec.tolerations or ())
        for check in checks:
            update = next((u for u in check.pod_set_updates or () if u.name == psa.name), None)
            if update is None:
                continue
            try:
                _union(info.labels, update.labels, "labels")
                _union(info.annotations, update.annotations, "annotations")
                _union(info.node_selector, update.node_selector, "nodeSelector")
            except PodSetUpdateConflict as err:
                raise PodSetUpdateConflict(
                    f'in admission check "{check.name}": invalid admission check PodSetUpdate: {err}'
                ) from None
            _add_tolerations(info, update.tolerations or ())
        out.append(info)
    return out


def _union(into: dict[str, str], extra: dict[str, str] | None, field: str) -> None:
    for k, v in (extra or {}).items():
        if k in into and into[k] != v:
            raise PodSetUpdateConflict(f"conflict for {field}: conflict for key={k}, value1={into[k]}, value2={v}")
        into[k] = v


def _add_tolerations(info: PodSetInfo, tolerations: Sequence[Toleration]) -> None:
    for t in tolerations:
        if t not in info.tolerations:
            info.tolerations.append(t)
