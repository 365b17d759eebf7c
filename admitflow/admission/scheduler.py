"""One scheduling pass over a cohort tree: reserve quota for as many pending workloads as fit.

Kueue's scheduler (`pkg/scheduler/scheduler.go`) works in cycles: it takes the head of every
ClusterQueue, assigns it flavors against a snapshot of the quota (`nominate`), orders the heads
(`makeClassicalIterator`: those that fit without borrowing first, then higher priority, then the
older queue-order timestamp; with fair sharing, the fair-sharing tournament), and admits them in
that order against the shared quota, skipping a head whose quota an earlier one of the cycle took
(`fits`). A pass here runs those cycles until they change nothing, which is what Kueue reaches
after as many cycles, in one workflow task. A standalone ClusterQueue is a tree of one, and its
cycles are simply its queue, walked in order.

Each ClusterQueue walks its own queue with a `_Cursor` (stopped and inactive queues, StrictFIFO
and BestEffortFIFO, the inadmissible set, the equivalence shortcut, the notify window, the
blockAdmission gate); the cycles step the cursors. Quota is a `QuotaTree` built for the pass from
the queues' specs and every reservation they hold (evicting ones too: they hold quota until they
leave); reservations made by the pass are added to it as they are made.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from pydantic import Field

from admitflow.wire import WireModel

from admitflow.admission.cluster_queue import (
    ClusterQueueState,
    ClusterQueueView,
    Notice,
    checks_info,
    send_back_strangers,
    sync_reservation_checks,
    Reservation,
    active_condition,
    checks_for,
    flavor_infos,
    namespace_allowed,
    quota_groups,
)
from admitflow.admission.cluster_queue import usage as held
from admitflow.admission import fair_sharing, pods_ready, preemption
from admitflow.admission.conditions import second
from admitflow.admission.flavor_assignment import (
    Assignment,
    FlavorRules,
    Mode,
    PodSetAssignment,
    TreeQuota,
    Usage,
    assign,
    covers_pods,
    preemptible_oracle,
)
from admitflow.admission.pending_queue import QueueEntry
from admitflow.admission.quota_tree import QuotaTree

REASON_SUSPENDED = "Suspended"
REASON_MISCONFIGURED = "Misconfigured"
REASON_WAITING_FOR_QUOTA = "WaitingForQuota"
REASON_WAITING_FOR_PREEMPTED = "WaitingForPreemptedWorkloads"

# Only this many workloads at the head of a queue are told why they wait. Each notice costs the
# workload a workflow task; telling 10,000 at once would double their cost when load is highest.
# Deeper workloads keep "pending evaluation" until they come within reach; the pending-workloads
# view shows every position live.
NOTIFY_WINDOW = 1000

# A pass reserves about this many workloads at most (a cycle in progress completes): the workflow
# task that runs it stays short whatever the depth (10,000 reserved in one task took 8.9 s of its
# 10 s timeout one day, and 9.6-13 s the next, when every retry of it failed and the queue was
# wedged), and the notices it leaves for the outbox stay few enough to carry over a
# continue-as-new. The rest is reserved by the next pass, once those notices are sent.
MAX_RESERVATIONS = 500
# A reservation told only in the answer to its enqueue (no signal, no workflow task of the
# workload's for it) is told again by signal when its workload has said nothing about it this long
# (`retell_answered`): its answer may have been lost with a failed workflow task. Workloads that
# finish sooner, or tell their queue they are admitted, cost no signal at all. Not 30 s: at Kueue's
# benchmark shape a loaded worker's backlog kept many short workloads from their finish for longer,
# and telling them again cost more than the answers saved (docs/performance-log.md, 2026-12-02).
RETELL_AFTER = timedelta(minutes=5)

BYPASSED = "Bypassed scheduling evaluation because an equivalent workload recently failed"
# Kueue's messages for a head passed over in a cycle: it is evaluated again in the next one.
NO_LONGER_FITS = "Workload no longer fits after processing another workload"
OVERLAPPING_TARGETS = "Workload has overlapping preemption targets with another workload"
# Reasons the scheduler itself writes; a workload keeps such a detailed message when it is bypassed.
SCHEDULER_REASONS = frozenset(
    {"WaitingForQuota", "NoMatchingFlavor", "ExceedsMaxQuota", "WaitingForPreemptedWorkloads", "PendingEvaluation"}
)


class PassResult(WireModel):
    reserved: list[Reservation] = Field(default_factory=list)
    cut_short: bool = Field(default=False, description="The pass stopped at MAX_RESERVATIONS: another is due.")
    notices: list[Notice] = Field(default_factory=list)
    ask_gate: bool = Field(default=False, description="blockAdmission: ask the gate for a grant.")
    gate_used: Reservation | None = Field(default=None, description="blockAdmission: the reservation the grant went to.")
    return_grant: bool = Field(default=False, description="blockAdmission: hand the unused grant back.")


def schedule(cohort: Sequence[ClusterQueueState], now: datetime, root: str | None = None) -> dict[str, PassResult]:
    """One pass over `cohort`, every ClusterQueue one scheduling entity holds (one cohort tree, or a
    standalone queue); each queue's result holds the notices for its own workloads (a victim of
    another queue's preemptor included). A pass stops once it has reserved MAX_RESERVATIONS (every
    result then says `cut_short`).

    `root`: the root Cohort of the tree the entity schedules (see `quota_tree`)."""
    run = _Pass(cohort, now, root)
    run.cycles()
    for cq in cohort:
        result = run.results[cq.name]
        if cq.view is not None and cq.view.spec is not None:
            # A waiting workload has the checks that apply whatever flavor it gets, so that a
            # controller may approve it before quota is reserved.
            before_reservation = checks_for(cq.view.spec, None)
            for n in result.notices:
                if n.kind == "pending":
                    n.admission_checks = before_reservation
        if cq.gate == "granted":
            # A blockAdmission grant never outlives the pass that received it: nothing used it.
            cq.gate, result.return_grant = "none", True
        result.cut_short = run.cut_short
    return run.results


class _Nominee:
    """A queue's head in a cycle, with the flavors it was assigned and whom it would preempt.
    `standing` is a head that holds its queue across cycles (a preemptor waiting for its victims, a
    StrictFIFO head keeping room it cannot yet use): Kueue takes it again in every cycle, and it
    takes its quota again in its turn; it is assigned again only when that fails."""

    __slots__ = ("cursor", "entry", "assignment", "targets", "standing", "skip_message")

    def __init__(self, cursor: _Cursor, entry: QueueEntry, assignment: Assignment, targets: list) -> None:
        self.cursor, self.entry, self.assignment, self.targets = cursor, entry, assignment, targets
        self.standing = False
        self.skip_message = ""

    def key(self) -> tuple:
        """Kueue's classical order: no borrowing first, then priority (PrioritySortingWithinCohort,
        on by default), then the queue-order timestamp; uid and queue make it total."""
        e = self.entry
        return (self.assignment.borrowing, -e.priority, e.timestamp, e.uid, self.cursor.name)


# What processing a head in a cycle did.
_DONE, _STANDING, _SKIPPED = "done", "standing", "skipped"


def quota_tree(cohort: Sequence[ClusterQueueState], root: str | None = None) -> tuple[QuotaTree, dict[str, list], list[str] | None]:
    """The quota tree of the queues one entity holds, with every reservation's usage (evicting ones
    included: they hold quota until they leave) and, with fair sharing on, the queues' weights;
    also each member's quota groups and the fair-sharing strategies in force.

    The cohorts are those of the newest member view whose tree has `root` (any root when None): a
    queue on its way to another tree already has a view naming it, and is counted standalone until
    it has left."""
    groups, members, tree_view = {}, {}, None
    for cq in cohort:
        view = cq.view
        if view is None or view.spec is None:
            continue
        groups[cq.name] = quota_groups(view.spec)
        members[cq.name] = (groups[cq.name], view.spec.cohort_name)
        if view.cohort_tree is not None and (root is None or view.cohort_tree.root == root):
            if tree_view is None or view.revision > tree_view.revision:
                tree_view = view
    tree = QuotaTree(members, tree_view.cohort_tree if tree_view is not None else None)
    states = {cq.name: cq for cq in cohort}
    for name in members:
        tree.add(name, held(states[name].reservations.values()))
    views = [cq.view for cq in cohort if cq.view is not None]
    strategies = max(views, key=lambda v: v.revision).fair_sharing if views else None
    if strategies is not None:
        fair_sharing.apply_weights(tree, {name: states[name].view.spec for name in members})
    return tree, groups, strategies


class _Pass:
    def __init__(self, cohort: Sequence[ClusterQueueState], now: datetime, root: str | None) -> None:
        self.now = now
        self.reserved = 0  # reservations made by this pass
        self.cut_short = False
        self.results = {cq.name: PassResult() for cq in cohort}
        self.states = {cq.name: cq for cq in cohort}
        self.tree, groups, self.fair_sharing = quota_tree(cohort, root)
        self.specs = {name: self.states[name].view.spec for name in groups}
        self.reservations = {name: self.states[name].reservations.values() for name in groups}
        self.heights: dict[str, int] = {}
        self.cursors = [c for cq in cohort if (c := _Cursor.start(self, cq, groups.get(cq.name))) is not None]

    # --- the cycles ------------------------------------------------------------------------------

    def cycles(self) -> None:
        """Kueue's cycles until one changes nothing. Every cycle resolves at least the head it takes
        first (nothing has changed since it was assigned), unless that head is one standing from an
        earlier cycle: a cycle of standing heads only is the fixed point."""
        if len(self.cursors) == 1:
            # A tree of one: each cycle is the queue's head alone, so the queue is simply walked.
            c = self.cursors[0]
            while c.standing is None and not c.done and (e := c.head()) is not None and not self.stop():
                self.process(c.nominate(e), {}, None)
            return
        skipped: list[_Nominee] = []
        while True:
            heads = []
            for c in self.cursors:
                if c.standing is not None:
                    heads.append(c.standing)
                elif not c.done:
                    e = c.head()
                    if e is not None:
                        heads.append(c.nominate(e))
            if not heads:
                return
            if self.stop():
                return  # the heads passed over are assigned again in the next pass, and told there
            changed, skipped = self.cycle(heads)
            if not changed:
                break
        for n in skipped:
            # Passed over in every cycle since: Kueue tells it why at the end of each.
            n.cursor.tell(n.entry, REASON_WAITING_FOR_QUOTA, n.skip_message)

    def stop(self) -> bool:
        """MAX_RESERVATIONS reached, with more to try (between cycles): the pass ends here."""
        if self.reserved >= MAX_RESERVATIONS:
            self.cut_short = True
        return self.cut_short

    def cycle(self, heads: list[_Nominee]) -> tuple[bool, list[_Nominee]]:
        if len(heads) == 1:
            # Alone in its cycle (a standalone queue's every cycle): nothing was taken before it,
            # and what it would claim for the rest of the cycle matters to nobody.
            return self.process(heads[0], {}, None) == _DONE, []
        preempted: dict[tuple[str, str], preemption.Target] = {}
        claims: list[tuple[str, Usage]] = []
        changed, skipped = False, []
        for n in self.order(heads):
            outcome = self.process(n, preempted, claims)
            if outcome == _SKIPPED:
                skipped.append(n)
            elif outcome == _DONE:
                changed = True
        # What a head claimed without reserving it lasts one cycle: it claims it again in the next.
        for cq, usage in claims:
            self.tree.remove(cq, usage)
        return changed, skipped

    def order(self, heads: list[_Nominee]):
        if self.fair_sharing is None:
            yield from sorted(heads, key=_Nominee.key)
            return
        # Kueue's fair-sharing iterator: the tournament again before each pop, as the tree changes;
        # ties go by priority, then age.
        heads = sorted(heads, key=lambda n: n.key()[1:])
        while heads:
            first = fair_sharing.fair_order(self.tree, [(n.cursor.name, n.assignment.usage()) for n in heads])[0]
            yield heads.pop(first)

    def process(self, n: _Nominee, preempted: dict, claims: list | None) -> str:
        """Kueue's processEntry for one head of the cycle."""
        c, e, a = n.cursor, n.entry, n.assignment
        if a.mode == "NoFit":
            c.fail(e, a)
            return _DONE
        if a.mode == "Preempt" and not n.targets:
            if not c.can_always_reclaim and claims is not None:
                # Kueue's reserveCapacityForUnreclaimablePreempt: what it could use of its nominal
                # quota (or up to its borrowing limit) is kept from lower workloads of other queues
                # for the rest of the cycle.
                self.claim(c.name, self.to_reserve(c.name, a), claims)
            if n.standing:
                return _STANDING
            c.fail(e, a)
            if c.strict and not c.can_always_reclaim:
                n.standing, c.standing = True, n
            return _DONE
        if any((t.cluster_queue, t.reservation.key) in preempted for t in n.targets):
            return self.skip(n, OVERLAPPING_TARGETS)
        usage = a.usage()
        # A preemptor counts on its targets' quota (and on that of every target preempted before it
        # in the cycle, as Kueue does). A workload that fits counts only on quota free now, so that
        # no reservation is made in room a victim has yet to leave. Alone in its cycle, a head was
        # assigned against the quota as it stands.
        alone = claims is None
        if not alone and not self.fits(c.name, usage, [*preempted.values(), *n.targets] if a.mode == "Preempt" else []):
            return self.skip(n, NO_LONGER_FITS)
        if a.mode == "Preempt":
            for t in n.targets:
                preempted[(t.cluster_queue, t.reservation.key)] = t
            if n.standing:
                self.claim(c.name, usage, claims)
                return _STANDING
            newly = self.preempt(c, e, n.targets)
            c.tell(e, REASON_WAITING_FOR_PREEMPTED, f"{a.message}. Pending the preemption of {len(n.targets)} workload(s)", window=False)
            # Kueue puts a workload pending preemption straight back at the head of its ClusterQueue
            # (sticky in BestEffortFIFO) and takes one head per queue per cycle, so nothing behind it
            # is reserved, not even where it would not compete, until its victims have left and it
            # is. Reserving behind it would hand out the quota the victims free, only for it to
            # preempt those workloads again.
            self.claim(c.name, usage, claims)
            n.standing, c.standing = True, n
            return _DONE if newly or not n.standing else _STANDING
        if c.view.block_admission and c.state.gate != "granted":
            # Kueue's scheduler blocks its loop until every workload it admitted is ready; here the
            # gate says whether any is not (pods_ready.py).
            if c.state.gate == "waiting":
                c.tell(e, pods_ready.WAITING_REASON, pods_ready.WAITING_MESSAGE)
            elif c.state.gate == "none":
                c.state.gate, c.result.ask_gate = "asked", True
            c.done = True
            return _DONE
        self.tree.add(c.name, usage)
        c.reserve(e, a, usage)
        self.reserved += 1
        return _DONE

    def skip(self, n: _Nominee, message: str) -> str:
        """Kueue requeues the head at once: the next cycle assigns it again."""
        n.skip_message = message
        if n.standing:
            n.standing, n.cursor.standing = False, None
        return _SKIPPED

    # --- quota -----------------------------------------------------------------------------------

    def fits(self, cq: str, usage: Usage, removed: Sequence) -> bool:
        """Kueue's fits: the usage fits what the queue may use, as if `removed` had left."""
        for t in removed:
            self.tree.remove(t.cluster_queue, t.reservation.assignment.usage())
        try:
            return all(self.tree.available(cq, fr) >= v for fr, v in usage.items() if v)
        finally:
            for t in removed:
                self.tree.add(t.cluster_queue, t.reservation.assignment.usage())

    def claim(self, cq: str, usage: Usage, claims: list | None) -> None:
        if claims is None:
            return
        self.tree.add(cq, usage)
        claims.append((cq, usage))

    def to_reserve(self, cq: str, a: Assignment) -> Usage:
        """Kueue's quotaResourcesToReserve for a workload waiting without preemption targets."""
        node = self.tree.queues[cq]
        out: Usage = {}
        for fr, v in a.usage().items():
            room = self.tree.nominal(cq, fr) - node.usage.get(fr, 0)
            if a.borrows:
                limit = node.borrowing_limit(fr)
                out[fr] = v if limit is None else max(0, min(v, room + limit))
            else:
                out[fr] = max(0, min(v, room))
        return out

    # --- preemption ------------------------------------------------------------------------------

    def targets(self, c: _Cursor, e: QueueEntry, a: Assignment, frs=None) -> list[preemption.Target]:
        return preemption.get_targets(
            e, c.name, a, self.tree, self.specs, self.reservations, self.fair_sharing, self.now, frs_need_preemption=frs
        )

    def oracle(self, c: _Cursor, e: QueueEntry):
        """Kueue's preemption oracle for one head: whether preemption could make room for `val` of
        one flavor and resource, and how high the queue would borrow once its targets left."""
        if not self.tree.in_cohort(c.name):
            # Without a cohort every target is in the queue, so preemption can make room exactly
            # when its candidates hold what is missing; found only when asked (most heads fit).
            within: list = []

            def simulate_within(fr: tuple[str, str], val: int) -> tuple[Mode, int]:
                if not within:
                    within.append(preemptible_oracle(c.quota, c.preemptible(e)))
                return within[0](fr, val)

            return simulate_within

        def simulate(fr: tuple[str, str], val: int) -> tuple[Mode, int]:
            probe = Assignment(
                pod_sets=[PodSetAssignment(name="probe", flavors={fr[1]: fr[0]}, resource_usage={fr[1]: val}, count=1)],
                mode="Preempt", preemption_possible=True,
            )
            found = self.targets(c, e, probe, frs=[fr])
            if not found:
                return Mode.NO_PREEMPTION_CANDIDATES, c.quota.borrow_height(fr, val)[0]
            for t in found:
                self.tree.remove(t.cluster_queue, t.reservation.assignment.usage())
            try:
                borrow = c.quota.borrow_height(fr, val)[0]
            finally:
                for t in found:
                    self.tree.add(t.cluster_queue, t.reservation.assignment.usage())
            return (Mode.PREEMPT if any(t.cluster_queue == c.name for t in found) else Mode.RECLAIM), borrow

        return simulate

    def preempt(self, c: _Cursor, preemptor: QueueEntry, targets: list) -> bool:
        """Tell each target to leave, in its own queue's result; it keeps its quota until it releases
        it (Kueue waits for the preempted workloads likewise), and is not told twice. Returns
        whether anyone was newly told."""
        newly = False
        for t in targets:
            v = t.reservation
            if v.evicting:
                continue
            v.evicting = newly = True
            message = preemption.preemption_message(
                preemptor, preemption.cohort_path(self.tree, c.name), preemption.cohort_path(self.tree, t.cluster_queue), t.reason
            )
            self.results[t.cluster_queue].notices.append(
                Notice(
                    key=v.key, uid=v.uid, ticket=v.ticket, kind="evicted", reason="Preempted", message=message,
                    preemption_reason=t.reason,
                )
            )
        return newly


