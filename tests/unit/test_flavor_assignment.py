"""Flavor assignment: Kueue's rules and messages for a standalone ClusterQueue, then in a cohort
(borrowing, lending limits, flavorFungibility)."""

from __future__ import annotations

import pytest

from admitflow.admission.flavor_assignment import (
    FlavorInfo,
    FlavorQuota,
    FlavorRules,
    Mode,
    ResourceGroupQuota,
    TreeQuota,
    assign,
    assign_flavors,
)
from admitflow.admission.quota_tree import CohortInfo, CohortTree, QuotaTree
from admitflow.api.cluster_queue import FlavorFungibility
from admitflow.admission.requests import PodSetRequest
from admitflow.admission.selectors import Requirement, Taint, Toleration

CPU_GROUP = ResourceGroupQuota(
    covered=("cpu", "memory"),
    flavors=(
        FlavorQuota(name="on-demand", nominal={"cpu": 4000, "memory": 8 * 2**30}),
        FlavorQuota(name="spot", nominal={"cpu": 8000, "memory": 16 * 2**30}),
    ),
)
ONE_FLAVOR = ResourceGroupQuota(covered=("cpu",), flavors=(FlavorQuota(name="default", nominal={"cpu": 4000}),))
FLAVORS = {"on-demand": FlavorInfo(), "spot": FlavorInfo(), "default": FlavorInfo()}


def podset(cpu: int, count: int = 1, name: str = "main", **kw) -> PodSetRequest:
    return PodSetRequest(name=name, count=count, per_pod={"cpu": cpu}, **kw)


CASES = [
    pytest.param(
        [podset(2000)], [ONE_FLAVOR], {}, ("Fit", "", ""), {"main": {"cpu": "default"}},
        id="a-pod-set-that-fits-takes-the-first-flavor",
    ),
    pytest.param(
        [podset(1000, count=3)], [CPU_GROUP], {("on-demand", "cpu"): 2000}, ("Fit", "", ""), {"main": {"cpu": "spot"}},
        id="when-the-first-flavor-is-full-the-next-one-is-tried-and-nothing-is-reported",
    ),
    pytest.param(
        [podset(2000)], [ONE_FLAVOR], {("default", "cpu"): 3000},
        ("Preempt", "WaitingForQuota", "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 1 more needed"),
        {"main": {"cpu": "default"}},
        id="quota-held-by-others-means-waiting-for-quota-with-what-is-missing",
    ),
    pytest.param(
        [podset(5000)], [ONE_FLAVOR], {},
        ("NoFit", "ExceedsMaxQuota", "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default, previously considered podsets requests (0) + current podset request (5) > maximum capacity (4)"),
        {"main": {}},
        id="a-request-above-the-nominal-quota-can-never-fit",
    ),
    pytest.param(
        [PodSetRequest(name="main", count=1, per_pod={"cpu": 1000, "nvidia.com/gpu": 1})], [ONE_FLAVOR], {},
        ("NoFit", "NoMatchingFlavor", "couldn't assign flavors to pod set main: resource nvidia.com/gpu unavailable in ClusterQueue"),
        {"main": {"cpu": "default"}},
        id="a-resource-the-queue-does-not-cover-is-unavailable",
    ),
    pytest.param(
        [PodSetRequest(name="main", count=1, per_pod={"cpu": 1000, "example.com/foo": 0})], [ONE_FLAVOR], {},
        ("Fit", "", ""), {"main": {"cpu": "default"}},
        id="a-zero-request-for-an-uncovered-resource-is-ignored",
    ),
    pytest.param(
        [podset(3000, count=2)], [CPU_GROUP], {("on-demand", "cpu"): 2000, ("spot", "cpu"): 4000},
        ("Preempt", "WaitingForQuota", "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor on-demand, previously considered podsets requests (0) + current podset request (6) > maximum capacity (4), insufficient unused quota for cpu in flavor spot, 2 more needed"),
        {"main": {"cpu": "spot"}},
        id="every-flavor-tried-is-reported-sorted-and-the-best-one-is-kept",
    ),
    pytest.param(
        [podset(3000, name="driver"), podset(2000, name="workers")], [ONE_FLAVOR], {},
        ("NoFit", "ExceedsMaxQuota", "couldn't assign flavors to pod set workers: insufficient quota for cpu in flavor default, previously considered podsets requests (3) + current podset request (2) > maximum capacity (4)"),
        {"driver": {"cpu": "default"}, "workers": {}},
        id="pod-sets-of-one-workload-add-up-against-the-same-flavor",
    ),
    pytest.param(
        [podset(1000)], [ONE_FLAVOR.model_copy(update={"flavors": (FlavorQuota(name="gone", nominal={"cpu": 4000}),)})], {},
        ("NoFit", "NoMatchingFlavor", "couldn't assign flavors to pod set main: flavor gone not found"),
        {"main": {}},
        id="a-flavor-that-does-not-exist-is-skipped",
    ),
]


