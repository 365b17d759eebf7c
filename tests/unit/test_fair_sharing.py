"""Fair sharing: each node's dominant resource share, the weighted share Kueue writes, the
preemption strategies, and the tournament that orders admission across a cohort tree.

Cases come from kubernetes-sigs/kueue: pkg/cache/scheduler/fair_sharing_test.go
(TestDominantResourceShare, TestIsBorrowingOn, TestZeroWeightBorrows) and
pkg/scheduler/scheduler_test.go (the fair-sharing cases of TestSchedule); each names its Kueue case.
"""

from __future__ import annotations

import math

import pytest

from admitflow.admission import fair_sharing as fs
from admitflow.admission.fair_sharing import Share
from tests.unit.test_preemption import admitted, build, cohort, queue_spec, usage_of

GPU = "example.com/gpu"
CPU, GPU_DEFAULT = ("default", "cpu"), ("default", GPU)


def two_queues(cq_quota, lender_quota, cq_weight="1", lender_weight="1"):
    """Kueue's `cq` and `lending-cq`, both in test-cohort."""
    return {
        "cq": queue_spec({"default": cq_quota}, "test-cohort", weight=cq_weight),
        "lending-cq": queue_spec({"default": lender_quota}, "test-cohort", weight=lender_weight),
    }


CPU_GPU = ({"cpu": "2", GPU: "5"}, {"cpu": "8", GPU: "5"})


def share_case(queues, usage, want, cohorts=(), extra=None):
    return queues, cohorts, usage, extra, want


