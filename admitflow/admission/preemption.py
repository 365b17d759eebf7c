"""Preemption at reservation time, as Kueue's preemptor does it: within a ClusterQueue, across its
cohort tree, and by fair sharing.

Kueue's `pkg/scheduler/preemption/` (preemption.go, classical_strategy.go, fair_strategy.go,
classical/, fairsharing/, common/). Who may be preempted:

- in the preemptor's own ClusterQueue, per `spec.preemption.withinClusterQueue` (`Never`,
  `LowerPriority`, `LowerOrNewerEqualPriority`: also equal priority that entered the queue later);
- in the other ClusterQueues of its cohort tree that use more than their nominal quota in a
  flavor and resource the preemptor needs, per `reclaimWithinCohort` (`Never`, `LowerPriority`,
  `Any`). Classically, a candidate over which the preemptor has a hierarchical advantage (the
  preemptor's quota, or a Cohort's on its path, holds the request, and the candidate borrows it
  from there) may be preempted whatever the borrowing; another may be preempted while the
  preemptor borrows only per `borrowWithinCohort` (`LowerPriority` below `maxPriorityThreshold`),
  and then for `InCohortReclaimWhileBorrowing`. With fair sharing, ClusterQueues are taken from the
  highest dominant resource share down and a candidate goes only if the strategies allow it.

Candidates are taken in Kueue's order (already being evicted first, other ClusterQueues before the
preemptor's own, lower priority, most recently reserved, uid) and removed from the quota tree
until the preemptor fits; then every one that is not needed after all is given back, so the fewest
and lowest-priority workloads are preempted. A workload being evicted still holds its quota until
it leaves, so it counts as usage and is simply the cheapest candidate.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import NamedTuple

from admitflow.admission.cluster_queue import Reservation
from admitflow.admission.fair_sharing import (
    Share,
    Strategy,
    apply_weights,
    compare,
    dominant_resource_share,
    less_than_initial_share,
    parse_strategies,
    restore_weights,
)
from admitflow.admission.flavor_assignment import Assignment, Usage
from admitflow.admission.pending_queue import QueueEntry
from admitflow.admission.quota_tree import FlavorResource, Node, QuotaTree
from admitflow.api import ClusterQueueSpec

REASON_IN_CLUSTER_QUEUE = "InClusterQueue"
REASON_IN_COHORT_RECLAMATION = "InCohortReclamation"
REASON_IN_COHORT_FAIR_SHARING = "InCohortFairSharing"
REASON_IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"
HUMAN_REASONS = {
    REASON_IN_CLUSTER_QUEUE: "prioritization in the ClusterQueue",
    REASON_IN_COHORT_RECLAMATION: "reclamation within the cohort",
    REASON_IN_COHORT_FAIR_SHARING: "Fair Sharing within the cohort",
    REASON_IN_COHORT_RECLAIM_WHILE_BORROWING: "reclamation within the cohort while borrowing",
    "": "UNKNOWN",
}


class Target(NamedTuple):
    reservation: Reservation  # the victim
    cluster_queue: str  # the victim's ClusterQueue
    reason: str  # InClusterQueue | InCohortReclamation | InCohortFairSharing | InCohortReclaimWhileBorrowing


def may_preempt(policy: str | None, preemptor: QueueEntry, candidate) -> bool:
    """Whether `policy` lets `preemptor` preempt `candidate` (a Reservation)."""
    if policy == "Any":
        return True
    if policy == "LowerPriority":
        return candidate.priority < preemptor.priority
    if policy == "LowerOrNewerEqualPriority":
        return candidate.priority < preemptor.priority or (
            candidate.priority == preemptor.priority and preemptor.timestamp < candidate.timestamp
        )
    return False


def _order_key(r, other_queue: bool, now: datetime | None = None) -> tuple:
    # Kueue's CandidatesOrdering: being evicted first, other ClusterQueues first, lower priority,
    # more recently reserved, then uid.
    reserved = getattr(r, "reserved_at", None) or now
    return (not r.evicting, not other_queue, r.priority, -reserved.timestamp(), r.uid)


def candidates(policy: str | None, preemptor: QueueEntry, reservations: Iterable) -> list:
    """Who may be preempted within one ClusterQueue, in the order Kueue considers them."""
    eligible = [r for r in reservations if r.key != preemptor.key and may_preempt(policy, preemptor, r)]
    return sorted(eligible, key=lambda r: _order_key(r, False))


def preemptible_usage(cands: Iterable) -> Usage:
    out: Usage = {}
    for r in cands:
        for fr, v in r.assignment.usage().items():
            out[fr] = out.get(fr, 0) + v
    return out


def cohort_path(tree: QuotaTree, cq: str) -> str:
    """The ClusterQueue's path in its cohort tree, root first: `/root/child/cq`; `/cq` standalone."""
    node = tree.queues.get(cq)
    names = [cq] if node is None else [n.name for n in reversed(node.path())]
    return "/" + "/".join(names)


