"""Preemption within a ClusterQueue: who may be preempted under each policy, in which order, and
the fewest victims that make room."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from admitflow.admission import cluster_queue as cq
from admitflow.admission import preemption
from admitflow.admission.cluster_queue import Reservation
from admitflow.admission.flavor_assignment import Assignment, PodSetAssignment
from admitflow.admission.pending_queue import QueueEntry
from admitflow.admission.quota_tree import CohortInfo, CohortTree, QuotaTree
from admitflow.api import ClusterQueueSpec
from admitflow.api.quantity import resource_value
from tests.unit.test_cluster_queue import entry, run_pass, state_with, view


def reserve(st, *entries):
    for e in entries:
        cq.enqueue(st, e)
    run_pass(st)
    assert {e.key for e in entries} <= set(st.reservations)


@pytest.mark.parametrize(
    ("policy", "victim_priority", "victim_age", "preempted"),
    [
        pytest.param("Never", 0, 0, False, id="never-preempts-nobody"),
        pytest.param("LowerPriority", 0, 0, True, id="lower-priority-preempts-a-lower-priority-workload"),
        pytest.param("LowerPriority", 5, 0, False, id="lower-priority-spares-an-equal-priority-workload"),
        pytest.param("LowerOrNewerEqualPriority", 5, -30, True, id="newer-equal-priority-is-preempted-by-an-older-one"),
        pytest.param("LowerOrNewerEqualPriority", 5, 30, False, id="older-equal-priority-is-spared"),
        pytest.param("LowerOrNewerEqualPriority", 9, -30, False, id="higher-priority-is-never-preempted"),
    ],
)
def test_policies(policy, victim_priority, victim_age, preempted):
    st = state_with(view(preemption={"withinClusterQueue": policy}))
    reserve(st, entry("victim", cpu=4000, priority=victim_priority, age=victim_age))
    cq.enqueue(st, entry("preemptor", cpu=2000, priority=5))
    result = run_pass(st)
    evicted = [n.key for n in result.notices if n.kind == "evicted"]
    assert evicted == (["default/victim"] if preempted else [])
    told = next(n for n in result.notices if n.key == "default/preemptor")
    if preempted:
        assert (told.reason, told.message) == (
            "WaitingForPreemptedWorkloads",
            "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, "
            "2 more needed. Pending the preemption of 1 workload(s)",
        )
        assert st.reservations["default/victim"].evicting, "the victim keeps its quota until it leaves"
    else:
        assert told.reason == "WaitingForQuota"


def test_the_fewest_and_lowest_priority_victims_are_chosen():
    st = state_with(view(preemption={"withinClusterQueue": "LowerPriority"}))
    reserve(
        st,
        entry("big-low", cpu=2000, priority=1, age=50),
        entry("small-lowest", cpu=1000, priority=0, age=40),
        entry("small-mid", cpu=1000, priority=2, age=30),
    )
    cq.enqueue(st, entry("preemptor", cpu=2000, priority=9))
    result = run_pass(st)
    # Lowest priority first: small-lowest (1 cpu) is not enough, big-low (2 cpu) then is; giving
    # small-lowest back still leaves room, so only big-low goes.
    assert [n.key for n in result.notices if n.kind == "evicted"] == ["default/big-low"]


def test_the_victim_message_and_the_preemptor_admitted_once_the_victim_leaves():
    st = state_with(view(preemption={"withinClusterQueue": "LowerPriority"}))
    reserve(st, entry("victim", cpu=4000, priority=0))
    cq.enqueue(st, entry("preemptor", cpu=4000, priority=1))
    (evicted,) = [n for n in run_pass(st).notices if n.kind == "evicted"]
    assert (evicted.reason, evicted.preemption_reason, evicted.message) == (
        "Preempted",
        "InClusterQueue",
        "Preempted to accommodate a workload (UID: uid-preemptor, JobUID: UNKNOWN) due to prioritization in the "
        "ClusterQueue; preemptor path: /cq; preemptee path: /cq",
    )
    again = run_pass(st)
    assert [n.kind for n in again.notices] == [], "nobody is told twice while the victim leaves"
    cq.release(st, "default/victim", "uid-victim", 1)
    assert [r.key for r in run_pass(st).reserved] == ["default/preemptor"]


def test_candidate_order_is_kueues():
    t = datetime(2026, 1, 1, tzinfo=UTC)

    class R:
        def __init__(self, key, priority, reserved, evicting=False):
            self.key, self.priority, self.evicting, self.uid = key, priority, evicting, key
            self.reserved_at = t + timedelta(seconds=reserved)

    p = entry("p", priority=10)
    got = preemption.candidates(
        "LowerPriority", p, [R("old-low", 1, 0), R("new-low", 1, 9), R("lowest", 0, 5), R("evicting", 5, 0, True)]
    )
    assert [r.key for r in got] == ["evicting", "lowest", "new-low", "old-low"]


# --- a preemptor keeps its queue's head while its victims leave --------------------------------------
# Kueue requeues a workload pending preemption straight back to the head of its ClusterQueue (sticky
# in BestEffortFIFO) and takes one head per ClusterQueue per cycle, so nothing behind it is reserved
# until it is; a preemptor that found no targets goes to the inadmissible set and holds nothing.


def preempting_queue(**kw):
    return state_with(view(quotas={"default": {"cpu": "20"}}, preemption={"withinClusterQueue": "LowerPriority"}, **kw))


def requeue_victims(st, names):
    """The victims leave (release their quota) and come back to the queue, as a preempted workload does."""
    for name in names:
        assert cq.release(st, f"default/{name}", f"uid-{name}", 1) is True
        cq.enqueue(st, entry(name, cpu=1000, priority=50, age=100, ticket=2))


def test_freed_quota_is_not_given_to_the_workloads_behind_a_waiting_preemptor():
    st = preempting_queue()
    smalls = [f"small-{i}" for i in range(20)]
    reserve(st, *(entry(n, cpu=1000, priority=50, age=100) for n in smalls))
    cq.enqueue(st, entry("large", cpu=20000, priority=200))
    first = run_pass(st)
    assert sorted(n.key for n in first.notices if n.kind == "evicted") == sorted(f"default/{n}" for n in smalls)

    requeue_victims(st, smalls[:4])
    after_four = run_pass(st)
    assert after_four.reserved == [], "the 4 cpu freed so far wait for the large workload"
    assert [n for n in after_four.notices if n.kind == "evicted"] == [], "nobody is preempted twice"
    assert {e.key for e in st.pending} == {"default/large", *(f"default/{n}" for n in smalls[:4])}

    requeue_victims(st, smalls[4:])
    last = run_pass(st)
    assert [r.key for r in last.reserved] == ["default/large"]
    assert [n for n in last.notices if n.kind == "evicted"] == []
    assert len(st.pending) == 20


def test_a_workload_behind_a_waiting_preemptor_waits_even_where_it_would_not_compete():
    # The small one would fit in the spot flavor, which the large one does not use; Kueue does not
    # look past the preemptor at the head of the ClusterQueue either.
    st = state_with(
        view(
            flavors=("default", "spot"),
            quotas={"default": {"cpu": "20"}, "spot": {"cpu": "4"}},
            preemption={"withinClusterQueue": "LowerPriority"},
        )
    )
    reserve(st, entry("holder", cpu=20000, priority=50, age=100))
    cq.enqueue(st, entry("large", cpu=20000, priority=200))
    cq.enqueue(st, entry("spot-fit", cpu=1000, priority=10))
    result = run_pass(st)
    assert [n.key for n in result.notices if n.kind == "evicted"] == ["default/holder"]
    assert result.reserved == []
    assert [n.key for n in result.notices if n.kind == "pending"] == ["default/large"], "the one behind is not evaluated"
    cq.release(st, "default/holder", "uid-holder", 1)
    assert [r.key for r in run_pass(st).reserved] == ["default/large", "default/spot-fit"]


def test_a_preemptor_that_finds_no_victims_holds_nothing_back():
    st = state_with(view(preemption={"withinClusterQueue": "LowerPriority"}))
    reserve(st, entry("higher", cpu=2000, priority=100))
    cq.enqueue(st, entry("preemptor", cpu=4000, priority=50))
    cq.enqueue(st, entry("small", cpu=1000, priority=0))
    result = run_pass(st)
    assert [n for n in result.notices if n.kind == "evicted"] == []
    assert [r.key for r in result.reserved] == ["default/small"]
    assert st.pending.get("default/preemptor").inadmissible


# --- across a cohort tree: Kueue's table tests ------------------------------------------------------
# Ported from kubernetes-sigs/kueue pkg/scheduler/preemption/preemption_test.go (TestPreemption),
# preemption_hierarchical_test.go (TestHierarchicalPreemptions) and preemption_fair_test.go
# (TestFairPreemptions); each case names the Kueue case it comes from. Memory is counted in plain
# units where Kueue writes Gi. A workload's uid is its name, as Kueue's tests set them.

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def quota(groups) -> list[dict]:
    """One resource group (a dict) or several (a list): flavor -> resource -> nominal, or
    (nominal, borrowingLimit, lendingLimit) with None for no limit."""
    out = []
    for g in [groups] if isinstance(groups, dict) else groups:
        covered = list(next(iter(g.values())))
        flavors = []
        for flavor, resources in g.items():
            items = []
            for name in covered:
                q = resources[name]
                nominal, borrowing, lending = (q, None, None) if isinstance(q, str) else (*q, None, None)[:3]
                item = {"name": name, "nominalQuota": nominal}
                if borrowing is not None:
                    item["borrowingLimit"] = borrowing
                if lending is not None:
                    item["lendingLimit"] = lending
                items.append(item)
            flavors.append({"name": flavor, "resources": items})
        out.append({"coveredResources": covered, "flavors": flavors})
    return out


def queue_spec(quotas, cohort=None, within="Never", reclaim="Never", borrow_below=None, weight=None) -> ClusterQueueSpec:
    """`borrow_below` set: borrowWithinCohort LowerPriority with that maxPriorityThreshold."""
    body: dict = {"resourceGroups": quota(quotas), "preemption": {"withinClusterQueue": within, "reclaimWithinCohort": reclaim}}
    if borrow_below is not None:
        body["preemption"]["borrowWithinCohort"] = {"policy": "LowerPriority", "maxPriorityThreshold": borrow_below}
    if cohort:
        body["cohortName"] = cohort
    if weight is not None:
        body["fairSharing"] = {"weight": weight}
    return ClusterQueueSpec.model_validate(body)


def cohort(name, parent=None, quotas=None, weight=1.0) -> CohortInfo:
    groups = tuple(cq.quota_groups(ClusterQueueSpec.model_validate({"resourceGroups": quota(quotas)}))) if quotas else ()
    return CohortInfo(name=name, parent=parent, groups=groups, weight=weight, explicit=True)


def pod_set_assignment(name: str, count: int, requests: dict, flavor: str) -> PodSetAssignment:
    """`requests` per pod: resource -> quantity, or (flavor, quantity)."""
    flavors, usage = {}, {}
    for res, q in requests.items():
        f, q = (flavor, q) if isinstance(q, str) else q
        flavors[res], usage[res] = f, resource_value(res, q) * count
    return PodSetAssignment(name=name, flavors=flavors, resource_usage=usage, count=count)


def admitted(name, queue, requests, priority=0, flavor="default", reserved=0, created=0, evicting=False):
    """(ClusterQueue, Reservation) of a workload holding quota; times are seconds after T0."""
    return queue, Reservation(
        key=f"default/{name}", uid=name, ticket=1, local_queue="lq", priority=priority,
        timestamp=T0 + timedelta(seconds=created),
        assignment=Assignment(pod_sets=[pod_set_assignment("main", 1, requests, flavor)], mode="Fit"),
        reserved_at=T0 + timedelta(seconds=reserved), evicting=evicting,
    )


def build(queues: dict[str, ClusterQueueSpec], cohorts=(), workloads=()):
    infos = {c.name: c for c in cohorts}
    for spec in queues.values():
        if spec.cohort_name and spec.cohort_name not in infos:
            infos[spec.cohort_name] = CohortInfo(name=spec.cohort_name)
    for c in list(infos.values()):
        if c.parent and c.parent not in infos:
            infos[c.parent] = CohortInfo(name=c.parent)
    members = {name: (cq.quota_groups(spec), spec.cohort_name) for name, spec in queues.items()}
    tree = QuotaTree(members, CohortTree(root="root", cohorts=infos) if infos else None)
    reservations: dict[str, list[Reservation]] = {}
    for queue, r in workloads:
        tree.add(queue, r.assignment.usage())
        reservations.setdefault(queue, []).append(r)
    return tree, reservations


def usage_of(tree: QuotaTree) -> dict:
    return {
        (n.kind, n.name): {fr: v for fr, v in n.usage.items() if v}
        for n in [*tree.queues.values(), *tree.cohorts.values()]
    }


def preempted(queues, workloads, target, requests, priority=0, cohorts=(), fair=None, created=0, flavor="default",
              pod_sets=None, frs=None) -> set[tuple[str, str]]:
    """{(victim, reason)} for an incoming workload of `target`; the tree is left as it was."""
    tree, reservations = build(queues, cohorts, workloads)
    before = usage_of(tree)
    incoming = QueueEntry(
        key="default/in", uid="in", ticket=1, local_queue="lq", priority=priority,
        timestamp=T0 + timedelta(seconds=created), pod_sets=[],
    )
    sets = pod_sets or [("main", 1, requests)]
    assignment = Assignment(pod_sets=[pod_set_assignment(n, c, r, flavor) for n, c, r in sets], mode="Preempt")
    got = preemption.get_targets(
        incoming, target, assignment, tree, queues, reservations, fair, T0, frs_need_preemption=frs
    )
    assert usage_of(tree) == before, "the tree is left as it was"
    return {(t.reservation.uid, t.reason) for t in got}


IN_CQ, RECLAIM, WHILE_BORROWING, FAIR = (
    "InClusterQueue", "InCohortReclamation", "InCohortReclaimWhileBorrowing", "InCohortFairSharing",
)

# Kueue's defaultClusterQueues of TestPreemption.
KUEUE_QUEUES = {
    "standalone": queue_spec([{"default": {"cpu": "6"}}, {"alpha": {"memory": "3"}, "beta": {"memory": "3"}}], within="LowerPriority"),
    "c1": queue_spec({"default": {"cpu": ("6", "6"), "memory": ("3", "3")}}, "cohort", "LowerPriority", "LowerPriority"),
    "c2": queue_spec({"default": {"cpu": ("6", "6"), "memory": ("3", "3")}}, "cohort", "Never", "Any"),
    "d1": queue_spec({"default": {"cpu": "6", "memory": "3"}}, "cohort-no-limits", "LowerPriority", "LowerPriority"),
    "d2": queue_spec({"default": {"cpu": "6", "memory": "3"}}, "cohort-no-limits", "Never", "Any"),
    "l1": queue_spec({"default": {"cpu": ("6", "12"), "memory": ("3", "6")}}, "legion", "LowerPriority", "LowerPriority"),
    "preventStarvation": queue_spec({"default": {"cpu": "6"}}, within="LowerOrNewerEqualPriority"),
    "a_standard": queue_spec({"default": {"cpu": ("1", "12")}}, "with-shared-cq", "Never", "LowerPriority", borrow_below=0),
    "b_standard": queue_spec({"default": {"cpu": ("1", "12")}}, "with-shared-cq", "LowerPriority", "Any", borrow_below=0),
    "a_best_effort": queue_spec({"default": {"cpu": ("1", "12")}}, "with-shared-cq", "Never", "LowerPriority", borrow_below=0),
    "b_best_effort": queue_spec({"default": {"cpu": ("0", "13")}}, "with-shared-cq", "Never", "LowerPriority", borrow_below=0),
    "shared": queue_spec({"default": {"cpu": "10"}}, "with-shared-cq"),
    "lend1": queue_spec({"default": {"cpu": ("6", None, "4")}}, "cohort-lend", "LowerPriority", "LowerPriority"),
    "lend2": queue_spec({"default": {"cpu": ("6", None, "2")}}, "cohort-lend", "LowerPriority", "LowerPriority"),
    "a": queue_spec({"default": {"cpu": "2", "memory": "2"}}, "cohort-three", "LowerPriority", "Any"),
    "b": queue_spec({"default": {"cpu": "2", "memory": "2"}}, "cohort-three"),
    "c": queue_spec({"default": {"cpu": "2", "memory": "2"}}, "cohort-three"),
}
BOTH = [("default", "cpu"), ("default", "memory")]


def kueue_case(workloads, target, requests, want, **kw):
    return (KUEUE_QUEUES, (), workloads, target, requests, kw), want


CLASSICAL = [
    # "preempt lowest priority"
    pytest.param(*kueue_case(
        [admitted("low", "standalone", {"cpu": "2"}, -1), admitted("mid", "standalone", {"cpu": "2"}),
         admitted("high", "standalone", {"cpu": "2"}, 1)],
        "standalone", {"cpu": "2"}, {("low", IN_CQ)}, priority=1,
    ), id="the-lowest-priority-workload-of-the-queue-is-preempted"),
    # "preempt multiple"
    pytest.param(*kueue_case(
        [admitted("low", "standalone", {"cpu": "2"}, -1), admitted("mid", "standalone", {"cpu": "2"}),
         admitted("high", "standalone", {"cpu": "2"}, 1)],
        "standalone", {"cpu": "3"}, {("low", IN_CQ), ("mid", IN_CQ)}, priority=1,
    ), id="several-lower-priority-workloads-are-preempted-when-one-is-not-enough"),
    # "no preemption for low priority"
    pytest.param(*kueue_case(
        [admitted("low", "standalone", {"cpu": "3"}, -1), admitted("mid", "standalone", {"cpu": "3"})],
        "standalone", {"cpu": "1"}, set(), priority=-1,
    ), id="a-low-priority-workload-preempts-nobody"),
    # "not enough low priority workloads"
    pytest.param(*kueue_case(
        [admitted("low", "standalone", {"cpu": "3"}, -1), admitted("mid", "standalone", {"cpu": "3"})],
        "standalone", {"cpu": "4"}, set(),
    ), id="nobody-is-preempted-when-all-allowed-victims-are-not-enough"),
    # "some free quota, preempt low priority"
    pytest.param(*kueue_case(
        [admitted("low", "standalone", {"cpu": "1"}, -1), admitted("mid", "standalone", {"cpu": "1"}),
         admitted("high", "standalone", {"cpu": "3"}, 1)],
        "standalone", {"cpu": "2"}, {("low", IN_CQ)}, priority=1,
    ), id="free-quota-counts-so-one-small-victim-is-enough"),
    # "minimal set excludes low priority"
    pytest.param(*kueue_case(
        [admitted("low", "standalone", {"cpu": "1"}, -1), admitted("mid", "standalone", {"cpu": "2"}),
         admitted("high", "standalone", {"cpu": "3"}, 1)],
        "standalone", {"cpu": "2"}, {("mid", IN_CQ)}, priority=1,
    ), id="a-victim-that-turns-out-unneeded-is-given-back"),
    # "only preempt workloads using the chosen flavor"
    pytest.param(*kueue_case(
        [admitted("low", "standalone", {"memory": "2"}, -1, flavor="alpha"),
         admitted("mid", "standalone", {"memory": "1"}, flavor="beta"),
         admitted("high", "standalone", {"memory": "1"}, 1, flavor="beta")],
        "standalone", {"cpu": "1", "memory": ("beta", "2")}, {("mid", IN_CQ)}, priority=1,
    ), id="only-workloads-using-the-flavor-that-needs-preemption-are-candidates"),
    # "each podset preempts a different flavor"
    pytest.param(*kueue_case(
        [admitted("low-alpha", "standalone", {"memory": "2"}, -1, flavor="alpha"),
         admitted("low-beta", "standalone", {"memory": "2"}, -1, flavor="beta")],
        "standalone", None, {("low-alpha", IN_CQ), ("low-beta", IN_CQ)},
        pod_sets=[("launcher", 1, {"memory": ("alpha", "2")}), ("workers", 2, {"memory": ("beta", "1")})],
    ), id="each-pod-set-preempts-in-its-own-flavor"),
    # "preempt newer workloads with the same priority"
    pytest.param(*kueue_case(
        [admitted("wl1", "preventStarvation", {"cpu": "2"}, 2),
         admitted("wl2", "preventStarvation", {"cpu": "2"}, 1, reserved=1),
         admitted("wl3", "preventStarvation", {"cpu": "2"}, 1)],
        "preventStarvation", {"cpu": "2"}, {("wl2", IN_CQ)}, priority=1, created=-15,
    ), id="an-older-workload-preempts-the-most-recently-reserved-newer-one-of-equal-priority"),
    # "reclaim quota from borrower"
    pytest.param(*kueue_case(
        [admitted("c1-low", "c1", {"cpu": "3"}, -1), admitted("c2-mid", "c2", {"cpu": "3"}),
         admitted("c2-high", "c2", {"cpu": "6"}, 1)],
        "c1", {"cpu": "3"}, {("c2-mid", RECLAIM)}, priority=1,
    ), id="quota-lent-to-a-borrowing-queue-is-reclaimed-before-preempting-at-home"),
    # "reclaim quota if workload requests 0 resources for a resource at nominal quota"
    pytest.param(*kueue_case(
        [admitted("c1-low", "c1", {"cpu": "3", "memory": "3"}, -1), admitted("c2-mid", "c2", {"cpu": "3"}),
         admitted("c2-high", "c2", {"cpu": "6"}, 1)],
        "c1", {"cpu": "3", "memory": "0"}, {("c2-mid", RECLAIM)}, priority=1,
    ), id="a-zero-request-at-nominal-quota-does-not-stop-reclamation"),
    # "no workloads borrowing"
    pytest.param(*kueue_case(
        [admitted("c1-high", "c1", {"cpu": "4"}, 1), admitted("c2-low-1", "c2", {"cpu": "4"}, -1)],
        "c1", {"cpu": "4"}, set(), priority=1, frs=[("default", "cpu")],
    ), id="a-queue-within-its-nominal-quota-is-not-reclaimed-from"),
    # "not enough workloads borrowing"
    pytest.param(*kueue_case(
        [admitted("c1-high", "c1", {"cpu": "4"}, 1), admitted("c2-low-1", "c2", {"cpu": "4"}, -1),
         admitted("c2-low-2", "c2", {"cpu": "4"}, -1)],
        "c1", {"cpu": "4"}, set(), priority=1,
    ), id="reclaiming-only-what-the-other-queue-borrows-is-not-enough-to-borrow-without-borrowWithinCohort"),
    # "preempting locally and borrowing other resources in cohort, without cohort candidates"
    pytest.param(*kueue_case(
        [admitted("c1-low", "c1", {"cpu": "4"}, -1), admitted("c2-low-1", "c2", {"cpu": "4"}, -1),
         admitted("c2-high-2", "c2", {"cpu": "4"}, 1)],
        "c1", {"cpu": "4", "memory": "5"}, {("c1-low", IN_CQ)}, priority=1, frs=BOTH,
    ), id="a-preemptor-that-must-borrow-preempts-at-home-rather-than-reclaim-without-borrowWithinCohort"),
    # "preempting locally and borrowing same resource in cohort"
    pytest.param(*kueue_case(
        [admitted("c1-med", "c1", {"cpu": "4"}), admitted("c1-low", "c1", {"cpu": "4"}, -1),
         admitted("c2-low-1", "c2", {"cpu": "4"}, -1)],
        "c1", {"cpu": "4"}, {("c1-low", IN_CQ)}, priority=1,
    ), id="a-borrowing-queue-preempts-its-own-lowest-priority-workload-and-keeps-borrowing"),
    # "preempting locally and borrowing same resource in cohort; no borrowing limit in the cohort"
    pytest.param(*kueue_case(
        [admitted("d1-med", "d1", {"cpu": "4"}), admitted("d1-low", "d1", {"cpu": "4"}, -1),
         admitted("d2-low-1", "d2", {"cpu": "4"}, -1)],
        "d1", {"cpu": "4"}, {("d1-low", IN_CQ)}, priority=1,
    ), id="the-same-without-a-borrowing-limit"),
    # "preempting locally and borrowing other resources in cohort, with cohort candidates"
    pytest.param(*kueue_case(
        [admitted("c1-med", "c1", {"cpu": "4"}), admitted("c2-low-1", "c2", {"cpu": "5"}, -1),
         admitted("c2-low-2", "c2", {"cpu": "1"}, -1), admitted("c2-low-3", "c2", {"cpu": "1"}, -1)],
        "c1", {"cpu": "2", "memory": "5"}, {("c1-med", IN_CQ)}, priority=1, frs=BOTH,
    ), id="a-preemptor-that-borrows-memory-does-not-reclaim-cpu-from-another-queue"),
    # "preempting locally and not borrowing same resource in 1-queue cohort"
    pytest.param(*kueue_case(
        [admitted("l1-med", "l1", {"cpu": "4"}), admitted("l1-low", "l1", {"cpu": "2"}, -1)],
        "l1", {"cpu": "4"}, {("l1-med", IN_CQ)}, priority=1,
    ), id="alone-in-its-cohort-a-queue-preempts-what-makes-room"),
    # "do not reclaim borrowed quota from same priority for withinCohort=ReclaimFromLowerPriority"
    pytest.param(*kueue_case(
        [admitted("c1", "c1", {"cpu": "2"}), admitted("c2-1", "c2", {"cpu": "4"}), admitted("c2-2", "c2", {"cpu": "4"})],
        "c1", {"cpu": "4"}, set(),
    ), id="reclaimWithinCohort-LowerPriority-spares-an-equal-priority-borrower"),
    # "reclaim borrowed quota from same priority for withinCohort=ReclaimFromAny"
    pytest.param(*kueue_case(
        [admitted("c1-1", "c1", {"cpu": "4"}), admitted("c1-2", "c1", {"cpu": "4"}, 1), admitted("c2", "c2", {"cpu": "2"})],
        "c2", {"cpu": "4"}, {("c1-1", RECLAIM)},
    ), id="reclaimWithinCohort-Any-reclaims-from-an-equal-priority-borrower"),
    # "preempt from all ClusterQueues in cohort"
    pytest.param(*kueue_case(
        [admitted("c1-low", "c1", {"cpu": "3"}, -1), admitted("c1-mid", "c1", {"cpu": "2"}),
         admitted("c2-low", "c2", {"cpu": "3"}, -1), admitted("c2-mid", "c2", {"cpu": "4"})],
        "c1", {"cpu": "4"}, {("c1-low", IN_CQ), ("c2-low", RECLAIM)},
    ), id="victims-come-from-both-the-own-queue-and-a-borrower"),
    # "can't preempt workloads in ClusterQueue for withinClusterQueue=Never"
    pytest.param(*kueue_case(
        [admitted("c2-low", "c2", {"cpu": "3"}, -1)], "c2", {"cpu": "4"}, set(), priority=1, frs=[("default", "cpu")],
    ), id="withinClusterQueue-Never-preempts-nothing-at-home"),
    # "use BorrowWithinCohort; allow preempting a lower-priority workload from another ClusterQueue while borrowing"
    pytest.param(*kueue_case(
        [admitted("a_best_effort_low", "a_best_effort", {"cpu": "10"}, -1),
         admitted("b_best_effort_low", "b_best_effort", {"cpu": "1"}, -1)],
        "a_standard", {"cpu": "10"}, {("a_best_effort_low", WHILE_BORROWING)},
    ), id="borrowWithinCohort-lets-a-borrowing-preemptor-reclaim-below-the-threshold"),
    # "use BorrowWithinCohort; don't allow preempting a lower-priority workload with priority above
    # MaxPriorityThreshold, if borrowing is required even after the preemption"
    pytest.param(*kueue_case(
        [admitted("b_standard", "b_standard", {"cpu": "10"}, 1)], "a_standard", {"cpu": "10"}, set(), priority=2,
    ), id="borrowWithinCohort-spares-a-workload-above-the-threshold-while-the-preemptor-would-borrow"),
    # "use BorrowWithinCohort; allow preempting a lower-priority workload with priority above
    # MaxPriorityThreshold, if borrowing is not required after the preemption"
    pytest.param(*kueue_case(
        [admitted("b_standard", "b_standard", {"cpu": "13"}, 1)], "a_standard", {"cpu": "1"},
        {("b_standard", RECLAIM)}, priority=2,
    ), id="a-workload-above-the-threshold-is-reclaimed-when-the-preemptor-then-fits-its-nominal-quota"),
    # "use BorrowWithinCohort; don't allow for preemption of lower-priority workload from the same ClusterQueue"
    pytest.param(*kueue_case(
        [admitted("a_standard", "a_standard", {"cpu": "13"}, 1)], "a_standard", {"cpu": "1"}, set(), priority=2,
    ), id="borrowWithinCohort-does-not-open-the-own-queue-when-withinClusterQueue-is-Never"),
    # "use BorrowWithinCohort; only preempt from CQ if no workloads below threshold and already above nominal"
    pytest.param(*kueue_case(
        [admitted("a_standard_1", "a_standard", {"cpu": "10"}, 1), admitted("a_standard_2", "a_standard", {"cpu": "1"}, 1),
         admitted("b_standard_1", "b_standard", {"cpu": "1"}, 1), admitted("b_standard_2", "b_standard", {"cpu": "1"}, 2)],
        "b_standard", {"cpu": "1"}, {("b_standard_1", IN_CQ)}, priority=3,
    ), id="a-borrowing-preemptor-with-nothing-below-the-threshold-elsewhere-preempts-at-home"),
    # "use BorrowWithinCohort; preempt from CQ and from other CQs with workloads below threshold"
    pytest.param(*kueue_case(
        [admitted("b_standard_high", "b_standard", {"cpu": "10"}, 2), admitted("b_standard_mid", "b_standard", {"cpu": "1"}, 1),
         admitted("a_best_effort_low", "a_best_effort", {"cpu": "1"}, -1),
         admitted("a_best_effort_lower", "a_best_effort", {"cpu": "1"}, -2)],
        "b_standard", {"cpu": "2"}, {("b_standard_mid", IN_CQ), ("a_best_effort_lower", WHILE_BORROWING)}, priority=2,
    ), id="below-the-threshold-elsewhere-and-lower-priority-at-home-together"),
    # "reclaim quota from lender"
    pytest.param(*kueue_case(
        [admitted("lend1-low", "lend1", {"cpu": "3"}, -1), admitted("lend2-mid", "lend2", {"cpu": "3"}),
         admitted("lend2-high", "lend2", {"cpu": "4"}, 1)],
        "lend1", {"cpu": "3"}, {("lend2-mid", RECLAIM)}, priority=1,
    ), id="with-lending-limits-the-lent-quota-is-reclaimed"),
    # "preempt from all ClusterQueues in cohort-lend"
    pytest.param(*kueue_case(
        [admitted("lend1-low", "lend1", {"cpu": "3"}, -1), admitted("lend1-mid", "lend1", {"cpu": "2"}),
         admitted("lend2-low", "lend2", {"cpu": "3"}, -1), admitted("lend2-mid", "lend2", {"cpu": "4"})],
        "lend1", {"cpu": "4"}, {("lend1-low", IN_CQ), ("lend2-low", RECLAIM)},
    ), id="with-lending-limits-victims-come-from-both-queues"),
    # "cannot preempt from other ClusterQueues if exceeds requestable quota including lending limit"
    pytest.param(*kueue_case(
        [admitted("lend2-low", "lend2", {"cpu": "10"}, -1)], "lend1", {"cpu": "9"}, set(),
    ), id="nothing-is-preempted-for-a-request-beyond-what-the-lending-limits-allow"),
    # "preemptions from cq when target queue is exhausted for the single requested resource"
    pytest.param(*kueue_case(
        [admitted("a1", "a", {"cpu": "1"}, -2), admitted("a2", "a", {"cpu": "1"}, -2), admitted("a3", "a", {"cpu": "1"}, -1),
         admitted("b1", "b", {"cpu": "1"}), admitted("b2", "b", {"cpu": "1"}), admitted("b3", "b", {"cpu": "1"})],
        "a", {"cpu": "2"}, {("a1", IN_CQ), ("a2", IN_CQ)},
    ), id="a-queue-over-its-nominal-quota-preempts-at-home"),
    # "preemptions from cq when target queue is exhausted for two requested resources"
    pytest.param(*kueue_case(
        [admitted(n, "a", {"cpu": "1", "memory": "1"}, p) for n, p in (("a1", -2), ("a2", -2), ("a3", -1))]
        + [admitted(n, "b", {"cpu": "1", "memory": "1"}) for n in ("b1", "b2", "b3")],
        "a", {"cpu": "2", "memory": "2"}, {("a1", IN_CQ), ("a2", IN_CQ)},
    ), id="a-queue-over-its-nominal-quota-in-two-resources-preempts-at-home"),
    # "preemptions from cq when target queue is exhausted for one requested resource, but not the other"
    pytest.param(*kueue_case(
        [admitted(n, "a", {"cpu": "1"}, p) for n, p in (("a1", -2), ("a2", -2), ("a3", -1))]
        + [admitted(n, "b", {"cpu": "1"}) for n in ("b1", "b2", "b3")],
        "a", {"cpu": "2", "memory": "2"}, {("a1", IN_CQ), ("a2", IN_CQ)}, frs=BOTH,
    ), id="a-queue-over-its-nominal-quota-in-one-of-two-resources-preempts-at-home"),
    # "allow preemption from other cluster queues if target cq is not exhausted for the requested resource"
    pytest.param(*kueue_case(
        [admitted("a1", "a", {"cpu": "1"}, -1)] + [admitted(f"b{i}", "b", {"cpu": "1"}) for i in range(1, 5)]
        + [admitted("b5", "b", {"cpu": "1"}, -1)],
        "a", {"cpu": "2"}, {("a1", IN_CQ), ("b5", RECLAIM)},
    ), id="a-queue-below-its-nominal-quota-reclaims-the-rest-from-a-borrower"),
]


@pytest.mark.parametrize(("case", "want"), CLASSICAL)
def test_classical_preemption_in_a_cohort(case, want):
    queues, cohorts, workloads, target, requests, kw = case
    assert preempted(queues, workloads, target, requests, cohorts=cohorts, **kw) == want


# TestPreemption "long range preemption" and TestHierarchicalPreemptions. In the diagrams, a
# number in () is the node's nominal quota of cpu.
LONG_RANGE = (
    {
        "cq-left": queue_spec({"default": {"cpu": "10"}}, "cohort-left", reclaim="Any"),
        "cq-right": queue_spec({"default": {"cpu": "0"}}, "cohort-right"),
    },
    (cohort("cohort-left", "root"), cohort("cohort-right", "root")),
)


def hierarchy(*extra: tuple[str, str, str], q_quota="0", q_borrow_below=None, c_quota="2"):
    """      r
          /     \\
        c(c_quota)  extra queues of r (or of c when so named)
        /
       q(q_quota)"""
    queues = {"q": queue_spec({"default": {"cpu": q_quota}}, "c", "LowerPriority", "Any", borrow_below=q_borrow_below)}
    for name, parent, nominal in extra:
        queues[name] = queue_spec({"default": {"cpu": nominal}}, parent, "LowerPriority", "Any")
    return queues, (cohort("r"), cohort("c", "r", {"default": {"cpu": c_quota}}))


HIERARCHICAL = [
    # "long range preemption"
    pytest.param(
        *LONG_RANGE, [admitted("to-be-preempted", "cq-right", {"cpu": "5"})], "cq-left", {"cpu": "8"}, {},
        {("to-be-preempted", RECLAIM)}, id="a-queue-reclaims-from-a-borrower-in-a-sibling-subtree",
    ),
    # "preempt with hierarchical advantage"
    pytest.param(
        *hierarchy(("q_borrowing", "r", "0")), [admitted("admitted2", "q_borrowing", {"cpu": "2"})], "q", {"cpu": "2"}, {},
        {("admitted2", RECLAIM)}, id="the-quota-of-its-own-cohort-gives-the-preemptor-an-advantage-whatever-the-priority",
    ),
    # "avoid queues within nominal quota"
    pytest.param(
        *hierarchy(("q_borrowing", "r", "0"), ("q_nominal", "r", "2")),
        [admitted("admitted1", "q_nominal", {"cpu": "2"}, -10), admitted("admitted2", "q_borrowing", {"cpu": "2"})],
        "q", {"cpu": "2"}, {}, {("admitted2", RECLAIM)}, id="a-queue-within-its-nominal-quota-is-never-a-candidate",
    ),
    # "preempt multiple with hierarchical advantage"
    pytest.param(
        *hierarchy(("q_borrowing", "r", "0")),
        [admitted("admitted1", "q_borrowing", {"cpu": "1"}, 1), admitted("admitted2", "q_borrowing", {"cpu": "1"}, 2)],
        "q", {"cpu": "2"}, {}, {("admitted1", RECLAIM), ("admitted2", RECLAIM)},
        id="a-hierarchical-advantage-preempts-several-higher-priority-borrowers",
    ),
    # "preempt in cohort and own CQ"
    pytest.param(
        *hierarchy(("q_same_cohort", "c", "0"), q_borrow_below=0, c_quota="3"),
        [admitted("admitted_not_preemptible", "q_same_cohort", {"cpu": "1"}, 1),
         admitted("admitted_preemptible", "q_same_cohort", {"cpu": "2"}),
         admitted("admitted_own_queue", "q", {"cpu": "1"}, -1)],
        "q", {"cpu": "2"}, {"priority": 1},
        {("admitted_own_queue", IN_CQ), ("admitted_preemptible", WHILE_BORROWING)},
        id="without-an-advantage-a-borrowing-preemptor-takes-below-the-threshold-and-at-home",
    ),
    # "prefer to preempt hierarchical candidate"
    pytest.param(
        *hierarchy(("q_borrowing", "r", "0")),
        [admitted("admitted_borrowing", "q_borrowing", {"cpu": "1"}, 1), admitted("admitted_same_queue", "q", {"cpu": "1"}, -2)],
        "q", {"cpu": "1"}, {}, {("admitted_borrowing", RECLAIM)},
        id="a-hierarchical-candidate-goes-before-a-lower-priority-one-at-home",
    ),
    # "forced to preempt priority candidate"
    pytest.param(
        *hierarchy(("q_nominal", "r", "2"), ("q_same_cohort", "c", "0"), q_borrow_below=0),
        [admitted("admitted_nominal", "q_nominal", {"cpu": "2"}, -10),
         admitted("admitted_same_cohort", "q_same_cohort", {"cpu": "2"}, -1)],
        "q", {"cpu": "2"}, {}, {("admitted_same_cohort", WHILE_BORROWING)},
        id="without-an-advantage-only-a-priority-candidate-below-the-threshold-can-go",
    ),
    # "incoming workload fits in CQ nominal quota"
    pytest.param(
        *hierarchy(("q_borrowing", "r", "0"), ("q_same_cohort", "c", "0"), q_quota="4"),
        [admitted("admitted_borrowing", "q_borrowing", {"cpu": "3"}, 10),
         admitted("admitted_same_cohort", "q_same_cohort", {"cpu": "3"}, 10)],
        "q", {"cpu": "4"}, {}, {("admitted_borrowing", RECLAIM), ("admitted_same_cohort", RECLAIM)},
        id="a-request-within-nominal-quota-reclaims-from-every-subtree-borrowing-it",
    ),
]


@pytest.mark.parametrize(("queues", "cohorts", "workloads", "target", "requests", "kw", "want"), HIERARCHICAL)
def test_hierarchical_preemption(queues, cohorts, workloads, target, requests, kw, want):
    assert preempted(queues, workloads, target, requests, cohorts=cohorts, **kw) == want


def test_a_workload_being_evicted_is_taken_first_and_holds_quota_until_it_leaves():
    # Kueue's CandidatesOrdering: workloads already marked for preemption come first.
    workloads = [admitted("low", "standalone", {"cpu": "3"}, -1), admitted("evicting", "standalone", {"cpu": "3"}, evicting=True)]
    assert preempted(KUEUE_QUEUES, workloads, "standalone", {"cpu": "3"}, priority=1) == {("evicting", IN_CQ)}


def test_the_victim_message_names_both_paths_in_the_cohort_tree():
    queues, cohorts = hierarchy(("q_borrowing", "r", "0"))
    tree, _ = build(queues, cohorts)
    assert (preemption.cohort_path(tree, "q"), preemption.cohort_path(tree, "q_borrowing")) == ("/r/c/q", "/r/q_borrowing")
    incoming = entry("in")
    # TestHierarchicalPreemptions "preempt with hierarchical advantage", for a Workload without a Job.
    assert preemption.preemption_message(incoming, "/r/c/q", "/r/q_borrowing", RECLAIM) == (
        "Preempted to accommodate a workload (UID: uid-in, JobUID: UNKNOWN) due to reclamation within the cohort; "
        "preemptor path: /r/c/q; preemptee path: /r/q_borrowing"
    )


@pytest.mark.parametrize(
    ("reason", "words"),
    [
        pytest.param(IN_CQ, "prioritization in the ClusterQueue", id="in-cluster-queue"),
        pytest.param(RECLAIM, "reclamation within the cohort", id="in-cohort-reclamation"),
        pytest.param(FAIR, "Fair Sharing within the cohort", id="in-cohort-fair-sharing"),
        pytest.param(WHILE_BORROWING, "reclamation within the cohort while borrowing", id="in-cohort-reclaim-while-borrowing"),
    ],
)
def test_each_reason_has_kueues_words(reason, words):
    tree, _ = build({"solo": queue_spec({"default": {"cpu": "1"}})})
    path = preemption.cohort_path(tree, "solo")
    assert preemption.preemption_message(entry("p"), path, path, reason) == (
        f"Preempted to accommodate a workload (UID: uid-p, JobUID: UNKNOWN) due to {words}; "
        "preemptor path: /solo; preemptee path: /solo"
    )


# --- fair sharing: TestFairPreemptions ------------------------------------------------------------

FAIR_QUEUES = {
    **{
        name: queue_spec({"default": {"cpu": "3"}}, "all", "LowerPriority", "Any", borrow_below=-3)
        for name in ("a", "b", "c")
    },
    "preemptible": queue_spec({"default": {"cpu": "0"}}, "all"),
}


def units(queue: str, *names: str, priority: int = 0):
    return [admitted(n, queue, {"cpu": "1"}, priority) for n in names]


def weighted(weights: dict[str, str], nominal="3", **kw) -> dict[str, ClusterQueueSpec]:
    return {
        name: queue_spec({"default": {"cpu": nominal}}, "all", "LowerPriority", "Any", weight=w, **kw)
        for name, w in weights.items()
    }


def fair_case(workloads, target, cpu, want, queues=FAIR_QUEUES, cohorts=(), strategies=(), priority=0):
    return queues, cohorts, workloads, target, cpu, list(strategies), priority, want


# The tree of "hierarchical preemption": (usage, quota, subtree quota) per node.
#                root(20,5,20)
#             /       |         \
#       left(5,5,7)  c(5,1,1)   right(10,5,7)
#       /       \               /      \
#     a(0,1,1)    b(5,1,1)   d(5,1,1)    e(5,1,1)
HIERARCHY_QUEUES = {
    "a": queue_spec({"default": {"cpu": "1"}}, "left", reclaim="Any", weight="2"),
    "b": queue_spec({"default": {"cpu": "1"}}, "left"),
    "c": queue_spec({"default": {"cpu": "1"}}, "root"),
    "d": queue_spec({"default": {"cpu": "1"}}, "right"),
    "e": queue_spec({"default": {"cpu": "1"}}, "right", weight="0.99"),
}
HIERARCHY_COHORTS = (
    cohort("root", quotas={"default": {"cpu": "5"}}),
    cohort("left", "root", {"default": {"cpu": "5"}}, weight=2.0),
    cohort("right", "root", {"default": {"cpu": "5"}}),
)
PROTECTED_QUEUES = {
    "a": queue_spec({"default": {"cpu": "5"}}, "root", "LowerPriority", "Any", weight="10"),
    "b": queue_spec({"default": {"cpu": "0"}}, "right", weight="0.1"),
}
DEEP_COHORTS = (
    cohort("root"),
    cohort("a", "root", weight=1.01), cohort("aa", "a"), cohort("aaa", "aa"),
    cohort("b", "root", weight=0.99), cohort("bb", "b"), cohort("bbb", "bb"),
    cohort("c", "root"), cohort("cc", "c"), cohort("ccc", "cc"), cohort("cccc", "ccc", {"default": {"cpu": "1"}}),
)

FAIR_CASES = [
    pytest.param(*fair_case(
        units("a", "a1", "a2", "a3") + units("b", "b1", "b2", "b3", "b4", "b5") + units("c", "c1"),
        "c", "1", {("b1", RECLAIM)},
    ), id="reclaim-nominal-from-the-queue-using-the-most"),
    pytest.param(*fair_case(
        [admitted("a1", "a", {"cpu": "3"}), admitted("a2", "a", {"cpu": "1"}),
         admitted("b1", "b", {"cpu": "2"}), admitted("b2", "b", {"cpu": "3"})],
        "c", "3", {("a1", RECLAIM)},
    ), id="reclaim-from-a-queue-using-less-when-the-latest-of-the-one-using-most-is-not-enough"),
    pytest.param(*fair_case(
        units("a", "a1", "a2", "a3") + units("b", "b1", "b2", "b3", "b4", "b5") + units("c", "c1"),
        "a", "1", {("b1", FAIR)},
    ), id="borrowable-quota-goes-back-from-the-queue-using-the-most"),
    pytest.param(*fair_case(
        [admitted(n, q, {"cpu": c}) for n, q, c in (
            ("a1", "a", "0.5"), ("a2", "a", "0.5"), ("a3", "a", "3"), ("b1", "b", "0.5"), ("b2", "b", "0.5"), ("b3", "b", "3"))],
        "c", "2", {("a1", RECLAIM), ("b1", RECLAIM)},
    ), id="one-is-preempted-from-each-borrowing-queue"),
    pytest.param(*fair_case(
        units("a", "a1", "a2", "a3") + units("b", "b1", "b2", "b3") + units("c", "c1", "c2", "c3"), "c", "1", set(),
    ), id="nothing-is-preempted-when-everyone-is-within-nominal-quota"),
    pytest.param(*fair_case(
        units("a", "a1", "a2", "a3") + units("b", "b1", "b2", "b3", "b4", "b5"), "a", "2", set(),
    ), id="nothing-is-preempted-when-it-would-switch-the-imbalance"),
    pytest.param(*fair_case(
        units("a", "a1_low", "a2_low", priority=-1) + units("a", "a3", "a4") + units("b", "b1", "b2", "b3", "b4", "b5"),
        "a", "2", {("a1_low", IN_CQ), ("a2_low", IN_CQ)},
    ), id="lower-priority-workloads-of-the-own-queue-are-preempted"),
    pytest.param(*fair_case(
        units("a", "a_low", priority=-1) + units("a", "a2", "a3") + units("b", "b1", "b2", "b3", "b4", "b5", "b6"),
        "a", "2", {("a_low", IN_CQ), ("b1", FAIR)},
    ), id="the-own-queue-and-the-queue-using-the-most-together"),
    pytest.param(*fair_case(
        [admitted("b1", "b", {"cpu": "9"})], "a", "2", {("b1", RECLAIM)},
    ), id="a-huge-workload-goes-when-nothing-else-would-do"),
    pytest.param(*fair_case(
        [admitted("a1", "a", {"cpu": "2"}), admitted("b1", "b", {"cpu": "7"})], "a", "5", set(),
    ), id="a-huge-workload-stays-when-the-incoming-one-is-huge-too"),
    pytest.param(*fair_case(
        [admitted("b1", "b", {"cpu": "2"}), admitted("b2", "b", {"cpu": "2"}), admitted("b3", "b", {"cpu": "3"})], "a", "6", set(),
    ), id="two-smaller-workloads-stay-when-the-incoming-one-is-huge"),
    pytest.param(*fair_case(
        [admitted("a1_low", "a", {"cpu": "2"}, -1), admitted("a2_low", "a", {"cpu": "1"}, -1),
         admitted("b1", "b", {"cpu": "3"}), admitted("b2", "b", {"cpu": "3"})],
        "a", "4", {("a1_low", IN_CQ), ("b1", FAIR)},
    ), id="the-own-queue-and-another-even-over-nominal-quota"),
    pytest.param(*fair_case(
        [admitted("b1", "b", {"cpu": "2"}), admitted("b2", "b", {"cpu": "1"}), admitted("b3", "b", {"cpu": "2"}),
         admitted("c1", "c", {"cpu": "1"})],
        "a", "3.5", {("b2", FAIR)},
    ), id="the-workload-that-does-not-leave-the-target-with-the-biggest-share-goes"),
    pytest.param(*fair_case(
        [admitted("b1", "b", {"cpu": "2"}), admitted("b2", "b", {"cpu": "2.5"}),
         admitted("c1", "c", {"cpu": "2"}), admitted("c2", "c", {"cpu": "2.5"})],
        "a", "3.5", {("b1", FAIR), ("c1", FAIR)},
    ), id="victims-from-two-queues-when-the-result-has-a-smaller-max-share"),
    pytest.param(*fair_case(
        [admitted("a1", "a", {"cpu": "3.5"}), admitted("b2", "b", {"cpu": "2.5"}), admitted("c2", "c", {"cpu": "2.5"})],
        "b", "2", set(),
    ), id="the-scenario-above-does-not-flap"),
    pytest.param(*fair_case(
        [admitted("b1", "b", {"cpu": "3"}), admitted("b2", "b", {"cpu": "3"}), admitted("c1", "c", {"cpu": "3"})],
        "a", "4", set(),
    ), id="nothing-goes-that-would-take-the-target-under-nominal-quota-after-one-victim"),
    pytest.param(*fair_case(
        units("a", "a1", "a2", "a3") + units("b", "b1", "b2", "b3")
        + units("preemptible", "preemptible1", "preemptible2", "preemptible3", priority=-3),
        "a", "2", set(),
    ), id="workloads-below-the-priority-threshold-are-not-capriciously-preempted"),
    pytest.param(*fair_case(
        [admitted("a1", "a", {"cpu": "3"}), admitted("b_low", "b", {"cpu": "5"}), admitted("b_high", "b", {"cpu": "1"}, 1)],
        "a", "1", {("b_low", FAIR)}, strategies=["LessThanInitialShare"],
    ), id="LessThanInitialShare-takes-the-lower-priority-first-even-if-big"),
    pytest.param(*fair_case(
        [admitted("a1", "a", {"cpu": "3"}), admitted("b_low", "b", {"cpu": "5"}), admitted("b_high", "b", {"cpu": "1"}, 1)],
        "a", "1", {("b_high", FAIR)}, strategies=["LessThanOrEqualToFinalShare"],
    ), id="LessThanOrEqualToFinalShare-takes-what-does-not-transfer-the-imbalance-even-if-high-priority"),
    pytest.param(*fair_case(
        units("a", "a1", "a2", "a3") + units("b", "b1", "b2", "b3", "b4", "b5", "b6"),
        "a", "2", {("b1", FAIR), ("b2", FAIR)}, queues=weighted({"a": "2", "b": "1", "c": "1"}),
    ), id="a-queue-with-a-higher-weight-can-preempt-more"),
    pytest.param(*fair_case(
        units("a", "a1", "a2", "a3") + units("b", "b1", "b2", "b3", "b4", "b5", "b6"),
        "a", "3", {("b1", FAIR), ("b2", FAIR), ("b3", FAIR)}, queues=weighted({"a": "1", "b": "0", "c": "1"}),
    ), id="anything-borrowed-by-a-queue-of-weight-zero-can-be-preempted"),
    pytest.param(*fair_case(
        units("a", "a1", "a2", "a3") + units("b", "b1", "b2", "b3"), "a", "1", set(), queues=weighted({"a": "1", "b": "0"}),
    ), id="the-nominal-quota-of-a-queue-of-weight-zero-is-safe"),
    pytest.param(*fair_case(
        units("right-cq", "right-1"), "left-cq", "1", set(),
        queues={
            "left-cq": queue_spec({"default": {"cpu": "0"}}, "root", reclaim="Any"),
            "right-cq": queue_spec({"default": {"cpu": "0"}}, "right-cohort", reclaim="Any", weight="0"),
        },
        cohorts=(cohort("right-cohort", "root", {"default": {"cpu": "1"}}, weight=0.0),),
    ), id="the-nominal-quota-of-a-cohort-of-weight-zero-is-safe"),
    pytest.param(*fair_case(
        units("a", "a1"), "a", "1", {("a1", IN_CQ)}, queues={"a": queue_spec({"default": {"cpu": "1"}}, within="LowerPriority")},
        priority=1000,
    ), id="without-a-cohort-preemption-stays-in-the-queue"),
    pytest.param(*fair_case(
        [admitted(f"{q}{i}", q, {"cpu": "1"}, i) for q in "bcde" for i in range(1, 6)],
        "a", "5", {("b1", FAIR), ("b2", FAIR), ("c1", FAIR), ("c2", FAIR), ("e1", FAIR)},
        queues=HIERARCHY_QUEUES, cohorts=HIERARCHY_COHORTS,
    ), id="hierarchical-preemption-reaches-every-subtree"),
    pytest.param(*fair_case(
        units("a", "a1", "a2", "a3", priority=-1) + units("b", "b1", priority=-1),
        "a", "5", {("a1", IN_CQ), ("a2", IN_CQ), ("a3", IN_CQ)},
        queues=PROTECTED_QUEUES, cohorts=(cohort("root"), cohort("right", "root", {"default": {"cpu": "1"}}, weight=0.1)),
    ), id="a-borrowing-queue-in-a-cohort-that-does-not-borrow-is-protected"),
    pytest.param(*fair_case(
        units("a", "a1", "a2", "a3", priority=-1) + [admitted("b1", "b", {"cpu": "4"}, 100)],
        "a", "4", {("a1", IN_CQ), ("a2", IN_CQ), ("a3", IN_CQ)},
        queues={**PROTECTED_QUEUES, "a": queue_spec({"default": {"cpu": "5"}}, "root", "LowerPriority", "LowerPriority", weight="10")},
        cohorts=(cohort("root"), cohort("right", "root", {"default": {"cpu": "3"}}, weight=0.1)),
    ), id="a-borrowing-workload-too-important-forces-preemption-at-home"),
    pytest.param(*fair_case(
        units("b", "b1"), "a", "1", {("b1", FAIR)},
        queues={"a": queue_spec({"default": {"cpu": "0"}}, "aaa", reclaim="Any"), "b": queue_spec({"default": {"cpu": "0"}}, "bbb")},
        cohorts=DEEP_COHORTS,
    ), id="deep-preemption-compares-the-children-of-the-lowest-common-cohort"),
    pytest.param(*fair_case(
        units("b", "b1"), "a", "1", {("b1", RECLAIM)},
        queues={
            "a": queue_spec({"default": {"cpu": "1"}}, "root", reclaim="Any", weight="0"),
            "b": queue_spec({"default": {"cpu": "0"}}, "root", weight="1"),
        },
    ), id="a-queue-of-weight-zero-reclaims-its-nominal-quota"),
    pytest.param(*fair_case(
        units("b", "b1"), "a", "1", {("b1", FAIR)},
        queues={
            "a": queue_spec({"default": {"cpu": "0"}}, "a", reclaim="Any", weight="0"),
            "b": queue_spec({"default": {"cpu": "0"}}, "root", weight="1"),
        },
        cohorts=(cohort("a", "root", {"default": {"cpu": "1"}}, weight=0.0),),
    ), id="a-cohort-of-weight-zero-reclaims-its-nominal-quota"),
]


@pytest.mark.parametrize(("queues", "cohorts", "workloads", "target", "cpu", "strategies", "priority", "want"), FAIR_CASES)
def test_fair_sharing_preemption(queues, cohorts, workloads, target, cpu, strategies, priority, want):
    got = preempted(queues, workloads, target, {"cpu": cpu}, priority=priority, cohorts=cohorts, fair=strategies,
                    frs=[("default", "cpu")])
    assert got == want


def test_fair_sharing_a_queue_within_nominal_quota_in_what_it_asks_preempts_despite_its_high_share():
    # TestFairPreemptions "nominal first: workload fitting within nominal can preempt despite high
    # aggregate DRS": a borrows 5 cheap cpu but asks for premium, within its nominal quota.
    queues = {
        "a": queue_spec({"premium": {"cpu": "3"}, "cheap": {"cpu": "0"}}, "all", reclaim="Any"),
        "b": queue_spec({"premium": {"cpu": "0"}, "cheap": {"cpu": "6"}}, "all"),
    }
    workloads = (
        [admitted(f"a_prem{i}", "a", {"cpu": "1"}, flavor="premium") for i in (1, 2)]
        + [admitted(f"a_cheap{i}", "a", {"cpu": "1"}, flavor="cheap") for i in range(1, 6)]
        + [admitted("b_prem1", "b", {"cpu": "1"}, flavor="premium")]
    )
    assert preempted(queues, workloads, "a", {"cpu": "1"}, flavor="premium", fair=[]) == {("b_prem1", RECLAIM)}


def test_fair_sharing_leaves_the_weights_of_the_tree_as_they_were():
    tree, reservations = build(FAIR_QUEUES, workloads=units("b", "b1", "b2", "b3", "b4"))
    tree.queues["b"].weight = 7.0
    preemption.get_targets(entry("in", cpu=1000), "a", Assignment(
        pod_sets=[pod_set_assignment("main", 1, {"cpu": "4"}, "default")], mode="Preempt"),
        tree, FAIR_QUEUES, reservations, [], T0)
    assert tree.queues["b"].weight == 7.0


def test_reservations_may_come_as_a_queue_state_keyed_by_workload():
    tree, reservations = build(KUEUE_QUEUES, workloads=[admitted("low", "standalone", {"cpu": "6"}, -1)])
    by_key = {q: {r.key: r for r in rs} for q, rs in reservations.items()}
    assignment = Assignment(pod_sets=[pod_set_assignment("main", 1, {"cpu": "2"}, "default")], mode="Preempt")
    got = preemption.get_targets(entry("in", priority=1), "standalone", assignment, tree, KUEUE_QUEUES, by_key, None, T0)
    assert [(t.reservation.uid, t.cluster_queue, t.reason) for t in got] == [("low", "standalone", IN_CQ)]