DRS_CASES = [
    pytest.param(*share_case(
        {"cq": queue_spec({"default": {"cpu": "2000", GPU: "5"}})}, {"cpu": "1", GPU: "2"}, {"cq": (0, "")},
    ), id="no-cohort-no-share"),  # "no cohort"
    pytest.param(*share_case(
        two_queues(*CPU_GPU), {"cpu": "1", GPU: "2"}, {"cq": (0, ""), "lending-cq": (0, ""), "test-cohort": (0, "")},
    ), id="usage-below-nominal-is-no-share"),  # "usage below nominal"
    pytest.param(*share_case(
        two_queues(*CPU_GPU), {"cpu": "3", GPU: "7"}, {"cq": (200, GPU), "lending-cq": (0, ""), "test-cohort": (0, "")},
    ), id="the-dominant-resource-is-the-one-borrowed-most-of-what-is-lendable"),  # "usage above nominal"
    pytest.param(*share_case(
        two_queues({GPU: "500"}, {GPU: "1000"}, lender_weight="300"), {GPU: "501"}, {"cq": (1, GPU)},
    ), id="a-share-is-rounded-up"),  # "usage slightly above nominal in a cohort with large quotas"
    pytest.param(*share_case(
        two_queues({GPU: "500"}, {GPU: "1000"}, "300", "300"), {GPU: "800"}, {"cq": (1, GPU)},
    ), id="a-large-weight-shrinks-the-share"),  # "usage way above nominal in a cohort with large quotas and weights"
    pytest.param(*share_case(
        two_queues(*CPU_GPU), {"cpu": "3", GPU: "3"}, {"cq": (100, "cpu")},
    ), id="only-the-resource-above-nominal-counts"),  # "one resource above nominal"
    pytest.param(*share_case(
        two_queues(*CPU_GPU), {"cpu": "1", GPU: "2"}, {"cq": (300, "cpu")}, extra={CPU: 4000, GPU_DEFAULT: 4},
    ), id="the-share-with-a-workload-admitted-counts-its-usage"),  # "usage with workload above nominal"
    pytest.param(*share_case(
        two_queues({"cpu": "2", GPU: ("2", None, "0")}, {"cpu": "8", GPU: ("64", None, "0")}),
        {"cpu": "1", GPU: "1"}, {"cq": (300, "cpu")}, extra={CPU: 4000, GPU_DEFAULT: 4},
    ), id="a-resource-with-nothing-lendable-is-left-out"),  # "A resource with zero lendable"
    pytest.param(*share_case(
        {
            "cq": queue_spec({"on-demand": {"cpu": "20"}, "spot": {"cpu": "80"}}, "test-cohort"),
            "lending-cq": queue_spec({"default": {"cpu": "100"}}, "test-cohort"),
        },
        {"cpu": ("on-demand", "15")}, {"cq": (25, "cpu")}, extra={("on-demand", "cpu"): 10000},
    ), id="flavors-of-a-resource-add-up"),  # "multiple flavors"
    pytest.param(*share_case(
        two_queues({GPU: "5"}, {GPU: "5"}, cq_weight="2"), {GPU: "7"}, {"cq": (100, GPU)},
    ), id="an-integer-weight-divides-the-share"),  # "above nominal with integer weight"
    pytest.param(*share_case(
        two_queues({GPU: "5"}, {GPU: "5"}, cq_weight="0.5"), {GPU: "7"}, {"cq": (400, GPU)},
    ), id="a-decimal-weight-divides-the-share"),  # "above nominal with decimal weight"
    pytest.param(*share_case(
        two_queues({GPU: "5"}, {GPU: "10"}, cq_weight="0"), {GPU: "7"}, {"cq": (fs.INFINITE_WEIGHTED_SHARE, GPU)},
    ), id="borrowing-with-weight-zero-is-an-infinite-share"),  # "above nominal with zero weight"
    pytest.param(*share_case(
        {"cq": queue_spec({"default": {GPU: "5"}}, "child-cohort")}, {GPU: "10"},
        {"cq": (100, GPU), "child-cohort": (50, GPU), "root": (0, "")},
        cohorts=(cohort("child-cohort", "root", weight=2.0), cohort("root", quotas={"default": {GPU: "45"}})),
    ), id="a-cohort-has-its-own-weighted-share"),  # "cohort has resource share"
    pytest.param(*share_case(
        {"cq": queue_spec({"default": {GPU: "0"}}, "child-cohort")}, {GPU: "10"},
        {"cq": (200, GPU), "child-cohort": (100, GPU), "root": (0, "")},
        cohorts=(cohort("child-cohort", "root", weight=2.0), cohort("root", quotas={"default": {GPU: "50"}})),
    ), id="quota-only-at-the-root-is-lendable-to-everyone-below"),
    # "resource share defined for resources only available at the root cohort"
    pytest.param(*share_case(
        {"cq": queue_spec({"default": {GPU: "0"}}, "child-cohort")}, {GPU: "10"},
        {"cq": (1000, GPU), "child-cohort": (200, GPU), "root": (0, "")},
        cohorts=(
            cohort("child-cohort", "root", {"default": {GPU: ("0", "10")}}),
            cohort("root", quotas={"default": {GPU: "50"}}),
        ),
    ), id="a-borrowing-limit-caps-what-is-lendable-below-it"),  # "resource share affected by borrowing limit"
]


@pytest.mark.parametrize(("queues", "cohorts", "usage", "extra", "want"), DRS_CASES)
def test_dominant_resource_share(queues, cohorts, usage, extra, want):
    tree, _ = build(queues, cohorts, [admitted("w", "cq", usage)])
    fs.apply_weights(tree, queues)
    got = {}
    for name in want:
        node = tree.queues.get(name) or tree.cohorts[name]
        share = fs.dominant_resource_share(node, extra if name == "cq" else None)
        got[name] = (share.rounded, share.resource)
    assert got == want


def test_weighted_share_is_what_kueue_writes_in_the_status():
    queues = two_queues(*CPU_GPU)
    tree, _ = build(queues, workloads=[admitted("w", "cq", {"cpu": "3", GPU: "7"})])
    assert (fs.weighted_share(tree, "cq"), fs.weighted_share(tree, "lending-cq")) == (200, 0)
    assert (fs.weighted_share(tree, "test-cohort", kind="cohort"), fs.weighted_share(tree, "nobody")) == (0, None)