def preemption_message(
    preemptor: QueueEntry, preemptor_path: str, preemptee_path: str | None = None, reason: str = REASON_IN_CLUSTER_QUEUE
) -> str:
    """Kueue's message on a victim's Evicted and Preempted conditions. A Workload applied directly
    has no owning Job, hence JobUID UNKNOWN. Paths come from `cohort_path`; a bare ClusterQueue
    name is taken as a standalone queue's path, and the preemptee's defaults to the preemptor's."""
    preemptor_path = _as_path(preemptor_path)
    preemptee_path = preemptor_path if preemptee_path is None else _as_path(preemptee_path)
    return (
        f"Preempted to accommodate a workload (UID: {preemptor.uid or 'UNKNOWN'}, JobUID: UNKNOWN) due to "
        f"{HUMAN_REASONS.get(reason, HUMAN_REASONS[''])}; preemptor path: {preemptor_path}; preemptee path: {preemptee_path}"
    )


def _as_path(path: str) -> str:
    if not path:
        return "UNKNOWN"
    return path if path.startswith("/") else f"/{path}"


# --- across a cohort tree -------------------------------------------------------------------------


def get_targets(
    preemptor: QueueEntry,
    preemptor_cq: str,
    assignment: Assignment,
    tree: QuotaTree,
    specs: Mapping[str, ClusterQueueSpec],
    reservations: Mapping[str, Iterable[Reservation]],
    fair_sharing: list[str] | None,
    now: datetime,
    *,
    frs_need_preemption: Collection[FlavorResource] | None = None,
) -> list[Target]:
    """The fewest workloads to preempt so that `assignment` (Preempt mode) fits in preemptor_cq,
    as Kueue's classical preemptor (or its fair-sharing preemptor when fair_sharing is not None)
    picks them; [] when no set of allowed victims makes it fit. `tree` holds the current usage of
    every member (every reservation, evicting ones included); it must be left unchanged on return.
    A ClusterQueue's reservations may also come as its state's mapping by workload key.

    The flavors and resources that need preemption (Kueue's Preempt mode per resource) are those
    the assignment asks more of than is available, unless `frs_need_preemption` names them. `now`
    stands in for a reservation time a candidate lacks (Kueue's quotaReservationTime)."""
    spec = specs.get(preemptor_cq)
    if spec is None or preemptor_cq not in tree.queues:
        return []
    requests = assignment.usage()
    if frs_need_preemption is None:
        frs_need_preemption = [fr for fr, v in requests.items() if v > tree.available(preemptor_cq, fr)]
    if not frs_need_preemption:
        return []
    ctx = _Context(
        preemptor=preemptor,
        cq=preemptor_cq,
        node=tree.queues[preemptor_cq],
        tree=tree,
        spec=spec,
        reservations={name: list(rs.values() if isinstance(rs, Mapping) else rs) for name, rs in reservations.items()},
        requests=requests,
        frs=frozenset(frs_need_preemption),
        now=now,
    )
    if fair_sharing is None:
        chosen = _first_fit(ctx, _classical(ctx))
    else:
        weights = apply_weights(tree, specs)
        try:
            chosen = _first_fit(ctx, _fair(ctx, fair_sharing))
        finally:
            restore_weights(tree, weights)
    return [Target(c.reservation, c.cluster_queue, c.reason) for c in chosen]


