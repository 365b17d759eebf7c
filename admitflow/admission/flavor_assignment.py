"""Flavor assignment: which ResourceFlavor each pod set's resources are charged to.

The rules of Kueue's `pkg/scheduler/flavorassigner` for a ClusterQueue without a cohort: for each
pod set in order, for each resource group it needs, try the group's flavors in order; a flavor must
accept the pod set (taints, node affinity) and have room for every covered resource. The first
flavor where everything fits wins; otherwise the best partial result and every reason are kept, so
the workload's `QuotaReserved=False` message says exactly what was tried. Messages are Kueue's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import IntEnum
from typing import Literal

from pydantic import ConfigDict, Field

from admitflow.wire import WireModel

from admitflow.admission.requests import PODS, PodSetRequest
from admitflow.admission.selectors import Taint, Toleration, first_untolerated_taint, node_affinity_matches
from admitflow.api import format_resource

# (flavor, resource) -> amount, in Kueue's integer units.
Usage = dict[tuple[str, str], int]

REASON_WAITING_FOR_QUOTA = "WaitingForQuota"
REASON_NO_MATCHING_FLAVOR = "NoMatchingFlavor"
REASON_EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"

# Kueue's reasonSeverity: when pod sets fail for different reasons, the most severe is reported.
_SEVERITY = {"": 0, REASON_WAITING_FOR_QUOTA: 2, REASON_EXCEEDS_MAX_QUOTA: 3, REASON_NO_MATCHING_FLAVOR: 4}


class FlavorInfo(WireModel):
    model_config = ConfigDict(frozen=True)

    node_labels: dict[str, str] = Field(default_factory=dict)
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()


class FlavorQuota(WireModel):
    model_config = ConfigDict(frozen=True)

    name: str
    nominal: dict[str, int]


class ResourceGroupQuota(WireModel):
    model_config = ConfigDict(frozen=True)

    covered: tuple[str, ...]
    flavors: tuple[FlavorQuota, ...]


class Mode(IntEnum):
    """Ordered from worst to best, as Kueue's preemptionMode."""

    NO_FIT = 0
    NO_PREEMPTION_CANDIDATES = 1
    PREEMPT = 2
    FIT = 4


class PodSetAssignment(WireModel):
    name: str
    flavors: dict[str, str] = Field(default_factory=dict)
    resource_usage: dict[str, int] = Field(default_factory=dict)
    count: int


class Assignment(WireModel):
    pod_sets: list[PodSetAssignment]
    mode: Literal["Fit", "Preempt", "NoFit"]
    message: str = ""
    reason: str = ""
    preemption_possible: bool = Field(
        default=False, description="In Preempt mode: workloads that may be preempted hold enough of the quota."
    )

    def usage(self) -> Usage:
        out: Usage = {}
        for ps in self.pod_sets:
            for res, flavor in ps.flavors.items():
                amount = ps.resource_usage.get(res, 0)
                out[(flavor, res)] = out.get((flavor, res), 0) + amount
        return out


class _Attempt:
    """One flavor tried for one resource group of one pod set."""

    def __init__(self) -> None:
        self.mode = Mode.NO_FIT
        self.reasons: list[str] = []
        self.no_fit_reason = ""


def covers_pods(groups: Sequence[ResourceGroupQuota]) -> bool:
    return any(PODS in g.covered for g in groups)


def assign_flavors(
    pod_sets: Sequence[PodSetRequest],
    groups: Sequence[ResourceGroupQuota],
    flavors: Mapping[str, FlavorInfo],
    usage: Mapping[tuple[str, str], int],
    preemptible: Mapping[tuple[str, str], int] | None = None,
) -> Assignment:
    """Assign flavors to every pod set against the queue's current `usage`. `preemptible` is the
    part of that usage held by workloads this one may preempt: a flavor where preempting them would
    make room is a Preempt-mode candidate, preferred to one where nothing can help."""
    with_pods = covers_pods(groups)
    assumed: Usage = {}
    out: list[PodSetAssignment] = []
    messages: list[str] = []
    worst = Mode.FIT
    reason = ""
    for ps in pod_sets:
        requests = ps.total(with_pods)
        assigned: dict[str, str] = {}
        reasons: list[str] = []
        podset_mode = Mode.FIT
        podset_reason = ""
        failed = False
        for res in sorted(requests):
            if res in assigned:
                continue
            group = next((g for g in groups if res in g.covered), None)
            if group is None:
                if requests[res] == 0:
                    continue
                reasons.append(f"resource {res} unavailable in ClusterQueue")
                podset_reason = _most_severe(podset_reason, REASON_NO_MATCHING_FLAVOR)
                failed = True
                break
            group_requests = {r: v for r, v in requests.items() if r in group.covered}
            chosen, mode, attempt_reasons, group_reason = _find_flavor(
                ps, group, group_requests, flavors, usage, assumed, preemptible or {}
            )
            reasons.extend(attempt_reasons)
            if chosen is None:
                podset_reason = _most_severe(podset_reason, group_reason)
                failed = True
                break
            for r in group_requests:
                assigned[r] = chosen
            podset_mode = min(podset_mode, mode)
        usage_of_ps = {r: requests[r] for r in assigned}
        out.append(PodSetAssignment(name=ps.name, flavors=assigned, resource_usage=usage_of_ps, count=ps.count))
        if reasons and (failed or podset_mode != Mode.FIT):
            messages.append(f"couldn't assign flavors to pod set {ps.name}: {', '.join(sorted(reasons))}")
        if failed:
            worst = Mode.NO_FIT
            reason = _most_severe(reason, podset_reason)
            break
        worst = min(worst, podset_mode)
        for r, f in assigned.items():
            assumed[(f, r)] = assumed.get((f, r), 0) + requests[r]
    message = "; ".join(messages)
    if worst == Mode.FIT:
        return Assignment(pod_sets=out, mode="Fit")
    if worst == Mode.NO_FIT:
        return Assignment(pod_sets=out, mode="NoFit", message=message, reason=reason)
    # Fits by quota only if someone else gives it up: by preemption, or else by waiting.
    return Assignment(
        pod_sets=out, mode="Preempt", message=message, reason=REASON_WAITING_FOR_QUOTA,
        preemption_possible=worst == Mode.PREEMPT,
    )