class _Cursor:
    """One ClusterQueue's walk through its pending workloads during a pass."""

    def __init__(self, run: _Pass, state: ClusterQueueState, groups) -> None:
        view, spec = state.view, state.view.spec
        self.run, self.state, self.view, self.spec, self.groups = run, state, view, spec, groups
        self.name = state.name
        self.result = run.results[state.name]
        self.active = active_condition(view)[0]
        self.strict = spec.queueing_strategy == "StrictFIFO"
        self.flavors = flavor_infos(view)
        p = spec.preemption
        self.policy = p.within_cluster_queue if p else None
        in_cohort = run.tree.in_cohort(state.name)
        reclaim = p.reclaim_within_cohort if p and in_cohort else "Never"
        self.never_preempts = self.policy in (None, "Never") and reclaim == "Never"
        self.can_always_reclaim = reclaim == "Any"
        borrow_within = p is not None and p.borrow_within_cohort.policy != "Never"
        preempt_while_borrowing = in_cohort and (borrow_within or (run.fair_sharing is not None and reclaim != "Never"))
        self.rules = FlavorRules(spec.flavor_fungibility, preempt_while_borrowing)
        self.with_pods = covers_pods(groups)
        self.quota = TreeQuota(run.tree, state.name, run.heights)
        # What it could use now, per resource over its flavors: an upper bound for the pass, as
        # quota is only taken during it.
        self.free: dict[str, int] = {}
        for g in groups:
            for fq in g.flavors:
                for res in fq.nominal:
                    self.free[res] = self.free.get(res, 0) + self.quota.available((fq.name, res))
        # Shapes that failed in this pass: usage only grows during a pass, so an equivalent workload
        # would fail too (Kueue's scheduling equivalence hashing).
        self.failed_shapes: dict[tuple, str] = {}
        self.entries = state.pending.entries()
        self.index = 0
        self.done = False
        self.standing: _Nominee | None = None
        self.shape: tuple = ()
        self._preemptible: dict = {}
        self._namespaces: dict[str, bool] = {}

    @classmethod
    def start(cls, run: _Pass, state: ClusterQueueState, groups) -> _Cursor | None:
        """The queue's own work before the cycles; None when it has nothing to schedule."""
        result = run.results[state.name]
        view = state.view
        if view is None:
            return None  # the catalog has not described this queue yet; nothing can be decided
        if view.spec is None:
            for e in state.pending:
                _tell(result, e, REASON_MISCONFIGURED, f"ClusterQueue {state.name} is terminating or missing")
            return None
        result.notices.extend(send_back_strangers(state))
        result.notices.extend(sync_reservation_checks(state))
        _drain_stopped(result, state)
        return cls(run, state, groups)

    def tell(self, e: QueueEntry, reason: str, message: str, window: bool = True) -> None:
        if not window or self.index < NOTIFY_WINDOW:
            _tell(self.result, e, reason, message)

    def head(self) -> QueueEntry | None:
        """The next workload to assign flavors to; those whose fate is known without it are dealt
        with on the way. None when the queue has nothing more to give in this pass."""
        entries = self.entries
        while self.index < len(entries):
            e = entries[self.index]
            if e.inadmissible:
                self.index += 1
                continue
            blocked = self.blocked(e)
            if blocked is not None:
                # Waiting on the queue's configuration, not on quota: such a workload never holds up
                # the ones behind it, in either queueing strategy.
                self.tell(e, *blocked)
                e.inadmissible = True
                self.index += 1
                continue
            # With preemption, priority decides who can make room, so it is part of the shape; age
            # too, where the policy compares it (LowerOrNewerEqualPriority). Reclaiming in the
            # cohort depends on neither.
            if self.never_preempts:
                shape = e.shape
            elif self.policy == "LowerOrNewerEqualPriority":
                shape = (e.shape, e.priority, e.timestamp)
            else:
                shape = (e.shape, e.priority)
            # A bypass is not an evaluation: such a workload is evaluated in full when its turn comes.
            known = e.evaluated is not None and e.evaluated[0] in SCHEDULER_REASONS and e.evaluated[1] != BYPASSED
            if self.never_preempts and known and _cannot_fit(e, self.free, self.with_pods):
                # Known to wait, and nothing could make room for it in this pass: no need to evaluate.
                self.tell(e, *e.evaluated)  # in case it has just come within the notify window
                if self.strict:
                    self.done = True
                    return None
                e.inadmissible = True
                self.index += 1
                continue
            if shape in self.failed_shapes and not self.strict:
                if e.notice is None or e.notice[0] not in SCHEDULER_REASONS:
                    self.tell(e, self.failed_shapes[shape], BYPASSED)
                if e.evaluated is None:
                    e.evaluated = (self.failed_shapes[shape], BYPASSED)
                e.inadmissible = True
                self.index += 1
                continue
            self.shape = shape
            return e
        self.done = True
        return None

    def blocked(self, e: QueueEntry) -> tuple[str, str] | None:
        """Why the queue's configuration keeps this workload waiting, whatever the quota."""
        if self.view.local_queues[e.local_queue_key].stop_policy not in (None, "None"):
            return REASON_SUSPENDED, f"LocalQueue {e.local_queue} is stopped"
        if self.spec.stop_policy not in (None, "None"):
            return REASON_SUSPENDED, f"ClusterQueue {self.name} is stopped"
        if not self.active:
            return REASON_SUSPENDED, f"ClusterQueue {self.name} is inactive"
        namespace = e.namespace
        allowed = self._namespaces.get(namespace)
        if allowed is None:  # thousands of workloads, a few namespaces
            allowed = self._namespaces[namespace] = namespace_allowed(self.spec, namespace)
        if not allowed:
            return REASON_MISCONFIGURED, "Workload namespace doesn't match ClusterQueue selector"
        return None

    def nominate(self, e: QueueEntry) -> _Nominee:
        """Kueue's nominate: flavors against the quota as it stands, then the targets of a preemptor."""
        oracle = None if self.never_preempts else self.run.oracle(self, e)
        a = assign(e.pod_sets, self.groups, self.flavors, self.quota, self.rules, oracle)
        targets = self.run.targets(self, e, a) if a.mode == "Preempt" and a.preemption_possible else []
        return _Nominee(self, e, a, targets)

    def preemptible(self, e: QueueEntry) -> Usage:
        """The quota held by the workloads of this queue `e` may preempt. Many pending workloads
        share a priority, and reservations change only as the pass makes them: kept per priority
        (and queue-order timestamp, where that decides) until the next reservation."""
        key = (e.priority, e.timestamp) if self.policy == "LowerOrNewerEqualPriority" else e.priority
        usage = self._preemptible.get(key)
        if usage is None:
            cands = preemption.candidates(self.policy, e, self.state.reservations.values())
            usage = self._preemptible[key] = preemption.preemptible_usage(cands)
        return usage

    def fail(self, e: QueueEntry, a: Assignment) -> None:
        e.evaluated = (a.reason, a.message)
        self.tell(e, a.reason, a.message)
        if self.strict:
            # StrictFIFO: the head that does not fit blocks everything behind it.
            self.done = True
            return
        self.failed_shapes[self.shape] = a.reason
        e.inadmissible = True
        self.index += 1

    def reserve(self, e: QueueEntry, a: Assignment, usage: Usage) -> None:
        """Quota reserved: the entry becomes a reservation and the workload is told, with the
        admission checks it gets for the flavors it was assigned."""
        view = self.view
        used = {f for ps in a.pod_sets for f in ps.flavors.values()}
        checks = checks_for(self.spec, used)
        reservation = Reservation(
            key=e.key, uid=e.uid, ticket=e.ticket, local_queue=e.local_queue, priority=e.priority,
            timestamp=e.timestamp, assignment=a, reserved_at=second(self.run.now), admitted=not checks, checks=checks,
            gated=view.block_admission,
        )
        self.state.pending.remove(e.key)
        self.state.reservations[e.key] = reservation
        self._preemptible.clear()
        self.result.reserved.append(reservation)
        self.result.notices.append(reservation_notice(view, reservation))
        if view.block_admission:
            self.state.gate, self.result.gate_used = "none", reservation
        for (_, res), v in usage.items():
            self.free[res] = self.free.get(res, 0) - v
        self.index += 1


