"""Flavor assignment: which ResourceFlavor each pod set's resources are charged to.

The rules of Kueue's `pkg/scheduler/flavorassigner/flavorassigner.go`: for each pod set in order,
for each resource group it needs, try the group's flavors in order; a flavor must accept the pod
set (taints, node affinity) and have room for every covered resource. Room is what the ClusterQueue
may use now (`available`: its unused quota plus what its cohort can lend, within its borrowing
limit); a request above what it could ever use (`potential_available`) can never fit. A flavor
that fits only by borrowing, or only by preempting, is taken or passed over as the queue's
`flavorFungibility` says; otherwise the best flavor tried wins, and every reason is kept so the
workload's `QuotaReserved=False` message says exactly what was tried. Messages are Kueue's.

A ClusterQueue without a cohort is a tree of one: its available quota is its nominal quota less
its usage, and it never borrows (`assign_flavors`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from enum import IntEnum
from typing import Literal, Protocol

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

TRY_NEXT_FLAVOR = "TryNextFlavor"
PREEMPTION_OVER_BORROWING = "PreemptionOverBorrowing"


class FlavorInfo(WireModel):
    model_config = ConfigDict(frozen=True)

    node_labels: dict[str, str] = Field(default_factory=dict)
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()


class FlavorQuota(WireModel):
    model_config = ConfigDict(frozen=True)

    name: str
    nominal: dict[str, int]
    borrowing_limit: dict[str, int] = Field(default_factory=dict, description="By resource; absent means no limit.")
    lending_limit: dict[str, int] = Field(default_factory=dict, description="By resource; absent means no limit.")


class ResourceGroupQuota(WireModel):
    model_config = ConfigDict(frozen=True)

    covered: tuple[str, ...]
    flavors: tuple[FlavorQuota, ...]


class Mode(IntEnum):
    """Ordered from worst to best, as Kueue's preemptionMode: RECLAIM needs preemption in other
    ClusterQueues of the cohort only, PREEMPT also in its own."""

    NO_FIT = 0
    NO_PREEMPTION_CANDIDATES = 1
    PREEMPT = 2
    RECLAIM = 3
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
    borrowing: int = Field(
        default=0,
        exclude=True,
        description=(
            "Kueue's Borrowing: 0 without borrowing, else the height of the lowest subtree of the cohort "
            "that has room (the pass orders by it). A decision of one pass: not carried, since whether a "
            "reservation borrows changes as others come and go (the tree says it: QuotaTree.borrowed)."
        ),
    )

    @property
    def borrows(self) -> bool:
        return self.borrowing > 0

    def usage(self) -> Usage:
        out: Usage = {}
        for ps in self.pod_sets:
            for res, flavor in ps.flavors.items():
                amount = ps.resource_usage.get(res, 0)
                out[(flavor, res)] = out.get((flavor, res), 0) + amount
        return out


class QueueQuota(Protocol):
    """What flavor assignment asks of one ClusterQueue's quota, per (flavor, resource)."""

    in_cohort: bool

    def available(self, fr: tuple[str, str]) -> int:
        """What it may use now: its unused quota and what its cohort can lend it (Kueue's Available)."""
        ...

    def limits(self, fr: tuple[str, str]) -> tuple[int, int]:
        """(the most it could ever use, with nothing else running: Kueue's PotentialAvailable;
        `available`), in one call: flavor assignment asks both of every resource of every flavor."""
        ...

    def nominal(self, fr: tuple[str, str]) -> int: ...

    def borrow_height(self, fr: tuple[str, str], val: int) -> tuple[int, bool]:
        """Kueue's FindHeightOfLowestSubtreeThatFits: (0, whether the queue has a cohort) when `val`
        fits its nominal quota, else the height of the lowest Cohort on its path with room for it
        (that of the root when none has), and whether that Cohort has a parent."""
        ...


# (flavor, resource), the amount wanted in it -> Kueue's SimulatePreemption: NO_PREEMPTION_CANDIDATES,
# PREEMPT or RECLAIM, and how high the queue would borrow once the targets are gone.
Oracle = Callable[[tuple[str, str], int], tuple[Mode, int]]


