"""Fair sharing: how much of its cohort's lendable quota each node borrows, weighted.

Kueue's `pkg/cache/scheduler/fair_sharing.go`, `pkg/scheduler/fair_sharing_iterator.go` and
`pkg/scheduler/preemption/fairsharing/strategy.go`, over the `QuotaTree` of one scheduling entity.

A node's dominant resource share (DRS) is, over the resources it borrows (usage past its subtree
quota, summed over flavors per resource), the largest `borrowed * 1000 / lendable`, where
`lendable` is what its parent could ever give it, summed over the flavors of that resource; the
share is divided by the node's `spec.fairSharing.weight`. A node with no parent never borrows; a
node that borrows with a weight of 0 ranks above every node that does not (an infinite share).
`status.fairSharing.weightedShare` is that share rounded up.

When fair sharing is on, the workloads at the heads of a cohort tree's ClusterQueues are taken in a
tournament: at each Cohort, the child whose share after admitting its nominee is lowest wins.

Shares are read from the tree's nodes: a Cohort's weight comes with the tree, a ClusterQueue's is
set from its spec by `apply_weights` once the tree is built for a pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from admitflow.admission.flavor_assignment import Usage
from admitflow.admission.quota_tree import FlavorResource, Node, QuotaTree, _potential_available
from admitflow.api import ClusterQueueSpec
from admitflow.api.quantity import parse_quantity

# What Kueue writes as weightedShare for a node that borrows with a weight of 0 (math.MaxInt64).
INFINITE_WEIGHTED_SHARE = 2**63 - 1

LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"


@dataclass(frozen=True)
class Share:
    """One node's DRS (Kueue's DRS): `ratio` is the unweighted per-mille of the dominant resource
    `resource`; `borrowing` holds every (flavor, resource) the node uses past its subtree quota,
    lendable or not."""

    weight: float = 1.0
    ratio: float = 0.0
    resource: str = ""
    borrowing: frozenset[FlavorResource] = frozenset()

    @property
    def is_zero(self) -> bool:
        return self.ratio == 0

    @property
    def zero_weight_borrows(self) -> bool:
        return self.weight == 0 and bool(self.borrowing)

    @property
    def precise(self) -> float:
        if self.is_zero:
            return 0.0
        if self.weight == 0:
            return math.inf
        return self.ratio / self.weight

    @property
    def rounded(self) -> int:
        """status.fairSharing.weightedShare."""
        if self.zero_weight_borrows:
            return INFINITE_WEIGHTED_SHARE
        return math.ceil(self.precise)

    def borrowing_on(self, frs: Iterable[FlavorResource]) -> bool:
        return any(fr in self.borrowing for fr in frs)


def compare(a: Share, b: Share) -> int:
    """Kueue's CompareDRS: negative when `a` is the fairer (preferred for admission), positive
    when `a` should rather be preempted."""
    if a.zero_weight_borrows and b.zero_weight_borrows:
        return _sign(a.ratio - b.ratio)
    if a.zero_weight_borrows:
        return 1
    if b.zero_weight_borrows:
        return -1
    return _sign(a.precise - b.precise)


def dominant_resource_share(node: Node, extra: Mapping[FlavorResource, int] | None = None) -> Share:
    """The node's DRS as its usage stands, plus `extra` on the node itself (a workload it would
    admit)."""
    if node.parent is None:
        return Share(weight=node.weight)
    extra = extra or {}
    borrowed: dict[str, int] = {}
    borrowing: set[FlavorResource] = set()
    for fr, quota in node.subtree.items():
        amount = extra.get(fr, 0) + node.usage.get(fr, 0) - quota
        if amount > 0:
            borrowed[fr[1]] = borrowed.get(fr[1], 0) + amount
            borrowing.add(fr)
    if not borrowed:
        return Share(weight=node.weight)
    lendable = _lendable(node.parent)
    ratio, resource = 0.0, ""
    for name in sorted(borrowed):
        if lendable.get(name, 0) > 0:
            r = borrowed[name] * 1000 / lendable[name]
            if r > ratio:
                ratio, resource = r, name
    return Share(weight=node.weight, ratio=ratio, resource=resource, borrowing=frozenset(borrowing))


def weighted_share(tree: QuotaTree, name: str, kind: str = "cq") -> int | None:
    """What Kueue writes as a ClusterQueue's (`kind` "cq") or a Cohort's ("cohort")
    `status.fairSharing.weightedShare`, with the weights `apply_weights` gave the tree's
    ClusterQueues; None when the tree has no such node. A root Cohort borrows from nobody: 0."""
    node = (tree.queues if kind == "cq" else tree.cohorts).get(name)
    return dominant_resource_share(node).rounded if node is not None else None


def _lendable(node: Node) -> dict[str, int]:
    """What `node` could give a child, per resource over every flavor of the tree."""
    root = node.path()[-1]
    out: dict[str, int] = {}
    for fr in root.subtree:
        out[fr[1]] = out.get(fr[1], 0) + _potential_available(node, fr)
    return out


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


# --- weights -------------------------------------------------------------------------------------


def queue_weight(spec: ClusterQueueSpec) -> float:
    """spec.fairSharing.weight (1 without one)."""
    if spec.fair_sharing is None:
        return 1.0
    return float(parse_quantity(str(spec.fair_sharing.weight)))


def apply_weights(tree: QuotaTree, specs: Mapping[str, ClusterQueueSpec]) -> dict[str, float]:
    """Give the tree's ClusterQueues the weights of their specs (Cohorts get theirs when the tree
    is built); returns the weights they had, for `restore_weights`."""
    before = {}
    for name, node in tree.queues.items():
        before[name] = node.weight
        if name in specs:
            node.weight = queue_weight(specs[name])
    return before


def restore_weights(tree: QuotaTree, weights: Mapping[str, float]) -> None:
    for name, weight in weights.items():
        tree.queues[name].weight = weight


# --- preemption strategies (KEP-1714 rules S2-a and S2-b) -----------------------------------------

Strategy = Callable[[Share, Share, Share], bool]


def less_than_or_equal_to_final_share(preemptor_new: Share, target_old: Share, target_new: Share) -> bool:
    """Rule S2-a: the preemptor's share after admission is at most the target's after preemption."""
    return compare(preemptor_new, target_new) <= 0


def less_than_initial_share(preemptor_new: Share, target_old: Share, target_new: Share) -> bool:
    """Rule S2-b: the preemptor's share after admission is below the target's before preemption."""
    return compare(preemptor_new, target_old) < 0


STRATEGIES: dict[str, Strategy] = {
    LESS_THAN_OR_EQUAL_TO_FINAL_SHARE: less_than_or_equal_to_final_share,
    LESS_THAN_INITIAL_SHARE: less_than_initial_share,
}


def parse_strategies(names: Sequence[str] | None) -> list[Strategy]:
    """The Configuration's fairSharing.preemptionStrategies; none given means both, S2-a first."""
    if not names:
        return [less_than_or_equal_to_final_share, less_than_initial_share]
    return [STRATEGIES[n] for n in names]