def hierarchical_two_levels():
    """Kueue's test/integration/singlecluster/scheduler/fairsharing, "using hierarchical cohorts",
    "admits workloads respecting fair share": five workloads of 1 cpu run in each queue.

             root
            /    \\
          fl      fr
         /  \\      \\
        sl   sr    bank (10 cpu)
        |     |
       cqL   cqR  (2 cpu each)"""
    queues = {"cqL": queue_spec({"default": {"cpu": "2"}}, "sl"), "cqR": queue_spec({"default": {"cpu": "2"}}, "sr")}
    cohorts = [
        cohort("root"), cohort("fl", "root"), cohort("fr", "root"), cohort("sl", "fl"), cohort("sr", "fl"),
        cohort("bank", "fr", {"default": {"cpu": "10"}}),
    ]
    return queues, cohorts, {"cqL": 5, "cqR": 5}


def research_tree(running):
    """The same file's "preempts workloads to enforce fair share": 12 cpu held by the root,
    best-effort (weight 0.5) beside research, whose chemistry, physics and llm (weight 2) hold none."""
    zero = {"default": {"cpu": "0"}}
    queues = {f"{c}-queue": queue_spec(zero, c) for c in ("chemistry", "physics", "llm", "best-effort")}
    cohorts = [
        cohort("root", quotas={"default": {"cpu": "12"}}), cohort("research", "root"),
        cohort("chemistry", "research"), cohort("physics", "research"), cohort("llm", "research", weight=2.0),
        cohort("best-effort", "root", weight=0.5),
    ]
    return queues, cohorts, {f"{c}-queue": n for c, n in running.items()}


@pytest.mark.parametrize(("tree", "want"), [
    # sl and sr each borrow 3 of the 14 cpu the tree can lend, fl 6; Kueue rounds up (6000/14).
    pytest.param(hierarchical_two_levels(), {"root": 0, "fl": 429, "fr": 0, "sl": 215, "sr": 215, "bank": 0},
                 id="two-levels-each-cohort-borrows-from-its-parent"),
    pytest.param(research_tree({"best-effort": 6, "physics": 6}), {"best-effort": 1000, "physics": 500, "research": 500},
                 id="all-capacity-used-a-half-weight-doubles-the-share"),
    # After the preemptions: 4 best-effort, 2 chemistry, 2 physics, 4 llm.
    pytest.param(research_tree({"best-effort": 4, "chemistry": 2, "physics": 2, "llm": 4}),
                 {"best-effort": 667, "research": 667, "chemistry": 167, "physics": 167, "llm": 167},
                 id="fair-with-respect-to-each-parent"),
])
def test_each_cohorts_weighted_share_is_what_it_borrows_from_its_parent(tree, want):
    queues, cohorts, running = tree
    workloads = [admitted(f"{q}-{i}", q, {"cpu": "1"}) for q, n in running.items() for i in range(n)]
    quota_tree, _ = build(queues, cohorts, workloads)
    fs.apply_weights(quota_tree, queues)
    assert {name: fs.weighted_share(quota_tree, name, kind="cohort") for name in want} == want


@pytest.mark.parametrize(
    ("usage", "requested", "on_requested", "borrowing"),
    [
        pytest.param({"cpu": "3"}, [CPU], True, True, id="borrows-on-the-requested-flavor"),
        pytest.param({"cpu": "1", GPU: "7"}, [CPU], False, True, id="borrows-on-an-unrequested-flavor-only"),
        pytest.param({"cpu": "3", GPU: "7"}, [GPU_DEFAULT], True, True, id="borrows-on-both-requests-one"),
        pytest.param({"cpu": "1", GPU: "2"}, [CPU], False, False, id="no-borrowing"),
        pytest.param({"cpu": "3"}, [], False, True, id="nothing-requested"),
    ],
)
def test_borrowing_on_the_requested_flavors(usage, requested, on_requested, borrowing):
    # TestIsBorrowingOn
    tree, _ = build(two_queues(*CPU_GPU), workloads=[admitted("w", "cq", usage)])
    share = fs.dominant_resource_share(tree.queues["cq"])
    assert (share.borrowing_on(requested), bool(share.borrowing)) == (on_requested, borrowing)