class StandaloneQuota:
    """A ClusterQueue without a cohort: its nominal quota less its usage."""

    in_cohort = False

    def __init__(self, groups: Sequence[ResourceGroupQuota], usage: Mapping[tuple[str, str], int]) -> None:
        self._nominal = {(fq.name, res): v for g in groups for fq in g.flavors for res, v in fq.nominal.items()}
        self._usage = usage

    def available(self, fr: tuple[str, str]) -> int:
        return max(0, self._nominal.get(fr, 0) - self._usage.get(fr, 0))

    def nominal(self, fr: tuple[str, str]) -> int:
        return self._nominal.get(fr, 0)

    def limits(self, fr: tuple[str, str]) -> tuple[int, int]:
        return self.nominal(fr), self.available(fr)

    def borrow_height(self, fr: tuple[str, str], val: int) -> tuple[int, bool]:
        return 0, False


class TreeQuota:
    """A ClusterQueue of a cohort tree (`admitflow.admission.quota_tree.QuotaTree`, a tree of one
    for a ClusterQueue without a cohort). `heights` caches the Cohorts' heights for one pass: the
    tree's shape does not change during it."""

    def __init__(self, tree, cq: str, heights: dict[str, int] | None = None) -> None:
        self._tree, self._cq = tree, cq
        self._node = tree.queues[cq]
        self.in_cohort = self._node.parent is not None
        self._heights = {} if heights is None else heights

    def available(self, fr: tuple[str, str]) -> int:
        # Kueue's ClusterQueueSnapshot.Available: 0 when the queue or its cohort is in debt.
        node = self._node
        if node.parent is None:  # the common case, kept cheap: a standalone queue's every check
            return max(0, node.subtree.get(fr, 0) - node.usage.get(fr, 0))
        return max(0, self._tree.available(self._cq, fr))

    def nominal(self, fr: tuple[str, str]) -> int:
        return self._tree.nominal(self._cq, fr)

    def limits(self, fr: tuple[str, str]) -> tuple[int, int]:
        node = self._node
        if node.parent is None:
            capacity = node.subtree.get(fr, 0)
            return capacity, max(0, capacity - node.usage.get(fr, 0))
        return self._tree.potential_available(self._cq, fr), max(0, self._tree.available(self._cq, fr))

    def borrow_height(self, fr: tuple[str, str], val: int) -> tuple[int, bool]:
        node = self._node
        if node.parent is None:
            return 0, False
        if node.usage.get(fr, 0) + val <= node.subtree.get(fr, 0):
            return 0, True
        remaining = val - node.local_available(fr)
        cohort = node.parent
        while cohort.parent is not None and cohort.usage.get(fr, 0) + remaining > cohort.subtree.get(fr, 0):
            remaining -= cohort.local_available(fr)
            cohort = cohort.parent
        return self._height(cohort), cohort.parent is not None

    def _height(self, cohort) -> int:
        """Kueue's getNodeHeight: the distance from a Cohort to its furthest leaf."""
        height = self._heights.get(cohort.name)
        if height is None:
            height = min(len(cohort.children), 1)
            for child in cohort.children:
                if child.kind == "cohort":
                    height = max(height, self._height(child) + 1)
            self._heights[cohort.name] = height
        return height


class _Attempt:
    """One flavor tried for one resource group of one pod set."""

    def __init__(self) -> None:
        self.mode = Mode.NO_FIT
        self.borrow = 0
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
    """Assign flavors to every pod set of a ClusterQueue without a cohort, against its current
    `usage`. `preemptible` is the part of that usage held by workloads this one may preempt: a
    flavor where preempting them would make room is a Preempt-mode candidate, preferred to one
    where nothing can help."""
    quota = StandaloneQuota(groups, usage)
    return assign(pod_sets, groups, flavors, quota, oracle=preemptible_oracle(quota, preemptible or {}))


def preemptible_oracle(quota: QueueQuota, preemptible: Mapping[tuple[str, str], int]) -> Oracle:
    """Preemption within the ClusterQueue can make room when the workloads it may preempt hold at
    least what is missing."""

    def simulate(fr: tuple[str, str], val: int) -> tuple[Mode, int]:
        missing = val - quota.available(fr)
        return (Mode.PREEMPT if missing <= preemptible.get(fr, 0) else Mode.NO_PREEMPTION_CANDIDATES), 0

    return simulate