@pytest.mark.parametrize(("pod_sets", "groups", "usage", "want", "want_flavors"), CASES)
def test_assign_flavors(pod_sets, groups, usage, want, want_flavors):
    got = assign_flavors(pod_sets, groups, FLAVORS, usage)
    assert (got.mode, got.reason, got.message) == want
    assert {ps.name: ps.flavors for ps in got.pod_sets} == want_flavors


TAINTED = {
    "gpu": FlavorInfo(node_labels={"accel": "a100"}, node_taints=(Taint(key="gpu", value="true", effect="NoSchedule"),)),
    "cpu": FlavorInfo(node_labels={"pool": "cpu"}),
}
TWO = [ResourceGroupQuota(covered=("cpu",), flavors=(FlavorQuota(name="gpu", nominal={"cpu": 8000}), FlavorQuota(name="cpu", nominal={"cpu": 8000})))]


@pytest.mark.parametrize(
    ("ps", "want_flavor", "want_message"),
    [
        pytest.param(podset(1000), "cpu", "", id="an-untolerated-taint-sends-the-pod-set-to-the-next-flavor"),
        pytest.param(
            podset(1000, tolerations=(Toleration(key="gpu", operator="Exists"),)), "gpu", "",
            id="a-toleration-lets-the-pod-set-onto-a-tainted-flavor",
        ),
        pytest.param(
            podset(1000, tolerations=(Toleration(key="gpu", operator="Exists"),), node_selector={"pool": "gpu"}), "gpu", "",
            id="a-node-selector-only-counts-for-flavors-that-label-the-key",
        ),
        pytest.param(
            podset(1000, node_selector={"pool": "other"}), None,
            "couldn't assign flavors to pod set main: flavor cpu doesn't match node affinity, untolerated taint gpu=true:NoSchedule in flavor gpu",
            id="nothing-matches-and-both-reasons-are-reported",
        ),
        pytest.param(
            podset(1000, affinity_terms=((Requirement(key="accel", operator="In", values=("h100",)),),)), "cpu", "",
            id="required-node-affinity-on-a-key-only-one-flavor-labels-rules-out-that-flavor",
        ),
    ],
)
def test_flavor_matching(ps, want_flavor, want_message):
    got = assign_flavors([ps], TWO, TAINTED, {})
    assert got.pod_sets[0].flavors.get("cpu") == want_flavor
    assert got.message == want_message


def test_pods_resource_counts_pods_when_the_queue_covers_it():
    groups = [ResourceGroupQuota(covered=("cpu", "pods"), flavors=(FlavorQuota(name="default", nominal={"cpu": 10000, "pods": 2}),))]
    got = assign_flavors([podset(1000, count=3)], groups, FLAVORS, {})
    assert got.mode == "NoFit"
    assert "insufficient quota for pods in flavor default" in got.message
    fits = assign_flavors([podset(1000, count=2)], groups, FLAVORS, {})
    assert fits.mode == "Fit"
    assert fits.usage() == {("default", "cpu"): 2000, ("default", "pods"): 2}


# --- in a cohort: what the queue may use is what its tree lets it (Kueue's TestAssignFlavors) -------


def quotas(spec: dict[str, dict[str, int | tuple[int, int | None, int | None]]]) -> list[ResourceGroupQuota]:
    """flavor -> resource -> nominal or (nominal, borrowingLimit, lendingLimit), one group covering
    the first flavor's resources."""

    def part(q, i):
        return q if isinstance(q, int) and i == 0 else (None if isinstance(q, int) else q[i])

    flavors = tuple(
        FlavorQuota(
            name=f,
            nominal={r: part(q, 0) for r, q in res.items()},
            borrowing_limit={r: part(q, 1) for r, q in res.items() if part(q, 1) is not None},
            lending_limit={r: part(q, 2) for r, q in res.items() if part(q, 2) is not None},
        )
        for f, res in spec.items()
    )
    return [ResourceGroupQuota(covered=tuple(next(iter(spec.values()))), flavors=flavors)]