@dataclass
class _Context:
    preemptor: QueueEntry
    cq: str
    node: Node
    tree: QuotaTree
    spec: ClusterQueueSpec
    reservations: dict[str, list[Reservation]]
    requests: Usage
    frs: frozenset[FlavorResource]
    now: datetime

    @property
    def within_cluster_queue(self) -> str:
        return self.spec.preemption.within_cluster_queue if self.spec.preemption else "Never"

    @property
    def reclaim_within_cohort(self) -> str:
        return self.spec.preemption.reclaim_within_cohort if self.spec.preemption else "Never"

    def borrow_within_cohort(self) -> tuple[bool, int | None]:
        """(allowed, maxPriorityThreshold) of borrowWithinCohort."""
        p = self.spec.preemption
        bwc = p.borrow_within_cohort if p else None
        if bwc is None or bwc.policy == "Never":
            return False, None
        return True, bwc.max_priority_threshold


@dataclass
class _Candidate:
    reservation: Reservation
    cluster_queue: str
    usage: Usage
    reason: str = ""
    # Classical preemption: the Cohort up to which the candidate's ClusterQueue must keep borrowing
    # for it to stay a candidate, and whether it may go only if the preemptor then does not borrow.
    lca: Node | None = None
    without_borrowing: bool = False
    key: tuple = field(default=())


# (allow borrowing, the candidates of one run, each removed from the tree before it is yielded)
_Attempt = tuple[bool, Callable[[], Iterator[_Candidate]]]


def _first_fit(ctx: _Context, attempts: Iterable[_Attempt]) -> list[_Candidate]:
    """Kueue's getTargets: per attempt, take candidates until the preemptor fits, then give back
    the ones not needed; the tree is restored whatever the outcome."""
    for allow_borrowing, run in attempts:
        taken: list[_Candidate] = []
        found = run()
        try:
            for c in found:
                taken.append(c)
                if _fits(ctx, allow_borrowing):
                    taken = _give_back(ctx, taken, allow_borrowing)
                    _restore(ctx, taken)
                    return taken
        finally:
            found.close()
        _restore(ctx, taken)
    return []


def _fits(ctx: _Context, allow_borrowing: bool) -> bool:
    for fr, v in ctx.requests.items():
        if not allow_borrowing and ctx.tree.borrowing_with(ctx.cq, fr, v):
            return False
        if v > ctx.tree.available(ctx.cq, fr):
            return False
    return True


def _give_back(ctx: _Context, taken: list[_Candidate], allow_borrowing: bool) -> list[_Candidate]:
    """Add back, last taken first (the last one is needed), every victim the preemptor fits without."""
    kept = list(taken)
    for c in reversed(taken[:-1]):
        ctx.tree.add(c.cluster_queue, c.usage)
        if _fits(ctx, allow_borrowing):
            kept.remove(c)
        else:
            ctx.tree.remove(c.cluster_queue, c.usage)
    return kept


def _restore(ctx: _Context, taken: Iterable[_Candidate]) -> None:
    for c in taken:
        ctx.tree.add(c.cluster_queue, c.usage)


def _candidates_of(ctx: _Context, cq: str, policy: str) -> list[_Candidate]:
    """The reservations of `cq` that `policy` lets the preemptor preempt and that hold some of what
    it needs (Kueue's WorkloadUsesResources)."""
    out = []
    for r in ctx.reservations.get(cq, ()):
        if r.key == ctx.preemptor.key or not may_preempt(policy, ctx.preemptor, r):
            continue
        usage = r.assignment.usage()
        if not any(fr in ctx.frs for fr in usage):
            continue
        out.append(_Candidate(reservation=r, cluster_queue=cq, usage=usage, key=_order_key(r, cq != ctx.cq, ctx.now)))
    return out


def _within_nominal(node: Node, frs: Iterable[FlavorResource]) -> bool:
    """Kueue's IsWithinNominalInResources: the node uses at most its subtree quota in each."""
    return all(node.usage.get(fr, 0) <= node.subtree.get(fr, 0) for fr in frs)


def _sorted(cands: list[_Candidate]) -> list[_Candidate]:
    return sorted(cands, key=lambda c: c.key)


# --- classical (classical_strategy.go, classical/) ------------------------------------------------