# --- admission order: the tournament --------------------------------------------------------------


def fair_order(tree: QuotaTree, candidates: Sequence[tuple[str, Usage]]) -> list[int]:
    """The order in which to consider (ClusterQueue, usage if admitted) candidates, as Kueue's
    fair-sharing iterator pops them: in a cohort, a tournament from the root where at each Cohort
    the child whose DRS after admitting its nominee is lowest wins, a child that would not borrow
    in the flavors its nominee asks for ahead of one that would (FairSharingPrioritizeNonBorrowing);
    a standalone ClusterQueue's candidates come as they are.

    List the candidates in queue order (higher priority, then earlier timestamp): a ClusterQueue's
    nominee is its first remaining candidate, and a tie goes to the candidate listed first, as
    Kueue breaks ties on priority and then FIFO. Trees are taken in the order of their first
    candidate (Kueue's order across trees is arbitrary). The tree is read as it stands: Kueue
    adds each admitted workload's usage before the next pop, so a caller admitting the first
    winner adds its usage and asks again for the rest."""
    queues: dict[str, list[int]] = {}
    for i, (cq, _) in enumerate(candidates):
        queues.setdefault(cq, []).append(i)
    order: list[int] = []
    while queues:
        first = min(q[0] for q in queues.values())
        node = tree.queues[candidates[first][0]]
        if node.parent is None:
            winner = first
        else:
            root = node.path()[-1]
            shares = _tournament_shares(tree, root, candidates, queues)
            winner = _tournament(root, candidates, queues, shares)
        order.append(winner)
        remaining = queues[candidates[winner][0]]
        remaining.pop(0)
        if not remaining:
            del queues[candidates[winner][0]]
    return order


def _tournament_shares(
    tree: QuotaTree, root: Node, candidates: Sequence[tuple[str, Usage]], queues: Mapping[str, list[int]]
) -> dict[tuple[str, int], Share]:
    """For each nominee in the tree, the share it gives each node on its path, with its usage
    added: keyed by (the node's parent Cohort, nominee), as Kueue's entryComparer.computeDRS."""
    shares: dict[tuple[str, int], Share] = {}
    for cq, indices in queues.items():
        node = tree.queues[cq]
        if node.path()[-1] is not root:
            continue
        nominee = indices[0]
        usage = candidates[nominee][1]
        tree.add(cq, usage)
        try:
            share = dominant_resource_share(node)
            for ancestor in node.path()[1:]:
                shares[(ancestor.name, nominee)] = share
                share = dominant_resource_share(ancestor)
        finally:
            tree.remove(cq, usage)
    return shares


def _tournament(
    cohort: Node,
    candidates: Sequence[tuple[str, Usage]],
    queues: Mapping[str, list[int]],
    shares: Mapping[tuple[str, int], Share],
) -> int | None:
    entrants = []
    for child in cohort.children:
        if child.kind == "cohort":
            nominee = _tournament(child, candidates, queues, shares)
            if nominee is not None:
                entrants.append(nominee)
    for child in cohort.children:
        if child.kind == "cq" and child.name in queues:
            entrants.append(queues[child.name][0])
    if not entrants:
        return None
    best = entrants[0]
    for current in entrants[1:]:
        if _fairer(current, best, cohort.name, candidates, shares):
            best = current
    return best


def _fairer(
    a: int, b: int, parent: str, candidates: Sequence[tuple[str, Usage]], shares: Mapping[tuple[str, int], Share]
) -> bool:
    share_a, share_b = shares[(parent, a)], shares[(parent, b)]
    borrows_a = share_a.borrowing_on(candidates[a][1])
    borrows_b = share_b.borrowing_on(candidates[b][1])
    if borrows_a != borrows_b:
        return not borrows_a
    by_share = compare(share_a, share_b)
    if by_share:
        return by_share < 0
    return a < b
