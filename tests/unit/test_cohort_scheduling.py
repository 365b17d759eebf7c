"""One scheduling pass over a cohort tree: borrowing, lending limits, hierarchical Cohorts, the order
of the heads of its ClusterQueues, and preemption across them.

Each scenario is a Kueue test, named in a comment: its integration tests
(test/integration/singlecluster/scheduler/scheduler_test.go, contexts "Using cohorts for sharing
unused resources", "Cohort provides resources directly", "Using cohorts for sharing with
LendingLimit", "Queueing with StrictFIFO") and the cohort cases of its scheduler's unit test
(pkg/scheduler/scheduler_test.go, TestSchedule). Kueue's unit test runs one scheduling cycle; a pass
here runs cycles until they change nothing, so where a second cycle would change the outcome the
expectation says what the second cycle does.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from admitflow.admission import cluster_queue as cq
from admitflow.admission import scheduler
from admitflow.admission.cluster_queue import ClusterQueueState, ClusterQueueView, LocalQueueInfo, Reservation
from admitflow.admission.flavor_assignment import Assignment, FlavorQuota, PodSetAssignment, ResourceGroupQuota
from admitflow.admission.pending_queue import QueueEntry
from admitflow.admission.quota_tree import CohortInfo, CohortTree, QuotaTree
from admitflow.admission.requests import PodSetRequest
from admitflow.admission.selectors import Toleration
from admitflow.api import resource_value
from tests.builders import flavor_manifest, manifest
from tests.unit.test_preemption import quota as resource_groups

NOW = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
V1BETA2 = "kueue.x-k8s.io/v1beta2"

INSTANCE = "cloud.provider.com/instance"
FLAVORS = {
    name: manifest(flavor_manifest(name, **spec)).spec
    for name, spec in {
        "default": {},
        "on-demand": {"nodeLabels": {INSTANCE: "on-demand"}},
        "spot": {},
        "spot-tainted": {
            "nodeLabels": {INSTANCE: "spot-tainted"},
            "nodeTaints": [{"key": INSTANCE, "value": "spot-tainted", "effect": "NoSchedule"}],
        },
        "spot-untainted": {"nodeLabels": {INSTANCE: "spot-untainted"}},
        "model-a": {},
    }.items()
}
SPOT_TOLERATION = Toleration(key=INSTANCE, operator="Equal", value="spot-tainted", effect="NoSchedule")


# --- building a cohort tree -------------------------------------------------------------------------

Quota = str | tuple[str, str | None, str | None]  # nominal, or (nominal, borrowingLimit, lendingLimit)


def queue(
    name: str, *groups: dict[str, dict[str, Quota]], cohort: str | None = None, tree: CohortTree | None = None,
    fair_sharing: list[str] | None = None, **spec: Any,
) -> ClusterQueueState:
    body = {"namespaceSelector": {}, "resourceGroups": resource_groups(list(groups)), **spec}
    if cohort:
        body["cohortName"] = cohort
    parsed = manifest({"apiVersion": V1BETA2, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": body}).spec
    used = {f for g in groups for f in g}
    view = ClusterQueueView(
        name=name, revision=1, spec=parsed, flavors={f: FLAVORS[f] for f in used},
        local_queues={f"default/lq-{name}": LocalQueueInfo()}, cohort_tree=tree, fair_sharing=fair_sharing,
    )
    state = ClusterQueueState(name=name)
    cq.set_view(state, view, NOW)
    return state


def cohort_groups(quota: dict[str, dict[str, Quota]] | None) -> tuple[ResourceGroupQuota, ...]:
    if quota is None:
        return ()
    return (
        ResourceGroupQuota(
            covered=tuple(next(iter(quota.values()))),
            flavors=tuple(
                FlavorQuota(
                    name=f,
                    nominal={r: resource_value(r, q if isinstance(q, str) else q[0]) for r, q in res.items()},
                    lending_limit={r: resource_value(r, q[2]) for r, q in res.items() if not isinstance(q, str) and q[2]},
                )
                for f, res in quota.items()
            ),
        ),
    )


def tree(
    root: str, quota: dict[str, dict[str, Quota]] | None = None, **cohorts: str | tuple[str, dict[str, dict[str, Quota]]]
) -> CohortTree:
    """The root Cohort (with its own `quota`, if any) and the others by name: their parent, or
    (parent, their own quota: flavor -> resource -> quota)."""
    infos = {root: CohortInfo(name=root, groups=cohort_groups(quota), explicit=True)}
    for name, value in cohorts.items():
        parent, own = value if isinstance(value, tuple) else (value, None)
        infos[name] = CohortInfo(name=name, parent=parent, groups=cohort_groups(own), explicit=True)
    return CohortTree(root=root, cohorts=infos)


def flat(name: str, quota: dict[str, dict[str, Quota]] | None = None) -> CohortTree:
    """A cohort of ClusterQueues only; with `quota`, a Cohort object that has quota of its own."""
    return tree(name, quota)


def entry(name: str, cq_name: str, cpu: str = "1", count: int = 1, priority: int = 0, age: int = 0,
          tolerate: bool = False, **other: str) -> QueueEntry:
    per_pod = {"cpu": resource_value("cpu", cpu)} if cpu else {}
    per_pod.update({r: resource_value(r, q) for r, q in other.items()})
    return QueueEntry(
        key=f"default/{name}", uid=f"uid-{name}", ticket=1, local_queue=f"lq-{cq_name}", priority=priority,
        timestamp=NOW - timedelta(seconds=age),
        pod_sets=[PodSetRequest(name="main", count=count, per_pod=per_pod, tolerations=(SPOT_TOLERATION,) if tolerate else ())],
    )


def submit(state: ClusterQueueState, *entries: QueueEntry) -> None:
    for e in entries:
        cq.enqueue(state, e)


def holding(state: ClusterQueueState, name: str, priority: int = 0, age: int = 60, **by_flavor: str) -> Reservation:
    """A workload that already holds quota: flavor (with _ for -) -> cpu."""
    pod_sets = [
        PodSetAssignment(name=f"ps{i}", flavors={"cpu": f.replace("_", "-")}, resource_usage={"cpu": resource_value("cpu", q)}, count=1)
        for i, (f, q) in enumerate(by_flavor.items())
    ]
    r = Reservation(
        key=f"default/{name}", uid=f"uid-{name}", ticket=1, local_queue=f"lq-{state.name}", priority=priority,
        timestamp=NOW - timedelta(seconds=age), assignment=Assignment(pod_sets=pod_sets, mode="Fit"),
        reserved_at=NOW - timedelta(seconds=age), admitted=True,
    )
    state.reservations[r.key] = r
    return r


def run(*states: ClusterQueueState) -> dict[str, scheduler.PassResult]:
    return scheduler.schedule(list(states), NOW)


def reserved(results: dict[str, scheduler.PassResult]) -> dict[str, dict[str, str]]:
    """workload name -> resource (pod set/resource with several pod sets) -> flavor, over every queue."""
    out = {}
    for result in results.values():
        for r in result.reserved:
            many = len(r.assignment.pod_sets) > 1
            out[r.key.split("/")[1]] = {
                f"{ps.name}/{res}" if many else res: f for ps in r.assignment.pod_sets for res, f in ps.flavors.items()
            }
    return out


def told(results: dict[str, scheduler.PassResult], kind: str = "pending") -> dict[str, tuple[str, str]]:
    return {n.key.split("/")[1]: (n.reason, n.message) for result in results.values() for n in result.notices if n.kind == kind}


def evicted(results: dict[str, scheduler.PassResult]) -> dict[str, tuple[str, str]]:
    """victim -> (its queue's result it was found in, preemption reason)."""
    return {
        n.key.split("/")[1]: (name, n.preemption_reason)
        for name, result in results.items()
        for n in result.notices
        if n.kind == "evicted"
    }


def quota_tree(*states: ClusterQueueState) -> QuotaTree:
    """The tree as the queues' reservations hold it."""
    members = {s.name: (cq.quota_groups(s.view.spec), s.view.spec.cohort_name) for s in states}
    t = QuotaTree(members, next((s.view.cohort_tree for s in states if s.view.cohort_tree), None))
    for s in states:
        t.add(s.name, cq.usage(s.reservations.values()))
    return t


def over_committed(*states: ClusterQueueState) -> list:
    return quota_tree(*states).over_committed()


def insufficient(flavor: str, more: str, res: str = "cpu") -> str:
    return f"insufficient unused quota for {res} in flavor {flavor}, {more} more needed"


def capacity(flavor: str, before: str, request: str, maximum: str, res: str = "cpu") -> str:
    return (
        f"insufficient quota for {res} in flavor {flavor}, previously considered podsets requests ({before}) + "
        f"current podset request ({request}) > maximum capacity ({maximum})"
    )


def pod_set_message(*reasons: str, pod_set: str = "main") -> str:
    return f"couldn't assign flavors to pod set {pod_set}: {', '.join(sorted(reasons))}"


# --- Kueue's TestSchedule ClusterQueues: sales (no cohort), eng-alpha and eng-beta in cohort eng ----

ENG = flat("eng")


def sales() -> ClusterQueueState:
    return queue("sales", {"default": {"cpu": "50"}}, queueingStrategy="StrictFIFO")


def eng_alpha() -> ClusterQueueState:
    return queue(
        "eng-alpha", {"on-demand": {"cpu": ("50", "50", None)}, "spot": {"cpu": ("100", "0", None)}},
        cohort="eng", tree=ENG, queueingStrategy="StrictFIFO",
    )


def eng_beta() -> ClusterQueueState:
    return queue(
        "eng-beta",
        {"on-demand": {"cpu": ("50", "10", None)}, "spot": {"cpu": ("0", "100", None)}},
        {"model-a": {"example.com/gpu": ("20", "0", None)}},
        cohort="eng", tree=ENG, queueingStrategy="StrictFIFO",
        preemption={"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
    )


def eng_gamma() -> ClusterQueueState:
    return queue(
        "eng-gamma", {"on-demand": {"cpu": ("50", "10", None)}, "spot": {"cpu": ("0", "100", None)}},
        cohort="eng", tree=ENG, preemption={"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
    )


def lend_a() -> ClusterQueueState:
    return queue("lend-a", {"default": {"cpu": ("3", None, "2")}}, cohort="lend", tree=flat("lend"))


def lend_b() -> ClusterQueueState:
    return queue("lend-b", {"default": {"cpu": ("2", None, "2")}}, cohort="lend", tree=flat("lend"))


def co(name: str) -> ClusterQueueState:
    return queue(
        name, {"default": {"r1": ("10", "10", None), "r2": ("10", "10", None)}}, cohort="co", tree=flat("co"),
        preemption={"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
    )


def admit_in_different_cohorts():
    # Kueue: TestSchedule "admit in different cohorts"
    s, a, b = sales(), eng_alpha(), eng_beta()
    submit(s, entry("new-sales", "sales", count=1))
    submit(a, entry("new-alpha", "eng-alpha", count=51))  # borrows eng-beta's on-demand
    return (s, a, b), {"new-sales": {"cpu": "default"}, "new-alpha": {"cpu": "on-demand"}}


def alpha_and_beta(alpha: int, beta: int):
    """eng-alpha and eng-beta, each with a pending workload of that many 1-cpu pods."""
    a, b = eng_alpha(), eng_beta()
    submit(a, entry("new-alpha", "eng-alpha", count=alpha))
    submit(b, entry("new-beta", "eng-beta", count=beta))
    return a, b


def admit_in_same_cohort_with_no_borrowing():
    # Kueue: TestSchedule "admit in same cohort with no borrowing"
    return alpha_and_beta(40, 40), {"new-alpha": {"cpu": "on-demand"}, "new-beta": {"cpu": "on-demand"}}


def assign_multiple_resources_and_flavors():
    # Kueue: TestSchedule "assign multiple resources and flavors": pod set one borrows 10 cpu of
    # on-demand and takes gpus; pod set two finds on-demand past its maximum and borrows spot.
    a, b = eng_alpha(), eng_beta()
    e = QueueEntry(
        key="default/new", uid="uid-new", ticket=1, local_queue="lq-eng-beta", timestamp=NOW,
        pod_sets=[
            PodSetRequest(name="one", count=10, per_pod={"cpu": 6000, "example.com/gpu": 1}),
            PodSetRequest(name="two", count=40, per_pod={"cpu": 1000}),
        ],
    )
    submit(b, e)
    return (a, b), {"new": {"one/cpu": "on-demand", "one/example.com/gpu": "model-a", "two/cpu": "spot"}}


def cannot_borrow_if_cohort_was_assigned_and_would_result_in_overadmission():
    # Kueue: TestSchedule "cannot borrow if cohort was assigned and would result in overadmission":
    # the cycle admits eng-alpha's workload (no borrowing comes first) and passes eng-beta's over;
    # the next cycle finds on-demand too short to borrow and gives it spot, which eng-alpha lends.
    return alpha_and_beta(45, 56), {"new-alpha": {"cpu": "on-demand"}, "new-beta": {"cpu": "spot"}}


def can_borrow_if_cohort_was_assigned_and_will_not_result_in_overadmission():
    # Kueue: TestSchedule "can borrow if cohort was assigned and will not result in overadmission"
    return alpha_and_beta(45, 55), {"new-alpha": {"cpu": "on-demand"}, "new-beta": {"cpu": "on-demand"}}


def can_borrow_if_needs_reclaim_from_cohort_in_different_flavor():
    # Kueue: TestSchedule "can borrow if needs reclaim from cohort in different flavor": eng-alpha's
    # head cannot preempt for spot, so it keeps what it could use of its nominal spot quota for the
    # cycle; eng-beta borrows on-demand, which it does not compete for.
    a, b = eng_alpha(), eng_beta()
    submit(a, entry("can-reclaim", "eng-alpha", cpu="100"))
    submit(b, entry("needs-to-borrow", "eng-beta", cpu="1"))
    holding(b, "user-on-demand", on_demand="50")
    holding(b, "user-spot", spot="1")
    return (a, b), {"needs-to-borrow": {"cpu": "on-demand"}}


def not_enough_resources_to_borrow_fallback_to_next_flavor():
    # Kueue: TestSchedule "not enough resources to borrow, fallback to next flavor"
    a, b = eng_alpha(), eng_beta()
    submit(a, entry("new", "eng-alpha", count=60))
    holding(b, "existing", on_demand="45")
    return (a, b), {"new": {"cpu": "spot"}}


def no_overadmission_while_borrowing():
    # Kueue: TestSchedule "no overadmission while borrowing": eng-gamma's head finds nobody to
    # preempt and waits; today's Kueue sets such a workload aside (PreemptionNoCandidates).
    a, b, g = eng_alpha(), eng_beta(), eng_gamma()
    submit(b, entry("new", "eng-beta", count=50, age=2))
    submit(a, entry("new-alpha", "eng-alpha", count=1, age=1))
    submit(g, entry("new-gamma", "eng-gamma", count=50))
    holding(g, "existing", on_demand="51", spot="100")
    return (a, b, g), {"new": {"cpu": "on-demand"}, "new-alpha": {"cpu": "on-demand"}}


def two_workloads_borrow_different_resources_of_one_flavor():
    # Kueue: TestSchedule "two workloads can borrow different resources from the same flavor in the same cycle"
    q1, q2, q3 = co("cq1"), co("cq2"), co("cq3")
    submit(q1, entry("wl1", "cq1", cpu="", priority=-1, r1="16"))
    submit(q2, entry("wl2", "cq2", cpu="", priority=-2, r2="16"))
    return (q1, q2, q3), {"wl1": {"r1": "default"}, "wl2": {"r2": "default"}}


def two_workloads_borrow_one_resource_that_the_cohort_holds():
    # Kueue: TestSchedule "two workloads can borrow the same resources from the same flavor in the
    # same cycle if fits in the cohort quota"
    q1, q2, q3 = co("cq1"), co("cq2"), co("cq3")
    submit(q1, entry("wl1", "cq1", cpu="", priority=-1, r1="16"))
    submit(q2, entry("wl2", "cq2", cpu="", priority=-2, r1="14"))
    return (q1, q2, q3), {"wl1": {"r1": "default"}, "wl2": {"r1": "default"}}


def only_one_workload_borrows_what_the_cohort_cannot_hold_twice():
    # Kueue: TestSchedule "only one workload can borrow one resources from the same flavor in the
    # same cycle if cohort quota cannot fit"
    q1, q2, q3 = co("cq1"), co("cq2"), co("cq3")
    submit(q1, entry("wl1", "cq1", cpu="", priority=-1, r1="16"))
    submit(q2, entry("wl2", "cq2", cpu="", priority=-2, r1="16"))
    return (q1, q2, q3), {"wl1": {"r1": "default"}}


def workload_exceeds_lending_limit_when_borrowing():
    # Kueue: TestSchedule "workload exceeds lending limit when borrow in cohort"
    a, b = lend_a(), lend_b()
    holding(b, "a", default="2")
    submit(b, entry("b", "lend-b", cpu="3"))
    return (a, b), {}


def strict_fifo_head_does_not_block_another_queue_from_borrowing():
    # Kueue: "Queueing with StrictFIFO" / "Pending workload with StrictFIFO doesn't block other CQ
    # from borrowing from a third CQ": the StrictFIFO head that cannot fit keeps what it could use
    # of its nominal quota in every cycle; a workload of another queue borrows past it, one that
    # would take that room waits.
    t = flat("cohort")
    strict = queue("strict-fifo-cq", {"on-demand": {"cpu": ("5", "0", None)}}, cohort="cohort", tree=t, queueingStrategy="StrictFIFO")
    team_a = queue("team-a", {"on-demand": {"cpu": "5"}}, cohort="cohort", tree=t)
    shared = queue("shared-resources", {"on-demand": {"cpu": "5"}}, cohort="cohort", tree=t)
    holding(strict, "wl", priority=10, on_demand="3")
    holding(team_a, "player1-a", priority=1, on_demand="5")
    submit(strict, entry("pending-wl", "strict-fifo-cq", cpu="3", priority=99, age=3))
    submit(team_a, entry("player2-a", "team-a", cpu="5", priority=11, age=2))
    submit(team_a, entry("player3-a", "team-a", cpu="1", priority=10, age=1))
    return (strict, team_a, shared), {"player2-a": {"cpu": "on-demand"}}


@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(admit_in_different_cohorts, id="a-standalone-queue-and-a-borrowing-queue-of-a-cohort-both-admit"),
        pytest.param(admit_in_same_cohort_with_no_borrowing, id="two-queues-within-their-nominal-quota-both-admit"),
        pytest.param(assign_multiple_resources_and_flavors, id="a-pod-set-borrows-in-the-flavor-where-the-previous-one-left-room"),
        pytest.param(
            cannot_borrow_if_cohort_was_assigned_and_would_result_in_overadmission,
            id="a-borrower-passed-over-in-a-cycle-finds-another-flavor-in-the-next",
        ),
        pytest.param(
            can_borrow_if_cohort_was_assigned_and_will_not_result_in_overadmission,
            id="a-borrower-admits-in-the-same-cycle-when-the-cohort-holds-both",
        ),
        pytest.param(
            can_borrow_if_needs_reclaim_from_cohort_in_different_flavor,
            id="a-head-waiting-for-one-flavor-does-not-block-a-borrower-of-another",
        ),
        pytest.param(not_enough_resources_to_borrow_fallback_to_next_flavor, id="too-little-to-borrow-falls-back-to-the-next-flavor"),
        pytest.param(no_overadmission_while_borrowing, id="a-queue-past-its-limit-waits-while-the-others-admit"),
        pytest.param(two_workloads_borrow_different_resources_of_one_flavor, id="two-queues-borrow-different-resources-of-one-flavor"),
        pytest.param(two_workloads_borrow_one_resource_that_the_cohort_holds, id="two-queues-borrow-one-resource-the-cohort-holds-for-both"),
        pytest.param(only_one_workload_borrows_what_the_cohort_cannot_hold_twice, id="only-one-queue-borrows-what-the-cohort-holds-once"),
        pytest.param(workload_exceeds_lending_limit_when_borrowing, id="nobody-borrows-past-a-lending-limit"),
        pytest.param(strict_fifo_head_does_not_block_another_queue_from_borrowing, id="a-strict-fifo-head-keeps-its-room-but-lets-others-borrow"),
    ],
)
def test_one_pass_over_a_cohort(scenario):
    states, want = scenario()
    results = run(*states)
    assert reserved(results) == want
    assert over_committed(*states) == []


def test_a_head_passed_over_in_one_cycle_and_admitted_in_the_next_is_told_nothing():
    states, _ = cannot_borrow_if_cohort_was_assigned_and_would_result_in_overadmission()
    _, b = states
    b.pending.add(entry("later", "eng-beta", count=1))
    results = run(*states)
    # eng-beta is StrictFIFO; its head, once on spot, lets the next one through.
    assert reserved(results)["later"] == {"cpu": "on-demand"}
    assert told(results) == {}


def test_what_a_queue_waits_for_is_told_with_kueues_messages():
    states, _ = no_overadmission_while_borrowing()
    results = run(*states)
    assert told(results) == {
        "new-gamma": (
            "WaitingForQuota",
            pod_set_message(
                insufficient("on-demand", "41"),
                insufficient("spot", "50"),
            ),
        )
    }
    gamma = states[2]
    assert gamma.pending.get("default/new-gamma").inadmissible, "set aside: nobody to preempt (PreemptionNoCandidates)"


def test_a_workload_past_a_lending_limit_is_set_aside_with_what_it_lacks():
    states, _ = workload_exceeds_lending_limit_when_borrowing()
    results = run(*states)
    assert told(results) == {"b": ("WaitingForQuota", pod_set_message(insufficient("default", "1")))}
    assert states[1].pending.get("default/b").inadmissible


def test_only_one_borrower_then_the_other_waits_for_quota():
    states, _ = only_one_workload_borrows_what_the_cohort_cannot_hold_twice()
    results = run(*states)
    assert told(results) == {"wl2": ("WaitingForQuota", pod_set_message(insufficient("default", "2", res="r1"), pod_set="main"))}


def test_a_head_that_keeps_its_room_makes_a_later_borrower_wait():
    states, _ = strict_fifo_head_does_not_block_another_queue_from_borrowing()
    results = run(*states)
    assert told(results) == {
        "pending-wl": ("WaitingForQuota", pod_set_message(insufficient("on-demand", "1"))),
        # Passed over in every cycle while the StrictFIFO head keeps its room (Kueue's skip message).
        "player3-a": ("WaitingForQuota", "Workload no longer fits after processing another workload"),
    }
    team_a = states[1]
    assert not team_a.pending.get("default/player3-a").inadmissible, "passed over, not set aside: the next pass looks again"


def test_preemption_in_the_queue_and_in_the_cohort_at_once():
    # Kueue: TestSchedule "preempt workloads in ClusterQueue and cohort". Needs
    # preemption.get_targets (cross-queue reclaim).
    a, b = eng_alpha(), eng_beta()
    submit(b, entry("preemptor", "eng-beta", cpu="20"))
    holding(a, "use-all-spot", spot="100")
    holding(b, "low-1", priority=-1, on_demand="30")
    holding(b, "low-2", priority=-2, on_demand="10")
    holding(a, "borrower", on_demand="60")
    results = run(a, b)
    assert reserved(results) == {}
    assert evicted(results) == {"borrower": ("eng-alpha", "InCohortReclamation"), "low-2": ("eng-beta", "InClusterQueue")}
    messages = {n.key: n.message for r in results.values() for n in r.notices if n.kind == "evicted"}
    assert messages["default/low-2"].endswith(
        "due to prioritization in the ClusterQueue; preemptor path: /eng/eng-beta; preemptee path: /eng/eng-beta"
    )
    assert messages["default/borrower"].endswith(
        "due to reclamation within the cohort; preemptor path: /eng/eng-beta; preemptee path: /eng/eng-alpha"
    )
    assert a.reservations["default/borrower"].evicting and b.reservations["default/low-2"].evicting, "they hold quota until they leave"
    again = run(a, b)
    assert (reserved(again), evicted(again), told(again)) == ({}, {}, {}), "nobody is preempted or told twice"
    for state, name in ((a, "borrower"), (b, "low-2")):
        cq.release(state, f"default/{name}", f"uid-{name}", 1)
    assert reserved(run(a, b)) == {"preemptor": {"cpu": "on-demand"}}


def test_a_lender_takes_back_its_nominal_quota_from_a_borrower():
    # Lent quota is reclaimable: with reclaimWithinCohort Any, a workload that fits its queue's
    # nominal quota preempts what other queues borrowed of it. Needs preemption.get_targets.
    t = flat("all")
    lender = queue("lender", {"default": {"cpu": "10"}}, cohort="all", tree=t, preemption={"reclaimWithinCohort": "Any"})
    borrower = queue("borrower", {"default": {"cpu": "0"}}, cohort="all", tree=t)
    holding(borrower, "b1", priority=100, age=20, default="5")
    holding(borrower, "b2", priority=100, age=10, default="5")
    submit(lender, entry("mine", "lender", cpu="4"))
    results = run(lender, borrower)
    assert evicted(results) == {"b2": ("borrower", "InCohortReclamation")}, "the most recently reserved goes"
    cq.release(borrower, "default/b2", "uid-b2", 1)
    cq.enqueue(borrower, entry("b2", "borrower", cpu="5", priority=100).model_copy(update={"ticket": 2}))
    results = run(lender, borrower)
    assert reserved(results) == {"mine": {"cpu": "default"}}
    assert told(results) == {"b2": ("WaitingForQuota", pod_set_message(insufficient("default", "4")))}


def test_with_fair_sharing_the_queue_that_borrows_least_goes_first_whatever_the_priority():
    # Kueue's fair-sharing iterator (pkg/scheduler/fair_sharing_iterator.go): the head whose queue's
    # share after admission is lowest goes first; classically, priority would.
    def cohort(fair: list[str] | None):
        t = flat("all", {"default": {"cpu": "10"}})
        a = queue("cq-a", {"default": {"cpu": "0"}}, cohort="all", tree=t, fair_sharing=fair)
        b = queue("cq-b", {"default": {"cpu": "0"}}, cohort="all", tree=t, fair_sharing=fair)
        holding(a, "a1", default="6")
        submit(a, entry("a2", "cq-a", cpu="4", priority=10))
        submit(b, entry("b1", "cq-b", cpu="4", priority=0))
        return a, b

    assert reserved(run(*cohort(None))) == {"a2": {"cpu": "default"}}
    assert reserved(run(*cohort([]))) == {"b1": {"cpu": "default"}}


# --- "Using cohorts for sharing unused resources" ------------------------------------------------


def test_a_workload_borrows_what_a_queue_added_to_its_cohort_leaves_unused():
    # Kueue: "Should admit workloads using borrowed ClusterQueue"
    t = flat("all")
    prod = queue("prod-cq", {"spot-tainted": {"cpu": ("5", "0", None)}, "on-demand": {"cpu": "5"}}, cohort="all", tree=t)
    submit(prod, entry("wl", "prod-cq", cpu="10", tolerate=True))
    alone = run(prod)
    assert reserved(alone) == {}
    assert told(alone) == {
        "wl": ("ExceedsMaxQuota", pod_set_message(capacity("spot-tainted", "0", "10", "5"), capacity("on-demand", "0", "10", "5")))
    }

    # prod-cq's borrowingLimit of 0 keeps it from the fallback queue's spot-tainted quota.
    fallback = queue("fallback-cq", {"spot-tainted": {"cpu": "5"}, "on-demand": {"cpu": "5"}}, cohort="all", tree=t)
    cq.requeue_inadmissible(prod)
    results = run(prod, fallback)
    assert reserved(results) == {"wl": {"cpu": "on-demand"}}


def test_two_queues_borrow_from_a_third_in_the_same_pass():
    # Kueue: "Should schedule workloads borrowing quota from ClusterQueues in the same Cohort"
    t = flat("all")
    prod = queue("prod-cq", {"on-demand": {"cpu": ("5", "10", None)}}, cohort="all", tree=t)
    dev = queue("dev-cq", {"on-demand": {"cpu": ("5", "10", None)}}, cohort="all", tree=t)
    submit(prod, entry("wl-1", "prod-cq", cpu="11"))
    submit(dev, entry("wl-2", "dev-cq", cpu="11"))
    assert reserved(run(prod, dev)) == {}
    test_cq = queue("test-cq", {"on-demand": {"cpu": ("15", "0", None)}}, cohort="all", tree=t)
    for s in (prod, dev):
        cq.requeue_inadmissible(s)
    assert reserved(run(prod, dev, test_cq)) == {"wl-1": {"cpu": "on-demand"}, "wl-2": {"cpu": "on-demand"}}


def test_a_workload_within_its_nominal_quota_goes_before_an_older_one_that_borrows():
    # Kueue: "Should start workloads that are under min quota before borrowing"
    t = flat("all")
    prod = queue("prod-cq", {"on-demand": {"cpu": "2"}}, cohort="all", tree=t, queueingStrategy="StrictFIFO")
    dev = queue("dev-cq", {"on-demand": {"cpu": "0"}}, cohort="all", tree=t, queueingStrategy="StrictFIFO")
    submit(prod, entry("p-wl-1", "prod-cq", cpu="2", age=10))
    assert reserved(run(prod, dev)) == {"p-wl-1": {"cpu": "on-demand"}}
    submit(dev, entry("d-wl-1", "dev-cq", cpu="1", age=2))
    submit(prod, entry("p-wl-2", "prod-cq", cpu="2", age=1))
    assert reserved(run(prod, dev)) == {}

    cq.release(prod, "default/p-wl-1", "uid-p-wl-1", 1)
    results = run(prod, dev)
    assert reserved(results) == {"p-wl-2": {"cpu": "on-demand"}}, "the younger one, which does not borrow, goes first"
    assert [e.key for e in dev.pending] == ["default/d-wl-1"]

    cq.release(prod, "default/p-wl-2", "uid-p-wl-2", 1)
    assert reserved(run(prod, dev)) == {"d-wl-1": {"cpu": "on-demand"}}


def test_the_next_flavor_is_tried_when_nobody_can_be_preempted_in_the_first():
    # Kueue: "Should try next flavor if can't preempt on first" (whenCanPreempt: Preempt, v1beta1)
    prod = queue(
        "prod-cq", {"on-demand": {"cpu": "2"}, "spot-untainted": {"cpu": "2"}}, cohort="all", tree=flat("all"),
        queueingStrategy="StrictFIFO", preemption={"withinClusterQueue": "LowerPriority"},
        flavorFungibility={"whenCanPreempt": "MayStopSearch"},
    )
    submit(prod, entry("wl-1", "prod-cq", age=3), entry("wl-2", "prod-cq", age=2))
    assert reserved(run(prod)) == {"wl-1": {"cpu": "on-demand"}, "wl-2": {"cpu": "on-demand"}}
    submit(prod, entry("wl-3", "prod-cq", age=1))
    assert reserved(run(prod)) == {"wl-3": {"cpu": "spot-untainted"}}


def test_the_next_flavor_is_tried_instead_of_borrowing():
    # Kueue: "Should try next flavor instead of borrowing"
    t = flat("all")
    prod = queue("prod-cq", {"on-demand": {"cpu": ("10", "10", None)}}, cohort="all", tree=t)
    dev = queue(
        "dev-cq", {"on-demand": {"cpu": ("10", "10", None)}, "spot-tainted": {"cpu": "11"}}, cohort="all", tree=t,
        flavorFungibility={"whenCanBorrow": "TryNextFlavor"},
    )
    submit(prod, entry("wl-1", "prod-cq", cpu="9"))
    assert reserved(run(prod, dev)) == {"wl-1": {"cpu": "on-demand"}}
    submit(dev, entry("wl-2", "dev-cq", cpu="11", tolerate=True))
    assert reserved(run(prod, dev)) == {"wl-2": {"cpu": "spot-tainted"}}


def test_a_queue_preempts_a_borrower_before_trying_the_next_flavor():
    # Kueue: "Should preempt before try next flavor" (whenCanPreempt: Preempt, v1beta1). Needs
    # preemption.get_targets (cross-queue reclaim).
    t = flat("all")
    prod = queue(
        "prod-cq", {"on-demand": {"cpu": ("10", "10", None)}, "spot-untainted": {"cpu": "11"}}, cohort="all", tree=t,
        preemption={"reclaimWithinCohort": "Any"}, flavorFungibility={"whenCanPreempt": "MayStopSearch"},
    )
    dev = queue("dev-cq", {"on-demand": {"cpu": ("10", "10", None)}}, cohort="all", tree=t, flavorFungibility={"whenCanBorrow": "TryNextFlavor"})
    submit(dev, entry("wl-1", "dev-cq", cpu="9", priority=0, age=2), entry("wl-2", "dev-cq", cpu="9", priority=1, age=1))
    assert reserved(run(prod, dev)) == {"wl-1": {"cpu": "on-demand"}, "wl-2": {"cpu": "on-demand"}}

    submit(prod, entry("wl-3", "prod-cq", cpu="5"))
    results = run(prod, dev)
    assert evicted(results) == {"wl-1": ("dev-cq", "InCohortReclamation")}, "the victim is told in its own queue's result"
    (notice,) = [n for n in results["dev-cq"].notices if n.kind == "evicted"]
    assert notice.message == (
        "Preempted to accommodate a workload (UID: uid-wl-3, JobUID: UNKNOWN) due to reclamation within the cohort; "
        "preemptor path: /all/prod-cq; preemptee path: /all/dev-cq"
    )
    assert told(results) == {
        "wl-3": ("WaitingForPreemptedWorkloads", pod_set_message(insufficient("on-demand", "3")) + ". Pending the preemption of 1 workload(s)")
    }
    assert reserved(results) == {}

    cq.release(dev, "default/wl-1", "uid-wl-1", 1)
    assert reserved(run(prod, dev)) == {"wl-3": {"cpu": "on-demand"}}


# --- "Using cohorts for sharing with LendingLimit" --------------------------------------------------


def test_a_workload_borrows_what_a_queue_added_to_its_cohort_lends():
    # Kueue: "Using cohorts for sharing with LendingLimit" / "Should admit workloads using borrowed ClusterQueue"
    t = flat("all")
    prod = queue("prod-cq", {"on-demand": {"cpu": ("5", None, "1")}}, cohort="all", tree=t)
    submit(prod, entry("wl", "prod-cq", cpu="9"))
    assert told(run(prod)) == {"wl": ("ExceedsMaxQuota", pod_set_message(capacity("on-demand", "0", "9", "5")))}
    dev = queue("dev-cq", {"on-demand": {"cpu": ("5", None, "4")}}, cohort="all", tree=t)
    cq.requeue_inadmissible(prod)
    assert reserved(run(prod, dev)) == {"wl": {"cpu": "on-demand"}}


def test_a_workload_borrows_once_another_queue_raises_its_lending_limit():
    # Kueue: "Using cohorts for sharing with LendingLimit" / "Should admit workloads after updating lending limit"
    t = flat("all")
    prod = queue("prod-cq", {"on-demand": {"cpu": ("5", None, "0")}}, cohort="all", tree=t)
    dev = queue("dev-cq", {"on-demand": {"cpu": ("5", None, "0")}}, cohort="all", tree=t)
    submit(prod, entry("wl-1", "prod-cq", cpu="5", age=2), entry("wl-2", "prod-cq", cpu="5", age=1))
    assert reserved(run(prod, dev)) == {"wl-1": {"cpu": "on-demand"}}
    raised = queue("dev-cq", {"on-demand": {"cpu": ("5", None, "5")}}, cohort="all", tree=t)
    cq.set_view(dev, raised.view.model_copy(update={"revision": 2}), NOW)
    cq.requeue_inadmissible(prod)
    assert reserved(run(prod, dev)) == {"wl-2": {"cpu": "on-demand"}}


# --- "Cohort provides resources directly" (hierarchical cohorts) -----------------------------------


def test_a_cohort_of_its_own_provides_quota_once_it_has_enough():
    # Kueue: "Should admit workload using resources borrowed from cohort"
    implicit = flat("cohort")
    q = queue("clusterqueue", {"on-demand": {"cpu": "0"}}, cohort="cohort", tree=implicit)
    submit(q, entry("wl", "clusterqueue", cpu="10"))
    results = run(q)
    assert told(results) == {"wl": ("ExceedsMaxQuota", pod_set_message(capacity("on-demand", "0", "10", "0")))}

    for nominal, want in (("5", {}), ("10", {"wl": {"cpu": "on-demand"}})):
        q.view = q.view.model_copy(update={"cohort_tree": flat("cohort", {"on-demand": {"cpu": nominal}})})
        cq.requeue_inadmissible(q)
        assert reserved(run(q)) == want


def test_a_workload_borrows_from_a_distant_cohort_of_its_tree():
    # Kueue: "Long distance resource allows workload to be scheduled"
    #         root
    #        /    \
    #      left    right
    #     /           \
    #    cq            bank (10 cpu)
    without_bank = tree("root", left="root", right="root")
    q = queue("cq", {"on-demand": {"cpu": "0"}}, cohort="left", tree=without_bank)
    submit(q, entry("wl", "cq", cpu="10"))
    assert reserved(run(q)) == {}
    q.view = q.view.model_copy(
        update={"cohort_tree": tree("root", left="root", right="root", bank=("right", {"on-demand": {"cpu": "10"}}))}
    )
    cq.requeue_inadmissible(q)
    assert reserved(run(q)) == {"wl": {"cpu": "on-demand"}}


def test_an_overflow_workload_is_admitted_once_its_cohort_moves_under_a_larger_root():
    # Kueue: "Should admit overflow workload after reparenting child cohort to a larger root"
    q = queue("cq", {"on-demand": {"cpu": "0"}}, cohort="child", tree=tree("root-a", {"on-demand": {"cpu": "1"}}, child="root-a"))
    submit(q, *(entry(f"wl-{i}", "cq", cpu="500m", age=3 - i) for i in (1, 2)))
    assert reserved(run(q)) == {"wl-1": {"cpu": "on-demand"}, "wl-2": {"cpu": "on-demand"}}
    submit(q, entry("wl-overflow", "cq", cpu="500m"))
    assert reserved(run(q)) == {}
    q.view = q.view.model_copy(update={"cohort_tree": tree("root-b", {"on-demand": {"cpu": "2"}}, child="root-b")})
    cq.requeue_inadmissible(q)
    assert reserved(run(q)) == {"wl-overflow": {"cpu": "on-demand"}}


def three_borrowers(quota_tree: CohortTree, cohort: str, **spec) -> ClusterQueueState:
    q = queue("cq", {"on-demand": {"cpu": "0"}}, cohort=cohort, tree=quota_tree, **spec)
    for i in (1, 2, 3):
        holding(q, f"wl-{i}", on_demand="500m")
    return q


@pytest.mark.parametrize(
    "shrunk",
    [
        # Kueue: "Should not evict admitted workloads after reparenting child cohort to a smaller root"
        pytest.param(
            lambda: three_borrowers(tree("root-b", {"on-demand": {"cpu": "1"}}, child="root-b"), "child"),
            id="its-cohort-moved-under-a-smaller-root",
        ),
        # Kueue: "Should not evict admitted workloads after reducing ancestor cohort quota below usage"
        pytest.param(
            lambda: three_borrowers(tree("root", {"on-demand": {"cpu": "1"}}, child="root"), "child"),
            id="an-ancestor-lost-quota",
        ),
        # Kueue: "Should not evict borrowed workloads when lender cohort tightens lendingLimit"
        pytest.param(
            lambda: three_borrowers(
                tree("root", lender=("root", {"on-demand": {"cpu": ("2", None, "0")}}), borrower="root"), "borrower"
            ),
            id="the-lender-lends-nothing-any-more",
        ),
        # Kueue: "Should not evict borrowed workloads when borrower CQ sets borrowingLimit to zero"
        pytest.param(
            lambda: queue_with_limit_zero(),
            id="its-borrowing-limit-went-to-zero",
        ),
    ],
)
def test_what_is_admitted_stays_when_the_cohort_shrinks_and_new_workloads_wait(shrunk):
    q = shrunk()
    submit(q, entry("wl-new", "cq", cpu="500m"))
    results = run(q)
    assert (reserved(results), evicted(results)) == ({}, {})
    assert told(results)["wl-new"][0] in ("WaitingForQuota", "ExceedsMaxQuota")
    assert len(q.reservations) == 3


def queue_with_limit_zero() -> ClusterQueueState:
    q = queue("cq", {"on-demand": {"cpu": ("0", "0", None)}}, cohort="root", tree=tree("root", {"on-demand": {"cpu": "2"}}))
    for i in (1, 2, 3):
        holding(q, f"wl-{i}", on_demand="500m")
    return q


# --- a pass reserves a bounded number ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("queues", "waiting", "bound", "first", "cut"),
    [
        pytest.param(1, 7, 3, 3, True, id="a-standalone-queue-stops-at-the-bound"),
        pytest.param(1, 3, 3, 3, False, id="exactly-the-bound-is-not-cut"),
        pytest.param(2, 7, 3, 4, True, id="a-cohort-finishes-the-cycle-it-is-in"),
    ],
)
def test_a_pass_stops_at_max_reservations_and_the_next_reserves_the_rest(monkeypatch, queues, waiting, bound, first, cut):
    """A pass reserves about MAX_RESERVATIONS at most (a cohort's cycle in progress completes), so
    that a workflow task stays short whatever the depth; the next pass goes on where it stopped."""
    monkeypatch.setattr(scheduler, "MAX_RESERVATIONS", bound)
    names = [f"cq{i}" for i in range(queues)]
    cohort = flat("all") if queues > 1 else None
    states = [queue(n, {"on-demand": {"cpu": "100"}}, cohort="all" if cohort else None, tree=cohort) for n in names]
    for i in range(waiting):
        submit(states[i % queues], entry(f"w{i}", names[i % queues], age=waiting - i))
    results = scheduler.schedule(states, NOW)
    assert (len(reserved(results)), {r.cut_short for r in results.values()}) == (first, {cut})
    assert not told(results), "nobody left behind is told anything yet"
    passes, everyone = 1, dict(reserved(results))
    while any(r.cut_short for r in results.values()):
        results = scheduler.schedule(states, NOW)
        passes += 1
        assert not set(reserved(results)) & set(everyone), "nobody is reserved twice"
        everyone.update(reserved(results))
    assert sorted(everyone) == sorted(f"w{i}" for i in range(waiting))
    assert passes == (-(-waiting // first) if cut else 1)