def _tell(result: PassResult, e: QueueEntry, reason: str, message: str) -> None:
    """Tell a workload why it waits when that changes. Waiting for quota is told once per reason:
    the amounts in the message go stale as quota moves (the pending-workloads view shows the live
    position), and re-telling 10,000 workloads after every release would cost more than it says.
    Other reasons name what blocks (which queue is stopped), so a changed message is told, and so
    is the first real evaluation of a workload that was only told it was bypassed, and the first
    evaluation after the queue's configuration changed (`retell`: its capacity, its cohort)."""
    retell = e.retell
    if retell:
        e.retell = False
    if e.notice is not None and e.notice[0] == reason:
        if e.notice[1] == message or (reason in SCHEDULER_REASONS and e.notice[1] != BYPASSED and not retell):
            return
    e.notice = (reason, message)
    result.notices.append(Notice(key=e.key, uid=e.uid, ticket=e.ticket, kind="pending", reason=reason, message=message))


def reservation_notice(view: ClusterQueueView, r: Reservation) -> Notice:
    """What a workload is told when quota is reserved for it: its assignment, the admission checks it
    has for the flavors it was assigned, and what its queue says it runs with."""
    used = {f for ps in r.assignment.pod_sets for f in ps.flavors.values()}
    lq = view.local_queues.get(r.local_queue_key)
    return Notice(
        key=r.key, uid=r.uid, ticket=r.ticket, kind="reserved", assignment=r.assignment, admission_checks=r.checks,
        checks_info=checks_info(view, r.checks),
        flavors={f: view.flavors[f] for f in sorted(used) if f in view.flavors},
        wait_for_pods_ready=view.wait_for_pods_ready,
        workload_retention=view.workload_retention,
        runner=lq.runner if lq is not None else "",
        gated=r.gated,
    )