def in_cohort(mine, theirs, used, their_used) -> tuple[list[ResourceGroupQuota], TreeQuota]:
    """The queue under test and another queue lending to it, in one cohort, with their usage."""
    groups = quotas(mine)
    tree = QuotaTree({"cq": (groups, "cohort"), "other": (quotas(theirs), "cohort")}, CohortTree(root="cohort", cohorts={"cohort": CohortInfo(name="cohort")}))
    tree.add("cq", used)
    tree.add("other", their_used)
    return groups, TreeQuota(tree, "cq")


ONE_TWO = {"one": FlavorInfo(), "two": FlavorInfo()}


def fungibility(borrow: str = "MayStopSearch", preempt: str = "TryNextFlavor", preference: str | None = None):
    return FlavorFungibility(whenCanBorrow=borrow, whenCanPreempt=preempt, preference=preference)


def reclaims(fr, val):
    return Mode.RECLAIM, 1


def preempts(fr, val):
    return Mode.PREEMPT, 0


COHORT_CASES = [
    # Kueue: "borrow try next flavor, found the first flavor"
    pytest.param(
        {"one": {"cpu": (10_000, 1_000, None)}, "two": {"cpu": 1_000}}, {"one": {"cpu": 1_000}, "two": {"cpu": 0}},
        ({("one", "cpu"): 2_000}, {}), podset(9_000), fungibility(borrow="TryNextFlavor"), None, False,
        ("Fit", "", ""), "one", True,
        id="trying-the-next-flavor-instead-of-borrowing-comes-back-to-the-first-when-none-fits-without",
    ),
    # Kueue: "borrow try next flavor, found the second flavor"
    pytest.param(
        {"one": {"cpu": (10_000, 1_000, None)}, "two": {"cpu": 10_000}}, {"one": {"cpu": 1_000}, "two": {"cpu": 0}},
        ({("one", "cpu"): 2_000}, {}), podset(9_000), fungibility(borrow="TryNextFlavor"), None, False,
        ("Fit", "", ""), "two", False,
        id="a-flavor-that-fits-without-borrowing-is-preferred-to-one-that-borrows",
    ),
    # Kueue: "borrow before try next flavor"
    pytest.param(
        {"one": {"cpu": (10_000, 1_000, None)}, "two": {"cpu": 10_000}}, {"one": {"cpu": 1_000}, "two": {"cpu": 0}},
        ({("one", "cpu"): 2_000}, {}), podset(9_000), None, None, False,
        ("Fit", "", ""), "one", True,
        id="by-default-a-flavor-that-fits-by-borrowing-ends-the-search",
    ),
    # Kueue: "not enough space to borrow"
    pytest.param(
        {"one": {"cpu": 1_000}}, {"one": {"cpu": 9_000}}, ({}, {("one", "cpu"): 9_000}), podset(2_000), None, None, False,
        ("NoFit", "WaitingForQuota", "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor one, 1 more needed"),
        None, False,
        id="past-its-nominal-quota-with-too-little-left-in-the-cohort-it-waits",
    ),
    # Kueue: "past max, but can preempt in ClusterQueue"
    pytest.param(
        {"one": {"cpu": (2_000, 8_000, None)}}, {"one": {"cpu": 98_000}}, ({("one", "cpu"): 9_000}, {}), podset(2_000), None, preempts, False,
        ("Preempt", "WaitingForQuota", "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor one, 1 more needed"),
        "one", False,
        id="within-its-nominal-quota-but-at-its-borrowing-limit-it-may-preempt-in-its-queue",
    ),
    # Kueue: "when borrowing while preemption is needed for flavor one; WhenCanBorrow=Borrow"
    pytest.param(
        {"one": {"cpu": (0, 12_000, None)}, "two": {"cpu": 12_000}}, {"one": {"cpu": 12_000}, "two": {"cpu": 0}},
        ({}, {("one", "cpu"): 10_000}), podset(12_000), fungibility(preempt="MayStopSearch"), reclaims, True,
        ("Preempt", "WaitingForQuota", "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor one, 10 more needed"),
        "one", True,
        id="borrowing-within-cohort-lets-it-reclaim-in-the-first-flavor",
    ),
    # Kueue: "when borrowing while preemption is needed for flavor one; WhenCanBorrow=TryNextFlavor"
    pytest.param(
        {"one": {"cpu": (0, 12_000, None)}, "two": {"cpu": 12_000}}, {"one": {"cpu": 12_000}, "two": {"cpu": 0}},
        ({}, {("one", "cpu"): 10_000}), podset(12_000), fungibility(borrow="TryNextFlavor", preempt="MayStopSearch"), reclaims, True,
        ("Fit", "", ""), "two", False,
        id="a-flavor-it-would-reclaim-in-while-borrowing-is-passed-over-for-one-that-fits",
    ),
    # Kueue: "when borrowing while preemption is needed, but borrowingLimit exceeds the quota available in the cohort"
    pytest.param(
        {"one": {"cpu": (0, 12_000, None)}}, {"one": {"cpu": 11_000}}, ({}, {("one", "cpu"): 10_000}), podset(12_000), None, reclaims, True,
        ("NoFit", "ExceedsMaxQuota", "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor one, previously considered podsets requests (0) + current podset request (12) > maximum capacity (11)"),
        None, False,
        id="the-maximum-capacity-is-what-the-cohort-holds-when-below-the-borrowing-limit",
    ),
    # Kueue: "lend try next flavor, found the second flavor": a lendingLimit keeps the rest of a
    # queue's quota its own, so the first flavor needs borrowing and the second does not.
    pytest.param(
        {"one": {"cpu": (10_000, None, 1_000)}, "two": {"cpu": (10_000, None, 0)}}, {"one": {"cpu": 1_000}, "two": {"cpu": 0}},
        ({("one", "cpu"): 2_000}, {}), podset(9_000), fungibility(borrow="TryNextFlavor"), None, False,
        ("Fit", "", ""), "two", False,
        id="with-a-lending-limit-the-guaranteed-quota-of-the-next-flavor-is-preferred-to-borrowing",
    ),
    pytest.param(
        {"one": {"cpu": 4_000}, "two": {"cpu": 0}}, {"one": {"cpu": 0}, "two": {"cpu": 8_000}},
        ({("one", "cpu"): 2_000}, {}), podset(4_000), fungibility("TryNextFlavor", "TryNextFlavor"), preempts, False,
        ("Fit", "", ""), "two", True,
        id="borrowing-is-preferred-to-preemption-by-default",
    ),
    pytest.param(
        {"one": {"cpu": 4_000}, "two": {"cpu": 0}}, {"one": {"cpu": 0}, "two": {"cpu": 8_000}},
        ({("one", "cpu"): 2_000}, {}), podset(4_000), fungibility("TryNextFlavor", "TryNextFlavor", "PreemptionOverBorrowing"), preempts, False,
        ("Preempt", "WaitingForQuota", "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor one, 2 more needed"),
        "one", False,
        id="preemption-over-borrowing-prefers-preempting-in-its-own-quota",
    ),
    pytest.param(
        {"one": {"cpu": 4_000}, "two": {"cpu": 0}}, {"one": {"cpu": 0}, "two": {"cpu": 8_000}},
        ({("one", "cpu"): 2_000}, {}), podset(4_000), fungibility("TryNextFlavor", "TryNextFlavor", "PreemptionOverBorrowing"), None, False,
        ("Fit", "", ""), "two", True,
        id="a-flavor-where-nobody-can-be-preempted-ranks-below-borrowing-whatever-the-preference",
    ),
]


@pytest.mark.parametrize(
    ("mine", "theirs", "usage", "ps", "fung", "oracle", "while_borrowing", "want", "want_flavor", "want_borrows"), COHORT_CASES
)
def test_assign_flavors_in_a_cohort(mine, theirs, usage, ps, fung, oracle, while_borrowing, want, want_flavor, want_borrows):
    groups, quota = in_cohort(mine, theirs, *usage)
    got = assign([ps], groups, ONE_TWO, quota, FlavorRules(fung, while_borrowing), oracle)
    assert (got.mode, got.reason, got.message) == want
    assert got.pod_sets[0].flavors.get("cpu") == want_flavor
    assert got.borrows == want_borrows


def test_a_standalone_queue_is_a_tree_of_one():
    """The same answers from a tree of one as from the standalone rules, message for message."""
    for pod_sets, groups, usage, want, want_flavors in (c.values for c in CASES):
        tree = QuotaTree({"cq": (groups, None)})
        tree.add("cq", usage)
        got = assign(pod_sets, groups, FLAVORS, TreeQuota(tree, "cq"))
        assert (got.mode, got.reason, got.message) == want
        assert {p.name: p.flavors for p in got.pod_sets} == want_flavors
        assert not got.borrows