def _classical(ctx: _Context) -> list[_Attempt]:
    same = _sorted(
        []
        if ctx.within_cluster_queue == "Never"
        else [_with_reason(c, REASON_IN_CLUSTER_QUEUE) for c in _candidates_of(ctx, ctx.cq, ctx.within_cluster_queue)]
    )
    hierarchy, priority = (_sorted(cands) for cands in _cohort_candidates(ctx))
    # Already being evicted first, then hierarchy, priority and own-queue candidates.
    ordered = [c for group in (hierarchy, priority, same) for c in group if c.reservation.evicting] + [
        c for group in (hierarchy, priority, same) for c in group if not c.reservation.evicting
    ]
    forbidden = not ctx.borrow_within_cohort()[0]
    under_nominal = all(ctx.tree.usage(ctx.cq).get(fr, 0) < ctx.tree.nominal(ctx.cq, fr) for fr in ctx.frs)
    # A priority candidate above the borrowing threshold may go only if the preemptor then does not
    # borrow, so a run without borrowing is tried too; Kueue's order of the two runs is kept.
    if not (hierarchy or priority) or (forbidden and not under_nominal):
        runs = [True]
    elif forbidden and not hierarchy:
        runs = [False, True]
    else:
        runs = [True, False]
    return [(borrowing, partial(_classical_run, ctx, ordered, borrowing)) for borrowing in runs]


def _classical_run(ctx: _Context, ordered: list[_Candidate], borrowing: bool) -> Iterator[_Candidate]:
    for c in ordered:
        if _still_candidate(ctx, c, borrowing):
            ctx.tree.remove(c.cluster_queue, c.usage)
            yield c


def _still_candidate(ctx: _Context, c: _Candidate, borrowing: bool) -> bool:
    """Kueue's candidateIsValid: a candidate of another ClusterQueue stays one while it, and every
    Cohort between it and the one it shares with the preemptor, still borrows (earlier victims may
    have ended that)."""
    if c.cluster_queue == ctx.cq:
        return True
    if borrowing and c.without_borrowing:
        return False
    node = ctx.tree.queues[c.cluster_queue]
    if _within_nominal(node, ctx.frs):
        return False
    for ancestor in node.path()[1:]:
        if ancestor is c.lca:
            break
        if _within_nominal(ancestor, ctx.frs):
            return False
    return True


def _cohort_candidates(ctx: _Context) -> tuple[list[_Candidate], list[_Candidate]]:
    """Kueue's collectCandidatesForHierarchicalReclaim: walking up from the preemptor, the
    candidates of each sibling subtree that borrows, with the Cohort shared with the preemptor as
    their LCA. Once the preemptor's request fits in the quota of its ClusterQueue or of a Cohort
    on its path, it has a hierarchical advantage over whatever borrows from there: (hierarchy
    candidates, priority candidates)."""
    hierarchy: list[_Candidate] = []
    priority: list[_Candidate] = []
    if ctx.node.parent is None or ctx.reclaim_within_cohort == "Never":
        return hierarchy, priority
    advantage, remaining = _fits_in_quota(ctx.node, ctx.requests)
    previous = None
    for subtree in ctx.node.path()[1:]:
        _collect(ctx, subtree, subtree, previous, advantage, hierarchy if advantage else priority)
        fits, remaining = _fits_in_quota(subtree, remaining)
        advantage = advantage or fits
        previous = subtree
    return hierarchy, priority


def _collect(ctx: _Context, cohort: Node, lca: Node, skip: Node | None, advantage: bool, out: list[_Candidate]) -> None:
    for child in cohort.children:
        if child.kind == "cohort" and child is not skip and not _within_nominal(child, ctx.frs):
            _collect(ctx, child, lca, skip, advantage, out)
    for child in cohort.children:
        if child.kind == "cq" and child is not ctx.node and not _within_nominal(child, ctx.frs):
            out.extend(_classified(ctx, c, lca, advantage) for c in _candidates_of(ctx, child.name, ctx.reclaim_within_cohort))


def _classified(ctx: _Context, c: _Candidate, lca: Node, advantage: bool) -> _Candidate:
    """Kueue's classifyPreemptionVariant for a candidate of another ClusterQueue."""
    c.lca = lca
    if advantage:
        return _with_reason(c, REASON_IN_COHORT_RECLAMATION)
    allowed, threshold = ctx.borrow_within_cohort()
    priority, incoming = c.reservation.priority, ctx.preemptor.priority
    if not allowed or priority >= incoming or (threshold is not None and priority > threshold):
        c.without_borrowing = True
        return _with_reason(c, REASON_IN_COHORT_RECLAMATION)
    return _with_reason(c, REASON_IN_COHORT_RECLAIM_WHILE_BORROWING)


def _with_reason(c: _Candidate, reason: str) -> _Candidate:
    c.reason = reason
    return c