def reservation_told(state: ClusterQueueState, key: str, uid: str, ticket: int) -> Notice | None:
    """The reservation the queue holds for this ticket, as its notice again (an enqueue of a ticket
    the queue has reserved asks again: the run was reset in Temporal to before the notice), or None."""
    r = state.reservations.get(key)
    if r is None or r.uid != uid or r.ticket != ticket or r.evicting or state.view is None or state.view.spec is None:
        return None
    return reservation_notice(state.view, r)


def answered(state: ClusterQueueState, n: Notice, now: datetime) -> bool:
    """Whether notice `n`, for an entry whose enqueue waits for its answer, goes in that answer
    instead of a signal: its pending reason or its reservation, which is then marked told only in an
    answer (`Reservation.answered_at`, for `retell_answered`). Anything else (an eviction, new
    checks) goes by signal."""
    if n.kind == "pending":
        return True
    if n.kind != "reserved":
        return False
    state.reservations[n.key].answered_at = now
    return True


def retell_answered(state: ClusterQueueState, now: datetime, limit: int = MAX_RESERVATIONS) -> list[Notice]:
    """The reservations told only in the answer to their enqueue at least RETELL_AFTER ago, with no
    word from their workload since (its `admitted`, a new priority; a release ends the reservation,
    an eviction tells it anyway): their notices again, as signals this time, once each.

    The answer is lost when the workflow task that ran the enqueue failed after the queue took it,
    and the task's next attempt, with more messages (a deactivation, a deletion), did not enqueue
    again. The signal reaches that workload, which gives back a ticket it did not ask for; the
    notice to a run that has ended finds no workflow, and the queue forgets that run. A workload that
    has the reservation ignores the notice: the ticket is no longer waiting. At most `limit` at a
    time, as a pass reserves (the rest stay due)."""
    if state.view is None or state.view.spec is None:
        return []
    out: list[Notice] = []
    for r in state.reservations.values():
        if len(out) >= limit:
            break
        if r.answered_at is not None and r.answered_at + RETELL_AFTER <= now:
            r.answered_at = None
            if not r.evicting:
                out.append(reservation_notice(state.view, r))
    return out


