"""Quota shared along a cohort tree: how much each ClusterQueue may still use, borrowing included.

Kueue's model (`pkg/cache/resource_node.go`), node for node. Every ClusterQueue and every Cohort is
a node holding, per (flavor, resource):

- its own quotas: `nominal`, and optionally `borrowingLimit` and `lendingLimit`;
- its subtree quota: a ClusterQueue's nominal; a Cohort's own nominal plus, from each child, the
  child's subtree quota less what the child keeps for itself (its guaranteed quota);
- its usage: a ClusterQueue's reserved usage; a Cohort's sum of its children's usage past their
  guaranteed quota.

A node's guaranteed quota is `max(0, subtree - lendingLimit)` (0 without a lendingLimit): only the
lent part is visible to its parent. A standalone ClusterQueue is a tree of one, whose available
quota is simply nominal less usage.

The tree is built for a pass from the members' quotas and the cohorts' specs, then usage is added
and removed as the pass reserves and preempts. It is plain Python, never carried in a workflow's
state: the state holds the reservations, the tree is derived from them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pydantic import ConfigDict, Field

from admitflow.wire import WireModel

from admitflow.admission.flavor_assignment import ResourceGroupQuota, Usage

FlavorResource = tuple[str, str]

# Kueue's ErrCohortHasCycle, as the Cohort's and its ClusterQueues' conditions say it.
CYCLE_MESSAGE = "Cohort has a cycle"


class CohortInfo(WireModel):
    """What a pass needs of one Cohort of the tree. A Cohort named by a ClusterQueue or another
    Cohort but never created exists implicitly, with no quota of its own (`explicit` False)."""

    model_config = ConfigDict(frozen=True)

    name: str
    parent: str | None = Field(default=None, description="Its parentName; None at the root.")
    groups: tuple[ResourceGroupQuota, ...] = Field(default=(), description="Its own spec.resourceGroups.")
    weight: float = Field(default=1.0, description="spec.fairSharing.weight.")
    explicit: bool = Field(default=False, description="A Cohort object exists (else only named).")


class CohortTree(WireModel):
    """Every Cohort of one tree, as the catalog resolved it; the ClusterQueues are the members the
    scheduling entity holds. `root` names the entity: `cohort/<root>`."""

    model_config = ConfigDict(frozen=True)

    root: str
    cohorts: dict[str, CohortInfo] = Field(default_factory=dict)


class _Quota:
    __slots__ = ("nominal", "borrowing_limit", "lending_limit")

    def __init__(self, nominal: int = 0, borrowing_limit: int | None = None, lending_limit: int | None = None):
        self.nominal = nominal
        self.borrowing_limit = borrowing_limit
        self.lending_limit = lending_limit


class Node:
    """One ClusterQueue (`kind` "cq") or Cohort ("cohort") of the tree."""

    def __init__(self, kind: str, name: str, groups: Iterable[ResourceGroupQuota], weight: float = 1.0) -> None:
        self.kind = kind
        self.name = name
        # spec.fairSharing.weight: a Cohort's from its CohortInfo, a ClusterQueue's set by
        # fair_sharing.apply_weights (the members here carry only quotas).
        self.weight = weight
        self.parent: Node | None = None
        self.children: list[Node] = []
        self.quotas: dict[FlavorResource, _Quota] = {}
        for g in groups:
            for fq in g.flavors:
                for res, v in fq.nominal.items():
                    self.quotas[(fq.name, res)] = _Quota(v, fq.borrowing_limit.get(res), fq.lending_limit.get(res))
        self.subtree: dict[FlavorResource, int] = {}
        self.usage: dict[FlavorResource, int] = {}

    def guaranteed(self, fr: FlavorResource) -> int:
        q = self.quotas.get(fr)
        if q is None or q.lending_limit is None:
            return 0
        return max(0, self.subtree.get(fr, 0) - q.lending_limit)

    def local_available(self, fr: FlavorResource) -> int:
        return max(0, self.guaranteed(fr) - self.usage.get(fr, 0))

    def borrowing_limit(self, fr: FlavorResource) -> int | None:
        q = self.quotas.get(fr)
        return None if q is None else q.borrowing_limit

    def path(self) -> list[Node]:
        """This node and its ancestors, up to the root."""
        out, node = [], self
        while node is not None:
            out.append(node)
            node = node.parent
        return out


class QuotaTree:
    """The tree of one scheduling entity. `members` maps each ClusterQueue it holds to its resource
    groups and cohort name (None: standalone); `tree` is the cohorts' tree (None when every member
    is standalone). A member whose cohort is not in `tree` is treated as standalone."""

    def __init__(
        self,
        members: Mapping[str, tuple[Iterable[ResourceGroupQuota], str | None]],
        tree: CohortTree | None = None,
    ) -> None:
        self.cohorts: dict[str, Node] = {}
        cohort_infos = tree.cohorts if tree is not None else {}
        for info in cohort_infos.values():
            self.cohorts[info.name] = Node("cohort", info.name, info.groups, info.weight)
        for info in cohort_infos.values():
            if info.parent is not None and info.parent in self.cohorts:
                node, parent = self.cohorts[info.name], self.cohorts[info.parent]
                node.parent = parent
                parent.children.append(node)
        self.queues: dict[str, Node] = {}
        for name, (groups, cohort) in members.items():
            node = self.queues[name] = Node("cq", name, groups)
            if cohort is not None and cohort in self.cohorts:
                node.parent = self.cohorts[cohort]
                node.parent.children.append(node)
        if _has_cycle(self.cohorts.values()):
            # The catalog refuses such trees (the Cohort's condition says so); should one still
            # arrive, nobody borrows through it rather than loop for ever.
            for node in [*self.cohorts.values(), *self.queues.values()]:
                node.parent, node.children = None, []
        for node in self.queues.values():
            node.subtree = {fr: q.nominal for fr, q in node.quotas.items()}
        for root in self.roots():
            _accumulate(root)

    def roots(self) -> list[Node]:
        return [n for n in [*self.cohorts.values(), *self.queues.values()] if n.parent is None]

    # --- what a ClusterQueue may use -----------------------------------------------------------

    def available(self, cq: str, fr: FlavorResource) -> int:
        """How much more of `fr` the ClusterQueue may use now: its unused guaranteed quota, plus
        what its cohort has free, capped by its borrowingLimit. Negative when over-committed (quota
        shrank, or it moved with borrowed usage)."""
        return _available(self.queues[cq], fr)

    def potential_available(self, cq: str, fr: FlavorResource) -> int:
        """The most of `fr` it could ever use with nothing else running, borrowing limits kept."""
        return _potential_available(self.queues[cq], fr)

    def nominal(self, cq: str, fr: FlavorResource) -> int:
        q = self.queues[cq].quotas.get(fr)
        return 0 if q is None else q.nominal

    def borrowing_with(self, cq: str, fr: FlavorResource, extra: int) -> bool:
        """Whether using `extra` more of `fr` takes the ClusterQueue past its nominal quota, into
        borrowing (Kueue's BorrowingWith; only a member of a cohort can borrow)."""
        node = self.queues[cq]
        return node.parent is not None and node.usage.get(fr, 0) + extra > node.subtree.get(fr, 0)

    def borrowed(self, cq: str, fr: FlavorResource) -> int:
        node = self.queues[cq]
        return max(0, node.usage.get(fr, 0) - node.subtree.get(fr, 0))

    def usage(self, cq: str) -> Usage:
        return dict(self.queues[cq].usage)

    def in_cohort(self, cq: str) -> bool:
        return self.queues[cq].parent is not None

    # --- changes during a pass -----------------------------------------------------------------

    def add(self, cq: str, usage: Mapping[FlavorResource, int]) -> None:
        for fr, v in usage.items():
            if v:
                _add_usage(self.queues[cq], fr, v)

    def remove(self, cq: str, usage: Mapping[FlavorResource, int]) -> None:
        for fr, v in usage.items():
            if v:
                _remove_usage(self.queues[cq], fr, v)

    # --- checks --------------------------------------------------------------------------------

    def over_committed(self) -> list[tuple[str, str, FlavorResource]]:
        """(kind, name, fr) of every node whose usage exceeds what it may hold: a root's subtree
        quota, a borrowing limit past its subtree quota. Empty in a healthy tree."""
        out = []
        for node in [*self.cohorts.values(), *self.queues.values()]:
            for fr, used in node.usage.items():
                if node.parent is None and used > node.subtree.get(fr, 0):
                    out.append((node.kind, node.name, fr))
                limit = node.borrowing_limit(fr)
                if node.parent is not None and limit is not None and used > node.subtree.get(fr, 0) + limit:
                    out.append((node.kind, node.name, fr))
        return out


def _available(node: Node, fr: FlavorResource) -> int:
    if node.parent is None:
        return node.subtree.get(fr, 0) - node.usage.get(fr, 0)
    parent_available = _available(node.parent, fr)
    limit = node.borrowing_limit(fr)
    if limit is not None:
        stored_in_parent = node.subtree.get(fr, 0) - node.guaranteed(fr)
        used_in_parent = max(0, node.usage.get(fr, 0) - node.guaranteed(fr))
        parent_available = min(stored_in_parent - used_in_parent + limit, parent_available)
    return node.local_available(fr) + parent_available


def _potential_available(node: Node, fr: FlavorResource) -> int:
    if node.parent is None:
        return node.subtree.get(fr, 0)
    available = node.guaranteed(fr) + _potential_available(node.parent, fr)
    limit = node.borrowing_limit(fr)
    if limit is not None:
        available = min(node.subtree.get(fr, 0) + limit, available)
    return available


def _add_usage(node: Node, fr: FlavorResource, v: int) -> None:
    local = node.local_available(fr)
    node.usage[fr] = node.usage.get(fr, 0) + v
    if node.parent is not None and v > local:
        _add_usage(node.parent, fr, v - local)


def _remove_usage(node: Node, fr: FlavorResource, v: int) -> None:
    stored_in_parent = node.usage.get(fr, 0) - node.guaranteed(fr)
    node.usage[fr] = node.usage.get(fr, 0) - v
    if stored_in_parent <= 0 or node.parent is None:
        return
    _remove_usage(node.parent, fr, min(v, stored_in_parent))


def _accumulate(node: Node) -> None:
    """Subtree quota and usage of a Cohort from its own quota and its children (root first)."""
    if node.kind == "cq":
        return
    node.subtree = {fr: q.nominal for fr, q in node.quotas.items()}
    node.usage = {}
    for child in node.children:
        _accumulate(child)
        for fr, quota in child.subtree.items():
            node.subtree[fr] = node.subtree.get(fr, 0) + quota - child.guaranteed(fr)
        for fr, used in child.usage.items():
            node.usage[fr] = node.usage.get(fr, 0) + max(0, used - child.guaranteed(fr))


def _has_cycle(cohorts: Iterable[Node]) -> bool:
    for start in cohorts:
        seen, node = set(), start
        while node is not None:
            if node.name in seen:
                return True
            seen.add(node.name)
            node = node.parent
    return False