def _fits_in_quota(node: Node, requests: Mapping[FlavorResource, int]) -> tuple[bool, dict[FlavorResource, int]]:
    """Kueue's QuantitiesFitInQuota: whether `requests` fit in the node's subtree quota, and what
    of them its guaranteed quota cannot hold (for its parent to check)."""
    fits = all(node.usage.get(fr, 0) + v <= node.subtree.get(fr, 0) for fr, v in requests.items())
    return fits, {fr: max(0, v - node.local_available(fr)) for fr, v in requests.items()}


# --- fair sharing (fair_strategy.go, fairsharing/) ------------------------------------------------


def _fair(ctx: _Context, strategy_names: list[str]) -> list[_Attempt]:
    cands = _sorted(_fair_candidates(ctx))
    if not cands:
        return []
    return [(True, partial(_fair_run, ctx, cands, parse_strategies(strategy_names)))]


def _fair_candidates(ctx: _Context) -> list[_Candidate]:
    """Kueue's findCandidates: the preemptor's own per withinClusterQueue, and per
    reclaimWithinCohort those of every ClusterQueue of the tree that borrows in what it needs."""
    out = []
    if ctx.within_cluster_queue != "Never":
        out.extend(_candidates_of(ctx, ctx.cq, ctx.within_cluster_queue))
    if ctx.node.parent is not None and ctx.reclaim_within_cohort != "Never":
        for node in _queues_under(ctx.node.path()[-1]):
            if node is not ctx.node and not _within_nominal(node, ctx.frs):
                out.extend(_candidates_of(ctx, node.name, ctx.reclaim_within_cohort))
    return out


def _queues_under(node: Node) -> Iterator[Node]:
    for child in node.children:
        if child.kind == "cq":
            yield child
        else:
            yield from _queues_under(child)


def _fair_run(ctx: _Context, cands: list[_Candidate], strategies: list[Strategy]) -> Iterator[_Candidate]:
    # The shares count the preemptor's workload as admitted; the fit checks between candidates do not.
    ctx.tree.add(ctx.cq, ctx.requests)
    try:
        retry = yield from _first_strategy(ctx, cands, strategies[0])
        if len(strategies) > 1:
            yield from _second_strategy(ctx, retry)
    finally:
        ctx.tree.remove(ctx.cq, ctx.requests)


def _yield_victim(ctx: _Context, c: _Candidate, reason: str) -> Iterator[_Candidate]:
    c.reason = reason
    ctx.tree.remove(c.cluster_queue, c.usage)
    ctx.tree.remove(ctx.cq, ctx.requests)
    try:
        yield c
    finally:
        ctx.tree.add(ctx.cq, ctx.requests)


def _first_strategy(ctx: _Context, cands: list[_Candidate], strategy: Strategy):
    """Kueue's iterateWithFirstFsStrategy; returns the candidates the strategy refused, for S2-b."""
    ordering = _TargetOrdering(ctx, cands)
    # A preemptor within its nominal quota in what it needs takes it back whatever the shares
    # (FairSharingPreemptWithinNominal).
    within_nominal = not any(ctx.tree.borrowing_with(ctx.cq, fr, 0) for fr in ctx.frs)
    retry: list[_Candidate] = []
    for target in ordering.targets():
        if target == ctx.cq:
            yield from _yield_victim(ctx, ordering.pop(target), REASON_IN_CLUSTER_QUEUE)
            continue
        if within_nominal:
            yield from _yield_victim(ctx, ordering.pop(target), REASON_IN_COHORT_RECLAMATION)
            continue
        preemptor_new, target_old = ordering.shares(target)
        while ordering.has_candidate(target):
            c = ordering.pop(target)
            if strategy(preemptor_new, target_old, ordering.share_without(target, c)):
                yield from _yield_victim(ctx, c, REASON_IN_COHORT_FAIR_SHARING)
                # The shares changed: the next target may be another ClusterQueue.
                break
            retry.append(c)
    return retry


def _second_strategy(ctx: _Context, retry: list[_Candidate]):
    """Kueue's iterateWithSecondFsStrategy (rule S2-b): at most one victim per ClusterQueue."""
    ordering = _TargetOrdering(ctx, retry)
    for target in ordering.targets():
        preemptor_new, target_old = ordering.shares(target)
        c = ordering.pop(target)
        if less_than_initial_share(preemptor_new, target_old, target_old):
            yield from _yield_victim(ctx, c, REASON_IN_COHORT_FAIR_SHARING)
        ordering.drop(target)