def _find_flavor(
    ps: PodSetRequest,
    group: ResourceGroupQuota,
    requests: Mapping[str, int],
    flavors: Mapping[str, FlavorInfo],
    usage: Mapping[tuple[str, str], int],
    assumed: Mapping[tuple[str, str], int],
    preemptible: Mapping[tuple[str, str], int],
) -> tuple[str | None, Mode, list[str], str]:
    """Try the group's flavors in order: (chosen flavor, its mode, every reason seen, no-fit reason).
    A flavor that fits ends the search; otherwise the best mode wins, the first of equals."""
    reasons: list[str] = []
    best: str | None = None
    best_mode = Mode.NO_FIT
    attempt_reasons: list[str] = []
    for fq in group.flavors:
        attempt = _try_flavor(ps, fq, requests, flavors.get(fq.name), usage, assumed, preemptible)
        reasons.extend(attempt.reasons)
        attempt_reasons.append(attempt.no_fit_reason)
        if attempt.mode == Mode.FIT:
            # Kueue reports nothing for a group that found a flavor, whatever failed before it.
            return fq.name, Mode.FIT, [], ""
        if attempt.mode > best_mode:
            best, best_mode = fq.name, attempt.mode
    # The group fails for the least severe reason among its flavors: one flavor that merely lacks
    # free quota makes the group "waiting", not "impossible".
    group_reason = min(attempt_reasons, key=lambda r: _SEVERITY.get(r, 0)) if attempt_reasons else ""
    if best is None and not attempt_reasons:
        group_reason = REASON_NO_MATCHING_FLAVOR
    return best, best_mode, reasons, group_reason


def _try_flavor(
    ps: PodSetRequest,
    fq: FlavorQuota,
    requests: Mapping[str, int],
    info: FlavorInfo | None,
    usage: Mapping[tuple[str, str], int],
    assumed: Mapping[tuple[str, str], int],
    preemptible: Mapping[tuple[str, str], int],
) -> _Attempt:
    attempt = _Attempt()
    if info is None:
        attempt.reasons.append(f"flavor {fq.name} not found")
        attempt.no_fit_reason = REASON_NO_MATCHING_FLAVOR
        return attempt
    taint = first_untolerated_taint(info.node_taints, (*ps.tolerations, *info.tolerations))
    if taint is not None:
        attempt.reasons.append(f"untolerated taint {taint} in flavor {fq.name}")
        attempt.no_fit_reason = REASON_NO_MATCHING_FLAVOR
        return attempt
    if not node_affinity_matches(ps.node_selector, ps.affinity_terms, info.node_labels):
        attempt.reasons.append(f"flavor {fq.name} doesn't match node affinity")
        attempt.no_fit_reason = REASON_NO_MATCHING_FLAVOR
        return attempt
    mode = Mode.FIT
    for res in sorted(requests):
        request = requests[res]
        before = assumed.get((fq.name, res), 0)
        wanted = before + request
        nominal = fq.nominal.get(res, 0)
        if wanted > nominal:
            attempt.reasons.append(
                f"insufficient quota for {res} in flavor {fq.name}, previously considered podsets requests "
                f"({format_resource(res, before)}) + current podset request ({format_resource(res, request)}) "
                f"> maximum capacity ({format_resource(res, nominal)})"
            )
            attempt.no_fit_reason = REASON_EXCEEDS_MAX_QUOTA
            attempt.mode = Mode.NO_FIT
            return attempt
        available = max(0, nominal - usage.get((fq.name, res), 0))
        if wanted > available:
            attempt.reasons.append(
                f"insufficient unused quota for {res} in flavor {fq.name}, "
                f"{format_resource(res, wanted - available)} more needed"
            )
            # Within the nominal quota, preempting lower-priority workloads could make room.
            can_preempt = wanted - available <= preemptible.get((fq.name, res), 0)
            mode = min(mode, Mode.PREEMPT if can_preempt else Mode.NO_PREEMPTION_CANDIDATES)
    attempt.mode = mode
    return attempt


def _most_severe(a: str, b: str) -> str:
    return a if _SEVERITY.get(a, 0) >= _SEVERITY.get(b, 0) else b