@pytest.mark.parametrize(
    ("share", "want"),
    [
        pytest.param(Share(weight=0, ratio=100, borrowing=frozenset({CPU})), True, id="zero-weight-and-borrowing"),
        pytest.param(Share(weight=0, ratio=0), False, id="zero-weight-and-not-borrowing"),
        pytest.param(Share(weight=1, ratio=100, borrowing=frozenset({CPU})), False, id="non-zero-weight-and-borrowing"),
        pytest.param(Share(weight=0, ratio=0, borrowing=frozenset({CPU})), True, id="zero-weight-borrowing-too-little-to-show"),
    ],
)
def test_zero_weight_borrows(share, want):
    # TestZeroWeightBorrows
    assert share.zero_weight_borrows is want


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [
        pytest.param(Share(ratio=100), Share(ratio=200), -1, id="a-lower-share-is-fairer"),
        pytest.param(Share(ratio=400, weight=2), Share(ratio=200), 0, id="weights-divide-before-comparing"),
        pytest.param(
            Share(ratio=1, weight=0, borrowing=frozenset({CPU})), Share(ratio=1000), 1,
            id="a-zero-weight-borrower-ranks-above-any-weighted-share",
        ),
        pytest.param(
            Share(ratio=1, weight=0, borrowing=frozenset({CPU})), Share(ratio=2, weight=0, borrowing=frozenset({CPU})), -1,
            id="two-zero-weight-borrowers-compare-their-unweighted-shares",
        ),
    ],
)
def test_compare_shares(a, b, want):
    assert fs.compare(a, b) == want
    assert math.isinf(Share(ratio=1, weight=0).precise)


@pytest.mark.parametrize(
    ("strategy", "preemptor_new", "target_old", "target_new", "want"),
    [
        pytest.param(fs.less_than_or_equal_to_final_share, 300, 500, 300, True, id="S2-a-allows-an-equal-final-share"),
        pytest.param(fs.less_than_or_equal_to_final_share, 300, 500, 200, False, id="S2-a-refuses-to-switch-the-imbalance"),
        pytest.param(fs.less_than_initial_share, 300, 500, 0, True, id="S2-b-compares-with-the-initial-share"),
        pytest.param(fs.less_than_initial_share, 500, 500, 0, False, id="S2-b-needs-a-strictly-lower-share"),
    ],
)
def test_preemption_strategies(strategy, preemptor_new, target_old, target_new, want):
    shares = [Share(ratio=r) for r in (preemptor_new, target_old, target_new)]
    assert strategy(*shares) is want


def test_without_configured_strategies_both_rules_apply_S2_a_first():
    assert fs.parse_strategies(None) == [fs.less_than_or_equal_to_final_share, fs.less_than_initial_share]
    assert fs.parse_strategies(["LessThanInitialShare"]) == [fs.less_than_initial_share]


# --- the tournament: TestSchedule's fair-sharing cases ----------------------------------------------


def on_demand(quota: str):
    return {"on-demand": {"cpu": quota}}


def pending(queue: str, cpu: str):
    return queue, {("on-demand", "cpu"): int(float(cpu) * 1000)}


def test_the_workload_winning_at_each_level_of_the_tree_goes_first():
    # "hierarchical fair sharing schedule workload which wins tournament": after admission, d1
    # gives d 80 and B 100, e1 gives e 81 and B 91, f1 and g1 give C 101; d1 wins in B, then B in A.
    queues = {name: queue_spec(on_demand("0"), parent) for name, parent in (("d", "b"), ("e", "b"), ("f", "c"), ("g", "c"))}
    cohorts = (cohort("a", quotas=on_demand("200")), cohort("b", "a"), cohort("c", "a"))
    tree, _ = build(queues, cohorts, [
        admitted("d0", "d", {"cpu": "10"}, flavor="on-demand"), admitted("e0", "e", {"cpu": "20"}, flavor="on-demand"),
        admitted("g0", "g", {"cpu": "100"}, flavor="on-demand"),
    ])
    candidates = [pending("e", "61"), pending("g", "1"), pending("d", "70"), pending("f", "1")]
    before = usage_of(tree)
    assert fs.fair_order(tree, candidates)[0] == 2
    assert usage_of(tree) == before