class _TargetOrdering:
    """Kueue's TargetClusterQueueOrdering: from the root, descend into the child with the highest
    share among those that may still yield a candidate (a Cohort before a ClusterQueue on a tie; of
    two ClusterQueues, the one whose next candidate comes first); a node that no longer borrows is
    pruned, except on the preemptor's own path. Between two targets a candidate must be popped or
    the queue dropped."""

    def __init__(self, ctx: _Context, cands: list[_Candidate]) -> None:
        self.ctx = ctx
        self.preemptor_ancestors = {n.name for n in ctx.node.path()[1:]}
        self.queues: dict[str, list[_Candidate]] = {}
        for c in cands:
            self.queues.setdefault(c.cluster_queue, []).append(c)
        self.pruned_queues: set[str] = set()
        self.pruned_cohorts: set[str] = set()

    def has_candidate(self, cq: str) -> bool:
        return bool(self.queues.get(cq))

    def pop(self, cq: str) -> _Candidate:
        return self.queues[cq].pop(0)

    def drop(self, cq: str) -> None:
        self.pruned_queues.add(cq)

    def targets(self) -> Iterator[str]:
        if self.ctx.node.parent is None:
            while self.has_candidate(self.ctx.cq):
                yield self.ctx.cq
            return
        root = self.ctx.node.path()[-1]
        while root.name not in self.pruned_cohorts:
            target = self._next(root)
            if target is not None:
                yield target

    def _next(self, cohort: Node) -> str | None:
        best_cq: Node | None = None
        best_cq_share: Share | None = None
        best_cohort: Node | None = None
        best_cohort_share: Share | None = None
        for child in cohort.children:
            if child.kind != "cq" or child.name in self.pruned_queues:
                continue
            share = dominant_resource_share(child)
            if (share.is_zero and child is not self.ctx.node) or not self.has_candidate(child.name):
                self.pruned_queues.add(child.name)
            elif best_cq is None or compare(share, best_cq_share) > 0:
                best_cq, best_cq_share = child, share
            elif compare(share, best_cq_share) == 0 and self._first(child) < self._first(best_cq):
                best_cq = child
        for child in cohort.children:
            if child.kind != "cohort" or child.name in self.pruned_cohorts:
                continue
            share = dominant_resource_share(child)
            if share.is_zero and child.name not in self.preemptor_ancestors:
                self.pruned_cohorts.add(child.name)
            elif best_cohort is None or compare(share, best_cohort_share) >= 0:
                best_cohort, best_cohort_share = child, share
        if best_cohort is None and best_cq is None:
            self.pruned_cohorts.add(cohort.name)
            return None
        if best_cohort is not None and (best_cq is None or compare(best_cohort_share, best_cq_share) >= 0):
            return self._next(best_cohort)
        return best_cq.name

    def _first(self, node: Node) -> tuple:
        return self.queues[node.name][0].key

    def shares(self, target: str) -> tuple[Share, Share]:
        """The shares of the preemptor's and the target's almost-LCAs (the children of their lowest
        common Cohort on each side): (preemptor's with its workload admitted, target's now)."""
        lca = self._lca(target)
        return (
            dominant_resource_share(_below(self.ctx.node, lca)),
            dominant_resource_share(_below(self.ctx.tree.queues[target], lca)),
        )

    def share_without(self, target: str, c: _Candidate) -> Share:
        """The target's almost-LCA share once `c` is gone."""
        lca = self._lca(target)
        self.ctx.tree.remove(c.cluster_queue, c.usage)
        try:
            return dominant_resource_share(_below(self.ctx.tree.queues[target], lca))
        finally:
            self.ctx.tree.add(c.cluster_queue, c.usage)

    def _lca(self, target: str) -> Node:
        for ancestor in self.ctx.tree.queues[target].path()[1:]:
            if ancestor.name in self.preemptor_ancestors:
                return ancestor
        raise ValueError(f"{target} is not in the preemptor's cohort tree")


def _below(node: Node, ancestor: Node) -> Node:
    """The node on `node`'s path whose parent is `ancestor`."""
    for n in node.path():
        if n.parent is ancestor:
            return n
    raise ValueError(f"{ancestor.name} is not above {node.name}")
