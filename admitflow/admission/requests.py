"""What a pod set asks for: Kueue's resource arithmetic, on integers.

Quantities become integers the way Kueue stores them: milli-units for `cpu`, whole units for every
other resource. The functions read pod specs in their wire form (camelCase dicts), so they do not
depend on how much of the Pod API our models spell out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ConfigDict, Field

from admitflow.wire import WireModel

from admitflow.admission.selectors import Requirement, Toleration
from admitflow.api import format_resource, resource_value

Requests = dict[str, int]

PODS = "pods"


def add(a: Mapping[str, int], b: Mapping[str, int]) -> Requests:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


def maximum(a: Mapping[str, int], b: Mapping[str, int]) -> Requests:
    out = dict(a)
    for k, v in b.items():
        out[k] = max(out.get(k, 0), v)
    return out


def scale(r: Mapping[str, int], n: int) -> Requests:
    return {k: v * n for k, v in r.items()}


def format_requests(r: Mapping[str, int]) -> dict[str, str]:
    return {k: format_resource(k, v) for k, v in sorted(r.items())}


def _container_requests(container: Mapping[str, Any]) -> Requests:
    # Limits stand in for missing requests, as the API server defaults them for pods.
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    merged = {**limits, **requests}
    return {name: resource_value(name, str(q)) for name, q in merged.items()}


def pod_requests(pod_spec: Mapping[str, Any]) -> Requests:
    """Effective requests of one pod, as `resourcehelper.PodRequests`: the containers' sum, at least
    the largest init container (sidecars, `restartPolicy: Always`, run alongside and add up), plus
    the pod overhead."""
    total: Requests = {}
    for c in pod_spec.get("containers") or ():
        total = add(total, _container_requests(c))
    sidecars: Requests = {}
    init_peak: Requests = {}
    for c in pod_spec.get("initContainers") or ():
        r = _container_requests(c)
        if c.get("restartPolicy") == "Always":
            total = add(total, r)
            sidecars = add(sidecars, r)
        else:
            init_peak = maximum(init_peak, add(r, sidecars))
    total = maximum(total, init_peak)
    overhead = {n: resource_value(n, str(q)) for n, q in (pod_spec.get("overhead") or {}).items()}
    return add(total, overhead)


class PodSetRequest(WireModel):
    """The part of a pod set that quota and flavor assignment look at, small enough to keep one per
    pending workload in a ClusterQueue."""

    model_config = ConfigDict(frozen=True)

    name: str
    count: int
    per_pod: dict[str, int] = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    affinity_terms: tuple[tuple[Requirement, ...], ...] | None = None
    tolerations: tuple[Toleration, ...] = ()

    def total(self, covers_pods: bool = False) -> Requests:
        total = scale(self.per_pod, self.count)
        if covers_pods:
            total[PODS] = self.count
        return total


def pod_set_request(pod_set: Mapping[str, Any]) -> PodSetRequest:
    """Compact a Workload `spec.podSets[]` entry (wire form)."""
    template = pod_set.get("template") or {}
    spec = template.get("spec") or {}
    affinity = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        or {}
    )
    terms = affinity.get("nodeSelectorTerms")
    return PodSetRequest(
        name=pod_set.get("name", "main"),
        count=pod_set.get("count", 1),
        per_pod=pod_requests(spec),
        node_selector=dict(spec.get("nodeSelector") or {}),
        affinity_terms=(
            tuple(tuple(Requirement(**_requirement(e)) for e in t.get("matchExpressions") or ()) for t in terms)
            if terms
            else None
        ),
        tolerations=tuple(Toleration(**_toleration(t)) for t in spec.get("tolerations") or ()),
    )


def _requirement(e: Mapping[str, Any]) -> dict[str, Any]:
    return {"key": e["key"], "operator": e["operator"], "values": tuple(e.get("values") or ())}


def _toleration(t: Mapping[str, Any]) -> dict[str, Any]:
    return {k: t[k] for k in ("key", "operator", "value", "effect") if t.get(k) is not None}


def total_requests(pod_sets: Iterable[PodSetRequest]) -> Requests:
    out: Requests = {}
    for ps in pod_sets:
        out = add(out, ps.total())
    return out