def assign(
    pod_sets: Sequence[PodSetRequest],
    groups: Sequence[ResourceGroupQuota],
    flavors: Mapping[str, FlavorInfo],
    quota: QueueQuota,
    rules: FlavorRules | None = None,
    oracle: Oracle | None = None,
) -> Assignment:
    """Assign flavors to every pod set against a ClusterQueue's `quota`, choosing among flavors by
    its `rules` (None: Kueue's defaults). `oracle` says whether preemption could make room in a
    flavor (None: it cannot)."""
    rules = rules or DEFAULT_RULES
    with_pods = covers_pods(groups)
    assumed: Usage = {}
    out: list[PodSetAssignment] = []
    messages: list[str] = []
    worst = Mode.FIT
    borrowing = 0
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
            chosen, mode, borrow, attempt_reasons, group_reason = _find_flavor(
                ps, group, group_requests, flavors, quota, assumed, rules, oracle
            )
            reasons.extend(attempt_reasons)
            if chosen is None:
                podset_reason = _most_severe(podset_reason, group_reason)
                failed = True
                break
            for r in group_requests:
                assigned[r] = chosen
            podset_mode = min(podset_mode, mode)
            borrowing = max(borrowing, borrow)
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
        return Assignment(pod_sets=out, mode="Fit", borrowing=borrowing)
    if worst == Mode.NO_FIT:
        return Assignment(pod_sets=out, mode="NoFit", message=message, reason=reason)
    # Fits by quota only if someone else gives it up: by preemption, or else by waiting.
    return Assignment(
        pod_sets=out, mode="Preempt", message=message, reason=REASON_WAITING_FOR_QUOTA,
        preemption_possible=worst >= Mode.PREEMPT, borrowing=borrowing,
    )


class FlavorRules:
    """How a ClusterQueue chooses among flavors: its spec.flavorFungibility (None: the defaults)
    and Kueue's canPreemptWhileBorrowing (borrowWithinCohort, or fair sharing with
    reclaimWithinCohort), without which a request past the nominal quota that does not fit waits
    instead of preempting. Built once per queue and pass."""

    __slots__ = ("borrow_next", "preempt_next", "preemption_first", "preempt_while_borrowing")

    def __init__(self, fungibility=None, preempt_while_borrowing: bool = False) -> None:
        self.borrow_next = fungibility is not None and fungibility.when_can_borrow == TRY_NEXT_FLAVOR
        self.preempt_next = fungibility is None or fungibility.when_can_preempt == TRY_NEXT_FLAVOR
        self.preemption_first = fungibility is not None and fungibility.preference == PREEMPTION_OVER_BORROWING
        self.preempt_while_borrowing = preempt_while_borrowing

    def try_next(self, mode: Mode, borrow: int) -> bool:
        """Kueue's shouldTryNextFlavor."""
        if mode in (Mode.NO_FIT, Mode.NO_PREEMPTION_CANDIDATES):
            return True
        if mode in (Mode.PREEMPT, Mode.RECLAIM) and self.preempt_next:
            return True
        return borrow > 0 and self.borrow_next

    def preferred(self, a: tuple[Mode, float], b: tuple[Mode, float]) -> bool:
        """Kueue's isPreferred over (mode, borrowing height): whether `a` is better than `b`."""
        if a[0] == Mode.NO_FIT:
            return False
        if b[0] == Mode.NO_FIT:
            return True
        a_stuck, b_stuck = a[0] == Mode.NO_PREEMPTION_CANDIDATES, b[0] == Mode.NO_PREEMPTION_CANDIDATES
        if a_stuck != b_stuck:
            return not a_stuck
        if self.preemption_first:
            return a[1] < b[1] if a[1] != b[1] else a[0] > b[0]
        return a[0] > b[0] if a[0] != b[0] else a[1] < b[1]


DEFAULT_RULES = FlavorRules()

# A flavor before any of its resources is checked: whatever the first one gives replaces it.
_FITS: tuple[Mode, float] = (Mode.FIT, 0)