def test_the_workload_with_the_lowest_share_after_admission_goes_first():
    # "fair sharing schedule workload with lowest drf after admission": b0 + b1 = 60 < c1 = 75.
    queues = {"b": queue_spec(on_demand("0"), "a"), "c": queue_spec(on_demand("0"), "a")}
    tree, _ = build(queues, (cohort("a", quotas=on_demand("100")),), [admitted("b0", "b", {"cpu": "10"}, flavor="on-demand")])
    assert fs.fair_order(tree, [pending("c", "75"), pending("b", "50")]) == [1, 0]


def test_queues_alone_in_their_cohort_or_without_one_all_get_their_turn():
    # "fair sharing schedule singleton cqs and cq without cohort"
    queues = {
        "a": queue_spec(on_demand("0"), "a-cohort"),
        "b": queue_spec(on_demand("10"), "b-cohort"),
        "c": queue_spec(on_demand("10")),
    }
    tree, _ = build(queues, (cohort("a-cohort", quotas=on_demand("10")), cohort("b-cohort")))
    assert fs.fair_order(tree, [pending("a", "10"), pending("b", "10"), pending("c", "10")]) == [0, 1, 2]


@pytest.mark.parametrize(
    "listed",
    [
        pytest.param(["c", "b"], id="on-equal-shares-the-higher-priority-listed-first-goes-first"),
        pytest.param(["b", "c"], id="on-equal-shares-the-earlier-listed-first-goes-first"),
    ],
)
def test_ties_go_to_the_candidate_listed_first(listed):
    # "fair sharing schedule highest priority first" and "fair sharing schedule earliest timestamp
    # first": the caller lists candidates in queue order, so the first listed is Kueue's winner.
    queues = {"b": queue_spec(on_demand("0"), "a"), "c": queue_spec(on_demand("0"), "a")}
    tree, _ = build(queues, (cohort("a", quotas=on_demand("10")),))
    assert fs.fair_order(tree, [pending(q, "10") for q in listed]) == [0, 1]


def test_a_queue_not_borrowing_in_what_its_nominee_asks_goes_before_a_fairer_one_that_would():
    # Kueue's FairSharingPrioritizeNonBorrowing (beta, on by default): x borrows cheap cpu, so its
    # share is the higher, but its nominee asks for premium cpu within x's nominal quota.
    queues = {
        "x": queue_spec({"premium": {"cpu": "2"}, "cheap": {"cpu": "0"}}, "all"),
        "y": queue_spec({"premium": {"cpu": "0"}, "cheap": {"cpu": "10"}}, "all"),
    }
    tree, _ = build(queues, workloads=[admitted("x0", "x", {"cpu": "4"}, flavor="cheap")])
    premium = {("premium", "cpu"): 1000}
    assert fs.fair_order(tree, [("y", premium), ("x", premium)]) == [1, 0]


def test_a_queue_nominates_its_candidates_one_at_a_time_in_the_order_given():
    queues = {"b": queue_spec(on_demand("0"), "a"), "c": queue_spec(on_demand("0"), "a")}
    tree, _ = build(queues, (cohort("a", quotas=on_demand("100")),), [admitted("c0", "c", {"cpu": "5"}, flavor="on-demand")])
    # b's first (10) beats c's (c would hold 5 + 10); then b's second (30) does not, b being read
    # as it stands, without its first.
    assert fs.fair_order(tree, [pending("b", "10"), pending("b", "30"), pending("c", "10")]) == [0, 2, 1]