def next_retell(state: ClusterQueueState) -> datetime | None:
    """When `retell_answered` has a notice to tell again, at the earliest; None when it never will."""
    told = [r.answered_at for r in state.reservations.values() if r.answered_at is not None]
    return min(told) + RETELL_AFTER if told else None


def pending_told(state: ClusterQueueState, key: str, uid: str, ticket: int) -> Notice | None:
    """What the queue last told a waiting entry of why it waits, as that notice again (an enqueue
    repeated after its answer was lost asks again), or None: not waiting here, or told nothing yet."""
    e = state.pending.get(key)
    if e is None or e.uid != uid or e.ticket != ticket or e.notice is None:
        return None
    spec = state.view.spec if state.view is not None else None
    return Notice(key=key, uid=uid, ticket=ticket, kind="pending", reason=e.notice[0], message=e.notice[1],
                  admission_checks=checks_for(spec, None) if spec is not None else [])


def _drain_stopped(result: PassResult, state: ClusterQueueState) -> None:
    """`stopPolicy: HoldAndDrain` on the ClusterQueue or a LocalQueue evicts what they hold."""
    view = state.view
    for r in state.reservations.values():
        if r.evicting:
            continue
        lq = view.local_queues.get(r.local_queue_key)
        if view.spec.stop_policy == "HoldAndDrain":
            reason, message = "ClusterQueueStopped", "The ClusterQueue is stopped"
        elif lq is not None and lq.stop_policy == "HoldAndDrain":
            reason, message = "LocalQueueStopped", "The LocalQueue is stopped"
        else:
            continue
        r.evicting = True
        result.notices.append(Notice(key=r.key, uid=r.uid, ticket=r.ticket, kind="evicted", reason=reason, message=message))


def _cannot_fit(e: QueueEntry, free: dict[str, int], with_pods: bool) -> bool:
    """Some resource the workload needs exceeds what is free across all flavors together."""
    need: dict[str, int] = {}
    for ps in e.pod_sets:
        for res, v in ps.total(with_pods).items():
            need[res] = need.get(res, 0) + v
    return any(v > free.get(res, 0) for res, v in need.items() if v)