def _find_flavor(
    ps: PodSetRequest,
    group: ResourceGroupQuota,
    requests: Mapping[str, int],
    flavors: Mapping[str, FlavorInfo],
    quota: QueueQuota,
    assumed: Mapping[tuple[str, str], int],
    rules: FlavorRules,
    oracle: Oracle | None,
) -> tuple[str | None, Mode, int, list[str], str]:
    """Try the group's flavors in order: (chosen flavor, its mode, its borrowing height, every
    reason seen, no-fit reason). A flavor the fungibility rules stop at ends the search; otherwise
    the preferred one wins, the first of equals."""
    reasons: list[str] = []
    best: str | None = None
    best_mode: tuple[Mode, float] = (Mode.NO_FIT, math.inf)
    attempt_reasons: list[str] = []
    for fq in group.flavors:
        attempt = _try_flavor(ps, fq, requests, flavors.get(fq.name), quota, assumed, rules, oracle)
        reasons.extend(attempt.reasons)
        attempt_reasons.append(attempt.no_fit_reason)
        if attempt.mode == Mode.NO_FIT:
            continue  # never preferred, always passed over
        mode = (attempt.mode, attempt.borrow)
        if attempt.mode == Mode.NO_PREEMPTION_CANDIDATES and best is None:
            best, best_mode = fq.name, mode  # better than nothing; the search goes on
            continue
        if (attempt.mode == Mode.FIT and not attempt.borrow) or not rules.try_next(attempt.mode, attempt.borrow):
            best, best_mode = fq.name, mode
            break
        if rules.preferred(mode, best_mode):
            best, best_mode = fq.name, mode
    if best_mode[0] == Mode.FIT:
        # Kueue reports nothing for a group that found a flavor, whatever failed before it.
        return best, Mode.FIT, int(best_mode[1]), [], ""
    # The group fails for the least severe reason among its flavors: one flavor that merely lacks
    # free quota makes the group "waiting", not "impossible".
    group_reason = min(attempt_reasons, key=lambda r: _SEVERITY.get(r, 0)) if attempt_reasons else ""
    if best is None and not attempt_reasons:
        group_reason = REASON_NO_MATCHING_FLAVOR
    borrow = 0 if best is None else int(best_mode[1])
    return best, best_mode[0], borrow, reasons, group_reason


def _try_flavor(
    ps: PodSetRequest,
    fq: FlavorQuota,
    requests: Mapping[str, int],
    info: FlavorInfo | None,
    quota: QueueQuota,
    assumed: Mapping[tuple[str, str], int],
    rules: FlavorRules,
    oracle: Oracle | None,
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
    mode: tuple[Mode, float] = _FITS
    for res in sorted(requests):
        fr = (fq.name, res)
        request = requests[res]
        before = assumed.get(fr, 0)
        wanted = before + request
        # Kueue's fitsResourceQuota.
        capacity, available = quota.limits(fr)
        if wanted > capacity:
            attempt.reasons.append(
                f"insufficient quota for {res} in flavor {fq.name}, previously considered podsets requests "
                f"({format_resource(res, before)}) + current podset request ({format_resource(res, request)}) "
                f"> maximum capacity ({format_resource(res, capacity)})"
            )
            attempt.no_fit_reason = REASON_EXCEEDS_MAX_QUOTA
            return attempt
        height, may_reclaim = quota.borrow_height(fr, wanted) if quota.in_cohort else (0, False)
        resource_mode: tuple[Mode, float]
        if wanted <= available:
            resource_mode = (Mode.FIT, height)
        else:
            attempt.reasons.append(
                f"insufficient unused quota for {res} in flavor {fq.name}, "
                f"{format_resource(res, wanted - available)} more needed"
            )
            # (A queue without a cohort can never want more than its nominal quota here.)
            if quota.in_cohort and not (quota.nominal(fr) >= wanted or may_reclaim or rules.preempt_while_borrowing):
                # Past its nominal quota, with nobody it may preempt to borrow: it waits.
                attempt.no_fit_reason = REASON_WAITING_FOR_QUOTA
                return attempt
            if oracle is None:
                resource_mode = (Mode.NO_PREEMPTION_CANDIDATES, height)
            else:
                resource_mode = oracle(fr, wanted)
        if mode is _FITS or (resource_mode != mode and rules.preferred(mode, resource_mode)):
            mode = resource_mode  # the worst resource makes the flavor's mode
    attempt.mode, attempt.borrow = mode[0], int(mode[1])
    return attempt


def _most_severe(a: str, b: str) -> str:
    return a if _SEVERITY.get(a, 0) >= _SEVERITY.get(b, 0) else b
